// BaPipe's stage partition: the dynamic programming against every partition tried, on random
// priced chains and on real chains evaluate() prices cut by cut; memory limits; a faster stage
// taking more ops; the family's refusals and its explanation.

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/search/bapipe.h"
#include "partita/search/optimizer.h"
#include "partita/sim/simulate.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"
#include "simple_cluster.h"
#include "test_support.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>

namespace partita {
namespace {

using graph::TensorRole;
using search::bapipe::Partition;
using search::bapipe::Problem;
using ::testing::HasSubstr;

// A plan's iteration as `partita plan` predicts it: simulated where its size allows.
strategy::Prediction predicted(const graph::Graph& g, const cluster::Cluster& c, const strategy::Strategy& st,
                               const cost::TrainingSetup& setup) {
  auto p = strategy::evaluate(g, c, st, setup);
  sim::simulate_prediction(g, c, st, p);
  return p;
}

// A random priced chain of `n` ops: each op reads the one before, some also an earlier op's
// output (a skip connection) that others read too.
Problem random_problem(std::mt19937& rng, int n, int stages) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Problem p;
  p.ops = n;
  p.micro_batches = std::uniform_int_distribution<int>(1, 4)(rng);
  for (int i = 1; i < n; ++i) {
    p.edges.push_back({i - 1, i, i - 1});
    if (i >= 2 && u(rng) < 0.4) {
      const int from = std::uniform_int_distribution<int>(0, i - 2)(rng);
      p.edges.push_back({from, i, from});
    }
  }
  for (int s = 0; s < stages; ++s) {
    search::bapipe::StagePrices sp;
    for (int i = 0; i < n; ++i) {
      sp.compute.push_back(u(rng) * 10);
      sp.communication.push_back(u(rng) < 0.5 ? u(rng) * 3 : 0.0);
      sp.sync.push_back(u(rng));
      sp.resident.push_back(u(rng) * 4);
      sp.activations.push_back(u(rng) * 4);
      sp.workspace.push_back(u(rng) * 2);
    }
    for (std::size_t e = 0; e < p.edges.size(); ++e) {
      sp.inner.push_back(u(rng) < 0.3 ? u(rng) : 0.0);
      sp.receive_copies.push_back(u(rng));
      sp.receive_transfer.push_back(u(rng) * 5);
    }
    sp.in_flight = u(rng) < 0.5 ? 1.0 : static_cast<double>(stages - s) / stages;
    // From "everything fits" down to "little does".
    sp.memory_limit = 2 + u(rng) * 4 * n;
    p.stages.push_back(std::move(sp));
  }
  return p;
}

// Every way to cut the chain into p.stages.size() non-empty runs.
Partition brute_force(const Problem& p) {
  const int stages = static_cast<int>(p.stages.size());
  Partition best;
  best.bottleneck = std::numeric_limits<double>::infinity();
  std::vector<int> starts(static_cast<std::size_t>(stages), 0);
  std::function<void(int)> place = [&](int s) {
    if (s == stages) {
      double worst = 0;
      for (int q = 0; q < stages; ++q) {
        const int last = q + 1 < stages ? starts[static_cast<std::size_t>(q) + 1] : p.ops;
        const auto c = search::bapipe::stage_cost(p, q, starts[static_cast<std::size_t>(q)], last);
        if (c.memory > p.stages[static_cast<std::size_t>(q)].memory_limit) {
          return;
        }
        worst = std::max(worst, c.time);
      }
      if (worst < best.bottleneck) {
        best.bottleneck = worst;
        best.starts = starts;
        best.feasible = true;
      }
      return;
    }
    for (int a = starts[static_cast<std::size_t>(s) - 1] + 1; a <= p.ops - (stages - s); ++a) {
      starts[static_cast<std::size_t>(s)] = a;
      place(s + 1);
    }
  };
  place(1);
  return best;
}

TEST(BaPipePartition, EqualsBruteForceOnRandomChainsInTimeAndMemory) {
  std::mt19937 rng(22);
  int feasible = 0, infeasible = 0, memory_bound = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 9)(rng);
    const int stages = std::uniform_int_distribution<int>(1, std::min(n, 4))(rng);
    const auto p = random_problem(rng, n, stages);
    const auto exact = search::bapipe::partition(p);
    const auto brute = brute_force(p);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << n << " ops, " << stages << " stages");
    ASSERT_EQ(exact.feasible, brute.feasible);
    if (!brute.feasible) {
      ++infeasible;
      continue;
    }
    ++feasible;
    EXPECT_NEAR(exact.bottleneck, brute.bottleneck, 1e-9 * brute.bottleneck);
    ASSERT_EQ(exact.starts.size(), static_cast<std::size_t>(stages));
    EXPECT_EQ(exact.starts.front(), 0);
    for (int s = 0; s < stages; ++s) {
      EXPECT_LE(exact.stages[static_cast<std::size_t>(s)].memory, p.stages[static_cast<std::size_t>(s)].memory_limit);
      if (s > 0) {
        EXPECT_GT(exact.starts[static_cast<std::size_t>(s)], exact.starts[static_cast<std::size_t>(s) - 1]);
      }
    }
    // Without the memory limits the bottleneck can only be as low or lower; where it is lower
    // the limit bound this problem.
    auto free = p;
    for (auto& sp : free.stages) {
      sp.memory_limit = std::numeric_limits<double>::infinity();
    }
    const auto unlimited = search::bapipe::partition(free);
    EXPECT_LE(unlimited.bottleneck, exact.bottleneck * (1 + 1e-12));
    memory_bound += unlimited.bottleneck < exact.bottleneck * (1 - 1e-9) ? 1 : 0;
  }
  // The random limits exercise all three cases.
  EXPECT_GT(feasible, 100);
  EXPECT_GT(infeasible, 20);
  EXPECT_GT(memory_bound, 20);
}

