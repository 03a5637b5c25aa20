#include "partita/graph/op_semantics.h"
#include "semantics_test_util.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace partita {
namespace {

using graph::DType;
using graph::InputSlot;
using graph::OpClass;
using graph::TensorRole;
using test::dims_of;
using test::expect_dim;

using Ints = std::vector<std::int64_t>;

graph::TensorId int_tensor(graph::Graph& g, const std::string& name, Ints values) {
  const auto id = test::tensor(g, name, {static_cast<std::int64_t>(values.size())}, TensorRole::constant, DType::i64);
  g.tensor(id).int_values = std::move(values);
  return id;
}

TEST(OpsMovement, TransposeMapsThroughPerm) {
  graph::Graph g;
  test::tensor(g, "x", {2, 3, 4, 5});
  test::tensor(g, "y", {2, 4, 3, 5});
  test::tensor(g, "z", {5, 3, 4, 2});
  const auto s = graph::describe(g, test::op(g, "Transpose", {"x"}, {"y"}, {{"perm", Ints{0, 2, 1, 3}}}));
  EXPECT_EQ(s.op_class, OpClass::data_movement);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"d0", "d2", "d1", "d3"}));
  EXPECT_DOUBLE_EQ(s.fwd_flops, 0);
  EXPECT_DOUBLE_EQ(s.fwd_bytes_read, 120 * 4);
  EXPECT_DOUBLE_EQ(s.fwd_bytes_written, 120 * 4);
  const auto r = graph::describe(g, test::op(g, "Transpose", {"y"}, {"z"}));
  EXPECT_EQ(r.inputs[0].dims, dims_of(r, {"d3", "d2", "d1", "d0"}));
}

TEST(OpsMovement, BackwardReadsOnlyWhatItNeeds) {
  graph::Graph g;
  test::tensor(g, "x", {2, 3, 4, 5});
  test::tensor(g, "w", {2, 3, 4, 5});
  test::tensor(g, "y", {2, 4, 3, 5});
  test::tensor(g, "sum", {2, 3, 4, 5});
  test::tensor(g, "product", {2, 3, 4, 5});
  const double bytes = 120 * 4;
  // A transpose's gradient is the output gradient transposed back: read dY, write dX.
  const auto t = graph::describe(g, test::op(g, "Transpose", {"x"}, {"y"}, {{"perm", Ints{0, 2, 1, 3}}}));
  EXPECT_DOUBLE_EQ(t.bwd_bytes, 2 * bytes);
  // A sum passes dY to both inputs without reading them; a product reads both.
  const auto add = graph::describe(g, test::op(g, "Add", {"x", "w"}, {"sum"}));
  EXPECT_FALSE(add.backward_reads_inputs);
  EXPECT_DOUBLE_EQ(add.bwd_bytes, 3 * bytes);
  const auto mul = graph::describe(g, test::op(g, "Mul", {"x", "w"}, {"product"}));
  EXPECT_TRUE(mul.backward_reads_inputs);
  EXPECT_DOUBLE_EQ(mul.bwd_bytes, 5 * bytes);
}

TEST(OpsMovement, ConcatAxisIsWhole) {
  graph::Graph g;
  test::tensor(g, "a", {2, 3, 4});
  test::tensor(g, "b", {2, 5, 4});
  test::tensor(g, "y", {2, 8, 4});
  test::tensor(g, "bad", {2, 9, 4});
  const auto s = graph::describe(g, test::op(g, "Concat", {"a", "b"}, {"y"}, {{"axis", std::int64_t{1}}}));
  expect_dim(s, "d1", 8, false, false);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"d0", "", "d2"}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"d0", "", "d2"}));
  const auto e = graph::describe(g, test::op(g, "Concat", {"a", "b"}, {"bad"}, {{"axis", std::int64_t{1}}}));
  EXPECT_EQ(e.op_class, OpClass::opaque);
}

TEST(OpsMovement, SplitReadsPartsFromOutputs) {
  graph::Graph g;
  test::tensor(g, "x", {6, 4});
  int_tensor(g, "parts", {2, 4});
  test::tensor(g, "a", {2, 4});
  test::tensor(g, "b", {4, 4});
  const auto s = graph::describe(g, test::op(g, "Split", {"x", "parts"}, {"a", "b"}));
  expect_dim(s, "d0", 6, false, false);
  EXPECT_EQ(s.slots[1], InputSlot::index);
  EXPECT_EQ(s.outputs[0].dims, dims_of(s, {"", "d1"}));
  EXPECT_EQ(s.outputs[1].dims, dims_of(s, {"", "d1"}));
}

