// Megatron as Megatron-LM runs it (Shoeybi et al. 2019, section 3): per transformer layer two
// all-reduces of b·s·h values in the forward pass (after the attention's and the MLP's row-parallel
// products) and two in the backward pass (the input gradients of the column-parallel products),
// heads split across the tensor-parallel group, nothing redistributed inside a block.

#include "partita/cluster/collectives.h"
#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"
#include "simple_cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace partita {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Layer {
  std::vector<std::string> forward_reduces, backward_reduces;
  double redistribution = 0; // seconds moved between devices inside the block
};

struct Planned {
  onnx_import::ImportResult model;
  cluster::Cluster cluster;
  strategy::Strategy strategy;
  strategy::Prediction prediction;

  Planned(const std::string& spec, int devices, int tp, int per_node = 8, cost::TrainingSetup setup = {})
      : model(zoo::load(spec)), cluster(test::simple_cluster(per_node)) {
    cluster.nodes = devices / per_node;
    search::Request r;
    r.graph = &model.graph;
    r.cluster = &cluster;
    r.devices = devices;
    r.tensor_parallel = tp;
    r.setup = setup;
    strategy = search::find_optimizer("megatron").optimize(r);
    prediction = strategy::evaluate(model.graph, cluster, strategy, setup);
  }

  // The ops whose names start with `prefix` (one layer).
  Layer layer(const std::string& prefix) const {
    Layer l;
    for (std::size_t i = 0; i < model.graph.ops().size(); ++i) {
      const auto& name = model.graph.ops()[i].name;
      if (name.rfind(prefix, 0) != 0) {
        continue;
      }
      const auto& c = prediction.ops[i].cost;
      if (c.get(cost::term::forward_reduce) > 0) {
        l.forward_reduces.push_back(name);
      }
      if (c.get(cost::term::backward_reduce) > 0) {
        l.backward_reduces.push_back(name);
      }
      for (const auto& t : c.time) {
        if (t.name == cost::term::redistribution) {
          l.redistribution += t.value;
        }
      }
    }
    return l;
  }
  std::string config(const std::string& name) const {
    for (std::size_t i = 0; i < model.graph.ops().size(); ++i) {
      if (model.graph.ops()[i].name == name) {
        return sharding::to_string(strategy.ops[i].config, graph::describe(model.graph, static_cast<graph::OpId>(i)));
      }
    }
    ADD_FAILURE() << "no op " << name;
    return {};
  }
  double time_of(const std::string& name, std::string_view term) const {
    for (std::size_t i = 0; i < model.graph.ops().size(); ++i) {
      if (model.graph.ops()[i].name == name) {
        return prediction.ops[i].cost.get(term);
      }
    }
    ADD_FAILURE() << "no op " << name;
    return 0;
  }
};

// GPT (fused QKV, split head by head), 16 devices: 8-way tensor parallel x 2-way data parallel.
TEST(Megatron, GptLayerHasTwoAllReducesEachWayOfBsh) {
  const std::int64_t b = 4, s = 64, h = 256;
  Planned p("zoo:gpt3?layers=2&hidden=256&heads=16&seq=64&batch=8&vocab=1024&positions=64", 16, 8);
  for (const char* layer : {"h.0.", "h.1."}) {
    const auto l = p.layer(layer);
    EXPECT_THAT(l.forward_reduces,
                ::testing::ElementsAre(std::string(layer) + "attn.proj", std::string(layer) + "mlp.proj"));
    EXPECT_THAT(l.backward_reduces,
                ::testing::ElementsAre(std::string(layer) + "attn.qkv", std::string(layer) + "mlp.fc"));
    EXPECT_EQ(l.redistribution, 0) << layer;
  }
  // Heads split across the group, the batch across the two groups.
  EXPECT_EQ(p.config("h.0.attn.scores"), "b0:2 b1:8");
  EXPECT_EQ(p.config("h.0.attn.softmax"), "d0:2 d1:8");
  // Each all-reduce moves b·s·h values (b the batch of one data-parallel group) over 8 devices.
  std::vector<int> group(8);
  std::iota(group.begin(), group.end(), 0);
  const double bsh = static_cast<double>(b * s * h) * 4;
  const double all_reduce = cluster::collective_cost(p.cluster, cluster::Collective::all_reduce, group, bsh).seconds;
  EXPECT_DOUBLE_EQ(p.time_of("h.0.attn.proj", cost::term::forward_reduce), all_reduce);
  EXPECT_DOUBLE_EQ(p.time_of("h.0.mlp.fc", cost::term::backward_reduce), all_reduce);
  // Vocabulary-parallel embedding and output layer; the position table replicated.
  EXPECT_EQ(p.config("wte"), "d0:2 v:8");
  EXPECT_EQ(p.config("lm_head"), "b0:2 n:8");
  EXPECT_EQ(p.config("wpe"), "replicated");
  EXPECT_THAT(p.strategy.explanation, Not(HasSubstr("Not Megatron-LM's layout")));
}

