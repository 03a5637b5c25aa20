#include "partita/graph/op_semantics.h"
#include "semantics_test_util.h"
#include "test_support.h"

#include <gtest/gtest.h>

namespace partita {
namespace {

using graph::InputSlot;
using graph::OpClass;
using graph::TensorRole;
using test::dims_of;
using test::expect_dim;

TEST(OpsNormalization, BatchNormMeanAndVarAreState) {
  graph::Graph g;
  test::tensor(g, "x", {8, 64, 28, 28});
  test::tensor(g, "scale", {64}, TensorRole::parameter);
  test::tensor(g, "bias", {64}, TensorRole::parameter);
  test::tensor(g, "mean", {64}, TensorRole::state);
  test::tensor(g, "var", {64}, TensorRole::state);
  test::tensor(g, "y", {8, 64, 28, 28});
  test::tensor(g, "running_mean", {64});
  test::tensor(g, "running_var", {64});
  const auto s =
      graph::describe(g, test::op(g, "BatchNormalization", {"x", "scale", "bias", "mean", "var"},
                                  {"y", "running_mean", "running_var"}, {{"training_mode", std::int64_t{1}}}));
  EXPECT_EQ(s.op_class, OpClass::normalization);
  EXPECT_TRUE(s.opaque_reason.empty()) << s.opaque_reason;
  EXPECT_EQ(s.slots, (std::vector<InputSlot>{InputSlot::data, InputSlot::weight, InputSlot::weight, InputSlot::state,
                                             InputSlot::state}));
  EXPECT_EQ(test::dim_names(s), (std::vector<std::string>{"n", "c", "h", "w"}));
  expect_dim(s, "n", 8, false, true); // splittable: statistics synchronized over the split (sync-BN)
  expect_dim(s, "h", 28, false, true);
  EXPECT_TRUE(s.dims[static_cast<std::size_t>(s.find_dim("n"))].statistics);
  EXPECT_TRUE(s.dims[static_cast<std::size_t>(s.find_dim("w"))].statistics);
  EXPECT_FALSE(s.dims[static_cast<std::size_t>(s.find_dim("c"))].statistics);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"n", "c", "h", "w"}));
  for (std::size_t i = 1; i < 5; ++i) {
    EXPECT_EQ(s.inputs[i].dims, dims_of(s, {"c"})) << i;
  }
  EXPECT_EQ(s.outputs[1].dims, dims_of(s, {"c"}));
  EXPECT_EQ(s.outputs[2].dims, dims_of(s, {"c"}));
  const double elems = 8.0 * 64 * 28 * 28;
  EXPECT_DOUBLE_EQ(s.fwd_flops, 5 * elems);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 8 * elems);
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops, 3 * elems); // scale 2, shift 1; no gradient for the state
}

TEST(OpsNormalization, LayerNormReducesTrailingDims) {
  graph::Graph g;
  test::tensor(g, "x", {4, 128, 768});
  test::tensor(g, "scale", {768}, TensorRole::parameter);
  test::tensor(g, "bias", {768}, TensorRole::parameter);
  test::tensor(g, "y", {4, 128, 768});
  test::tensor(g, "mean", {4, 128, 1});
  const auto s = graph::describe(g, test::op(g, "LayerNormalization", {"x", "scale", "bias"}, {"y", "mean"}));
  expect_dim(s, "d0", 4, false, true);
  expect_dim(s, "d1", 128, false, true);
  expect_dim(s, "d2", 768, true, false);
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"d2"}));
  EXPECT_EQ(s.inputs[2].dims, dims_of(s, {"d2"}));
  EXPECT_EQ(s.outputs[1].dims, dims_of(s, {"d0", "d1", ""}));
  const double elems = 4.0 * 128 * 768;
  EXPECT_DOUBLE_EQ(s.fwd_flops, 5 * elems);
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops, 3 * elems);
}

TEST(OpsNormalization, LayerNormFromAxisOne) {
  graph::Graph g;
  test::tensor(g, "x", {4, 16, 32}, TensorRole::input);
  test::tensor(g, "scale", {16, 32}, TensorRole::parameter);
  test::tensor(g, "y", {4, 16, 32});
  const auto s =
      graph::describe(g, test::op(g, "LayerNormalization", {"x", "scale"}, {"y"}, {{"axis", std::int64_t{1}}}));
  expect_dim(s, "d1", 16, true, false);
  expect_dim(s, "d2", 32, true, false);
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"d1", "d2"}));
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 0); // the input is a graph input
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops, 2.0 * 4 * 16 * 32);
}