TEST(OpsMovement, SliceKeepsUncutDims) {
  graph::Graph g;
  test::tensor(g, "x", {4, 10});
  int_tensor(g, "starts", {0});
  int_tensor(g, "ends", {5});
  int_tensor(g, "axes", {1});
  test::tensor(g, "y", {4, 5});
  const auto s = graph::describe(g, test::op(g, "Slice", {"x", "starts", "ends", "axes"}, {"y"}));
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"d0", ""}));
  EXPECT_EQ(s.slots[3], InputSlot::index);
}

TEST(OpsMovement, SliceReversingADimReadsItWhole) {
  graph::Graph g;
  test::tensor(g, "x", {4, 10});
  int_tensor(g, "starts", {-1});
  int_tensor(g, "ends", {-100});
  int_tensor(g, "axes", {0});
  int_tensor(g, "steps", {-1});
  test::tensor(g, "y", {4, 10});
  const auto s = graph::describe(g, test::op(g, "Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"}));
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"", "d1"}));
}

TEST(OpsMovement, GatherOnParameterIsEmbedding) {
  graph::Graph g;
  test::tensor(g, "table", {1000, 64}, TensorRole::parameter);
  test::tensor(g, "ids", {2, 16}, TensorRole::input, DType::i64);
  test::tensor(g, "y", {2, 16, 64});
  const auto s = graph::describe(g, test::op(g, "Gather", {"table", "ids"}, {"y"}));
  EXPECT_EQ(s.op_class, OpClass::embedding);
  expect_dim(s, "v", 1000, true, true); // vocabulary-parallel: partial rows summed
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"v", "d2"}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"d0", "d1"}));
  EXPECT_EQ(s.slots[1], InputSlot::index);
  EXPECT_DOUBLE_EQ(s.fwd_flops, 0);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 0);
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops, 2.0 * 16 * 64); // scatter-add of one row per index
  // The table is read by index: the forward pass touches the 32 rows it writes, not 1,000.
  EXPECT_TRUE(s.inputs[0].read_by_index);
  EXPECT_DOUBLE_EQ(s.fwd_bytes_read, 4.0 * 32 * 64 + 8.0 * 32);
  EXPECT_DOUBLE_EQ(s.fwd_bytes_written, 4.0 * 32 * 64);
}

// A table smaller than what is gathered from it is read whole, once.
TEST(OpsMovement, AGatherReadsAtMostItsTable) {
  graph::Graph g;
  test::tensor(g, "table", {8, 64}, TensorRole::parameter);
  test::tensor(g, "ids", {2, 16}, TensorRole::input, DType::i64);
  test::tensor(g, "y", {2, 16, 64});
  const auto s = graph::describe(g, test::op(g, "Gather", {"table", "ids"}, {"y"}));
  EXPECT_DOUBLE_EQ(s.fwd_bytes_read, 4.0 * 8 * 64 + 8.0 * 32);
}

// GatherElements and GatherND read their data by index too: the elements or slices the indices
// pick, at most the output's bytes, however large the data.
TEST(OpsMovement, GatherElementsAndGatherNdReadAtMostWhatTheyWrite) {
  graph::Graph g;
  test::tensor(g, "data", {1000, 64});
  test::tensor(g, "idx", {4, 64}, TensorRole::input, DType::i64);
  test::tensor(g, "y", {4, 64});
  const auto e = graph::describe(g, test::op(g, "GatherElements", {"data", "idx"}, {"y"}));
  EXPECT_DOUBLE_EQ(e.fwd_bytes_read, 4.0 * 4 * 64 + 8.0 * 4 * 64);
  test::tensor(g, "nd", {2, 500, 7, 3});
  test::tensor(g, "nd_idx", {2, 4, 1}, TensorRole::input, DType::i64);
  test::tensor(g, "nd_y", {2, 4, 7, 3});
  const auto n =
      graph::describe(g, test::op(g, "GatherND", {"nd", "nd_idx"}, {"nd_y"}, {{"batch_dims", std::int64_t{1}}}));
  EXPECT_DOUBLE_EQ(n.fwd_bytes_read, 4.0 * 2 * 4 * 7 * 3 + 8.0 * 2 * 4);
}

TEST(OpsMovement, GatherOnActivationIsDataMovement) {
  graph::Graph g;
  test::tensor(g, "x", {2, 10, 8});
  int_tensor(g, "idx", {0, 3, 7});
  test::tensor(g, "y", {2, 3, 8});
  const auto s = graph::describe(g, test::op(g, "Gather", {"x", "idx"}, {"y"}, {{"axis", std::int64_t{1}}}));
  EXPECT_EQ(s.op_class, OpClass::data_movement);
  EXPECT_EQ(s.find_dim("v"), -1);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"d0", "", "d2"}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"d1"}));
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops + s.bwd_data_flops + s.fwd_flops, 0);
}

