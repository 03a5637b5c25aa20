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

using Ints = std::vector<std::int64_t>;

TEST(OpsConvolution, ThreeByThreeConvWithBias) {
  graph::Graph g;
  test::tensor(g, "x", {2, 64, 56, 56});
  test::tensor(g, "w", {64, 64, 3, 3}, TensorRole::parameter);
  test::tensor(g, "b", {64}, TensorRole::parameter);
  test::tensor(g, "y", {2, 64, 56, 56});
  const auto s = graph::describe(g, test::op(g, "Conv", {"x", "w", "b"}, {"y"}, {{"pads", Ints{1, 1, 1, 1}}}));
  EXPECT_EQ(s.op_class, OpClass::convolution);
  EXPECT_EQ(test::dim_names(s), (std::vector<std::string>{"n", "co", "ci", "oh", "ow", "kh", "kw"}));
  expect_dim(s, "n", 2, false, true);
  expect_dim(s, "co", 64, false, true);
  expect_dim(s, "ci", 64, true, true);
  expect_dim(s, "oh", 56, false, true);
  expect_dim(s, "kh", 3, true, false);
  expect_dim(s, "kw", 3, true, false);
  EXPECT_EQ(s.slots, (std::vector<InputSlot>{InputSlot::data, InputSlot::weight, InputSlot::weight}));
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"n", "ci", "oh", "ow"}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"co", "ci", "kh", "kw"}));
  EXPECT_EQ(s.inputs[2].dims, dims_of(s, {"co"}));
  EXPECT_EQ(s.outputs[0].dims, dims_of(s, {"n", "co", "oh", "ow"}));
  const double macs = 2.0 * 64 * 64 * 56 * 56 * 9;
  const double bias = 2.0 * 64 * 56 * 56;
  EXPECT_DOUBLE_EQ(s.macs, macs);
  EXPECT_DOUBLE_EQ(s.fwd_flops, 2 * macs + bias);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 2 * macs);
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops, 2 * macs + bias);
}

TEST(OpsConvolution, FirstLayerGetsNoDataGradient) {
  graph::Graph g;
  test::tensor(g, "image", {2, 3, 224, 224}, TensorRole::input);
  test::tensor(g, "w", {64, 3, 7, 7}, TensorRole::parameter);
  test::tensor(g, "y", {2, 64, 112, 112});
  const auto s = graph::describe(g, test::op(g, "Conv", {"image", "w"}, {"y"}, {{"strides", Ints{2, 2}}}));
  const double macs = 2.0 * 64 * 3 * 112 * 112 * 49;
  EXPECT_DOUBLE_EQ(s.macs, macs);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 0);
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops, 2 * macs);
  // Strided: input spatial dims still map to the output's, with a halo.
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"n", "ci", "oh", "ow"}));
  EXPECT_GT(s.bwd_bytes, 0);
}

TEST(OpsConvolution, DepthwiseReadsTheOutputChannel) {
  graph::Graph g;
  test::tensor(g, "x", {2, 32, 28, 28});
  test::tensor(g, "w", {32, 1, 3, 3}, TensorRole::parameter);
  test::tensor(g, "y", {2, 32, 28, 28});
  const auto s = graph::describe(g, test::op(g, "Conv", {"x", "w"}, {"y"}, {{"group", std::int64_t{32}}}));
  expect_dim(s, "ci", 1, true, false);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"n", "co", "oh", "ow"}));
  EXPECT_DOUBLE_EQ(s.macs, 2.0 * 32 * 28 * 28 * 9);
}

TEST(OpsConvolution, GroupedConvReadsChannelsWhole) {
  graph::Graph g;
  test::tensor(g, "x", {1, 64, 8, 8});
  test::tensor(g, "w", {128, 16, 3, 3}, TensorRole::parameter);
  test::tensor(g, "y", {1, 128, 8, 8});
  const auto s = graph::describe(g, test::op(g, "Conv", {"x", "w"}, {"y"}, {{"group", std::int64_t{4}}}));
  expect_dim(s, "ci", 16, true, true);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"n", "", "oh", "ow"}));
  EXPECT_DOUBLE_EQ(s.macs, 1.0 * 128 * 16 * 64 * 9);
}