// Separate Q, K and V projections (BERT): the heads still split; each projection reads the
// layer's input whole, so each reduces its input gradient.
TEST(Megatron, BertLayerSplitsHeadsWithoutRedistribution) {
  Planned p("zoo:bert?layers=1&hidden=256&heads=8&seq=32&batch=4&vocab=1000&positions=64", 8, 8);
  const auto l = p.layer("encoder.layer.0.");
  EXPECT_THAT(l.forward_reduces,
              ::testing::ElementsAre("encoder.layer.0.attention.proj", "encoder.layer.0.output.dense"));
  EXPECT_EQ(l.redistribution, 0);
  EXPECT_THAT(p.config("encoder.layer.0.attention.scores"), HasSubstr("b1:8"));
}

// Fewer heads than the tensor-parallel width: the textbook layout is impossible, and the plan
// says where and why.
TEST(Megatron, ExplainsWhereTheHeadsDoNotDivide) {
  Planned p("zoo:gpt2?layers=1&hidden=64&heads=4&seq=16&batch=8&vocab=100&positions=32", 8, 8);
  EXPECT_THAT(p.strategy.explanation, HasSubstr("Not Megatron-LM's layout"));
  EXPECT_THAT(p.strategy.explanation, HasSubstr("split_heads"));
}