TEST(BaPipePartition, ATensorSentIntoAStageIsChargedOnceAndCopiedByEachReader) {
  Problem p;
  p.ops = 3;
  p.micro_batches = 2;
  p.edges = {{0, 1, 0}, {0, 2, 0}, {1, 2, 1}};
  for (int s = 0; s < 2; ++s) {
    search::bapipe::StagePrices sp;
    sp.compute = {1, 2, 4};
    sp.communication = {0, 0, 0};
    sp.sync = {0.5, 0, 0.25};
    sp.resident = {10, 20, 40};
    sp.activations = {1, 2, 4};
    sp.workspace = {3, 1, 2};
    sp.inner = {0.125, 0.125, 0.125};
    sp.receive_copies = {0.5, 0.5, 0.5};
    sp.receive_transfer = {8, 16, 32};
    sp.in_flight = s == 0 ? 1.0 : 0.5;
    sp.memory_limit = 1e9;
    p.stages.push_back(std::move(sp));
  }
  // Stage 1 holds ops 1 and 2: tensor 0 enters once (its first reader's transfer, 8), both
  // readers copy it (0.5 each); tensor 1 moves inside the stage (0.125).
  const auto c = search::bapipe::stage_cost(p, 1, 1, 3);
  EXPECT_DOUBLE_EQ(c.receive, (8 + 0.5 + 0.5) / 2);
  EXPECT_DOUBLE_EQ(c.compute, 6.0 / 2);
  EXPECT_DOUBLE_EQ(c.time, (6 + 0.125 + 9) / 2);
  EXPECT_DOUBLE_EQ(c.sync, 0.25);
  EXPECT_DOUBLE_EQ(c.memory, 60 + 6 * 0.5 + 2.0 / 2);
  const auto part = search::bapipe::partition(p);
  ASSERT_TRUE(part.feasible);
  // {0} | {1, 2}: 1 and 15.125; {0, 1} | {2}: 3.125 and 4 + (0.5 + 16) + (0.5 + 32), both of op 2's
  // inputs sent.
  EXPECT_EQ(part.starts, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(part.bottleneck, 15.125 / 2);
  EXPECT_DOUBLE_EQ(search::bapipe::stage_cost(p, 1, 2, 3).time, (4 + 16.5 + 32.5) / 2);
}

TEST(BaPipePartition, RefusesMoreStagesThanOps) {
  std::mt19937 rng(1);
  const auto p = random_problem(rng, 3, 4);
  try {
    search::bapipe::partition(p);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("4 stages for 3 ops"));
  }
}

