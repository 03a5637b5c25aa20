// evaluate() against hand-derived figures on a cluster whose formulas are exact.

#include "partita/cluster/cluster.h"
#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"
#include "simple_cluster.h"
#include "test_support.h"

#include <gmock/gmock.h>

#include <algorithm>
#include <gtest/gtest.h>
#include <numeric>

namespace partita {
namespace {

using graph::TensorRole;

strategy::Strategy run_family(const std::string& family, const graph::Graph& g, const cluster::Cluster& c, int devices,
                              cost::TrainingSetup setup = {}) {
  search::Request r;
  r.graph = &g;
  r.cluster = &c;
  r.devices = devices;
  r.setup = setup;
  return search::find_optimizer(family).optimize(r);
}

TEST(Evaluate, DataParallelOnOneDeviceIsExactlyTheSingleDeviceCompute) {
  const auto model = zoo::load("zoo:mlp?batch=8&input=16&hidden=32&layers=2&classes=4");
  const auto& g = model.graph;
  const auto c = test::simple_cluster(4);
  const auto p = strategy::evaluate(g, c, run_family("dp", g, c, 1), {});
  double expected = 0, steps = 0;
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    const auto s = graph::describe(g, static_cast<graph::OpId>(i));
    // Adam (the default) steps each weight: 28 bytes a value (weight, gradient, m and v).
    double weights = 0;
    for (const auto t : g.op(static_cast<graph::OpId>(i)).inputs) {
      if (t != graph::no_tensor && g.tensor(t).role == graph::TensorRole::parameter) {
        weights += static_cast<double>(g.tensor(t).elements());
      }
    }
    if (weights > 0) {
      const double step =
          cost::kernel_time(0, 28 * weights, c.device, cluster::Precision::fp32, graph::KernelClass::optimizer);
      expected += step;
      steps += step;
    }
    expected +=
        cost::kernel_time(s.fwd_flops, s.fwd_bytes_read + s.fwd_bytes_written, c.device, cluster::Precision::fp32);
    if (s.bwd_data_flops + s.bwd_weight_flops > 0 || s.bwd_bytes > 0) {
      expected +=
          cost::kernel_time(s.bwd_data_flops + s.bwd_weight_flops, s.bwd_bytes, c.device, cluster::Precision::fp32);
      // Before the backward pass the loss gradient is copied into the graph's output's gradient
      // (read and written); the chain's other outputs have one consumer each, nothing to zero.
      for (const auto t : g.op(static_cast<graph::OpId>(i)).outputs) {
        if (g.is_graph_output(t)) {
          expected +=
              cost::kernel_time(0, 2.0 * static_cast<double>(g.tensor(t).bytes()), c.device, cluster::Precision::fp32);
        } else {
          EXPECT_LE(g.tensor(t).consumers.size(), 1U) << g.tensor(t).name;
        }
      }
    }
  }
  EXPECT_NEAR(p.iteration_time, expected, 1e-12 * expected);
  for (const auto& term : p.iteration) {
    if (term.name == "optimizer step") {
      EXPECT_NEAR(term.value, steps, 1e-12 * steps);
    } else if (term.name != "compute") {
      EXPECT_EQ(term.value, 0) << term.name;
    }
  }
  EXPECT_GT(steps, 0);
  EXPECT_EQ(p.devices_used, 1);
  EXPECT_DOUBLE_EQ(p.samples_per_second, 8 / p.iteration_time);
}

// DESIGN 3.2.1's worked example: Y[b,n] = X[b,k] W[k,n] with b:2 n:2 on 4 devices.
struct FullyConnected {
  graph::Graph g;
  FullyConnected() {
    test::tensor(g, "input", {8, 16}, TensorRole::input);
    test::tensor(g, "x", {8, 16});
    test::tensor(g, "w", {16, 32}, TensorRole::parameter);
    test::tensor(g, "y", {8, 32});
    test::op(g, "Relu", {"input"}, {"x"});
    test::op(g, "MatMul", {"x", "w"}, {"y"});
  }
  strategy::Strategy strategy(std::vector<std::pair<std::string, int>> splits) const {
    strategy::Strategy st;
    st.family = "given";
    st.devices = 4;
    const auto relu = graph::describe(g, 0);
    st.ops.push_back({sharding::make_config(relu, std::vector<std::pair<std::string, int>>{{"d0", 2}}), {0, 1, 2, 3}});
    const auto mm = graph::describe(g, 1);
    st.ops.push_back({sharding::make_config(mm, splits), {0, 1, 2, 3}});
    return st;
  }
};

TEST(Evaluate, WorkedExampleGradientTermsFollowTheOneRule) {
  FullyConnected fc;
  const double bandwidth = 1e10;
  const auto c = test::simple_cluster(4, bandwidth);
  const auto p = strategy::evaluate(fc.g, c, fc.strategy({{"m", 2}, {"n", 2}}), {});
  const auto& mm = p.ops[1].cost;
  // W[16,32] split along n: a 16x16 fp32 shard of 1024 bytes, replicated over the b (m) axis:
  // a 2-device ring all-reduce moves 2(p-1)/p x 1024 bytes.
  EXPECT_DOUBLE_EQ(mm.get(cost::term::gradient_sync), 2.0 * 1 / 2 * 1024 / bandwidth);
  // X[8,16] split along b: 4x16 fp32 = 256 bytes per device, read whole by the 2 devices of the
  // n axis, so dX is reduced over them.
  EXPECT_DOUBLE_EQ(mm.get(cost::term::backward_reduce), 2.0 * 1 / 2 * 256 / bandwidth);
  EXPECT_EQ(mm.get(cost::term::forward_reduce), 0);
  // Adam in fp32: 1024 bytes of weights, as many of gradients, 8 bytes of state per 4-byte value.
  EXPECT_DOUBLE_EQ(mm.get(cost::term::parameters), 1024);
  EXPECT_DOUBLE_EQ(mm.get(cost::term::gradients), 1024);
  EXPECT_DOUBLE_EQ(mm.get(cost::term::optimizer_state), 2048);
  // Activations: the backward pass reads X (for dW), held by the op that makes it (a 4x16 block);
  // nothing reads Y back (not a graph output here).
  EXPECT_EQ(mm.get(cost::term::activations), 0);
  EXPECT_DOUBLE_EQ(p.ops[0].cost.get(cost::term::activations), 4 * 16 * 4);
  // Backward buffers: the output gradient (a quarter of Y) and dX (a 4x16 block), held while
  // the op runs; a device's workspace is the largest of its ops'.
  EXPECT_DOUBLE_EQ(mm.get(cost::term::workspace), 8 * 32 * 4 / 4 + 4 * 16 * 4);
  EXPECT_DOUBLE_EQ(p.memory[0].workspace,
                   std::max(mm.get(cost::term::workspace), p.ops[0].cost.get(cost::term::workspace)));
}

TEST(Evaluate, SplitReductionIsAForwardPartialSumReduce) {
  FullyConnected fc;
  const double bandwidth = 1e10;
  const auto c = test::simple_cluster(4, bandwidth);
  const auto p = strategy::evaluate(fc.g, c, fc.strategy({{"m", 2}, {"k", 2}}), {});
  // Y[8,32] split along b only: 4x32 fp32 = 512 bytes, partial over k: all-reduced over 2.
  EXPECT_DOUBLE_EQ(p.ops[1].cost.get(cost::term::forward_reduce), 2.0 * 1 / 2 * 512 / bandwidth);
}

TEST(Evaluate, ZeroShardsOptimizerStateOverReplicas) {
  FullyConnected fc;
  const auto c = test::simple_cluster(4);
  cost::TrainingSetup zero1;
  zero1.zero_stage = 1;
  const auto p = strategy::evaluate(fc.g, c, fc.strategy({{"m", 2}, {"n", 2}}), zero1);
  EXPECT_DOUBLE_EQ(p.ops[1].cost.get(cost::term::optimizer_state), 1024); // 2048 over 2 replicas
  EXPECT_DOUBLE_EQ(p.ops[1].cost.get(cost::term::gradients), 1024);
  cost::TrainingSetup zero3;
  zero3.zero_stage = 3;
  const auto q = strategy::evaluate(fc.g, c, fc.strategy({{"m", 2}, {"n", 2}}), zero3);
  EXPECT_DOUBLE_EQ(q.ops[1].cost.get(cost::term::parameters), 512);
  // ZeRO-1/2 reduce-scatter the gradient and all-gather the updated weight; ZeRO-3 reduce-scatters
  // only (the shard stays sharded) and gathers the weight before the forward and backward passes.
  const double sync1 = p.ops[1].cost.get(cost::term::gradient_sync);
  const double sync3 = q.ops[1].cost.get(cost::term::gradient_sync);
  const double gather3 = q.ops[1].cost.get(cost::term::parameter_gather);
  EXPECT_GT(gather3, 0);
  EXPECT_GT(sync3, 0);
  EXPECT_NEAR(sync1, sync3 + gather3 / 2, 1e-15);
}

TEST(Evaluate, MixedPrecisionHalvesValuesAndAddsMasterWeights) {
  FullyConnected fc;
  const auto c = test::simple_cluster(4);
  cost::TrainingSetup mixed;
  mixed.precision = cluster::Precision::fp16;
  const auto p = strategy::evaluate(fc.g, c, fc.strategy({{"m", 2}, {"n", 2}}), mixed);
  // 256 fp16 values: 512 bytes of weights; Adam state + fp32 master = 12 bytes per value.
  EXPECT_DOUBLE_EQ(p.ops[1].cost.get(cost::term::parameters), 512);
  EXPECT_DOUBLE_EQ(p.ops[1].cost.get(cost::term::optimizer_state), 256 * 12);
}

TEST(Evaluate, TheAlternativeToChooseIsTheFastestThatFits) {
  strategy::Prediction fast_too_big, slow_fits, fast_fits, also_fast_fits;
  fast_too_big.iteration_time = 1, fast_too_big.fits = false;
  slow_fits.iteration_time = 3, slow_fits.fits = true;
  fast_fits.iteration_time = 2, fast_fits.fits = true;
  also_fast_fits.iteration_time = 2, also_fast_fits.fits = true;
  EXPECT_EQ(strategy::fastest_that_fits({&fast_too_big, &slow_fits, nullptr, &fast_fits, &also_fast_fits}), 3U);
  EXPECT_EQ(strategy::fastest_that_fits({&slow_fits}), 0U);
  EXPECT_FALSE(strategy::fastest_that_fits({&fast_too_big, nullptr}).has_value());
  EXPECT_FALSE(strategy::fastest_that_fits({}).has_value());
}

TEST(Evaluate, RejectsAStrategyThatDoesNotMatch) {
  FullyConnected fc;
  const auto c = test::simple_cluster(4);
  auto st = fc.strategy({{"m", 2}, {"n", 2}});
  st.ops[1].devices = {0, 1, 2};
  EXPECT_THROW(strategy::evaluate(fc.g, c, st, {}), Error);
  st.ops[1].devices = {0, 1, 2, 9};
  EXPECT_THROW(strategy::evaluate(fc.g, c, st, {}), Error);
  st.ops.pop_back();
  EXPECT_THROW(strategy::evaluate(fc.g, c, st, {}), Error);
}

// The search prices every pair of layouts with move_seconds (move_terms' sum, no terms, no text);
// evaluate() with the text. All must give the same values: every input of a small GPT-2 under every pair of
// configurations that its producer and consumer take (8 devices, two nodes' worth of groups).
TEST(Evaluate, MovesPricedWithoutTextAreTheMovesEvaluatePrices) {
  const auto model = zoo::load("zoo:gpt2?layers=1&hidden=64&heads=4&seq=16&batch=8&vocab=100&positions=32");
  const auto& g = model.graph;
  const auto c = cluster::load_cluster("dgx-a100?nodes=2");
  std::vector<graph::OpSemantics> sem;
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    sem.push_back(graph::describe(g, static_cast<graph::OpId>(i)));
  }
  cost::TrainingSetup setup;
  setup.precision = cluster::Precision::bf16;
  sharding::EnumerateOptions eo;
  eo.max_devices = 16;
  int compared = 0, moved = 0;
  std::vector<strategy::OpAssignment> ops(g.ops().size());
  for (std::size_t id = 0; id < g.ops().size(); ++id) {
    const auto& op = g.op(static_cast<graph::OpId>(id));
    for (std::size_t in = 0; in < op.inputs.size(); ++in) {
      const auto t = op.inputs[in];
      if (t == graph::no_tensor || g.tensor(t).producer < 0) {
        continue;
      }
      const auto prod = static_cast<std::size_t>(g.tensor(t).producer);
      const auto from_configs = sharding::enumerate_configs(sem[prod], eo);
      const auto to_configs = sharding::enumerate_configs(sem[id], eo);
      // Every 7th pair keeps the test short; the strides cover every pattern on this model.
      for (std::size_t k = 0; k < from_configs.size() * to_configs.size(); k += 7) {
        const auto& fc = from_configs[k / to_configs.size()];
        const auto& tc = to_configs[k % to_configs.size()];
        auto devices = [](const sharding::Config& x) {
          std::vector<int> d(static_cast<std::size_t>(16 / x.devices() * x.devices()));
          std::iota(d.begin(), d.end(), 0);
          return d;
        };
        ops[prod] = {fc, devices(fc)};
        ops[id] = {tc, devices(tc)};
        const auto told = strategy::input_redistribution(g, sem, ops, c, setup, static_cast<graph::OpId>(id), in);
        const auto& producer_op = g.op(static_cast<graph::OpId>(prod));
        const auto out = static_cast<std::size_t>(std::find(producer_op.outputs.begin(), producer_op.outputs.end(), t) -
                                                  producer_op.outputs.begin());
        const auto from = sharding::output_layout(g, sem[prod], fc, out);
        const auto to = sharding::input_layout(g, sem[id], tc, in);
        const auto geometry = strategy::move_geometry(from, ops[prod], to, ops[id]);
        const auto context = strategy::move_context(g, static_cast<graph::OpId>(id), in, setup);
        const auto quiet = strategy::move_terms(geometry, context, c, setup, false);
        ASSERT_EQ(told.size(), quiet.size());
        // The search's sum: of the same geometry, of one with its unpriced groups dropped, and of
        // one counted per unit (a quarter of the bytes, four units: exact in binary).
        double sum = 0;
        for (const auto& term : quiet) {
          sum += term.value;
        }
        EXPECT_EQ(strategy::move_seconds(geometry, 1, context, c, setup), sum);
        auto unit = geometry;
        strategy::keep_priced_groups(c, unit);
        // The search's way to the same: groups repeated on other nodes never listed.
        const auto priced = strategy::priced_move_geometry(from, fc, ops[prod].devices, to, tc, ops[id].devices, c);
        EXPECT_EQ(priced.same_blocks, unit.same_blocks);
        for (const auto& [p, u] :
             {std::pair(&priced.forward, &unit.forward), std::pair(&priced.backward, &unit.backward)}) {
          EXPECT_EQ(p->groups.lists(), u->groups.lists());
          EXPECT_EQ(p->max_bytes_in, u->max_bytes_in);
          EXPECT_EQ(p->total_bytes, u->total_bytes);
          EXPECT_EQ(p->pattern, u->pattern);
        }
        unit.consumer_shard_bytes /= 4;
        for (auto* r : {&unit.forward, &unit.backward}) {
          r->max_bytes_in /= 4;
          r->total_bytes /= 4;
          r->max_block_bytes /= 4;
        }
        EXPECT_EQ(strategy::move_seconds(unit, 4, context, c, setup), sum);
        for (std::size_t j = 0; j < told.size(); ++j) {
          EXPECT_EQ(told[j].name, quiet[j].name);
          EXPECT_EQ(told[j].value, quiet[j].value) << told[j].formula;
          EXPECT_EQ(told[j].backward, quiet[j].backward);
          EXPECT_FALSE(told[j].formula.empty());
          EXPECT_TRUE(quiet[j].formula.empty());
        }
        moved += told.empty() ? 0 : 1;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 1000);
  EXPECT_GT(moved, compared / 4); // most pairs move something: the comparison is not of empty lists
}

// A tensor held whole on every device, by copies of a one-position grid or by a grid that
// replicates it over a split axis, is the same placement: the reader works on the producer's
// buffer (as partita-run does), nothing moves and nothing is copied.
// GPT-2's word embedding feeds the Gather and, through a Transpose, the LM head: partita-run adds
// the second reader's gradient into the first's layout and copies the sum back, and evaluate()
// prices that, once per iteration, on the first reader: a local add and copy when both hold the
// same blocks on the same devices (data parallel), a transfer each way when they do not (the
// Gather on the first pipeline stage, the LM head on the last).
// The pipeline family's 2 stages of 2 devices, 4 micro-batches, on 4 devices.
strategy::Strategy two_stages(const graph::Graph& g, const cluster::Cluster& c) {
  search::Request r;
  r.graph = &g;
  r.cluster = &c;
  r.devices = 4;
  r.stages = 2;
  r.micro_batches = 4;
  return search::find_optimizer("pipeline").optimize(r);
}

// A tensor that is the same in every micro-batch (GPT-2's causal mask, the scales its Constant ops
// make), read by a later pipeline stage, crosses once per iteration, whole, and each later
// micro-batch copies it; an activation crosses with every micro-batch, its share each time.
TEST(Evaluate, AFixedTensorCrossesPipelineStagesOncePerIteration) {
  const auto model = zoo::load("zoo:gpt2?layers=2&hidden=64&heads=4&seq=32&batch=8");
  const auto& g = model.graph;
  const auto cluster = cluster::load_cluster("dgx-a100");
  const auto plan = [&](int micro) {
    search::Request r;
    r.graph = &g;
    r.cluster = &cluster;
    r.devices = 2;
    r.stages = 2;
    r.micro_batches = micro;
    r.balance = "layers"; // a layer each: the second reads the mask and the scales the first made
    return search::find_optimizer("pipeline").optimize(r);
  };
  const auto one = plan(1), four = plan(4);
  ASSERT_EQ(one.pipeline->stage_of_op, four.pipeline->stage_of_op);
  const auto p1 = strategy::evaluate(g, cluster, one, {}), p4 = strategy::evaluate(g, cluster, four, {});
  const auto term = [](const strategy::Prediction& p, graph::OpId id, std::size_t input, std::string_view name) {
    const auto& op = p.ops[static_cast<std::size_t>(id)];
    double sum = 0;
    for (std::size_t k = 0; k < op.cost.time.size(); ++k) {
      if (op.term_input[k] == static_cast<int>(input) && op.cost.time[k].name == name) {
        sum += op.cost.time[k].value;
      }
    }
    return sum;
  };
  int once = 0, each = 0;
  for (graph::OpId id = 0; id < static_cast<graph::OpId>(g.ops().size()); ++id) {
    for (std::size_t i = 0; i < g.op(id).inputs.size(); ++i) {
      const auto t = g.op(id).inputs[i];
      if (t == graph::no_tensor || g.tensor(t).producer < 0 ||
          four.pipeline->stage_of_op[static_cast<std::size_t>(g.tensor(t).producer)] ==
              four.pipeline->stage_of_op[static_cast<std::size_t>(id)]) {
        continue;
      }
      const double t1 = term(p1, id, i, cost::term::redistribution);
      const double t4 = term(p4, id, i, cost::term::redistribution);
      if (!(t1 > 0)) {
        continue;
      }
      SCOPED_TRACE(g.op(id).name + " reads " + g.tensor(t).name);
      EXPECT_EQ(strategy::sent_once(g, four, id, i), g.tensor(t).fixed);
      if (g.tensor(t).fixed) {
        ++once;
        EXPECT_DOUBLE_EQ(t4, t1) << "whole, once";
        EXPECT_GT(term(p4, id, i, cost::term::redistribution_copies),
                  term(p1, id, i, cost::term::redistribution_copies))
            << "each later micro-batch copies it";
      } else {
        ++each;
        EXPECT_GT(t4, t1 * (1 + 1e-9)) << "four sends of a quarter: four latencies";
      }
    }
  }
  EXPECT_GT(once, 0) << "the causal mask or a scale crosses the cut";
  EXPECT_GT(each, 0) << "the residual stream crosses the cut";
  EXPECT_FALSE(strategy::sent_once(g, strategy::Strategy{}, 0, 0)) << "no pipeline, nothing sent once";
}

TEST(Evaluate, ATiedWeightsGradientsAreSummedBetweenItsReaders) {
  const auto model = zoo::load("zoo:gpt2?layers=2&hidden=64&heads=4&seq=16&batch=8&vocab=100&positions=32");
  const auto& g = model.graph;
  const auto ties = strategy::tied_weights(g);
  ASSERT_EQ(ties.size(), 1u);
  EXPECT_EQ(g.tensor(ties[0].tensor).name, "wte.weight");
  ASSERT_EQ(ties[0].readers.size(), 2u);
  const graph::OpId first = ties[0].readers[0].first;
  EXPECT_EQ(g.op(first).name, "wte");
  const auto c = test::simple_cluster(4);
  auto tie_seconds = [&](const strategy::Prediction& p) {
    double sum = 0;
    int count = 0;
    for (const auto& t : p.ops[static_cast<std::size_t>(first)].cost.time) {
      if (t.name == cost::term::gradient_sync && t.formula.find("tied") != std::string::npos) {
        sum += t.value;
        ++count;
      }
    }
    EXPECT_EQ(count, 1);
    return sum;
  };
  const auto dp = strategy::evaluate(g, c, run_family("dp", g, c, 4), {});
  const double local = tie_seconds(dp);
  EXPECT_GT(local, 0);
  const auto piped = two_stages(g, c);
  const auto lm_head = ties[0].readers[1].first;
  ASSERT_NE(piped.pipeline->stage_of_op[static_cast<std::size_t>(first)],
            piped.pipeline->stage_of_op[static_cast<std::size_t>(lm_head)]);
  EXPECT_GT(tie_seconds(strategy::evaluate(g, c, piped, {})), local) << "the sum crosses between the stages";
}

// A tied weight whose readers hold the same blocks on the same devices is one tensor there: one
// buffer, one gradient, one optimizer step, counted on its first reader. A reader on other devices
// (the last stage of a pipeline) holds a copy of its own, and counts it.
TEST(Evaluate, ATiedWeightOnTheSameDevicesIsHeldOnce) {
  const auto model = zoo::load("zoo:gpt2?layers=2&hidden=64&heads=4&seq=16&batch=8&vocab=100&positions=32");
  const auto& g = model.graph;
  const auto ties = strategy::tied_weights(g);
  ASSERT_EQ(ties.size(), 1u);
  const auto table = static_cast<double>(g.tensor(ties[0].tensor).elements());
  const auto lm_head = static_cast<std::size_t>(ties[0].readers[1].first);
  double parameters = 0; // every parameter once
  for (const auto& t : g.tensors()) {
    if (t.role == TensorRole::parameter) {
      parameters += static_cast<double>(t.elements());
    }
  }
  const auto c = test::simple_cluster(4);
  const auto dp = strategy::evaluate(g, c, run_family("dp", g, c, 4), {});
  EXPECT_DOUBLE_EQ(dp.memory[0].parameters, 4 * parameters);
  EXPECT_DOUBLE_EQ(dp.memory[0].gradients, 4 * parameters);
  EXPECT_EQ(dp.ops[lm_head].cost.get(cost::term::parameters), 0);
  EXPECT_EQ(dp.ops[lm_head].cost.get(cost::term::optimizer_step), 0);
  EXPECT_EQ(dp.ops[lm_head].cost.get(cost::term::gradient_sync), 0);

  const auto piped = two_stages(g, c);
  const auto p = strategy::evaluate(g, c, piped, {});
  double held = 0;
  for (const auto& m : p.memory) {
    held += m.parameters;
  }
  // Two devices a stage, each holding its stage's weights, and the last stage a copy of the table.
  EXPECT_DOUBLE_EQ(held, 4 * 2 * (parameters + table));
  EXPECT_GT(p.ops[lm_head].cost.get(cost::term::parameters), 0);
  EXPECT_GT(p.ops[lm_head].cost.get(cost::term::optimizer_step), 0);
}

TEST(Evaluate, TheSameBlocksOnTheSameDevicesMoveNothingWhateverTheGrids) {
  const auto model = zoo::load("zoo:mlp?batch=8&input=16&hidden=32&layers=2&classes=4");
  const auto& g = model.graph;
  const auto c = test::simple_cluster(4);
  std::vector<graph::OpSemantics> sem;
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    sem.push_back(graph::describe(g, static_cast<graph::OpId>(i)));
  }
  std::vector<strategy::OpAssignment> ops(g.ops().size());
  const std::vector<int> all{0, 1, 2, 3};
  // layers.0 -> add_bias -> relu -> layers.1: the relu replicated (4 copies), layers.1 split n:4.
  graph::OpId relu = -1, next = -1;
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    if (g.ops()[i].name == "layers.0.relu") {
      relu = static_cast<graph::OpId>(i);
    }
    if (g.ops()[i].name == "layers.1") {
      next = static_cast<graph::OpId>(i);
    }
  }
  ASSERT_GE(relu, 0);
  ASSERT_GE(next, 0);
  ops[static_cast<std::size_t>(relu)] = {
      sharding::Config{std::vector<int>(sem[static_cast<std::size_t>(relu)].dims.size(), 1)}, all};
  ops[static_cast<std::size_t>(next)] = {
      sharding::make_config(sem[static_cast<std::size_t>(next)], std::vector<std::pair<std::string, int>>{{"n", 4}}),
      all};
  EXPECT_TRUE(strategy::input_redistribution(g, sem, ops, c, {}, next, 0).empty());
  // Split along the batch instead, the same input must move (a slice forward, a gather back).
  ops[static_cast<std::size_t>(next)] = {
      sharding::make_config(sem[static_cast<std::size_t>(next)], std::vector<std::pair<std::string, int>>{{"m", 4}}),
      all};
  EXPECT_FALSE(strategy::input_redistribution(g, sem, ops, c, {}, next, 0).empty());
}

