// Activation memory of a transformer layer, pinned to Korthikanti et al. 2022 ("Reducing
// Activation Recomputation in Large Transformer Models", section 4.1, equation 1): per layer
// s·b·h·(34 + 5·a·s/h) bytes with 16-bit activations. The zoo's GPT has no dropout, whose masks
// and output are 2·s·b·h + 3·a·s²·b of that, so a layer here holds s·b·h·32 + 2·a·s²·b bytes:
// LayerNorm inputs 4sbh, the QKV product's input 2sbh, Q and K 4sbh, V 2sbh, the output
// projection's input 2sbh, the MLP's input 2sbh, GeLU's input 8sbh, the second product's input
// 8sbh; the softmax's output 2as²b. Selective recomputation (section 5) recomputes the
// attention core: 32sbh. Full recomputation keeps the layer's inputs: a pre-norm layer has two
// tensors that cut the graph (before each residual branch), 2 x 2sbh. Tensor parallelism divides
// the block's interior by t, tensor and sequence parallelism all of it.

#include "partita/search/optimizer.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"
#include "simple_cluster.h"

#include <gtest/gtest.h>

namespace partita {
namespace {

constexpr double s = 128, b = 2, h = 256, a = 8;

// Activation bytes of layer 1's ops on device 0 (its output is the next layer's input).
double layer_activations(cost::Recompute policy, int tp = 1, bool sequence_parallel = false) {
  const auto model = zoo::load("zoo:gpt3?layers=2&hidden=256&heads=8&seq=128&batch=2&vocab=512&positions=128");
  const auto cluster = test::simple_cluster(8);
  search::Request r;
  r.graph = &model.graph;
  r.cluster = &cluster;
  r.devices = tp;
  r.tensor_parallel = tp;
  r.setup.precision = cluster::Precision::fp16;
  r.setup.recompute = policy;
  r.setup.sequence_parallel = sequence_parallel;
  const auto st = search::find_optimizer(tp > 1 ? "megatron" : "dp").optimize(r);
  const auto p = strategy::evaluate(model.graph, cluster, st, r.setup);
  double bytes = 0;
  for (std::size_t i = 0; i < model.graph.ops().size(); ++i) {
    if (model.graph.ops()[i].name.rfind("h.1.", 0) == 0) {
      bytes += p.ops[i].cost.get(cost::term::activations);
    }
  }
  return bytes;
}

TEST(ActivationMemory, TransformerLayerAsKorthikantiCountsIt) {
  EXPECT_DOUBLE_EQ(layer_activations(cost::Recompute::none), s * b * h * 32 + 2 * a * s * s * b);
}

TEST(ActivationMemory, SelectiveRecomputationDropsTheAttentionCore) {
  EXPECT_DOUBLE_EQ(layer_activations(cost::Recompute::selective), s * b * h * 32);
}

TEST(ActivationMemory, FullRecomputationKeepsTheLayerInputs) {
  EXPECT_DOUBLE_EQ(layer_activations(cost::Recompute::full), 2 * 2 * s * b * h);
}

// Tensor parallelism divides what lies between the column- and the row-parallel products (24sbh
// + 2as²b of the 32sbh + 2as²b); the LayerNorms' inputs and the products' inputs stay whole
// (10sbh): the paper's sbh·(10 + 24/t + 5as/(ht)) without dropout.
TEST(ActivationMemory, TensorParallelismDividesTheBlockInterior) {
  const double t = 8;
  EXPECT_DOUBLE_EQ(layer_activations(cost::Recompute::none, 8), s * b * h * (8 + 24 / t) + 2 * a * s * s * b / t);
}

// Tensor and sequence parallelism (section 4.2.2) divide all of it: LayerNorms and residual
// branches split along the sequence, the products' inputs kept as those split tensors (gathered
// again when needed): sbh·(34 + 5as/h)/t in the paper, sbh·32/t + 2as²b/t without dropout, and
// 32sbh/t (the paper's 34sbh/t) with selective recomputation.
TEST(ActivationMemory, SequenceParallelismDividesTheWholeLayer) {
  const double t = 8;
  EXPECT_DOUBLE_EQ(layer_activations(cost::Recompute::none, 8, true), s * b * h * 32 / t + 2 * a * s * s * b / t);
  EXPECT_DOUBLE_EQ(layer_activations(cost::Recompute::selective, 8, true), s * b * h * 32 / t);
}

} // namespace
} // namespace partita
