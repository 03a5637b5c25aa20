// The 3-D search: its best is the fastest fitting candidate of the whole space (brute force), its
// Pareto front holds only undominated points that are their own plans, the user's held choices
// stay, a plan that fits is never traded for one that does not, and the plan file carries the
// setup it chose.

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "partita/search/optimizer.h"
#include "partita/search/three_d.h"
#include "partita/sim/simulate.h"
#include "partita/strategy/plan_file.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"
#include "simple_cluster.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <map>

namespace partita {
namespace {

using search::three_d::Candidate;
using ::testing::HasSubstr;

// One thread, so that the search's own pricing is what the tests measure against brute force.
// Ranked by the terms added up (no simulation budget): the screen the simulated ranking starts
// from, exact against brute force; RanksAsAnExhaustiveSimulationDoes tests the ranking itself.
search::Request request_on(const graph::Graph& g, const cluster::Cluster& c, int devices, cluster::Precision p) {
  search::Request r;
  r.graph = &g;
  r.cluster = &c;
  r.devices = devices;
  r.setup.precision = p;
  r.threads = 1;
  r.simulation_budget = 0;
  return r;
}

// A small GPT on 2 nodes of 4 devices: 4 layers, so up to 4 stages, interleaving with 2 chunks.
struct Fixture {
  onnx_import::ImportResult model = zoo::load("zoo:gpt2?layers=4&hidden=128&heads=4&seq=64&batch=16&vocab=512");
  cluster::Cluster cluster = [] {
    auto c = test::simple_cluster(4);
    c.nodes = 2;
    return c;
  }();

