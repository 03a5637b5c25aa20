#include "partita/graph/op_semantics.h"
#include "semantics_test_util.h"
#include "test_support.h"

#include <gtest/gtest.h>

namespace partita {
namespace {

using graph::DType;
using graph::InputSlot;
using graph::OpClass;
using graph::TensorRole;
using test::dims_of;
using test::expect_dim;

using Ints = std::vector<std::int64_t>;

TEST(OpsPooling, MaxPoolWindowAndIndices) {
  graph::Graph g;
  test::tensor(g, "x", {2, 64, 112, 112});
  test::tensor(g, "y", {2, 64, 56, 56});
  test::tensor(g, "idx", {2, 64, 56, 56}, TensorRole::activation, DType::i64);
  const auto s = graph::describe(
      g, test::op(g, "MaxPool", {"x"}, {"y", "idx"}, {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}}));
  EXPECT_EQ(s.op_class, OpClass::pooling);
  EXPECT_EQ(test::dim_names(s), (std::vector<std::string>{"n", "c", "oh", "ow", "kh", "kw"}));
  expect_dim(s, "oh", 56, false, true);
  expect_dim(s, "kh", 3, true, false);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"n", "c", "oh", "ow"}));
  EXPECT_EQ(s.outputs[1].dims, dims_of(s, {"n", "c", "oh", "ow"}));
  const double out = 2.0 * 64 * 56 * 56;
  EXPECT_DOUBLE_EQ(s.fwd_flops, 9 * out);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, out); // the gradient goes to the arg-max only
}

TEST(OpsPooling, AveragePoolBackwardMatchesForward) {
  graph::Graph g;
  test::tensor(g, "x", {1, 8, 10, 10});
  test::tensor(g, "y", {1, 8, 5, 5});
  const auto s = graph::describe(
      g, test::op(g, "AveragePool", {"x"}, {"y"}, {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}));
  EXPECT_DOUBLE_EQ(s.fwd_flops, 8.0 * 25 * 4);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, s.fwd_flops);
}

TEST(OpsPooling, PoolWithoutKernelShapeIsOpaque) {
  graph::Graph g;
  test::tensor(g, "x", {1, 8, 10, 10});
  test::tensor(g, "y", {1, 8, 5, 5});
  const auto s = graph::describe(g, test::op(g, "MaxPool", {"x"}, {"y"}));
  EXPECT_EQ(s.op_class, OpClass::opaque);
  EXPECT_NE(s.opaque_reason.find("kernel_shape"), std::string::npos) << s.opaque_reason;
}

TEST(OpsPooling, GlobalAveragePoolReducesSpatialDims) {
  graph::Graph g;
  test::tensor(g, "x", {2, 2048, 7, 7});
  test::tensor(g, "y", {2, 2048, 1, 1});
  const auto s = graph::describe(g, test::op(g, "GlobalAveragePool", {"x"}, {"y"}));
  expect_dim(s, "c", 2048, false, true);
  expect_dim(s, "h", 7, true, false);
  expect_dim(s, "w", 7, true, false);
  EXPECT_EQ(s.outputs[0].dims, dims_of(s, {"n", "c", "", ""}));
  EXPECT_DOUBLE_EQ(s.fwd_flops, 2.0 * 2048 * 49);
}

TEST(OpsReduction, ReduceMeanWithAxesAttribute) {
  graph::Graph g;
  test::tensor(g, "x", {4, 16, 32});
  test::tensor(g, "y", {4, 16, 1});
  const auto s = graph::describe(g, test::op(g, "ReduceMean", {"x"}, {"y"}, {{"axes", Ints{-1}}}));
  EXPECT_EQ(s.op_class, OpClass::reduction);
  expect_dim(s, "d2", 32, true, true); // a split leaves partial sums, reduced across devices
  expect_dim(s, "d0", 4, false, true);
  EXPECT_EQ(s.outputs[0].dims, dims_of(s, {"d0", "d1", ""}));
  EXPECT_DOUBLE_EQ(s.fwd_flops, 4.0 * 16 * 32);
}

TEST(OpsReduction, ReduceSumWithAxesInput) {
  graph::Graph g;
  test::tensor(g, "x", {4, 16, 32});
  const auto axes = test::tensor(g, "axes", {1}, TensorRole::constant, DType::i64);
  g.tensor(axes).int_values = std::vector<std::int64_t>{1};
  test::tensor(g, "y", {4, 32});
  const auto s = graph::describe(g, test::op(g, "ReduceSum", {"x", "axes"}, {"y"}, {{"keepdims", std::int64_t{0}}}));
  EXPECT_TRUE(s.opaque_reason.empty()) << s.opaque_reason;
  EXPECT_EQ(s.slots[1], InputSlot::index);
  expect_dim(s, "d1", 16, true, true);
  EXPECT_EQ(s.outputs[0].dims, dims_of(s, {"d0", "d2"}));
}

TEST(OpsReduction, UnknownAxesInputIsOpaque) {
  graph::Graph g;
  test::tensor(g, "x", {4, 16});
  test::tensor(g, "axes", {1}, TensorRole::activation, DType::i64);
  test::tensor(g, "y", {4, 1});
  const auto s = graph::describe(g, test::op(g, "ReduceMax", {"x", "axes"}, {"y"}));
  EXPECT_EQ(s.op_class, OpClass::opaque);
  EXPECT_NE(s.opaque_reason.find("'axes'"), std::string::npos) << s.opaque_reason;
}

TEST(OpsReduction, EmptyAxesReduceAllOrNothing) {
  graph::Graph g;
  test::tensor(g, "x", {4, 16});
  test::tensor(g, "all", {});
  test::tensor(g, "same", {4, 16});
  const auto s = graph::describe(g, test::op(g, "ReduceL2", {"x"}, {"all"}, {{"keepdims", std::int64_t{0}}}));
  EXPECT_TRUE(s.opaque_reason.empty()) << s.opaque_reason;
  expect_dim(s, "d0", 4, true, true);
  expect_dim(s, "d1", 16, true, true);
  EXPECT_DOUBLE_EQ(s.fwd_flops, 2 * 64);
  const auto n =
      graph::describe(g, test::op(g, "ReduceSum", {"x"}, {"same"}, {{"noop_with_empty_axes", std::int64_t{1}}}));
  expect_dim(n, "d0", 4, false, true);
  expect_dim(n, "d1", 16, false, true);
  EXPECT_EQ(n.outputs[0].dims, dims_of(n, {"d0", "d1"}));
}

TEST(OpsReduction, ArgMaxKeepsItsAxisWhole) {
  graph::Graph g;
  test::tensor(g, "x", {8, 1000});
  test::tensor(g, "y", {8}, TensorRole::activation, DType::i64);
  const auto s = graph::describe(
      g, test::op(g, "ArgMax", {"x"}, {"y"}, {{"axis", std::int64_t{1}}, {"keepdims", std::int64_t{0}}}));
  expect_dim(s, "d1", 1000, true, false);
  EXPECT_EQ(s.outputs[0].dims, dims_of(s, {"d0"}));
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 0);
}

} // namespace
} // namespace partita
