// The per-layer search (auto): exact against every strategy tried on a small model, never slower
// than a hand-made family, within the memory limit, and its objective is evaluate()'s prediction.

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/search/auto_search.h"
#include "partita/sim/simulate.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>

namespace partita {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

struct Case {
  onnx_import::ImportResult model;
  cluster::Cluster cluster;
  search::Request request;
  Case(const std::string& spec, int devices, const std::string& cluster_spec = "dgx-a100")
      : model(zoo::load(spec)), cluster(cluster::load_cluster(cluster_spec)) {
    request.graph = &model.graph;
    request.cluster = &cluster;
    request.devices = devices;
    request.simulation_budget = 0; // the exact additive optimum; the simulated ranking is tested on its own
  }
  double time(const strategy::Strategy& st) const {
    return strategy::evaluate(model.graph, cluster, st, request.setup).iteration_time;
  }
};

// Every combination of every op's configurations (the search's own space: powers of two, the
// config's grid copied over the devices), each predicted by evaluate().
double brute_force_best(const Case& s) {
  const auto& g = s.model.graph;
  const std::size_t n = g.ops().size();
  std::vector<std::vector<strategy::OpAssignment>> options(n);
  for (std::size_t i = 0; i < n; ++i) {
    sharding::EnumerateOptions eo;
    eo.max_devices = s.request.devices;
    for (const auto& c : sharding::enumerate_configs(graph::describe(g, static_cast<graph::OpId>(i)), eo)) {
      std::vector<int> devices(static_cast<std::size_t>(s.request.devices / c.devices() * c.devices()));
      std::iota(devices.begin(), devices.end(), 0);
      options[i].push_back({c, devices});
    }
  }
  strategy::Strategy st;
  st.family = "brute";
  st.devices = s.request.devices;
  std::vector<std::size_t> pick(n, 0);
  double best = std::numeric_limits<double>::infinity();
  for (;;) {
    st.ops.clear();
    for (std::size_t i = 0; i < n; ++i) {
      st.ops.push_back(options[i][pick[i]]);
    }
    best = std::min(best, s.time(st));
    std::size_t j = 0;
    for (; j < n; ++j) {
      if (++pick[j] < options[j].size()) {
        break;
      }
      pick[j] = 0;
    }
    if (j == n) {
      return best;
    }
  }
}

TEST(AutoSearch, FindsTheOptimumEveryStrategyTriedFinds) {
  for (const char* spec : {"zoo:mlp?batch=8&input=16&hidden=32&layers=1&classes=4",
                           "zoo:mlp?batch=64&input=256&hidden=1024&layers=1&classes=10"}) {
    Case s(spec, 4);
    const auto r = search::auto_search(s.request);
    const double brute = brute_force_best(s);
    EXPECT_NEAR(r.objective, brute, 1e-9 * brute) << spec;
    EXPECT_NEAR(s.time(r.strategy), r.objective, 1e-9 * brute) << spec << ": the objective is the prediction";
  }
}

TEST(AutoSearch, ObjectiveIsThePredictionOrAboveIt) {
  // A tensor moved into one layout for several readers is sent once by evaluate(); the search
  // prices each reader's move, so the prediction is the objective or less, never more.
  for (const char* spec : {"zoo:resnet50?batch=16&image=64", "zoo:gpt2?layers=2&hidden=256&heads=4&seq=128&batch=8"}) {
    Case s(spec, 8);
    const auto r = search::auto_search(s.request);
    EXPECT_LE(s.time(r.strategy), r.objective * (1 + 1e-9)) << spec;
    EXPECT_GT(s.time(r.strategy), 0.8 * r.objective) << spec;
  }
}

class NeverSlower : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(NeverSlower, ThanAnyPerOpFamily) {
  const auto& [spec, devices] = GetParam();
  Case s(spec, devices, fmt::format("dgx-a100?nodes={}", (devices + 7) / 8));
  const auto r = search::auto_search(s.request);
  const double mine = s.time(r.strategy);
  for (const char* family : {"dp", "mp", "owt", "megatron", "hybrid", "gholami"}) {
    strategy::Strategy st;
    try {
      st = search::find_optimizer(family).optimize(s.request);
    } catch (const Error&) {
      continue;
    }
    EXPECT_LE(mine, s.time(st) * (1 + 1e-9)) << spec << " on " << devices << " devices: auto is slower than " << family;
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, NeverSlower,
                         ::testing::Combine(::testing::Values("zoo:mlp?batch=64", "zoo:alexnet?batch=32&image=64",
                                                              "zoo:resnet50?batch=32&image=64",
                                                              "zoo:rnnlm?batch=32&seq=8",
                                                              "zoo:gpt2?layers=2&hidden=256&heads=4&seq=128&batch=16",
                                                              "zoo:bert?layers=2&hidden=256&heads=4&seq=64&batch=16"),
                                            ::testing::Values(8)));
// At 64 devices only the models the search finishes in about a second here: pricing every pair of
// layouts on every edge takes the larger ones 8-45 s (see bench/auto_bench.cpp).
INSTANTIATE_TEST_SUITE_P(Zoo64, NeverSlower,
                         ::testing::Combine(::testing::Values("zoo:mlp?batch=64", "zoo:rnnlm?batch=32&seq=8"),
                                            ::testing::Values(64)));

// Ranked in the end by the simulator (the prediction `plan` shows), auto is never slower than a
// per-op family's plan simulated the same way, and whatever it returns fits.
class NeverSlowerSimulated : public ::testing::TestWithParam<std::string> {};

TEST_P(NeverSlowerSimulated, ThanAnyPerOpFamily) {
  Case s(GetParam(), 8);
  s.request.simulation_budget = search::Request{}.simulation_budget;
  const auto simulated = [&](const strategy::Strategy& st) {
    auto p = strategy::evaluate(s.model.graph, s.cluster, st, s.request.setup);
    EXPECT_TRUE(sim::simulate_prediction(s.model.graph, s.cluster, st, p).has_value());
    return p.iteration_time;
  };
  const auto r = search::auto_search(s.request);
  const double mine = simulated(r.strategy);
  EXPECT_LE(r.peak_memory, r.memory_limit);
  for (const auto& o : r.ranking) {
    EXPECT_GE(o.predicted, mine * (1 - 1e-9)) << o.candidate;
    EXPECT_EQ(o.chosen, o.predicted == mine) << o.candidate;
  }
  for (const char* family : {"dp", "mp", "owt", "megatron", "hybrid", "gholami"}) {
    strategy::Strategy st;
    try {
      st = search::find_optimizer(family).optimize(s.request);
    } catch (const Error&) {
      continue;
    }
    EXPECT_LE(mine, simulated(st) * (1 + 1e-9)) << GetParam() << ": auto is slower than " << family;
  }
  const auto cmp = search::compare_with_families(s.request, r.strategy);
  EXPECT_GE(cmp.best_family_time, mine * (1 - 1e-9)) << "the comparison simulates the families too";
}

INSTANTIATE_TEST_SUITE_P(Zoo, NeverSlowerSimulated,
                         ::testing::Values("zoo:mlp?batch=64", "zoo:alexnet?batch=32&image=64",
                                           "zoo:resnet50?batch=32&image=64", "zoo:rnnlm?batch=32&seq=8",
                                           "zoo:gpt2?layers=2&hidden=256&heads=4&seq=128&batch=16",
                                           "zoo:bert?layers=2&hidden=256&heads=4&seq=64&batch=16",
                                           "zoo:densenet?layers=6&growth=8&image=32&batch=8&classes=10"));

// Where the exact additive optimum is not the simulator's fastest (ResNet-50's gradient all-reduce
// hides behind its backward pass), the ranking names its candidates and returns a faster one, and
// the explanation says so.
TEST(AutoSearch, RanksItsCandidatesByTheSimulator) {
  Case s("zoo:resnet50?batch=2048", 8);
  s.request.setup.precision = cluster::Precision::fp16;
  s.request.simulation_budget = search::Request{}.simulation_budget;
  const auto r = search::auto_search(s.request);
  ASSERT_GE(r.ranking.size(), 2U);
  EXPECT_EQ(r.ranking.front().candidate, "the exact optimum");
  const auto chosen = std::find_if(r.ranking.begin(), r.ranking.end(), [](const auto& o) { return o.chosen; });
  ASSERT_NE(chosen, r.ranking.end());
  EXPECT_LT(chosen->predicted, r.ranking.front().predicted);
  EXPECT_GE(chosen->objective, r.ranking.front().objective * (1 - 1e-9)) << "the exact optimum's terms are the least";
  EXPECT_NEAR(r.objective, chosen->objective, 1e-12);
  EXPECT_THAT(r.strategy.explanation, HasSubstr("ranked by their simulated iteration"));
}

TEST(AutoSearch, HoldsTheMemoryLimitAndStatesItsGap) {
  Case s("zoo:gpt2?layers=2&hidden=512&heads=8&seq=256&batch=32&vocab=8192", 8);
  const auto free = search::auto_search(s.request);
  ASSERT_EQ(free.lower_bound, free.objective);
  s.request.memory_limit = 0.93 * free.peak_memory; // between the smallest footprint and the fastest
  const auto bound = search::auto_search(s.request);
  EXPECT_LE(bound.peak_memory, s.request.memory_limit);
  EXPECT_GE(bound.objective, free.objective * (1 - 1e-9)) << "a limit cannot make it faster";
  EXPECT_LE(bound.lower_bound, bound.objective);
  EXPECT_GE(bound.lower_bound, free.objective * (1 - 1e-9));
  EXPECT_GT(bound.stats.solves, 1);
  EXPECT_THAT(bound.strategy.explanation, HasSubstr("does not fit"));

  s.request.memory_limit = 1e5; // 100 kB: nothing fits
  EXPECT_THAT([&] { search::auto_search(s.request); }, ::testing::ThrowsMessage<Error>(HasSubstr("nothing fits in")));

  // The smallest footprint it names is the least of any plan, found without a search: a limit just
  // above it fits, one just below does not.
  std::string message;
  try {
    search::auto_search(s.request);
  } catch (const Error& e) {
    message = e.what();
  }
  const auto at = message.find("the smallest footprint of any plan is ");
  ASSERT_NE(at, std::string::npos) << message;
  std::size_t used = 0;
  const std::string rest = message.substr(at + std::string("the smallest footprint of any plan is ").size());
  const double value = std::stod(rest, &used);
  const double unit = rest.compare(used, 4, " GiB") == 0 ? 1024.0 * 1024 * 1024 : 1024.0 * 1024;
  s.request.memory_limit = value * unit * 1.01; // the message rounds to three digits
  const auto smallest = search::auto_search(s.request);
  EXPECT_LE(smallest.peak_memory, s.request.memory_limit);
  s.request.memory_limit = value * unit * 0.99;
  EXPECT_THAT([&] { search::auto_search(s.request); }, ::testing::ThrowsMessage<Error>(HasSubstr("nothing fits in")));
}

// A DenseNet block's concatenations read every earlier layer: no ordering of its ops has narrow
// dependent sets, so the search is bounded, states how far its plan can be from the optimum, and
// is still never slower than a hand-made family; asked to be exact, it refuses, naming the table.
TEST(AutoSearch, ATooWideGraphGetsABoundedPlanWithItsGapStated) {
  Case s("zoo:densenet?layers=6&growth=8&image=32&batch=8&classes=10", 8);
  const auto r = search::auto_search(s.request);
  EXPECT_FALSE(r.exact);
  EXPECT_GT(r.stats.dp.too_wide_table, 6e7);
  EXPECT_GT(r.stats.dp.split_steps, 0);
  EXPECT_LE(r.stats.dp.largest_table, s.request.bounded_table_entries);
  EXPECT_GT(r.lower_bound, 0.9 * r.objective) << "a bound far below the plan says nothing";
  EXPECT_LE(r.lower_bound, r.objective);
  EXPECT_THAT(r.strategy.explanation,
              AllOf(HasSubstr("bounded dynamic program"), HasSubstr("too wide to search exactly"),
                    HasSubstr("slower than the optimum")));
  const double mine = s.time(r.strategy);
  EXPECT_LE(mine, r.objective * (1 + 1e-9));
  for (const char* family : {"dp", "mp", "owt", "megatron", "hybrid", "gholami"}) {
    strategy::Strategy st;
    try {
      st = search::find_optimizer(family).optimize(s.request);
    } catch (const Error&) {
      continue;
    }
    EXPECT_LE(mine, s.time(st) * (1 + 1e-9)) << "auto is slower than " << family;
  }
  // Larger tables: a bound at least as tight.
  s.request.bounded_table_entries = 1e5;
  const auto wider = search::auto_search(s.request);
  EXPECT_GE(wider.lower_bound, r.lower_bound * (1 - 1e-12));
  EXPECT_LE(wider.lower_bound, wider.objective);
  s.request.bounded_table_entries = 0;
  EXPECT_THAT([&] { search::auto_search(s.request); },
              ::testing::ThrowsMessage<Error>(HasSubstr("too wide to search exactly")));
  for (const double bad : {0.5, -1.0, std::nan(""), 1e9}) {
    s.request.bounded_table_entries = bad;
    EXPECT_THAT([&] { search::auto_search(s.request); },
                ::testing::ThrowsMessage<Error>(HasSubstr("the bounded search's tables")))
        << bad;
  }
}

TEST(AutoSearch, NamesTheRunnerUpOfEveryOpWithAChoice) {
  Case s("zoo:mlp?batch=64&input=256&hidden=1024&layers=2&classes=10", 8);
  const auto r = search::auto_search(s.request);
  ASSERT_EQ(r.ops.size(), s.model.graph.ops().size());
  for (const auto& op : r.ops) {
    if (op.candidates > 1) {
      EXPECT_TRUE(op.has_runner_up);
      EXPECT_GE(op.runner_up_delta, -1e-12) << "with the others fixed, the chosen one is at least as good";
    }
  }
  EXPECT_EQ(r.stats.ops, static_cast<int>(s.model.graph.ops().size()));
  EXPECT_LT(r.stats.distinct_ops, r.stats.ops) << "the two hidden layers share their tables";

  // Term by term: the chosen configuration's terms are what evaluate() charges the op (every tensor
  // of an MLP has one reader, so each move is priced once either way); for an op whose outputs
  // nobody reads inside the graph, the runner-up's terms account for the whole difference.
  const auto p = strategy::evaluate(s.model.graph, s.cluster, r.strategy, s.request.setup);
  auto sum = [](const std::vector<cost::Term>& terms) {
    double t = 0;
    for (const auto& term : terms) {
      t += term.value;
    }
    return t;
  };
  int last_checked = 0;
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const auto& op = r.ops[i];
    if (!op.has_runner_up) {
      continue;
    }
    EXPECT_NEAR(sum(op.chosen_terms), p.ops[i].time, 1e-9 * p.iteration_time) << s.model.graph.op(i).name;
    bool read = false;
    for (auto t : s.model.graph.op(static_cast<graph::OpId>(i)).outputs) {
      read = read || !s.model.graph.tensor(t).consumers.empty();
    }
    if (!read) {
      EXPECT_NEAR(sum(op.runner_up_terms) - sum(op.chosen_terms), op.runner_up_delta, 1e-9 * p.iteration_time);
      ++last_checked;
    }
  }
  EXPECT_GT(last_checked, 0);
}

TEST(AutoSearch, RefusesATooLargeSearchAtOnceNamingItsSize) {
  Case s("zoo:resnet50?batch=32&image=64", 1024, "dgx-a100?nodes=128");
  // Default limit: ResNet-50 on 1,024 devices would price tens of millions of layout pairs.
  EXPECT_THAT([&] { search::auto_search(s.request); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(HasSubstr("too large to run here"), HasSubstr("1024 devices"), HasSubstr("--search-limit"))));
  Case small("zoo:mlp?batch=64&input=256&hidden=1024&layers=2&classes=10", 8);
  small.request.max_search_work = 10;
  EXPECT_THAT([&] { search::auto_search(small.request); },
              ::testing::ThrowsMessage<Error>(HasSubstr("the limit is 10")));
  small.request.max_search_work = 0; // no limit
  EXPECT_NO_THROW(search::auto_search(small.request));
}

TEST(AutoSearch, TheLimitCountsThePairsOfDistinctLayoutsItPrices) {
  Case s("zoo:bert?layers=2&hidden=256&heads=4&seq=128&batch=8", 8);
  s.request.max_search_work = 0;
  const auto free = search::auto_search(s.request);
  const double work = free.stats.search_work;
  ASSERT_GT(work, 0);
  // Far fewer than every pair of configurations: a tensor is placed alike by many of them.
  EXPECT_LT(work, free.stats.configurations * free.stats.configurations * 8);
  s.request.max_search_work = work; // exactly its size: runs, to the same plan
  EXPECT_DOUBLE_EQ(search::auto_search(s.request).objective, free.objective);
  s.request.max_search_work = work * (1 - 1e-9);
  EXPECT_THAT([&] { search::auto_search(s.request); },
              ::testing::ThrowsMessage<Error>(HasSubstr("pairs of distinct layouts")));
}

TEST(AutoSearch, RepeatedBlocksShareTheirTables) {
  Case two("zoo:gpt2?layers=2&hidden=256&heads=4&seq=128&batch=8", 8);
  Case eight("zoo:gpt2?layers=8&hidden=256&heads=4&seq=128&batch=8", 8);
  const auto a = search::auto_search(two.request);
  const auto b = search::auto_search(eight.request);
  EXPECT_GT(b.stats.ops, 3 * a.stats.ops);
  EXPECT_LE(b.stats.distinct_ops, a.stats.distinct_ops + 2);
}

TEST(AutoSearch, StopsWhenCancelledAndRefusesBadRequests) {
  Case s("zoo:resnet50?batch=16&image=64", 8);
  std::atomic<bool> cancel{true};
  s.request.cancel = &cancel;
  EXPECT_THROW(search::auto_search(s.request), Cancelled);
  s.request.cancel = nullptr;
  s.request.devices = 1000;
  EXPECT_THAT([&] { search::auto_search(s.request); }, ::testing::ThrowsMessage<Error>(HasSubstr("1000 devices")));
  s.request.devices = 8;
  s.request.min_piece = 0;
  EXPECT_THAT([&] { search::auto_search(s.request); }, ::testing::ThrowsMessage<Error>(HasSubstr("smallest piece")));
}

TEST(AutoSearch, IsAFamilyLikeTheOthers) {
  Case s("zoo:mlp?batch=64", 8);
  const auto st = search::find_optimizer("auto").optimize(s.request);
  EXPECT_EQ(st.family, "auto");
  EXPECT_THAT(st.explanation, HasSubstr("dynamic programming"));
  const auto cmp = search::compare_with_families(s.request, st);
  EXPECT_FALSE(cmp.closest.empty());
  EXPECT_GE(cmp.best_family_time, s.time(st) * (1 - 1e-9));
}

// The edge tables hold a lower bound on each move's price until an optimum uses the move: the
// search prices fewer moves and finds the optimum it finds with every move priced, plan and runner-
// ups alike. Priced whole, every move is checked against its bound: none is below it (switched
// nodes with per-collective figures and protocols, a mesh, PCIe, this machine's CPUs).
TEST(AutoSearch, PricesOnlyTheMovesItsOptimaUseAndFindsTheSameOptimum) {
  const std::vector<std::pair<std::string, int>> clusters{
      {"dgx-a100?nodes=8", 64}, {"dgx-a100", 8},      {"dgx1", 8},
      {"pcie-8gpu", 8},         {"localhost-cpu", 2}, {"h100-measured", 8}};
  const std::vector<std::string> models{"zoo:mlp?batch=64", "zoo:alexnet?batch=32",
                                        "zoo:bert?layers=2&hidden=256&heads=4&seq=128&batch=8",
                                        "zoo:gnmt?layers=2&batch=16&seq=16"};
  int fewer = 0, runs = 0;
  for (const auto& [cluster, devices] : clusters) {
    for (const auto& model : models) {
      SCOPED_TRACE(model + " on " + std::to_string(devices) + " devices of " + cluster);
      Case lazy(model, devices, cluster);
      // Lazily to the end: what is priced then does not depend on how fast the machine solves.
      lazy.request.price_only_what_optima_use = true;
      Case whole(model, devices, cluster);
      whole.request.price_every_move = true;
      const auto a = search::auto_search(lazy.request);
      const auto b = search::auto_search(whole.request);
      EXPECT_EQ(b.stats.bound_misses, 0U);
      EXPECT_EQ(b.stats.moves_priced, b.stats.moves);
      EXPECT_EQ(a.stats.moves, b.stats.moves);
      EXPECT_LE(a.stats.moves_priced, a.stats.moves);
      EXPECT_EQ(a.stats.bound_misses, 0U);
      fewer += a.stats.moves_priced < a.stats.moves ? 1 : 0;
      ++runs;
      EXPECT_NEAR(a.objective, b.objective, 1e-12 * b.objective);
      ASSERT_EQ(a.strategy.ops.size(), b.strategy.ops.size());
      for (std::size_t i = 0; i < a.strategy.ops.size(); ++i) {
        EXPECT_EQ(a.strategy.ops[i].config, b.strategy.ops[i].config) << i;
        EXPECT_EQ(a.ops[i].has_runner_up, b.ops[i].has_runner_up) << i;
        // A move is priced on the layouts of the first move of its geometry in its batch: the
        // last bit of a price can differ with the batch.
        EXPECT_NEAR(a.ops[i].runner_up_delta, b.ops[i].runner_up_delta, 1e-12 * std::abs(b.ops[i].runner_up_delta))
            << i;
      }
    }
  }
  EXPECT_GT(fewer, runs / 2); // most searches priced fewer moves than the tables hold
}

// The layout pairs are priced on several threads: the tables, and so the plan, are the same as on
// one; a cancel raised while the threads price stops all of them.
TEST(AutoSearch, PricesOnSeveralThreadsWithTheSameResultAndStopsThemAllWhenCancelled) {
  Case one("zoo:gpt2?layers=2&hidden=256&heads=4&seq=128&batch=8", 16, "dgx-a100?nodes=2");
  one.request.threads = 1;
  Case four("zoo:gpt2?layers=2&hidden=256&heads=4&seq=128&batch=8", 16, "dgx-a100?nodes=2");
  four.request.threads = 4;
  // The same moves priced on both (when the rest are priced at once goes by the clock otherwise).
  one.request.price_only_what_optima_use = four.request.price_only_what_optima_use = true;
  const auto a = search::auto_search(one.request);
  const auto b = search::auto_search(four.request);
  EXPECT_EQ(a.objective, b.objective);
  ASSERT_EQ(a.strategy.ops.size(), b.strategy.ops.size());
  for (std::size_t i = 0; i < a.strategy.ops.size(); ++i) {
    EXPECT_EQ(a.strategy.ops[i].config, b.strategy.ops[i].config) << i;
  }
  EXPECT_EQ(a.stats.distinct_edge_tables, b.stats.distinct_edge_tables);

  std::atomic<bool> cancel{false};
  double seen = 0;
  four.request.cancel = &cancel;
  four.request.progress = [&](double done) {
    seen = std::max(seen, done);
    if (done > 0.3) { // past the ops' own tables
      cancel = true;
    }
  };
  EXPECT_THROW(search::auto_search(four.request), Cancelled);
  // Cancelled mid-search, and it never finished (1.0 is its last report). Where in it the flag is
  // seen depends on the machine's load and on how many moves the optima need priced: at the latest
  // the cancel set at the report after the dynamic program (0.7) is seen then.
  EXPECT_GT(seen, 0.3);
  EXPECT_LT(seen, 1.0);
}

} // namespace
} // namespace partita