  search::Request request() const { return request_on(model.graph, cluster, 8, cluster::Precision::fp16); }
};

// Every candidate, enumerated here independently of the search's own enumeration and pruning.
std::vector<Candidate> every_candidate(int devices, int per_node, int batch, int layers) {
  std::vector<Candidate> out;
  for (int t = 1; t <= per_node; ++t) {
    if (per_node % t != 0 || devices % t != 0) {
      continue;
    }
    for (int p = 1; p <= layers; ++p) {
      if ((devices / t) % p != 0) {
        continue;
      }
      const int d = devices / (t * p);
      if (batch % d != 0) {
        continue;
      }
      const int per_replica = batch / d;
      for (int b = 1; b <= per_replica; ++b) {
        if (per_replica % b != 0 || ((b & (b - 1)) != 0 && b != per_replica)) {
          continue;
        }
        const int m = per_replica / b;
        if (p > 1 && m < p) {
          continue;
        }
        std::vector<std::pair<strategy::Schedule, int>> schedules = {{strategy::Schedule::one_f_one_b, 1}};
        for (int v = 2; v <= 4 && p > 1 && m % p == 0; ++v) {
          if (layers % (p * v) == 0) {
            schedules.emplace_back(strategy::Schedule::interleaved, v);
          }
        }
        for (const auto& [schedule, v] : schedules) {
          for (int sp = 0; sp <= (t > 1 ? 1 : 0); ++sp) {
            for (int z = 0; z <= 3; ++z) {
              for (const auto rc : {cost::Recompute::none, cost::Recompute::selective, cost::Recompute::full}) {
                Candidate c;
                c.pipeline = p;
                c.tensor = t;
                c.data = d;
                c.micro_batch_size = b;
                c.micro_batches = m;
                c.schedule = schedule;
                c.chunks = v;
                c.zero_stage = z;
                c.recompute = rc;
                c.sequence_parallel = sp == 1;
                out.push_back(c);
              }
            }
          }
        }
      }
    }
  }
  // Each stage laid out by the per-layer search: 2 stages or more of a node at most, m
  // micro-batches from the stages to 4 x in powers of two, 1F1B or interleaved with 2 chunks, cut
  // by time or as Megatron-LM cuts.
  for (int p = 2; p <= layers; ++p) {
    if (devices % p != 0 || devices / p > per_node) {
      continue;
    }
    for (int m = p; m <= 4 * p && m <= batch; m *= 2) {
      if (batch % m != 0) {
        continue;
      }
      std::vector<std::pair<strategy::Schedule, int>> schedules = {{strategy::Schedule::one_f_one_b, 1}};
      if (layers % (2 * p) == 0) {
        schedules.emplace_back(strategy::Schedule::interleaved, 2);
      }
      for (const auto& [schedule, v] : schedules) {
        for (int z = 0; z <= 3; ++z) {
          for (const auto rc : {cost::Recompute::none, cost::Recompute::selective, cost::Recompute::full}) {
            for (const bool layers_cut : {false, true}) { // cut by time, or as Megatron-LM cuts
              Candidate c;
              c.pipeline = p;
              c.micro_batch_size = batch / m;
              c.micro_batches = m;
              c.schedule = schedule;
              c.chunks = v;
              c.zero_stage = z;
              c.recompute = rc;
              c.per_layer = true;
              c.layers_cut = layers_cut;
              out.push_back(c);
            }
          }
        }
      }
    }
  }
  return out;
}

struct Brute {
  double best = std::numeric_limits<double>::infinity();
  double least_memory = std::numeric_limits<double>::infinity();
  std::vector<std::pair<double, double>> fitting; // (time, memory)
};

// `simulate`: each candidate's iteration as `partita plan` predicts it (sim::simulate_prediction).
Brute brute_force(const search::Request& r, double limit, bool simulate = false) {
  Brute out;
  // A per-layer layout is searched without recomputation: planned once for the three.
  std::map<std::string, strategy::Strategy> per_layer;
  for (const auto& c : every_candidate(r.devices, r.cluster->devices_per_node, strategy::batch_size(*r.graph), 4)) {
    strategy::Strategy st;
    try {
      if (c.per_layer) {
        auto none = c;
        none.recompute = cost::Recompute::none;
        auto it = per_layer.find(none.text());
        if (it == per_layer.end()) {
          it = per_layer.emplace(none.text(), search::three_d::plan(r, none)).first;
        }
        st = it->second;
        st.setup->recompute = c.recompute;
      } else {
        st = search::three_d::plan(r, c);
      }
    } catch (const Error&) {
      continue;
    }
    auto p = strategy::evaluate(*r.graph, *r.cluster, st, *st.setup);
    if (simulate) {
      EXPECT_TRUE(sim::simulate_prediction(*r.graph, *r.cluster, st, p)) << c.text();
    }
    out.least_memory = std::min(out.least_memory, p.peak_memory);
    if (p.peak_memory <= limit) {
      out.best = std::min(out.best, p.iteration_time);
      out.fitting.emplace_back(p.iteration_time, p.peak_memory);
    }
  }
  return out;
}

// Without a limit, on a GPU preset whose kernels run faster per sample on larger pieces: every
// micro-batch size is a candidate of its own (a larger one runs its kernels at a better
// efficiency, reads the weights fewer times and pays each collective's latency fewer times; a
// smaller one shrinks the bubble), so none may be skipped unpriced.
TEST(ThreeD, PricesEveryMicroBatchSize) {
  const auto model = zoo::load("zoo:gpt2?layers=4&hidden=128&heads=4&seq=64&batch=16&vocab=512");
  const auto cluster = cluster::load_cluster("dgx-a100?nodes=2");
  const auto r = request_on(model.graph, cluster, 16, cluster::Precision::bf16);
  const auto found = search::three_d::search(r);
  const auto brute = brute_force(r, std::numeric_limits<double>::infinity());
  EXPECT_NEAR(found.best.iteration_time, brute.best, 1e-12 * brute.best) << found.best.candidate.text();
}

TEST(ThreeD, FindsTheFastestFittingCandidateOfTheWholeSpace) {
  Fixture f;
  auto r = f.request();
  const auto free = search::three_d::search(r);
  // A limit between the front's extremes, so that memory binds and the fastest plan is out.
  ASSERT_GE(free.pareto.size(), 2U);
  const double limit = (free.pareto.front().peak_memory + free.pareto.back().peak_memory) / 2;
  r.memory_limit = limit;
  const auto bound = search::three_d::search(r);
  const auto brute = brute_force(r, limit);
  EXPECT_NEAR(bound.best.iteration_time, brute.best, 1e-12 * brute.best);

  EXPECT_LE(bound.best.peak_memory, limit);
  EXPECT_GT(bound.best.iteration_time, free.best.iteration_time);
  EXPECT_EQ(bound.binding, "memory");
  EXPECT_GT(bound.too_slow + bound.too_big, 0U) << "the bounds skipped nothing";
  // The returned plan is the best candidate's and predicts what the search said.
  const auto p = strategy::evaluate(*r.graph, *r.cluster, bound.strategy, r.setup);
  EXPECT_DOUBLE_EQ(p.iteration_time, bound.best.iteration_time);
  EXPECT_DOUBLE_EQ(p.peak_memory, bound.best.peak_memory);
  EXPECT_EQ(bound.strategy.setup->zero_stage, bound.best.candidate.zero_stage);
  EXPECT_EQ(bound.strategy.setup->recompute, bound.best.candidate.recompute);

  // The front: fastest first, each point using strictly less memory than the one before, none
  // dominated by any fitting candidate of the brute force, and each point its own plan.
  for (std::size_t i = 1; i < bound.pareto.size(); ++i) {
    EXPECT_GT(bound.pareto[i].iteration_time, bound.pareto[i - 1].iteration_time);
    EXPECT_LT(bound.pareto[i].peak_memory, bound.pareto[i - 1].peak_memory);
  }
  EXPECT_NEAR(bound.pareto.front().iteration_time, brute.best, 1e-12 * brute.best);
  for (const auto& point : bound.pareto) {
    for (const auto& [time, memory] : brute.fitting) {
      const double t = point.iteration_time, m = point.peak_memory, eps = 1e-12;
      EXPECT_FALSE(time <= t * (1 + eps) && memory <= m * (1 + eps) && (time < t * (1 - eps) || memory < m * (1 - eps)))
          << point.candidate.text() << " is dominated by a candidate of " << time << " s, " << memory << " B";
    }
    // Predicted by the Evaluator: evaluate()'s figures up to the order of floating-point sums.
    const auto st = search::three_d::plan(r, point.candidate);
    const auto q = strategy::evaluate(*r.graph, *r.cluster, st, r.setup);
    EXPECT_NEAR(q.iteration_time, point.iteration_time, 1e-12 * q.iteration_time) << point.candidate.text();
    EXPECT_NEAR(q.peak_memory, point.peak_memory, 1e-12 * q.peak_memory) << point.candidate.text();
  }
  // The smallest footprint of the space is on the front.
  EXPECT_NEAR(bound.pareto.back().peak_memory, brute.least_memory, 1e-12 * brute.least_memory);
}

// The final ranking simulates the candidates whose bound (their terms added up less what the
// simulator can overlap) could beat the best simulated so far: it finds what simulating every
// candidate finds (brute force), the chosen figure is `partita plan`'s (simulated), and the plan the
// terms added up would choose simulates no faster. (Before the per-layer layouts were also cut as
// Megatron-LM cuts, simulating changed the choice here; now both pick the same plan.)
TEST(ThreeD, RanksAsAnExhaustiveSimulationDoes) {
  // One device count (the brute force simulates the whole space: about a minute under ASan).
  for (const int devices : {16}) {
    const auto model = zoo::load("zoo:gpt2?layers=4&hidden=256&heads=4&seq=128&batch=32&vocab=2048");
    const auto cluster = cluster::load_cluster("dgx-a100?nodes=2");
    auto r = request_on(model.graph, cluster, devices, cluster::Precision::bf16);
    r.simulation_budget = search::Request{}.simulation_budget;
    const auto found = search::three_d::search(r);
    EXPECT_TRUE(found.best.simulated);
    EXPECT_FALSE(found.budget_cut);
    EXPECT_GT(found.simulated, 0U);
    const auto brute = brute_force(r, std::numeric_limits<double>::infinity(), true);
    EXPECT_NEAR(found.best.iteration_time, brute.best, 1e-9 * brute.best)
        << devices << ": " << found.best.candidate.text();
    EXPECT_LT(found.simulated, brute.fitting.size() / 4) << "the bound skips most of the space";

    // What `partita plan` predicts for the chosen plan.
    auto p = strategy::evaluate(*r.graph, *r.cluster, found.strategy, *found.strategy.setup);
    const double additive = p.iteration_time;
    ASSERT_TRUE(sim::simulate_prediction(*r.graph, *r.cluster, found.strategy, p));
    EXPECT_NEAR(found.best.iteration_time, p.iteration_time, 1e-9 * p.iteration_time);
    EXPECT_NEAR(found.best.additive_time, additive, 1e-12 * additive);

    auto unsimulated = r;
    unsimulated.simulation_budget = 0;
    const auto added = search::three_d::search(unsimulated);
    EXPECT_FALSE(added.best.simulated);
    EXPECT_EQ(added.simulated, 0U);
    // The plan the terms added up would choose simulates no faster than the one chosen.
    const auto additive_plan = search::three_d::plan(r, added.best.candidate);
    auto q = strategy::evaluate(*r.graph, *r.cluster, additive_plan, *additive_plan.setup);
    ASSERT_TRUE(sim::simulate_prediction(*r.graph, *r.cluster, additive_plan, q));
    EXPECT_LE(found.best.iteration_time, q.iteration_time * (1 + 1e-9)) << added.best.candidate.text();
  }
}

TEST(ThreeD, OneLayoutServesEveryMicroBatchSize) {
  // The search plans a layout once and replaces its micro-batch count: the same ops on the same
  // devices, the same stages, as the megatron family gives for each size.
  Fixture f;
  const auto r = f.request();
  Candidate a;
  a.pipeline = 2;
  a.tensor = 2;
  a.data = 2;
  a.micro_batch_size = 1;
  a.micro_batches = 8;
  Candidate b = a;
  b.micro_batch_size = 4;
  b.micro_batches = 2;
  const auto x = search::three_d::plan(r, a), y = search::three_d::plan(r, b);
  ASSERT_TRUE(x.pipeline && y.pipeline);
  EXPECT_EQ(x.pipeline->micro_batches, 8);
  EXPECT_EQ(y.pipeline->micro_batches, 2);
  EXPECT_EQ(x.pipeline->stage_of_op, y.pipeline->stage_of_op);
  ASSERT_EQ(x.ops.size(), y.ops.size());
  for (std::size_t i = 0; i < x.ops.size(); ++i) {
    EXPECT_EQ(x.ops[i].config.splits, y.ops[i].config.splits) << i;
    EXPECT_EQ(x.ops[i].devices, y.ops[i].devices) << i;
  }
}

TEST(ThreeD, HeldChoicesStayAsTyped) {
  Fixture f;
  auto r = f.request();
  r.held.zero = true;
  r.setup.zero_stage = 2;
  r.held.recompute = true;
  r.setup.recompute = cost::Recompute::selective;
  r.tensor_parallel = 2;
  const auto res = search::three_d::search(r);
  for (const auto& p : res.pareto) {
    EXPECT_EQ(p.candidate.zero_stage, 2);
    EXPECT_EQ(p.candidate.recompute, cost::Recompute::selective);
    EXPECT_EQ(p.candidate.tensor, 2);
  }
  r.pipeline_parallel = 2;
  r.schedule = strategy::Schedule::interleaved;
  r.held.schedule = true;
  r.chunks = 2;
  const auto piped = search::three_d::search(r);
  EXPECT_EQ(piped.best.candidate.pipeline, 2);
  EXPECT_EQ(piped.best.candidate.schedule, strategy::Schedule::interleaved);
  EXPECT_EQ(piped.best.candidate.chunks, 2);
  r.schedule = strategy::Schedule::gpipe;
  r.chunks = 0;
  EXPECT_THAT([&] { search::three_d::search(r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("--schedule gpipe is not among")));
}

TEST(ThreeD, NothingFitsNamesTheSmallestFootprint) {
  Fixture f;
  auto r = f.request();
  r.memory_limit = 1e3; // 1 kB
  EXPECT_THAT([&] { search::three_d::search(r); }, ::testing::ThrowsMessage<Error>(HasSubstr("no candidate fits")));
  // Parameters, gradients and optimizer state alone over the limit: nothing is planned.
  try {
    search::three_d::search(r);
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("alone"));
  }
  r.memory_limit = 0;
  const auto free = search::three_d::search(r);
  r.memory_limit = free.pareto.back().peak_memory * 0.999; // just under the smallest footprint
  EXPECT_THAT([&] { search::three_d::search(r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("smallest footprint found")));
}

TEST(ThreeD, NeverSlowerThanMegatronLayoutsItCouldHaveChosen) {
  // Any Megatron-LM configuration of the space, typed by hand, is predicted no faster than the
  // search's best (under the same model, setup and memory limit).
  Fixture f;
  auto r = f.request();
  const auto best = search::three_d::search(r).best.iteration_time;
  for (const int tp : {1, 2, 4}) {
    for (const int pp : {1, 2}) {
      auto typed = r;
      typed.tensor_parallel = tp;
      typed.pipeline_parallel = pp;
      typed.micro_batch_size = 1;
      typed.setup.recompute = cost::Recompute::full;
      const auto st = search::find_optimizer("megatron").optimize(typed);
      const auto p = strategy::evaluate(*r.graph, *r.cluster, st, typed.setup);
      if (p.fits) {
        EXPECT_LE(best, p.iteration_time) << "tp " << tp << " pp " << pp;
      }
    }
  }
}

TEST(ThreeD, ThePlanFileCarriesTheSetupItChose) {
  Fixture f;
  auto r = f.request();
  r.memory_limit = 0;
  const auto st = search::find_optimizer("3d").optimize(r);
  ASSERT_TRUE(st.setup);
  EXPECT_EQ(st.family, "3d");
  EXPECT_THAT(st.explanation, HasSubstr("Runner-up"));
  EXPECT_THAT(st.explanation, HasSubstr("Binding"));
  const auto p = strategy::evaluate(*r.graph, *r.cluster, st, r.setup);
  const auto plan = strategy::to_plan(*r.graph, *r.cluster, st, p, r.setup, "zoo:gpt2");
  EXPECT_EQ(plan.setup().zero_stage(), st.setup->zero_stage);
  EXPECT_EQ(plan.setup().recompute(), std::string(cost::recompute_name(st.setup->recompute)));

  const auto path = std::filesystem::temp_directory_path() / "partita_three_d_plan.json";
  io::write_json_file(path, plan);
  auto given = r;
  given.plan_file = path.string();
  const auto read = search::find_optimizer("given").optimize(given);
  ASSERT_TRUE(read.setup);
  const auto q = strategy::evaluate(*r.graph, *r.cluster, read, r.setup);
  EXPECT_NEAR(q.iteration_time, p.iteration_time, 1e-12 * p.iteration_time) << st.explanation;
  EXPECT_NEAR(q.peak_memory, p.peak_memory, 1e-12 * p.peak_memory);
  // A ZeRO stage typed beside the plan that differs from the one chosen is refused.
  given.held.zero = true;
  given.setup.zero_stage = st.setup->zero_stage == 3 ? 0 : 3;
  EXPECT_THAT([&] { search::find_optimizer("given").optimize(given); },
              ::testing::ThrowsMessage<Error>(HasSubstr("--zero on the command line differs")));
  std::filesystem::remove(path);
}

// Node 0 of the fixture's devices, node 1 of devices `speed` times as fast (4 devices each).
cluster::Cluster mixed_nodes(const cluster::Cluster& c, double speed) {
  auto out = c;
  out.nodes = 1;
  auto fast = c.device;
  fast.name = fmt::format("{}x{}", c.device.name, speed);
  for (double* x : {&fast.peak_fp32, &fast.peak_tf32, &fast.peak_fp16, &fast.peak_bf16, &fast.memory_bandwidth}) {
    *x *= speed;
  }
  out.node_groups.push_back({1, fast});
  return out;
}

std::vector<int> layers_per_stage(const graph::Graph& g, const strategy::Strategy& st) {
  std::vector<int> out(static_cast<std::size_t>(st.pipeline->stages), 0);
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    if (g.op(static_cast<graph::OpId>(i)).type == "LayerNormalization") {
      ++out[static_cast<std::size_t>(st.pipeline->stage_of_op[i])];
    }
  }
  return out;
}

// On mixed nodes every pipelined shape is also cut by its stages' speed: the faster node's stage
// takes more layers, cut where a layer starts, and the iteration is shorter than with Megatron-LM's
// even cut; on nodes of one kind that cut is Megatron-LM's.
TEST(ThreeD, OnMixedNodesItAlsoCutsTheLayersByTheStagesSpeed) {
  Fixture f;
  const auto mixed = mixed_nodes(f.cluster, 4);
  const auto r = request_on(f.model.graph, mixed, 8, cluster::Precision::fp16);
  const auto& g = f.model.graph;
  Candidate c;
  c.pipeline = 2;
  c.data = 4;
  c.micro_batch_size = 1;
  c.micro_batches = 4;
  const auto even = search::three_d::plan(r, c);
  c.speed_cut = true;
  const auto speed = search::three_d::plan(r, c);
  const auto even_layers = layers_per_stage(g, even), speed_layers = layers_per_stage(g, speed);
  // Layer norms: two per layer and the final one, which rides with the last stage.
  EXPECT_LE(std::abs(even_layers[0] - even_layers[1]), 1) << even_layers[0] << " / " << even_layers[1];
  EXPECT_GE(speed_layers[1], speed_layers[0] + 3)
      << speed_layers[0] << " / " << speed_layers[1] << ": the 4x faster node's stage takes more layers";
  for (const auto id : g.topological_order()) {
    if (speed.pipeline->stage_of_op[static_cast<std::size_t>(id)] == 1) {
      EXPECT_EQ(g.op(id).type, "LayerNormalization") << "stage 1 starts with a layer";
      break;
    }
  }
  EXPECT_LT(strategy::evaluate(g, mixed, speed, *speed.setup).iteration_time,
            strategy::evaluate(g, mixed, even, *even.setup).iteration_time);
  EXPECT_THAT(c.options(), HasSubstr("--balance speed"));

  // The search prices both cuts and keeps the faster.
  const auto flat = search::three_d::search(f.request());
  const auto res = search::three_d::search(r);
  EXPECT_GT(res.candidates, flat.candidates);
  const auto evaluated = [&](const Candidate& x) {
    const auto st = search::three_d::plan(r, x);
    return strategy::evaluate(g, mixed, st, *st.setup).iteration_time;
  };
  EXPECT_LE(res.best.iteration_time, evaluated(c) * (1 + 1e-12));

  // Nodes of one kind: the same cut either way.
  const auto one_kind = f.request();
  auto x = c;
  x.speed_cut = false;
  EXPECT_EQ(search::three_d::plan(one_kind, c).pipeline->stage_of_op,
            search::three_d::plan(one_kind, x).pipeline->stage_of_op);
}

} // namespace
} // namespace partita