// A layer whose input is split by its producer and read whole sums its input gradient with a
// reduce-scatter (under sequence parallelism; otherwise such sums are all-reduced). partita-run
// sums in place where the producer's slices lie one after another in memory (rows) and packs them
// first where they are strided (features: the MLP's hidden layers under mp): the packing and the
// copy back are priced there, and only there, on top of the collective.
TEST(Evaluate, AReduceScatterOfStridedSlicesPaysForPackingThem) {
  const auto c = test::simple_cluster(2);
  cost::TrainingSetup setup;
  setup.sequence_parallel = true;
  const auto model = zoo::load("zoo:mlp?batch=64&input=256&hidden=512&layers=2&classes=16");
  const auto& g = model.graph;
  const auto find = [&](const std::string& name) {
    std::size_t id = 0;
    while (id < g.ops().size() && g.ops()[id].name != name) {
      ++id;
    }
    EXPECT_LT(id, g.ops().size()) << name;
    return id;
  };
  const auto scatter_term = [&](const strategy::Strategy& st) {
    const auto p = strategy::evaluate(g, c, st, setup);
    for (const auto& term : p.ops[find("layers.1")].cost.time) {
      if (term.name == cost::term::backward_reduce && term.formula.find("reduce-scattered") != std::string::npos) {
        return term;
      }
    }
    ADD_FAILURE() << "layers.1: no reduce-scattered input gradient";
    return cost::Term{};
  };
  // mp: the ReLU before layers.1 keeps half the features on each device (strided rows).
  const auto features = run_family("mp", g, c, 2, setup);
  auto rows = features; // the same ReLU split along the batch instead: contiguous halves
  const auto relu = find("layers.0.relu");
  ASSERT_EQ(features.ops[relu].config.splits, (std::vector<int>{1, 2}));
  rows.ops[relu].config.splits = {2, 1};
  const auto strided = scatter_term(features), in_place = scatter_term(rows);
  EXPECT_THAT(strided.formula, ::testing::HasSubstr("packed first"));
  EXPECT_THAT(in_place.formula, ::testing::Not(::testing::HasSubstr("packed")));
  // The same collective of the same 64 x 512 floats: the strided one costs the collective and the
  // copies (the whole shard packed, this device's half copied back), the other the collective alone.
  const double bytes = 64.0 * 512 * 4;
  const double collective =
      cost::collective_on_groups(c, cluster::Collective::reduce_scatter, {{0, 1}}, bytes, false).seconds;
  EXPECT_NEAR(in_place.value, collective, 1e-12);
  const double copies = cost::kernel_time(0, 2 * bytes + 2 * bytes / 2, c.device, cluster::Precision::fp32);
  EXPECT_NEAR(strided.value, collective + copies, 1e-12);
}