// A chain of matrix products of random widths, each followed by a Relu.
graph::Graph random_mlp(std::mt19937& rng, int layers, std::int64_t batch) {
  graph::Graph g;
  std::uniform_int_distribution<int> width(1, 8);
  std::int64_t in = 64 * width(rng);
  g.graph_inputs.push_back(test::tensor(g, "x0", {batch, in}, TensorRole::input));
  for (int l = 0; l < layers; ++l) {
    const std::int64_t out = 64 * width(rng);
    const auto n = std::to_string(l);
    test::tensor(g, "w" + n, {in, out}, TensorRole::parameter);
    test::tensor(g, "h" + n, {batch, out});
    test::tensor(g, "x" + std::to_string(l + 1), {batch, out});
    test::op(g, "MatMul", {"x" + n, "w" + n}, {"h" + n});
    test::op(g, "Relu", {"h" + n}, {"x" + std::to_string(l + 1)});
    in = out;
  }
  return g;
}

double term(const strategy::Prediction& p, const std::string& name) {
  for (const auto& t : p.iteration) {
    if (t.name == name) {
      return t.value;
    }
  }
  return 0;
}

// On a chain the prices are evaluate()'s own: for every way to cut it, the pipeline family's
// strategy at those cuts, evaluated, has the slowest stage and the peak memory the partition
// prices, so the partition's optimum is the best of them all.
TEST(BaPipe, OnChainsThePartitionIsTheBestEvaluatedCutInTimeAndMemory) {
  std::mt19937 rng(7);
  const auto cluster = test::simple_cluster(8, 2e9);
  int memory_bound = 0; // trials where a limit moved the optimum
  for (int trial = 0; trial < 6; ++trial) {
    const auto g = random_mlp(rng, 3, 32);
    const int n = static_cast<int>(g.ops().size());
    const int stages = trial % 2 == 0 ? 2 : 3;
    search::Request r;
    r.graph = &g;
    r.cluster = &cluster;
    r.devices = 2 * stages;
    r.micro_batches = 4;
    r.schedule = trial % 3 == 0 ? strategy::Schedule::gpipe : strategy::Schedule::one_f_one_b;
    search::bapipe::Shape shape{stages, 4, r.schedule, 1};
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ", " << stages << " stages");

    // Every cut, evaluated.
    struct Cut {
      std::vector<int> cuts;
      double slowest, peak;
    };
    std::vector<Cut> all;
    std::vector<int> cuts(static_cast<std::size_t>(stages) - 1);
    std::function<void(std::size_t, int)> place = [&](std::size_t s, int from) {
      if (s == cuts.size()) {
        auto q = r;
        q.cuts = cuts;
        const auto st = search::find_optimizer("pipeline").optimize(q);
        const auto p = strategy::evaluate(g, cluster, st, r.setup);
        all.push_back({cuts, term(p, "pipeline bubble") / (stages - 1), p.peak_memory});
        return;
      }
      for (int a = from; a <= n - static_cast<int>(cuts.size() - s); ++a) {
        cuts[s] = a;
        place(s + 1, a + 1);
      }
    };
    place(0, 1);
    ASSERT_FALSE(all.empty());

    // The partition prices each cut as evaluate() does.
    const auto t = search::bapipe::tables(r, shape);
    for (const auto& cut : all) {
      Partition part;
      part.starts = {0};
      part.starts.insert(part.starts.end(), cut.cuts.begin(), cut.cuts.end());
      double slowest = 0, peak = 0;
      for (int s = 0; s < stages; ++s) {
        const int last = s + 1 < stages ? part.starts[static_cast<std::size_t>(s) + 1] : n;
        const auto c = search::bapipe::stage_cost(t.problem, s, part.starts[static_cast<std::size_t>(s)], last);
        slowest = std::max(slowest, c.time);
        peak = std::max(peak, c.memory);
      }
      EXPECT_NEAR(slowest, cut.slowest, 1e-9 * cut.slowest);
      EXPECT_NEAR(peak, cut.peak, 1e-9 * cut.peak);
    }

    // Under a limit that rules some cuts out, the partition finds the best of the rest.
    std::vector<double> peaks;
    for (const auto& c : all) {
      peaks.push_back(c.peak);
    }
    std::sort(peaks.begin(), peaks.end());
    double unlimited = 0;
    for (double limit : {std::numeric_limits<double>::infinity(), peaks[peaks.size() / 2], peaks.front()}) {
      auto q = r;
      q.memory_limit = limit;
      const auto part = search::bapipe::partition(search::bapipe::tables(q, shape).problem);
      double best = std::numeric_limits<double>::infinity();
      for (const auto& c : all) {
        if (c.peak <= limit) {
          best = std::min(best, c.slowest);
        }
      }
      ASSERT_TRUE(part.feasible);
      EXPECT_NEAR(part.bottleneck, best, 1e-9 * best);
      if (limit == std::numeric_limits<double>::infinity()) {
        unlimited = part.bottleneck;
      }
      memory_bound += part.bottleneck > unlimited * (1 + 1e-9) ? 1 : 0;
      auto st = search::bapipe::to_strategy(q, shape, search::bapipe::tables(q, shape), part);
      const auto p = strategy::evaluate(g, cluster, st, r.setup);
      EXPECT_LE(p.peak_memory, limit * (1 + 1e-12));
    }
    // Below the smallest footprint nothing fits.
    auto q = r;
    q.memory_limit = peaks.front() * (1 - 1e-6);
    EXPECT_FALSE(search::bapipe::partition(search::bapipe::tables(q, shape).problem).feasible);
  }
  EXPECT_GT(memory_bound, 2);
}

