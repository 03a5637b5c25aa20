#include "partita/graph/op_semantics.h"
#include "semantics_test_util.h"
#include "test_support.h"

#include <gtest/gtest.h>

namespace partita {
namespace {

using graph::OpClass;
using graph::TensorRole;
using test::dims_of;
using test::expect_dim;

TEST(OpsContraction, BatchedMatMulWithSharedWeight) {
  graph::Graph g;
  test::tensor(g, "a", {2, 8, 16, 32});
  test::tensor(g, "w", {32, 64}, TensorRole::parameter);
  test::tensor(g, "y", {2, 8, 16, 64});
  const auto id = test::op(g, "MatMul", {"a", "w"}, {"y"});
  const auto s = graph::describe(g, id);
  EXPECT_EQ(s.op_class, OpClass::contraction);
  EXPECT_TRUE(s.opaque_reason.empty()) << s.opaque_reason;
  expect_dim(s, "m", 16, false, true);
  expect_dim(s, "n", 64, false, true);
  expect_dim(s, "k", 32, true, true);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"b0", "b1", "m", "k"}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"k", "n"}));
  EXPECT_EQ(s.outputs[0].dims, dims_of(s, {"b0", "b1", "m", "n"}));
  const double macs = 2.0 * 8 * 16 * 64 * 32;
  EXPECT_DOUBLE_EQ(s.macs, macs);
  EXPECT_DOUBLE_EQ(s.fwd_flops, 2 * macs);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 2 * macs);
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops, 2 * macs);
}

TEST(OpsContraction, MatMulBroadcastsBatchDims) {
  graph::Graph g;
  test::tensor(g, "a", {4, 1, 16, 32});
  test::tensor(g, "b", {3, 32, 8});
  test::tensor(g, "y", {4, 3, 16, 8});
  const auto s = graph::describe(g, test::op(g, "MatMul", {"a", "b"}, {"y"}));
  EXPECT_TRUE(s.opaque_reason.empty()) << s.opaque_reason;
  expect_dim(s, "b0", 4, false, true);
  expect_dim(s, "b1", 3, false, true);
  // a's size-1 batch dim broadcasts: it is read whole by every b1 block.
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"b0", "", "m", "k"}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"b1", "k", "n"}));
  EXPECT_DOUBLE_EQ(s.macs, 4.0 * 3 * 16 * 8 * 32);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 2 * 2 * s.macs); // both operands are activations
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops, 0);
}

TEST(OpsContraction, MatMulWithVectorOperand) {
  graph::Graph g;
  test::tensor(g, "v", {32}, TensorRole::input);
  test::tensor(g, "w", {32, 10}, TensorRole::parameter);
  test::tensor(g, "y", {10});
  const auto s = graph::describe(g, test::op(g, "MatMul", {"v", "w"}, {"y"}));
  EXPECT_EQ(test::dim_names(s), (std::vector<std::string>{"n", "k"}));
  EXPECT_DOUBLE_EQ(s.macs, 320);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 0); // a graph input gets no gradient
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops, 640);
}

TEST(OpsContraction, GemmWithTransposedWeightAndBias) {
  graph::Graph g;
  test::tensor(g, "x", {4, 128});
  test::tensor(g, "w", {256, 128}, TensorRole::parameter);
  test::tensor(g, "b", {256}, TensorRole::parameter);
  test::tensor(g, "y", {4, 256});
  const auto s = graph::describe(g, test::op(g, "Gemm", {"x", "w", "b"}, {"y"}, {{"transB", std::int64_t{1}}}));
  EXPECT_EQ(test::dim_names(s), (std::vector<std::string>{"m", "n", "k"}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"n", "k"}));
  EXPECT_EQ(s.inputs[2].dims, dims_of(s, {"n"}));
  const double macs = 4.0 * 256 * 128;
  EXPECT_DOUBLE_EQ(s.macs, macs);
  EXPECT_DOUBLE_EQ(s.fwd_flops, 2 * macs + 4 * 256);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 2 * macs);
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops, 2 * macs + 4 * 256);
}

TEST(OpsContraction, GemmRejectsMismatchedInnerDims) {
  graph::Graph g;
  test::tensor(g, "x", {4, 128});
  test::tensor(g, "w", {100, 256}, TensorRole::parameter);
  test::tensor(g, "y", {4, 256});
  const auto s = graph::describe(g, test::op(g, "Gemm", {"x", "w"}, {"y"}));
  EXPECT_EQ(s.op_class, OpClass::opaque);
  EXPECT_NE(s.opaque_reason.find("Gemm_0"), std::string::npos) << s.opaque_reason;
}