// A published configuration typed as it is written: --tp, --pp and --micro-batch-size make the
// pipeline that Megatron-LM runs (the pipeline family's cut, Megatron's layout inside each stage,
// batch / (replicas x micro-batch size) micro-batches); without --pp, micro-batches accumulate
// gradients on one stage. What cannot work is refused with the reason.
TEST(Megatron, PipelineStagesAndMicroBatchSizeAsMegatronLmTakesThem) {
  const auto model = zoo::load("zoo:gpt2?layers=4&hidden=64&heads=8&seq=16&batch=32&vocab=100&positions=32");
  auto cluster = test::simple_cluster(8);
  cluster.nodes = 2;
  search::Request r;
  r.graph = &model.graph;
  r.cluster = &cluster;
  r.devices = 16;
  r.tensor_parallel = 4;
  r.pipeline_parallel = 2;
  r.micro_batch_size = 2;
  const auto st = search::find_optimizer("megatron").optimize(r);
  EXPECT_EQ(st.family, "megatron");
  ASSERT_TRUE(st.pipeline.has_value());
  EXPECT_EQ(st.pipeline->stages, 2);
  EXPECT_EQ(st.pipeline->micro_batches, 8); // 32 / (2 replicas x 2)
  EXPECT_THAT(st.explanation, HasSubstr("4-way tensor parallel, 2 pipeline stages of contiguous ops, 2-way data"));
  // As Megatron-LM does: as many layers in every stage (h.0 and h.1, then h.2 and h.3), the
  // embeddings with the first, the output layer with the last.
  for (std::size_t i = 0; i < st.ops.size(); ++i) {
    const auto& name = model.graph.ops()[i].name;
    if (name.rfind("h.", 0) == 0) {
      EXPECT_EQ(st.pipeline->stage_of_op[i], name[2] - '0' < 2 ? 0 : 1) << name;
    } else if (name.rfind("wte", 0) == 0 || name.rfind("wpe", 0) == 0) {
      EXPECT_EQ(st.pipeline->stage_of_op[i], 0) << name;
    } else if (name.rfind("lm_head", 0) == 0) {
      EXPECT_EQ(st.pipeline->stage_of_op[i], 1) << name;
    }
  }
  // The same plan as the pipeline family asked the same.
  search::Request q = r;
  q.pipeline_parallel = 0;
  q.micro_batch_size = 0;
  q.stages = 2;
  q.micro_batches = 8;
  q.balance = "layers";
  const auto same = search::find_optimizer("pipeline").optimize(q);
  ASSERT_EQ(same.ops.size(), st.ops.size());
  for (std::size_t i = 0; i < st.ops.size(); ++i) {
    EXPECT_EQ(same.ops[i].config, st.ops[i].config) << i;
    EXPECT_EQ(same.ops[i].devices, st.ops[i].devices) << i;
  }
  EXPECT_EQ(strategy::evaluate(model.graph, cluster, st, {}).iteration_time,
            strategy::evaluate(model.graph, cluster, same, {}).iteration_time);

  // One stage: gradient accumulation, the activations of one micro-batch held at a time.
  r.pipeline_parallel = 0;
  r.micro_batch_size = 1;
  const auto accumulated = search::find_optimizer("megatron").optimize(r);
  ASSERT_TRUE(accumulated.pipeline.has_value());
  EXPECT_EQ(accumulated.pipeline->stages, 1);
  EXPECT_EQ(accumulated.pipeline->micro_batches, 8); // 32 / (4 replicas x 1)
  r.micro_batch_size = 0;
  const auto whole = search::find_optimizer("megatron").optimize(r);
  EXPECT_FALSE(whole.pipeline.has_value());
  EXPECT_LT(strategy::evaluate(model.graph, cluster, accumulated, {}).peak_memory,
            strategy::evaluate(model.graph, cluster, whole, {}).peak_memory);

  r.micro_batch_size = 3;
  EXPECT_THAT([&] { search::find_optimizer("megatron").optimize(r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("--micro-batch-size 3: the batch of 32")));
  r.micro_batch_size = 2;
  r.micro_batches = 3;
  EXPECT_THAT([&] { search::find_optimizer("megatron").optimize(r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("disagree")));
  r.micro_batches = 0;
  r.pipeline_parallel = 3;
  EXPECT_THAT([&] { search::find_optimizer("megatron").optimize(r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("--pp 3 does not divide the 16 devices")));
  // A tensor-parallel degree that would leave devices idle is refused, not rounded.
  r.pipeline_parallel = 0;
  r.micro_batch_size = 0;
  r.tensor_parallel = 3;
  EXPECT_THAT([&] { search::find_optimizer("megatron").optimize(r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("--tp 3 does not divide the 16 devices")));
  r.tensor_parallel = 16;
  r.pipeline_parallel = 2;
  EXPECT_THAT([&] { search::find_optimizer("megatron").optimize(r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("--tp 16 does not divide the 8 devices of a pipeline stage")));
  r.tensor_parallel = 4;
  r.pipeline_parallel = 0;
  r.stages = 2;
  r.tensor_parallel = 3;
  EXPECT_THAT([&] { search::find_optimizer("pipeline").optimize(r); },
              ::testing::ThrowsMessage<Error>(HasSubstr("--tp 3 does not divide the 8 devices of a stage")));
}

// Megatron-LM's own estimate of the weight and optimizer memory of the most loaded device
// (megatron/training/theoretical_memory_usage.py, compute_weight_and_optimizer_memory, for a GPT
// with ffn = 4h and a tied output layer): (12 L h^2 + 4 L h + 2 h) / p + V h parameters on the first
// stage (the last holds the embedding's copy too), over t, at 18 bytes each (bf16 weight, fp32
// gradient, fp32 master weight and Adam's two moments), or 6 + 12 / d with its distributed
// optimizer (master weights and moments sharded over the d data-parallel replicas).
double megatron_weight_and_optimizer_bytes(double layers, double h, double vocab, int t, int p, int d,
                                           bool distributed_optimizer) {
  const double transformer = 10 * layers * h * h * (1 + 1 / 5.0 + 2 / (5 * h) + 1 / (5 * layers * h));
  const double most_loaded = (transformer / p + h * vocab) / t;
  return most_loaded * (distributed_optimizer ? 6 + 12.0 / d : 18);
}

TEST(Megatron, WeightAndOptimizerMemoryAsMegatronLmEstimatesIt) {
  // Large enough a hidden size that the biases and LayerNorms Megatron-LM's formula rounds
  // (4h a layer for 13h) and the position table it leaves out (256 x h, replicated over t: 1.6% of
  // a device's share at t = 8) stay under 2%. One stage holds the tied table once; pipelined, the
  // last stage holds a copy for the output layer, as Megatron-LM does.
  const auto model = zoo::load("zoo:gpt3?layers=8&hidden=2048&heads=16&seq=256&batch=16&vocab=32000&positions=256");
  auto cluster = test::simple_cluster(8);
  cluster.nodes = 2;
  cost::TrainingSetup setup;
  setup.precision = cluster::Precision::bf16;
  setup.fp32_gradients = true; // Megatron-LM's main_grad under bf16
  struct Case {
    int t, p, d;
    bool distributed_optimizer;
  };
  for (const Case c :
       {Case{2, 1, 8, false}, Case{2, 1, 8, true}, Case{8, 1, 2, true}, Case{2, 2, 4, false}, Case{2, 2, 4, true},
        Case{4, 2, 2, true}, Case{8, 2, 1, false}, Case{1, 4, 4, true}, Case{2, 4, 2, false}}) {
    search::Request r;
    r.graph = &model.graph;
    r.cluster = &cluster;
    r.devices = c.t * c.p * c.d;
    r.tensor_parallel = c.t;
    r.pipeline_parallel = c.p;
    r.micro_batch_size = 1;
    r.setup = setup;
    r.setup.zero_stage = c.distributed_optimizer ? 1 : 0;
    const auto st = search::find_optimizer("megatron").optimize(r);
    const auto prediction = strategy::evaluate(model.graph, cluster, st, r.setup);
    double most = 0;
    for (const auto& m : prediction.memory) {
      most = std::max(most, m.parameters + m.gradients + m.optimizer_state);
    }
    const double expected = megatron_weight_and_optimizer_bytes(8, 2048, 32000, c.t, c.p, c.d, c.distributed_optimizer);
    EXPECT_NEAR(most / expected, 1.0, 0.02)
        << "t=" << c.t << " p=" << c.p << " d=" << c.d << (c.distributed_optimizer ? " distributed optimizer" : "");
  }
}

// What --fp32-gradients changes: the gradients' bytes and their all-reduce, nothing else.
TEST(Megatron, Fp32GradientsDoubleTheGradientBytesAndTheirReduce) {
  const Planned base("zoo:gpt2?layers=2&hidden=256&heads=8&seq=64&batch=16&vocab=1000&positions=64", 16, 8);
  cost::TrainingSetup bf16;
  bf16.precision = cluster::Precision::bf16;
  cost::TrainingSetup wide = bf16;
  wide.fp32_gradients = true;
  const auto a = strategy::evaluate(base.model.graph, base.cluster, base.strategy, bf16);
  const auto b = strategy::evaluate(base.model.graph, base.cluster, base.strategy, wide);
  ASSERT_GT(a.memory[0].gradients, 0);
  EXPECT_DOUBLE_EQ(b.memory[0].gradients, 2 * a.memory[0].gradients);
  EXPECT_DOUBLE_EQ(b.memory[0].parameters, a.memory[0].parameters);
  EXPECT_DOUBLE_EQ(b.memory[0].optimizer_state, a.memory[0].optimizer_state);
  double sync_a = 0, sync_b = 0;
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    sync_a += a.ops[i].cost.get(cost::term::gradient_sync);
    sync_b += b.ops[i].cost.get(cost::term::gradient_sync);
    EXPECT_DOUBLE_EQ(a.ops[i].cost.get(cost::term::forward_compute), b.ops[i].cost.get(cost::term::forward_compute));
  }
  EXPECT_GT(sync_a, 0);
  EXPECT_GT(sync_b, 1.5 * sync_a);
}

// Sequence parallelism (Korthikanti et al. 2022, section 4.2.2): LayerNorm and the residual adds
// split along the sequence inside the tensor-parallel group; each of the layer's all-reduces
// becomes a reduce-scatter (forward after the row-parallel products, backward for the
// column-parallel products' input gradients) and an all-gather (before the column-parallel
// products, and their gradients' way back), the same bytes in all; the split ops' activations and
// work are divided by t.
TEST(Megatron, SequenceParallelTurnsEachAllReduceIntoAReduceScatterAndAnAllGather) {
  const std::string spec = "zoo:gpt2?layers=2&hidden=256&heads=8&seq=64&batch=16&vocab=1000&positions=64";
  cost::TrainingSetup sp;
  sp.sequence_parallel = true;
  const Planned plain(spec, 8, 8);
  const Planned split(spec, 8, 8, 8, sp);
  EXPECT_EQ(plain.config("h.1.ln_1"), "replicated");
  EXPECT_EQ(split.config("h.1.ln_1"), "d1:8");
  EXPECT_EQ(split.config("h.1.attn.residual"), "d1:8");
  EXPECT_EQ(split.config("h.1.attn.qkv"), plain.config("h.1.attn.qkv")) << "the products keep Megatron's layout";
  // The same ops reduce, now as reduce-scatters: about half an all-reduce's time each (a ring
  // moves (n-1)/n of the bytes instead of 2(n-1)/n), plus the packing of slices that are strided in
  // memory (the zoo's [batch, sequence, hidden] cut along the sequence: partita-run packs them
  // first and copies its own slice of the sum back).
  const auto a = plain.layer("h.1."), b = split.layer("h.1.");
  EXPECT_EQ(a.forward_reduces, b.forward_reduces);
  EXPECT_EQ(a.backward_reduces, b.backward_reduces);
  ASSERT_EQ(b.forward_reduces.size(), 2U);
  ASSERT_EQ(b.backward_reduces.size(), 2U);
  for (const auto& name : b.forward_reduces) {
    const double ar = plain.time_of(name, cost::term::forward_reduce),
                 rs = split.time_of(name, cost::term::forward_reduce);
    EXPECT_GT(rs, 0.4 * ar) << name;
    EXPECT_LT(rs, 0.7 * ar) << name;
  }
  for (const auto& name : b.backward_reduces) {
    const double ar = plain.time_of(name, cost::term::backward_reduce),
                 rs = split.time_of(name, cost::term::backward_reduce);
    EXPECT_GT(rs, 0.4 * ar) << name;
    EXPECT_LT(rs, 0.7 * ar) << name;
  }
  // The all-gathers are the moves into the column-parallel products (none without it).
  EXPECT_EQ(a.redistribution, 0);
  EXPECT_GT(b.redistribution, 0);
  // A LayerNorm's kept activations and its work: 1/t of each.
  EXPECT_DOUBLE_EQ(split.time_of("h.1.ln_1", cost::term::activations) * 8,
                   plain.time_of("h.1.ln_1", cost::term::activations));
  EXPECT_LT(split.time_of("h.1.ln_1", cost::term::forward_compute),
            plain.time_of("h.1.ln_1", cost::term::forward_compute));
  EXPECT_LT(split.prediction.peak_memory, plain.prediction.peak_memory);
}

// A model exported at batch 1 has no batch dim to split, yet its tensors are [1, sequence,
// hidden] all the same: sequence parallelism splits LayerNorm and the residual adds along the
// sequence as at any batch. Their slices are then contiguous in memory, so each reduce-scatter
// sums in place, with no packing: below the strided case's share of an all-reduce.
TEST(Megatron, SequenceParallelAtABatchOfOneSplitsTheSequenceToo) {
  const std::string spec = "zoo:gpt2?layers=2&hidden=256&heads=8&seq=512&batch=1&vocab=1000&positions=512";
  cost::TrainingSetup sp;
  sp.sequence_parallel = true;
  const Planned plain(spec, 8, 8);
  const Planned split(spec, 8, 8, 8, sp);
  EXPECT_EQ(plain.config("h.1.ln_1"), "replicated");
  EXPECT_EQ(split.config("h.1.ln_1"), "d1:8");
  EXPECT_EQ(split.config("h.1.attn.residual"), "d1:8");
  EXPECT_EQ(split.config("h.1.attn.qkv"), plain.config("h.1.attn.qkv"));
  const auto b = split.layer("h.1.");
  ASSERT_EQ(b.forward_reduces.size(), 2U);
  for (const auto& name : b.forward_reduces) {
    const double ar = plain.time_of(name, cost::term::forward_reduce),
                 rs = split.time_of(name, cost::term::forward_reduce);
    EXPECT_GT(rs, 0.4 * ar) << name;
    EXPECT_LT(rs, 0.6 * ar) << name;
  }
  EXPECT_DOUBLE_EQ(split.time_of("h.1.ln_1", cost::term::activations) * 8,
                   plain.time_of("h.1.ln_1", cost::term::activations));
}

// Megatron-LM's report_theoretical_memory (theoretical_memory_usage.py), which assumes sequence
// parallelism and selective recomputation: the weights and optimizer state above, plus the first
// stage's activations, s·b·h·(18 + 4·ffn/h) = 34·s·b·h per layer for all L layers (p micro-batches
// of L/p layers in flight under 1F1B), 8·s·b·p for the embedding's input and s·b·h·p for its
// dropout, over t. The zoo's GPT has no dropout, whose 2·s·b·h a layer the 34 counts: 32 here.
// Pipelined (with one stage Megatron-LM adds the fp32 logits of its cross-entropy, which the
// zoo's graph, ending at the logits, has no op for).
TEST(Megatron, TheoreticalMemoryAsMegatronLmReportsIt) {
  const double s = 256, b = 1, h = 2048, layers = 8, vocab = 32000;
  const auto model = zoo::load("zoo:gpt3?layers=8&hidden=2048&heads=16&seq=256&batch=16&vocab=32000&positions=256");
  auto cluster = test::simple_cluster(8);
  cluster.nodes = 4;
  struct Case {
    int t, p, d;
    bool distributed_optimizer;
  };
  for (const Case c : {Case{2, 2, 2, true}, Case{2, 4, 2, false}, Case{4, 2, 2, false}, Case{2, 2, 4, true}}) {
    search::Request r;
    r.graph = &model.graph;
    r.cluster = &cluster;
    r.tensor_parallel = c.t;
    r.pipeline_parallel = c.p;
    r.devices = c.t * c.p * c.d;
    r.micro_batch_size = 1;
    r.setup.precision = cluster::Precision::bf16;
    r.setup.fp32_gradients = true;
    r.setup.recompute = cost::Recompute::selective;
    r.setup.sequence_parallel = true;
    r.setup.zero_stage = c.distributed_optimizer ? 1 : 0;
    const auto st = search::find_optimizer("megatron").optimize(r);
    const auto prediction = strategy::evaluate(model.graph, cluster, st, r.setup);
    double most = 0;
    for (const auto& m : prediction.memory) {
      most = std::max(most, m.parameters + m.gradients + m.optimizer_state + m.activations);
    }
    const double activations = (s * b * h * 32 * layers + 8 * s * b * c.p + s * b * h * c.p) / c.t;
    const double expected =
        megatron_weight_and_optimizer_bytes(layers, h, vocab, c.t, c.p, c.d, c.distributed_optimizer) + activations;
    EXPECT_NEAR(most / expected, 1.0, 0.02) << "t=" << c.t << " p=" << c.p << " d=" << c.d;
  }
}

} // namespace
} // namespace partita