cluster::Device scaled(const cluster::Device& d, double speed, double memory) {
  auto out = d;
  out.name = fmt::format("{}x{}", d.name, speed);
  out.peak_fp32 *= speed;
  out.peak_tf32 *= speed;
  out.peak_fp16 *= speed;
  out.peak_bf16 *= speed;
  out.memory_bandwidth *= speed;
  out.memory_capacity = memory;
  return out;
}

TEST(BaPipe, AFasterStageTakesMoreLayersAndASmallerMemoryFewer) {
  const auto g = zoo::load("zoo:mlp?batch=32&input=256&hidden=256&layers=8&classes=256").graph;
  const auto cluster = test::simple_cluster(4);
  search::Request r;
  r.graph = &g;
  r.cluster = &cluster;
  r.devices = 4;
  const search::bapipe::Shape shape{2, 8, strategy::Schedule::one_f_one_b, 1};
  auto ops_per_stage = [&](const std::vector<cluster::Device>& devices) {
    const auto t = search::bapipe::tables(r, shape, devices);
    const auto part = search::bapipe::partition(t.problem);
    EXPECT_TRUE(part.feasible);
    EXPECT_EQ(t.problem.stages[0].device, devices[0].name);
    return std::pair{part.starts[1], t.problem.ops - part.starts[1]};
  };
  const auto& d = cluster.device;
  const auto [even0, even1] = ops_per_stage({d, d});
  EXPECT_LE(std::abs(even0 - even1), 2);
  const auto [slow0, fast1] = ops_per_stage({d, scaled(d, 4, d.memory_capacity)});
  EXPECT_GT(fast1, slow0 + 4) << "the 4x faster stage 1 takes more ops";
  const auto [fast0, slow1] = ops_per_stage({scaled(d, 4, d.memory_capacity), d});
  EXPECT_GT(fast0, slow1 + 4) << "the 4x faster stage 0 takes more ops";
  // The faster stage given too little memory for its share: the limit moves the cut back.
  const auto t = search::bapipe::tables(r, shape, {d, scaled(d, 4, d.memory_capacity)});
  const auto part = search::bapipe::partition(t.problem);
  const double need = part.stages[1].memory;
  const auto [more0, less1] = ops_per_stage({d, scaled(d, 4, need * 0.6)});
  EXPECT_LT(less1, fast1);
  EXPECT_GT(more0, slow0);
}