TEST(OpsContraction, EinsumWithEllipsis) {
  graph::Graph g;
  test::tensor(g, "a", {2, 3, 4, 5});
  test::tensor(g, "b", {2, 3, 5, 6});
  test::tensor(g, "y", {2, 3, 4, 6});
  const auto s =
      graph::describe(g, test::op(g, "Einsum", {"a", "b"}, {"y"}, {{"equation", std::string("...ij,...jk->...ik")}}));
  EXPECT_TRUE(s.opaque_reason.empty()) << s.opaque_reason;
  expect_dim(s, "j", 5, true, true);
  expect_dim(s, "i", 4, false, true);
  EXPECT_EQ(s.outputs[0].dims, dims_of(s, {"b0", "b1", "i", "k"}));
  EXPECT_DOUBLE_EQ(s.macs, 2.0 * 3 * 4 * 5 * 6);
}

TEST(OpsElementwise, AddBroadcastsBias) {
  graph::Graph g;
  test::tensor(g, "x", {8, 16, 32});
  test::tensor(g, "b", {32}, TensorRole::parameter);
  test::tensor(g, "y", {8, 16, 32});
  const auto s = graph::describe(g, test::op(g, "Add", {"x", "b"}, {"y"}));
  EXPECT_EQ(s.op_class, OpClass::elementwise);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"d0", "d1", "d2"}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"d2"}));
  EXPECT_DOUBLE_EQ(s.fwd_flops, 8 * 16 * 32);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 8 * 16 * 32);
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops, 8 * 16 * 32);
  EXPECT_DOUBLE_EQ(s.fwd_bytes_read, (8 * 16 * 32 + 32) * 4);
  EXPECT_DOUBLE_EQ(s.fwd_bytes_written, 8 * 16 * 32 * 4);
}

// The backward pass reads what its gradients need: x / c (c a constant) reads c and dy, not x;
// a x b with both taking gradients reads both; x x c reads c only; a sum reads neither input.
TEST(OpsElementwise, ABackwardPassReadsTheInputsItsGradientsNeed) {
  graph::Graph g;
  test::tensor(g, "x", {8, 16, 32}, TensorRole::input);
  test::tensor(g, "w", {8, 16, 32}, TensorRole::parameter);
  test::tensor(g, "c", {1}, TensorRole::constant);
  for (const char* t : {"q", "p", "h", "s", "wx"}) {
    test::tensor(g, t, {8, 16, 32});
  }
  test::op(g, "Mul", {"x", "w"}, {"wx"}); // wx takes a gradient (from w)
  const auto q = test::op(g, "Div", {"wx", "c"}, {"q"});
  const auto p = test::op(g, "Mul", {"wx", "q"}, {"p"});
  const auto h = test::op(g, "Mul", {"wx", "c"}, {"h"});
  const auto s = test::op(g, "Add", {"wx", "q"}, {"s"});
  graph::mark_gradients(g);
  const double n = 8.0 * 16 * 32 * 4, c = 4;
  const auto sem = [&](graph::OpId id) { return graph::describe(g, id); };
  EXPECT_FALSE(graph::backward_reads_input(g, g.op(q), sem(q), 0));
  EXPECT_TRUE(graph::backward_reads_input(g, g.op(q), sem(q), 1));
  EXPECT_DOUBLE_EQ(sem(q).bwd_bytes, c + n + n); // c, dy read; dx written
  EXPECT_DOUBLE_EQ(sem(p).bwd_bytes, 2 * n + n + 2 * n);
  EXPECT_DOUBLE_EQ(sem(h).bwd_bytes, c + n + n);
  EXPECT_DOUBLE_EQ(sem(s).bwd_bytes, n + 2 * n);
  // The first product's x takes no gradient: only w's, which reads x.
  const auto wx = g.tensor(g.find_tensor("wx")).producer;
  EXPECT_TRUE(graph::backward_reads_input(g, g.op(wx), sem(wx), 0));
  EXPECT_FALSE(graph::backward_reads_input(g, g.op(wx), sem(wx), 1));
}

} // namespace
} // namespace partita