TEST(OpsMovement, GatherNdAndScatterNd) {
  graph::Graph g;
  test::tensor(g, "data", {2, 5, 7, 3});
  test::tensor(g, "idx", {2, 4, 1}, TensorRole::constant, DType::i64);
  test::tensor(g, "y", {2, 4, 7, 3});
  const auto s = graph::describe(g, test::op(g, "GatherND", {"data", "idx"}, {"y"}, {{"batch_dims", std::int64_t{1}}}));
  EXPECT_TRUE(s.opaque_reason.empty()) << s.opaque_reason;
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"d0", "", "d2", "d3"}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"d0", "d1", ""}));

  test::tensor(g, "base", {8, 6});
  test::tensor(g, "where", {3, 1}, TensorRole::constant, DType::i64);
  test::tensor(g, "upd", {3, 6});
  test::tensor(g, "out", {8, 6});
  const auto t = graph::describe(g, test::op(g, "ScatterND", {"base", "where", "upd"}, {"out"}));
  EXPECT_EQ(t.inputs[0].dims, dims_of(t, {"d0", "d1"}));
  EXPECT_EQ(t.inputs[2].dims, dims_of(t, {"", "d1"}));
  EXPECT_EQ(t.slots, (std::vector<InputSlot>{InputSlot::data, InputSlot::index, InputSlot::data}));
}

TEST(OpsMovement, ExpandAndResize) {
  graph::Graph g;
  test::tensor(g, "x", {3, 1});
  int_tensor(g, "shape", {2, 3, 4});
  test::tensor(g, "y", {2, 3, 4});
  const auto s = graph::describe(g, test::op(g, "Expand", {"x", "shape"}, {"y"}));
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"d1", ""}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {""}));

  test::tensor(g, "img", {1, 3, 8, 8});
  test::tensor(g, "big", {1, 3, 16, 16});
  const auto r = graph::describe(g, test::op(g, "Resize", {"img"}, {"big"}));
  EXPECT_EQ(r.inputs[0].dims, dims_of(r, {"d0", "d1", "d2", "d3"}));
}

TEST(OpsMovement, TopKAndCumSum) {
  graph::Graph g;
  test::tensor(g, "x", {4, 100});
  int_tensor(g, "k", {5});
  test::tensor(g, "values", {4, 5});
  test::tensor(g, "indices", {4, 5}, TensorRole::activation, DType::i64);
  const auto s = graph::describe(g, test::op(g, "TopK", {"x", "k"}, {"values", "indices"}));
  expect_dim(s, "d1", 100, false, false);
  EXPECT_EQ(s.outputs[1].dims, dims_of(s, {"d0", ""}));

  int_tensor(g, "axis", {1});
  test::tensor(g, "c", {4, 100});
  const auto c = graph::describe(g, test::op(g, "CumSum", {"x", "axis"}, {"c"}));
  expect_dim(c, "d1", 100, false, false);
  EXPECT_DOUBLE_EQ(c.fwd_flops, 400);
  test::tensor(g, "unknown_axis", {1}, TensorRole::activation, DType::i64);
  test::tensor(g, "c2", {4, 100});
  EXPECT_EQ(graph::describe(g, test::op(g, "CumSum", {"x", "unknown_axis"}, {"c2"})).op_class, OpClass::opaque);
}

TEST(OpsMovement, OneHotInsertsDepth) {
  graph::Graph g;
  test::tensor(g, "ids", {2, 16}, TensorRole::input, DType::i64);
  int_tensor(g, "depth", {10});
  test::tensor(g, "vals", {2});
  test::tensor(g, "y", {2, 16, 10});
  const auto s = graph::describe(g, test::op(g, "OneHot", {"ids", "depth", "vals"}, {"y"}));
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"d0", "d1"}));
}

TEST(OpsShape, ReshapeSplitsHeadsThrough) {
  graph::Graph g;
  test::tensor(g, "x", {2, 16, 768});
  int_tensor(g, "shape", {2, 16, 12, 64});
  test::tensor(g, "y", {2, 16, 12, 64});
  test::tensor(g, "z", {2, 16, 768});
  const auto s = graph::describe(g, test::op(g, "Reshape", {"x", "shape"}, {"y"}));
  EXPECT_EQ(s.op_class, OpClass::shape);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"d0", "d1", "d2"}));
  EXPECT_DOUBLE_EQ(s.fwd_bytes_read + s.fwd_bytes_written + s.bwd_bytes + s.fwd_flops, 0);
  const auto m = graph::describe(g, test::op(g, "Reshape", {"y", "shape"}, {"z"}));
  EXPECT_EQ(m.inputs[0].dims, dims_of(m, {"d0", "d1", "d2", ""}));
}