// A cluster of mixed nodes: node 0 of `first`, node 1 of `second`, 2 devices each, one network.
cluster::Cluster mixed_nodes(const cluster::Device& first, const cluster::Device& second) {
  auto c = test::simple_cluster(2);
  c.device = first;
  c.node_groups.push_back({1, second});
  return c;
}

// The stages of a cluster of mixed nodes are sized by the devices they land on, exactly as when
// each stage is given its device: the faster node's stage takes more ops, and a node with too
// little memory for its share gives ops back.
TEST(BaPipe, OnMixedNodesEachStageIsSizedByItsNodesDevices) {
  const auto g = zoo::load("zoo:mlp?batch=32&input=256&hidden=256&layers=8&classes=256").graph;
  const auto& d = test::simple_cluster(2).device;
  const search::bapipe::Shape shape{2, 8, strategy::Schedule::one_f_one_b, 1};
  auto cut = [&](const cluster::Cluster& c, const std::vector<cluster::Device>& devices) {
    search::Request r;
    r.graph = &g;
    r.cluster = &c;
    r.devices = 4;
    const auto t = search::bapipe::tables(r, shape, devices);
    const auto part = search::bapipe::partition(t.problem);
    EXPECT_TRUE(part.feasible);
    return std::pair{part.starts[1], t.problem.ops - part.starts[1]};
  };
  const auto fast = scaled(d, 4, d.memory_capacity);
  const auto mixed = mixed_nodes(d, fast);
  ASSERT_EQ(mixed.device_count(), 4);
  EXPECT_EQ(mixed.device_of(1).name, d.name);
  EXPECT_EQ(mixed.device_of(2).name, fast.name);
  const auto [slow0, fast1] = cut(mixed, {});
  EXPECT_GT(fast1, slow0 + 4) << "the node 4x faster takes more ops";
  auto flat = mixed;
  flat.node_groups.clear();
  flat.nodes = 2;
  EXPECT_EQ(cut(mixed, {}), cut(flat, {d, fast})) << "as if each stage were given its node's device";

  // The family on the mixed cluster: every op of the later stage on the fast node, and evaluate()
  // checks each device against its own memory.
  search::Request r;
  r.graph = &g;
  r.cluster = &mixed;
  r.devices = 4;
  r.stages = 2;
  const auto st = search::find_optimizer("bapipe").optimize(r);
  const auto p = strategy::evaluate(g, mixed, st, r.setup);
  EXPECT_TRUE(p.fits);
  const auto small = mixed_nodes(d, scaled(d, 4, 1e3));
  const auto p_small = strategy::evaluate(g, small, st, r.setup);
  EXPECT_FALSE(p_small.fits) << "the fast node's 1 kB cannot hold its stage";
  EXPECT_EQ(p_small.memory_capacity, 1e3);
}

struct Gpt {
  onnx_import::ImportResult model =
      zoo::load("zoo:gpt2?layers=4&hidden=64&heads=4&seq=16&batch=16&vocab=100&positions=32");
  cluster::Cluster cluster = test::simple_cluster(8);
  search::Request request(int devices) const {
    search::Request r;
    r.graph = &model.graph;
    r.cluster = &cluster;
    r.devices = devices;
    return r;
  }
};

std::string refusal(const search::Request& r) {
  try {
    search::find_optimizer("bapipe").optimize(r);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no refusal)";
}