TEST(OpsNormalization, InstanceNormReducesSpatialDims) {
  graph::Graph g;
  test::tensor(g, "x", {2, 16, 32, 32});
  test::tensor(g, "scale", {16}, TensorRole::parameter);
  test::tensor(g, "bias", {16}, TensorRole::parameter);
  test::tensor(g, "y", {2, 16, 32, 32});
  const auto s = graph::describe(g, test::op(g, "InstanceNormalization", {"x", "scale", "bias"}, {"y"}));
  expect_dim(s, "c", 16, false, true);
  expect_dim(s, "h", 32, true, false);
  expect_dim(s, "w", 32, true, false);
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"c"}));
}

TEST(OpsNormalization, GroupNormSplitsByGroup) {
  graph::Graph g;
  test::tensor(g, "x", {2, 64, 16, 16});
  test::tensor(g, "scale", {8}, TensorRole::parameter);
  test::tensor(g, "bias", {64}, TensorRole::parameter); // opset 21 shape
  test::tensor(g, "y", {2, 64, 16, 16});
  const auto s = graph::describe(
      g, test::op(g, "GroupNormalization", {"x", "scale", "bias"}, {"y"}, {{"num_groups", std::int64_t{8}}}));
  EXPECT_TRUE(s.opaque_reason.empty()) << s.opaque_reason;
  expect_dim(s, "g", 8, false, true);
  expect_dim(s, "cg", 8, true, false);
  expect_dim(s, "h", 16, true, false);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"n", "g", "h", "w"}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"g"}));
  EXPECT_EQ(s.inputs[2].dims, dims_of(s, {"g"}));
  EXPECT_DOUBLE_EQ(s.iteration_points(), 2.0 * 64 * 16 * 16);
}

TEST(OpsNormalization, GroupNormRejectsIndivisibleGroups) {
  graph::Graph g;
  test::tensor(g, "x", {2, 60, 4, 4});
  test::tensor(g, "y", {2, 60, 4, 4});
  const auto s = graph::describe(g, test::op(g, "GroupNormalization", {"x"}, {"y"}, {{"num_groups", std::int64_t{8}}}));
  EXPECT_EQ(s.op_class, OpClass::opaque);
  EXPECT_NE(s.opaque_reason.find("num_groups"), std::string::npos) << s.opaque_reason;
}

TEST(OpsNormalization, SoftmaxDefaultsToLastAxis) {
  graph::Graph g;
  test::tensor(g, "x", {2, 12, 128, 128});
  test::tensor(g, "y", {2, 12, 128, 128});
  test::tensor(g, "z", {2, 12, 128, 128});
  const auto s = graph::describe(g, test::op(g, "Softmax", {"x"}, {"y"}));
  EXPECT_EQ(s.op_class, OpClass::softmax);
  expect_dim(s, "d3", 128, true, false);
  expect_dim(s, "d2", 128, false, true);
  const double elems = 2.0 * 12 * 128 * 128;
  EXPECT_DOUBLE_EQ(s.fwd_flops, 5 * elems);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 4 * elems);
  const auto l = graph::describe(g, test::op(g, "LogSoftmax", {"y"}, {"z"}, {{"axis", std::int64_t{1}}}));
  EXPECT_EQ(l.op_class, OpClass::softmax);
  expect_dim(l, "d1", 12, true, false);
  expect_dim(l, "d3", 128, false, true);
}

TEST(OpsNormalization, LpNormalizationAlongAxis) {
  graph::Graph g;
  test::tensor(g, "x", {10, 20});
  test::tensor(g, "y", {10, 20});
  const auto s = graph::describe(g, test::op(g, "LpNormalization", {"x"}, {"y"}, {{"axis", std::int64_t{0}}}));
  expect_dim(s, "d0", 10, true, false);
  expect_dim(s, "d1", 20, false, true);
  EXPECT_DOUBLE_EQ(s.fwd_flops, 3 * 200);
}

} // namespace
} // namespace partita
