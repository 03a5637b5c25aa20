// strategy::Evaluator, the searches' evaluate(): each class of equal ops priced once and
// remembered across strategies, with evaluate()'s iteration time, terms and memory per device
// (up to the order of floating-point sums), for every family, pipelines and setups included.

#include "partita/cluster/cluster.h"
#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"
#include "partita/graph/op_semantics.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

namespace partita {
namespace {

void expect_same(const strategy::Prediction& a, const strategy::Prediction& b, const std::string& what) {
  const auto near = [](double x, double y) { return std::abs(x - y) <= 1e-12 * std::max(std::abs(x), std::abs(y)); };
  EXPECT_TRUE(near(a.iteration_time, b.iteration_time)) << what << ": " << a.iteration_time << " " << b.iteration_time;
  EXPECT_TRUE(near(a.peak_memory, b.peak_memory)) << what << ": " << a.peak_memory << " " << b.peak_memory;
  EXPECT_EQ(a.fits, b.fits) << what;
  EXPECT_EQ(a.devices_used, b.devices_used) << what;
  ASSERT_EQ(a.memory.size(), b.memory.size());
  for (std::size_t d = 0; d < a.memory.size(); ++d) {
    EXPECT_TRUE(near(a.memory[d].total(), b.memory[d].total())) << what << " device " << d;
    EXPECT_TRUE(near(a.memory[d].activations, b.memory[d].activations)) << what << " device " << d;
  }
  ASSERT_EQ(a.iteration.size(), b.iteration.size());
  for (std::size_t i = 0; i < a.iteration.size(); ++i) {
    EXPECT_EQ(a.iteration[i].name, b.iteration[i].name);
    EXPECT_TRUE(near(a.iteration[i].value, b.iteration[i].value)) << what << ": " << a.iteration[i].name;
  }
  ASSERT_EQ(a.ops.size(), b.ops.size());
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    EXPECT_TRUE(near(a.ops[i].time, b.ops[i].time)) << what << " op " << i;
  }
}

TEST(Evaluator, PredictsWhatEvaluatePredictsForEveryFamilyAndSetup) {
  const auto model = zoo::load("zoo:gpt2?layers=4&hidden=64&heads=4&seq=32&batch=16&vocab=128");
  const auto cnn = zoo::load("zoo:resnet50?batch=16&image=64");
  auto cluster = cluster::load_cluster("dgx-a100?nodes=2");
  int compared = 0;
  for (const auto* m : {&model, &cnn}) {
    strategy::Evaluator evaluator(m->graph, cluster); // one for all: its memory must not leak between them
    for (const auto& family : {"dp", "mp", "owt", "megatron", "hybrid", "gholami", "pipeline"}) {
      for (int variant = 0; variant < 4; ++variant) {
        search::Request r;
        r.graph = &m->graph;
        r.cluster = &cluster;
        r.devices = 16;
        r.setup.precision = variant % 2 == 0 ? cluster::Precision::fp32 : cluster::Precision::bf16;
        r.setup.zero_stage = variant;
        r.setup.recompute = static_cast<cost::Recompute>(variant % 3);
        r.setup.sequence_parallel = variant == 3 && m == &model;
        if (std::string(family) == "pipeline") {
          r.stages = 2;
          r.micro_batches = 4;
          r.schedule = variant == 1 && m == &model ? strategy::Schedule::interleaved : strategy::Schedule::one_f_one_b;
        }
        strategy::Strategy st;
        try {
          st = search::find_optimizer(family).optimize(r);
        } catch (const Error&) {
          continue; // a family that does not apply to this model
        }
        const std::string what = std::string(family) + " variant " + std::to_string(variant);
        expect_same(evaluator(st, r.setup), strategy::evaluate(m->graph, cluster, st, r.setup), what);
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 40);
}

// Stages on different nodes share their prices where the nodes are alike (a stage's devices as
// their node's rank and local id): exact on switched nodes, on direct-link nodes (DGX-1: which
// local devices matters) and between nodes, for stages of whole nodes, of part of one, and for
// the moves between them.
TEST(Evaluator, StagesOnAlikeNodesPriceAlike) {
  const auto model = zoo::load("zoo:gpt2?layers=8&hidden=64&heads=4&seq=32&batch=16&vocab=128");
  int compared = 0;
  for (const char* preset : {"dgx-a100?nodes=4", "dgx1?nodes=4", "pcie-8gpu?nodes=4"}) {
    const auto cluster = cluster::load_cluster(preset);
    strategy::Evaluator evaluator(model.graph, cluster);
    for (const int pp : {2, 4, 8}) {
      for (const int tp : {1, 2, 4}) {
        for (const int zero : {0, 3}) {
          search::Request r;
          r.graph = &model.graph;
          r.cluster = &cluster;
          r.devices = 32;
          r.setup.precision = cluster::Precision::bf16;
          r.setup.zero_stage = zero;
          r.setup.sequence_parallel = tp > 1 && zero == 0;
          r.tensor_parallel = tp;
          r.pipeline_parallel = pp;
          r.micro_batch_size = 1;
          strategy::Strategy st;
          try {
            st = search::find_optimizer("megatron").optimize(r);
          } catch (const Error&) {
            continue;
          }
          const auto what = fmt::format("{} pp {} tp {} zero {}", preset, pp, tp, zero);
          const auto exact = strategy::evaluate(model.graph, cluster, st, r.setup);
          expect_same(evaluator(st, r.setup), exact, what);
          // totals(): the same without the per-op predictions.
          auto totals = evaluator.totals(st, r.setup);
          EXPECT_TRUE(totals.ops.empty());
          totals.ops = exact.ops;
          expect_same(totals, exact, what + " (totals)");
          ++compared;
        }
      }
    }
  }
  EXPECT_GE(compared, 40);
}

// A layout prepared once predicts, under every setup and micro-batch count, what evaluate() does
// (the 3-D search's way: one plan per shape, its setup and micro-batches changed in place).
TEST(Evaluator, APreparedLayoutPredictsEverySetup) {
  const auto model = zoo::load("zoo:gpt2?layers=8&hidden=64&heads=4&seq=32&batch=32&vocab=128");
  const auto cluster = cluster::load_cluster("dgx-a100?nodes=2");
  strategy::Evaluator evaluator(model.graph, cluster);
  int compared = 0;
  for (const int tp : {1, 2}) {
    search::Request r;
    r.graph = &model.graph;
    r.cluster = &cluster;
    r.devices = 16;
    r.tensor_parallel = tp;
    r.pipeline_parallel = 2;
    r.micro_batch_size = 1;
    auto st = search::find_optimizer("megatron").optimize(r);
    ASSERT_TRUE(st.pipeline.has_value());
    const int prepared = evaluator.prepare(st);
    for (const int micro : {2, 4, 8}) {
      st.pipeline->micro_batches = micro;
      for (const int zero : {0, 1, 2, 3}) {
        for (const auto recompute : {cost::Recompute::none, cost::Recompute::selective, cost::Recompute::full}) {
          for (const bool sp : {false, true}) {
            cost::TrainingSetup setup;
            setup.precision = cluster::Precision::bf16;
            setup.zero_stage = zero;
            setup.recompute = recompute;
            setup.sequence_parallel = sp && tp > 1;
            const auto exact = strategy::evaluate(model.graph, cluster, st, setup);
            auto totals = evaluator.totals(st, setup, prepared);
            totals.ops = exact.ops;
            expect_same(totals, exact,
                        fmt::format("tp {} micro {} zero {} recompute {} sp {}", tp, micro, zero,
                                    static_cast<int>(recompute), sp));
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 2 * 3 * 4 * 3 * 2);
  // A prepared layout belongs to its strategy: another's op count is refused.
  const auto other = zoo::load("zoo:mlp");
  search::Request q;
  q.graph = &other.graph;
  q.cluster = &cluster;
  q.devices = 2;
  const auto dp = search::find_optimizer("dp").optimize(q);
  EXPECT_THROW(evaluator.totals(dp, {}, 0), Error);
}

// Setups that differ only in what an op's terms do not read share its price (a weightless op's
// does not read the optimizer, the ZeRO stage or the gradients' width; a move reads the precision
// alone): one Evaluator walked through every field of the setup, in an order that revisits each
// price from other setups, predicts what evaluate() does each time.
TEST(Evaluator, SetupsShareOnlyThePricesTheirOpsDoNotTellApart) {
  const auto model = zoo::load("zoo:gpt2?layers=4&hidden=64&heads=4&seq=32&batch=16&vocab=128");
  const auto cluster = cluster::load_cluster("dgx-a100?nodes=2");
  search::Request r;
  r.graph = &model.graph;
  r.cluster = &cluster;
  r.devices = 16;
  r.tensor_parallel = 2;
  r.pipeline_parallel = 2;
  r.micro_batch_size = 1;
  auto st = search::find_optimizer("megatron").optimize(r);
  ASSERT_TRUE(st.pipeline.has_value());
  strategy::Evaluator evaluator(model.graph, cluster);
  const int prepared = evaluator.prepare(st);
  int compared = 0;
  for (const bool fp32_gradients : {false, true}) {
    for (const auto optimizer : {cost::Optimizer::adam, cost::Optimizer::sgd, cost::Optimizer::momentum}) {
      for (const int zero : {2, 0, 3, 1}) {
        for (const auto precision : {cluster::Precision::bf16, cluster::Precision::fp32, cluster::Precision::fp16}) {
          for (const bool sp : {true, false}) {
            cost::TrainingSetup setup;
            setup.precision = precision;
            setup.optimizer = optimizer;
            setup.zero_stage = zero;
            setup.fp32_gradients = fp32_gradients;
            setup.sequence_parallel = sp;
            setup.recompute = sp ? cost::Recompute::selective : cost::Recompute::none;
            const auto exact = strategy::evaluate(model.graph, cluster, st, setup);
            auto totals = evaluator.totals(st, setup, prepared);
            totals.ops = exact.ops;
            expect_same(totals, exact,
                        fmt::format("{} {} zero {} fp32 gradients {} sp {}", cluster::precision_name(precision),
                                    cost::optimizer_name(optimizer), zero, fp32_gradients, sp));
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 2 * 3 * 4 * 3 * 2);
}

// An op's terms priced without their formulas (the searches' way) carry the same names and the
// same numbers as with them, and no text.
TEST(Evaluator, NumbersOnlyPricingHasTheExplainedNumbers) {
  const auto model = zoo::load("zoo:gpt2?layers=2&hidden=64&heads=4&seq=32&batch=16&vocab=128");
  const auto cnn = zoo::load("zoo:resnet50?batch=16&image=64");
  const auto cluster = cluster::load_cluster("dgx-a100?nodes=2");
  int compared = 0;
  for (const auto* m : {&model, &cnn}) {
    std::vector<graph::OpSemantics> sem;
    for (std::size_t i = 0; i < m->graph.ops().size(); ++i) {
      sem.push_back(graph::describe(m->graph, static_cast<graph::OpId>(i)));
    }
    for (const auto& family : {"megatron", "gholami", "hybrid"}) {
      for (const int zero : {0, 3}) {
        search::Request r;
        r.graph = &m->graph;
        r.cluster = &cluster;
        r.devices = 16;
        r.setup.precision = cluster::Precision::bf16;
        r.setup.zero_stage = zero;
        r.micro_batches = zero == 3 ? 2 : 0;
        strategy::Strategy st;
        try {
          st = search::find_optimizer(family).optimize(r);
        } catch (const Error&) {
          continue;
        }
        for (std::size_t i = 0; i < st.ops.size(); ++i) {
          const auto id = static_cast<graph::OpId>(i);
          const auto& a = st.ops[i];
          const auto told = cost::op_cost(m->graph, id, sem[i], a.config, a.devices, cluster, r.setup,
                                          cost::Saved::recomputed, {}, 4, true);
          const auto bare = cost::op_cost(m->graph, id, sem[i], a.config, a.devices, cluster, r.setup,
                                          cost::Saved::recomputed, {}, 4, false);
          for (const auto& [x, y] : {std::pair{&told.time, &bare.time}, std::pair{&told.memory, &bare.memory}}) {
            ASSERT_EQ(x->size(), y->size()) << family << " op " << i;
            for (std::size_t k = 0; k < x->size(); ++k) {
              EXPECT_EQ((*x)[k].name, (*y)[k].name);
              EXPECT_EQ((*x)[k].value, (*y)[k].value) << family << " op " << i << " " << (*x)[k].name;
              EXPECT_EQ((*x)[k].backward, (*y)[k].backward);
              EXPECT_FALSE((*x)[k].formula.empty()) << family << " op " << i << " " << (*x)[k].name;
              EXPECT_TRUE((*y)[k].formula.empty()) << family << " op " << i << " " << (*y)[k].name;
            }
          }
          for (std::size_t in = 0; in < m->graph.op(id).inputs.size(); ++in) {
            const auto with = strategy::input_redistribution(m->graph, sem, st.ops, cluster, r.setup, id, in, 4, true);
            const auto without =
                strategy::input_redistribution(m->graph, sem, st.ops, cluster, r.setup, id, in, 4, false);
            ASSERT_EQ(with.size(), without.size());
            for (std::size_t k = 0; k < with.size(); ++k) {
              EXPECT_EQ(with[k].value, without[k].value) << family << " op " << i << " input " << in;
              EXPECT_TRUE(without[k].formula.empty());
            }
          }
          ++compared;
        }
      }
    }
  }
  EXPECT_GE(compared, 500);
}

TEST(Evaluator, ASecondLookAtTheSameStrategyIsTheSame) {
  const auto model = zoo::load("zoo:bert?layers=2&hidden=64&heads=4&seq=32&batch=8&vocab=128&positions=64");
  const auto cluster = cluster::load_cluster("dgx-a100");
  search::Request r;
  r.graph = &model.graph;
  r.cluster = &cluster;
  r.devices = 8;
  const auto st = search::find_optimizer("megatron").optimize(r);
  strategy::Evaluator evaluator(model.graph, cluster);
  const auto first = evaluator(st, r.setup);
  const auto second = evaluator(st, r.setup); // from its memory
  EXPECT_EQ(first.iteration_time, second.iteration_time);
  EXPECT_EQ(first.peak_memory, second.peak_memory);
  // Another setup is another class: not the first one's figures.
  auto setup = r.setup;
  setup.zero_stage = 3;
  const auto zero = evaluator(st, setup);
  expect_same(zero, strategy::evaluate(model.graph, cluster, st, setup), "ZeRO-3");
  EXPECT_LT(zero.peak_memory, first.peak_memory);
}

} // namespace
} // namespace partita