TEST(BaPipe, RefusesPipelineOptionsThatCannotWorkNamingTheReason) {
  Gpt s;
  auto r = s.request(8);
  r.stages = 3;
  EXPECT_THAT(refusal(r), HasSubstr("3 stages do not divide 8 devices"));
  r = s.request(8);
  r.micro_batches = 5;
  EXPECT_THAT(refusal(r), HasSubstr("5 micro-batches do not divide the batch of 16"));
  r = s.request(8);
  r.stages = 2;
  r.micro_batches = 8; // 2 samples each over 4 replicas
  EXPECT_THAT(refusal(r), HasSubstr("a micro-batch of 2 samples (16 / 8 micro-batches) does not split over the 4 "
                                    "data-parallel replicas"));
  r = s.request(8);
  r.cuts = {3};
  EXPECT_THAT(refusal(r), HasSubstr("--cuts belongs to --strategy pipeline"));
  r = s.request(8);
  r.stages = 2;
  r.tensor_parallel = 3;
  EXPECT_THAT(refusal(r), HasSubstr("3-way tensor parallelism does not divide the 4 devices of a stage"));
  const auto tiny = zoo::load("zoo:mlp?batch=8&input=16&hidden=16&layers=1&classes=4").graph;
  r = s.request(8);
  r.graph = &tiny;
  r.stages = 8;
  EXPECT_THAT(refusal(r), HasSubstr(fmt::format("8 stages for {} ops", tiny.ops().size())));
  // Micro-batches that only some stage counts can take: those are tried, and named when none fits.
  r = s.request(8);
  r.micro_batches = 16;
  const auto st = search::find_optimizer("bapipe").optimize(r);
  EXPECT_EQ(st.pipeline->stages, 8);
  EXPECT_THAT(st.explanation, HasSubstr("1: a micro-batch of 1 sample (16 / 16 micro-batches) does not split"));
  r.memory_limit = 1024;
  EXPECT_THAT(refusal(r), HasSubstr("4: a micro-batch of 1 sample (16 / 16 micro-batches) does not split over the 2"));
  r = s.request(8);
  r.memory_limit = 1024;
  EXPECT_THAT(refusal(r), HasSubstr("no pipeline fits 0.00 GiB per device"));
}

TEST(BaPipe, TheFamilyKeepsTheFastestStageCountThatFitsAndExplainsIt) {
  Gpt s;
  const auto r = s.request(8);
  const auto st = search::find_optimizer("bapipe").optimize(r);
  ASSERT_TRUE(st.pipeline.has_value());
  const auto p = predicted(s.model.graph, s.cluster, st, r.setup);
  EXPECT_TRUE(p.fits);
  EXPECT_TRUE(p.simulated);
  // Never slower than the fixed-shape candidates it tried, as `partita plan` predicts them (the
  // final ranking is the simulator's).
  for (int stages : {1, 2, 4, 8}) {
    auto q = r;
    q.stages = stages;
    const auto other = search::find_optimizer("bapipe").optimize(q);
    EXPECT_LE(p.iteration_time, predicted(s.model.graph, s.cluster, other, r.setup).iteration_time * (1 + 1e-12));
  }
  EXPECT_THAT(st.explanation, HasSubstr(", simulated)"));
  EXPECT_THAT(st.explanation, HasSubstr(fmt::format("{} stage", st.pipeline->stages)));
  EXPECT_THAT(st.explanation, HasSubstr(fmt::format("{} micro-batches", st.pipeline->micro_batches)));
  EXPECT_THAT(st.explanation, HasSubstr("1f1b schedule"));
  EXPECT_THAT(st.explanation, HasSubstr("Stage counts: 1: "));
  EXPECT_THAT(st.explanation, HasSubstr("Runner-up: ")); // every count fits here
  EXPECT_THAT(st.explanation, HasSubstr(", losing most on its "));
  if (st.pipeline->stages > 1) {
    EXPECT_THAT(st.explanation, HasSubstr("Bottleneck: stage"));
    EXPECT_THAT(st.explanation, HasSubstr("Binding constraint: "));
  }
  // A memory limit below the fastest plan's peak: the plan found fits it, or bapipe says none does.
  auto q = r;
  q.memory_limit = p.peak_memory * 0.7;
  try {
    const auto limited = search::find_optimizer("bapipe").optimize(q);
    EXPECT_LE(strategy::evaluate(s.model.graph, s.cluster, limited, r.setup).peak_memory, q.memory_limit);
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no pipeline fits"));
  }
}