TEST(OpsShape, FlattenSqueezeUnsqueeze) {
  graph::Graph g;
  test::tensor(g, "x", {8, 512, 1, 1});
  test::tensor(g, "f", {8, 512});
  test::tensor(g, "u", {8, 1, 512});
  test::tensor(g, "c", {8, 2, 4, 4});
  test::tensor(g, "cf", {8, 32});
  const auto f = graph::describe(g, test::op(g, "Flatten", {"x"}, {"f"}));
  EXPECT_EQ(f.inputs[0].dims, dims_of(f, {"d0", "d1", "", ""}));
  const auto u = graph::describe(g, test::op(g, "Unsqueeze", {"f"}, {"u"}, {{"axes", Ints{1}}}));
  EXPECT_EQ(u.inputs[0].dims, dims_of(u, {"d0", "d2"}));
  const auto c = graph::describe(g, test::op(g, "Flatten", {"c"}, {"cf"}));
  EXPECT_EQ(c.inputs[0].dims, dims_of(c, {"d0", "d1", "", ""}));
}

TEST(OpsShape, ReshapeWithDifferentElementCountsIsOpaque) {
  graph::Graph g;
  test::tensor(g, "x", {2, 6});
  test::tensor(g, "y", {5, 2});
  const auto s = graph::describe(g, test::op(g, "Reshape", {"x"}, {"y"}));
  EXPECT_EQ(s.op_class, OpClass::opaque);
  EXPECT_NE(s.opaque_reason.find("element counts"), std::string::npos) << s.opaque_reason;
}

TEST(OpsShape, MetadataOpsHaveNoSpaceAndNoCost) {
  graph::Graph g;
  test::tensor(g, "x", {2, 6});
  test::tensor(g, "shape", {2}, TensorRole::activation, DType::i64);
  const auto s = graph::describe(g, test::op(g, "Shape", {"x"}, {"shape"}));
  EXPECT_EQ(s.op_class, OpClass::shape);
  EXPECT_TRUE(s.dims.empty());
  EXPECT_EQ(s.slots[0], InputSlot::index);
  EXPECT_EQ(s.inputs[0].dims, (std::vector<int>{-1, -1}));
  EXPECT_DOUBLE_EQ(s.fwd_bytes_read, 0);
}

// Every op type the descriptions promise is registered, none left to the opaque fallback.
TEST(OpsRegistry, EveryDescribedFamilyIsRegistered) {
  const std::vector<std::string> expected = {"Conv",
                                             "ConvTranspose",
                                             "BatchNormalization",
                                             "LayerNormalization",
                                             "InstanceNormalization",
                                             "GroupNormalization",
                                             "LpNormalization",
                                             "Softmax",
                                             "LogSoftmax",
                                             "MaxPool",
                                             "AveragePool",
                                             "LpPool",
                                             "GlobalAveragePool",
                                             "GlobalMaxPool",
                                             "ReduceMean",
                                             "ReduceSum",
                                             "ReduceMax",
                                             "ReduceMin",
                                             "ReduceProd",
                                             "ReduceL1",
                                             "ReduceL2",
                                             "ReduceLogSumExp",
                                             "ReduceSumSquare",
                                             "ArgMax",
                                             "ArgMin",
                                             "LSTM",
                                             "GRU",
                                             "RNN",
                                             "Transpose",
                                             "Concat",
                                             "Split",
                                             "Slice",
                                             "Gather",
                                             "GatherElements",
                                             "GatherND",
                                             "ScatterND",
                                             "ScatterElements",
                                             "Expand",
                                             "Tile",
                                             "Pad",
                                             "Resize",
                                             "Upsample",
                                             "DepthToSpace",
                                             "SpaceToDepth",
                                             "OneHot",
                                             "TopK",
                                             "CumSum",
                                             "Trilu",
                                             "Reshape",
                                             "Flatten",
                                             "Squeeze",
                                             "Unsqueeze",
                                             "Shape",
                                             "Size",
                                             "Constant",
                                             "ConstantOfShape",
                                             "Identity",
                                             "Range",
                                             "NonZero",
                                             "EyeLike"};
  for (const auto& type : expected) {
    EXPECT_NE(graph::find_descriptor(type), nullptr) << type;
  }
  EXPECT_EQ(graph::find_descriptor("NotAnOp"), nullptr);
}

} // namespace
} // namespace partita