// A gradient added in place into another (a tensor's readers summing theirs: BERT's LayerNorm
// output, read by q, k, v and the residual add) runs at the accumulate family's rate, the
// element-wise one where the device has no curve of its own for it.
TEST(Evaluate, AGradientAddedInPlaceIsPricedOnTheAccumulateCurve) {
  const auto model = zoo::load("zoo:bert?layers=1&hidden=256&heads=4&seq=128&batch=8&vocab=500&positions=128");
  const auto& g = model.graph;
  auto c = test::simple_cluster(2);
  c.device.memory_efficiency.points = {{1e3, 0.2}, {1e9, 0.4}};
  const auto st = run_family("dp", g, c, 2);
  const auto adds = [&](const cluster::Cluster& cl) {
    const auto p = strategy::evaluate(g, cl, st, {});
    double sum = 0;
    int n = 0;
    for (const auto& op : p.ops) {
      for (const auto& term : op.cost.time) {
        if (term.name == cost::term::redistribution_copies &&
            term.formula.find("into the producer's gradient") != std::string::npos) {
          sum += term.value;
          ++n;
        }
      }
    }
    EXPECT_GT(n, 0);
    return sum;
  };
  EXPECT_EQ(c.device.memory_efficiency_for(graph::KernelClass::accumulate, 1e6),
            c.device.memory_efficiency_for(graph::KernelClass::eltwise, 1e6));
  EXPECT_EQ(c.device.fresh_read_for(graph::KernelClass::accumulate, 1e6),
            c.device.fresh_read_for(graph::KernelClass::eltwise, 1e6));
  const double plain = adds(c);
  // Its own curve, at twice the element-wise rate at every size: half the time.
  c.device.memory_efficiency_by_class[graph::KernelClass::accumulate].points = {{1e3, 0.4}, {1e9, 0.8}};
  EXPECT_NEAR(adds(c), plain / 2, 0.05 * plain);
}

} // namespace
} // namespace partita