// The micro-batch count is searched under the memory limit: the family's plan for a stage count
// fits and is at least as fast as every count that fits (each a power of two dividing a replica's
// samples, which the search tries), with a limit that leaves out the fewest micro-batches. On an
// A100 a model this small is kernel-launch latency: fewer micro-batches are faster, more hold less.
TEST(BaPipe, TheMicroBatchCountIsTheFastestThatFits) {
  Gpt s;
  s.cluster = cluster::load_cluster("dgx-a100");
  auto r = s.request(8);
  r.stages = 2; // 4 replicas of 4 samples each: 1, 2 or 4 micro-batches
  std::map<int, strategy::Prediction> by_count;
  for (const int m : {1, 2, 4}) {
    auto q = r;
    q.micro_batches = m;
    by_count[m] = predicted(s.model.graph, s.cluster, search::find_optimizer("bapipe").optimize(q), {});
  }
  EXPECT_LT(by_count[2].iteration_time, by_count[4].iteration_time);
  // Fewer micro-batches hold more activations in flight.
  EXPECT_GT(by_count[1].peak_memory, by_count[4].peak_memory);
  for (const double limit :
       {std::numeric_limits<double>::infinity(), (by_count[1].peak_memory + by_count[2].peak_memory) / 2}) {
    auto q = r;
    q.memory_limit = std::isinf(limit) ? 0 : limit;
    const auto st = search::find_optimizer("bapipe").optimize(q);
    const auto p = predicted(s.model.graph, s.cluster, st, {});
    EXPECT_LE(p.peak_memory, limit);
    int fitting = 0;
    for (const auto& [m, other] : by_count) {
      if (other.peak_memory <= limit) {
        ++fitting;
        EXPECT_LE(p.iteration_time, other.iteration_time * (1 + 1e-12)) << m << " micro-batches, limit " << limit;
      }
    }
    EXPECT_GE(fitting, 2);
  }
}

// With equal stage shapes, the exact partition's slowest stage is never slower than the pipeline
// family's cuts balanced by time (a greedy fill of per-op times).
TEST(BaPipe, NeverASlowerBottleneckThanTheTimeBalancedCuts) {
  Gpt s;
  for (int stages : {2, 4}) {
    auto r = s.request(8);
    r.stages = stages;
    r.micro_batches = 16 / (8 / stages); // one sample per data-parallel replica
    const auto mine = strategy::evaluate(s.model.graph, s.cluster, search::find_optimizer("bapipe").optimize(r), {});
    const auto theirs =
        strategy::evaluate(s.model.graph, s.cluster, search::find_optimizer("pipeline").optimize(r), {});
    EXPECT_LE(term(mine, "pipeline bubble"), term(theirs, "pipeline bubble") * (1 + 1e-9)) << stages << " stages";
  }
}

} // namespace
} // namespace partita

namespace partita {
namespace {

// A transformer is no chain (the residual stream skips ops, a tensor has several readers), yet on
// one switched node the partition prices its stages as evaluate() does.
TEST(BaPipe, OnATransformerTheBottleneckAndPeakAreEvaluatesOnOneNode) {
  Gpt s;
  for (int stages : {2, 4, 8}) {
    auto r = s.request(8);
    const search::bapipe::Shape shape{stages, 16 / (8 / stages), strategy::Schedule::one_f_one_b, 1};
    const auto t = search::bapipe::tables(r, shape);
    const auto part = search::bapipe::partition(t.problem);
    ASSERT_TRUE(part.feasible);
    const auto p = strategy::evaluate(s.model.graph, s.cluster, search::bapipe::to_strategy(r, shape, t, part), {});
    double peak = 0;
    for (const auto& st : part.stages) {
      peak = std::max(peak, st.memory);
    }
    EXPECT_NEAR(part.bottleneck, term(p, "pipeline bubble") / (stages - 1), 1e-9 * part.bottleneck) << stages;
    EXPECT_NEAR(peak, p.peak_memory, 1e-9 * peak) << stages;
    EXPECT_NEAR(part.iteration_time, p.iteration_time, 1e-9 * p.iteration_time) << stages;
  }
}

} // namespace
} // namespace partita