TEST(OpsConvolution, OneAndThreeDimensionalNames) {
  graph::Graph g;
  test::tensor(g, "x1", {2, 16, 100});
  test::tensor(g, "w1", {32, 16, 5}, TensorRole::parameter);
  test::tensor(g, "y1", {2, 32, 96});
  test::tensor(g, "x3", {1, 4, 8, 16, 16});
  test::tensor(g, "w3", {8, 4, 3, 3, 3}, TensorRole::parameter);
  test::tensor(g, "y3", {1, 8, 6, 14, 14});
  const auto s1 = graph::describe(g, test::op(g, "Conv", {"x1", "w1"}, {"y1"}));
  EXPECT_EQ(test::dim_names(s1), (std::vector<std::string>{"n", "co", "ci", "ol", "kl"}));
  EXPECT_DOUBLE_EQ(s1.macs, 2.0 * 32 * 16 * 96 * 5);
  const auto s3 = graph::describe(g, test::op(g, "Conv", {"x3", "w3"}, {"y3"}));
  EXPECT_EQ(test::dim_names(s3), (std::vector<std::string>{"n", "co", "ci", "od", "oh", "ow", "kd", "kh", "kw"}));
  EXPECT_DOUBLE_EQ(s3.macs, 1.0 * 8 * 4 * 6 * 14 * 14 * 27);
}

TEST(OpsConvolution, ConvTransposeCountsInputPixels) {
  graph::Graph g;
  test::tensor(g, "x", {1, 32, 14, 14});
  test::tensor(g, "w", {32, 16, 4, 4}, TensorRole::parameter);
  test::tensor(g, "b", {16}, TensorRole::parameter);
  test::tensor(g, "y", {1, 16, 28, 28});
  const auto s = graph::describe(g, test::op(g, "ConvTranspose", {"x", "w", "b"}, {"y"}, {{"strides", Ints{2, 2}}}));
  EXPECT_EQ(test::dim_names(s), (std::vector<std::string>{"n", "ci", "co", "ih", "iw", "kh", "kw"}));
  expect_dim(s, "ci", 32, true, true);
  expect_dim(s, "co", 16, false, true);
  expect_dim(s, "kh", 4, true, false);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"n", "ci", "ih", "iw"}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"ci", "co", "kh", "kw"}));
  EXPECT_EQ(s.inputs[2].dims, dims_of(s, {"co"}));
  EXPECT_EQ(s.outputs[0].dims, dims_of(s, {"n", "co", "ih", "iw"}));
  const double macs = 1.0 * 32 * 16 * 14 * 14 * 16;
  EXPECT_DOUBLE_EQ(s.macs, macs);
  EXPECT_DOUBLE_EQ(s.fwd_flops, 2 * macs + 16 * 28 * 28);
}

TEST(OpsConvolution, MismatchedWeightBecomesOpaqueNamingTheNode) {
  graph::Graph g;
  test::tensor(g, "x", {1, 3, 8, 8});
  test::tensor(g, "w", {8, 4, 3, 3}, TensorRole::parameter);
  test::tensor(g, "y", {1, 8, 6, 6});
  const auto s = graph::describe(g, test::op(g, "Conv", {"x", "w"}, {"y"}));
  EXPECT_EQ(s.op_class, OpClass::opaque);
  EXPECT_NE(s.opaque_reason.find("'Conv_0'"), std::string::npos) << s.opaque_reason;
  EXPECT_NE(s.opaque_reason.find("weight shape"), std::string::npos) << s.opaque_reason;
}

} // namespace
} // namespace partita