namespace partita {
namespace {

// The tightest limit any partition fits (found by bisection): the cut moves, the bottleneck grows,
// and the explanation says memory binds.
TEST(BaPipe, AMemoryLimitThatMovesTheCutIsNamedAsTheBindingConstraint) {
  Gpt s;
  auto r = s.request(8);
  r.stages = 4;
  const search::bapipe::Shape shape{4, 8, strategy::Schedule::one_f_one_b, 1};
  const auto t = search::bapipe::tables(r, shape);
  const auto free = search::bapipe::partition(t.problem);
  ASSERT_TRUE(free.feasible);
  double peak = 0;
  for (const auto& st : free.stages) {
    peak = std::max(peak, st.memory);
  }
  auto limited = [&](double limit) {
    auto p = t.problem;
    for (auto& sp : p.stages) {
      sp.memory_limit = limit;
    }
    return search::bapipe::partition(p);
  };
  double lo = 0, hi = peak;
  for (int i = 0; i < 60; ++i) {
    (limited((lo + hi) / 2).feasible ? hi : lo) = (lo + hi) / 2;
  }
  ASSERT_LT(hi, peak * 0.99) << "some partition holds less than the balanced one";
  r.memory_limit = hi;
  const auto bound = search::bapipe::partition(search::bapipe::tables(r, shape).problem);
  ASSERT_TRUE(bound.feasible);
  EXPECT_GT(bound.bottleneck, free.bottleneck);
  const auto st = search::find_optimizer("bapipe").optimize(r);
  EXPECT_THAT(st.explanation, HasSubstr("Binding constraint: memory: without the limit the stages would balance"));
  EXPECT_LE(strategy::evaluate(s.model.graph, s.cluster, st, {}).peak_memory, r.memory_limit);
}

} // namespace
} // namespace partita

namespace partita {
namespace {

// Across nodes and on a non-switched node (DGX-1's cube mesh), stages that sit alike in their
// nodes share their prices, each on its own devices. On a chain those are evaluate()'s numbers
// exactly; a transformer's reads from two or more stages back (constants, the causal mask) are
// priced as sent from the stage just before, which across nodes is a faster link than evaluate()'s.
TEST(BaPipe, StagesPricedOnceForAlikePlacesStillMatchEvaluateAcrossNodes) {
  std::mt19937 rng(3);
  const auto chain = random_mlp(rng, 12, 64);
  const auto gpt = zoo::load("zoo:gpt2?layers=4&hidden=64&heads=4&seq=16&batch=64&vocab=100&positions=32").graph;
  for (const char* preset : {"dgx1?nodes=2", "dgx-a100?nodes=2"}) {
    const auto cluster = cluster::load_cluster(preset);
    for (const auto* g : {&chain, &gpt}) {
      for (int stages : {4, 8, 16}) {
        SCOPED_TRACE(::testing::Message()
                     << preset << ", " << (g == &chain ? "chain" : "gpt2") << ", " << stages << " stages");
        search::Request r;
        r.graph = g;
        r.cluster = &cluster;
        r.devices = 16;
        const search::bapipe::Shape shape{stages, 64 / (16 / stages), strategy::Schedule::one_f_one_b, 1};
        const auto t = search::bapipe::tables(r, shape);
        const auto part = search::bapipe::partition(t.problem);
        ASSERT_TRUE(part.feasible);
        const auto st = search::bapipe::to_strategy(r, shape, t, part);
        for (std::size_t id = 0; id < st.ops.size(); ++id) {
          for (int d : st.ops[id].devices) {
            ASSERT_EQ(d / (16 / stages), st.pipeline->stage_of_op[id]) << "op " << id;
          }
        }
        const auto p = strategy::evaluate(*g, cluster, st, {});
        const double slowest = term(p, "pipeline bubble") / (stages - 1);
        // 12% at most here: 16 one-device stages of a tiny model, whose sends are all latency.
        const double tolerance = g == &chain ? 1e-9 : 0.15;
        EXPECT_NEAR(part.bottleneck, slowest, tolerance * slowest);
        EXPECT_NEAR(part.iteration_time, p.iteration_time, tolerance * p.iteration_time);
      }
    }
  }
}

} // namespace
} // namespace partita

namespace partita {
namespace {

TEST(BaPipe, StopsWhenCancelled) {
  Gpt s;
  auto r = s.request(8);
  std::atomic<bool> cancel{true};
  r.cancel = &cancel;
  EXPECT_THROW(search::find_optimizer("bapipe").optimize(r), Cancelled);
  std::mt19937 rng(5);
  EXPECT_THROW(search::bapipe::partition(random_problem(rng, 8, 3), &cancel), Cancelled);
}

} // namespace
} // namespace partita
