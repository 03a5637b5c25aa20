#include "partita/graph/error.h"
#include "partita/sharding/config.h"
#include "sharding_test_util.h"

#include <gtest/gtest.h>

namespace partita {
namespace {

using sharding::Block;
using sharding::Config;
using sharding::TensorLayout;
using Ints = std::vector<std::int64_t>;
using Axes = std::vector<int>;

// A layout of b:2 n:2 on 4 devices.
TEST(ShardingLayout, WorkedExample) {
  const test::TwoLayers t;
  const auto& s = t.fc1;
  const int b = s.find_dim("m"), n = s.find_dim("n");
  const Config c = test::config(s, {{"m", 2}, {"n", 2}});

  // X[b,k]: partitioned along b, replicated over the n axis (dX is reduced over n groups).
  const TensorLayout x = input_layout(t.g, s, c, 0);
  EXPECT_EQ(x.shape, (Ints{8, 16}));
  EXPECT_EQ(x.dim_axis, (Axes{b, -1}));
  EXPECT_EQ(x.parts, (Axes{2, 1}));
  EXPECT_EQ(x.replica_axes, (Axes{n}));
  EXPECT_TRUE(x.partial_axes.empty());
  EXPECT_DOUBLE_EQ(x.shard_bytes(), 4.0 * 4 * 16);

  // W[k,n]: partitioned along n, replicated over the b axis (dW is data parallelism's all-reduce).
  const TensorLayout w = input_layout(t.g, s, c, 1);
  EXPECT_EQ(w.dim_axis, (Axes{-1, n}));
  EXPECT_EQ(w.parts, (Axes{1, 2}));
  EXPECT_EQ(w.replica_axes, (Axes{b}));
  EXPECT_DOUBLE_EQ(w.shard_bytes(), 4.0 * 16 * 6);

  // Y[b,n]: a quarter per device, no partial sums since k is whole.
  const TensorLayout y = output_layout(t.g, s, c, 0);
  EXPECT_EQ(y.dim_axis, (Axes{b, n}));
  EXPECT_EQ(y.parts, (Axes{2, 2}));
  EXPECT_TRUE(y.replica_axes.empty());
  EXPECT_TRUE(y.partial_axes.empty());
  EXPECT_DOUBLE_EQ(y.shard_bytes(), 4.0 * 4 * 6);
  EXPECT_DOUBLE_EQ(4 * y.shard_bytes(), 4.0 * 8 * 12);

  // Position 1 is (b 0, n 1): the top-right quarter.
  const Block q = block_of(y, c, 1);
  EXPECT_EQ(q.begin, (Ints{0, 6}));
  EXPECT_EQ(q.end, (Ints{4, 12}));
  EXPECT_EQ(q.elements(), 24);
  // X at position 3 (b 1, n 1): the bottom rows, every column.
  const Block xb = block_of(x, c, 3);
  EXPECT_EQ(xb.begin, (Ints{4, 0}));
  EXPECT_EQ(xb.end, (Ints{8, 16}));
}

TEST(ShardingLayout, SplitReductionLeavesPartialSums) {
  const test::TwoLayers t;
  const auto& s = t.fc1;
  const int b = s.find_dim("m"), n = s.find_dim("n"), k = s.find_dim("k");
  const Config c = test::config(s, {{"m", 2}, {"n", 2}, {"k", 2}});
  const TensorLayout y = output_layout(t.g, s, c, 0);
  EXPECT_EQ(y.partial_axes, (Axes{k}));
  EXPECT_TRUE(y.replica_axes.empty());
  EXPECT_EQ(y.parts, (Axes{2, 2}));
  const TensorLayout x = input_layout(t.g, s, c, 0);
  EXPECT_EQ(x.dim_axis, (Axes{b, k}));
  EXPECT_EQ(x.replica_axes, (Axes{n}));
  EXPECT_TRUE(x.partial_axes.empty());
  const TensorLayout w = input_layout(t.g, s, c, 1);
  EXPECT_EQ(w.dim_axis, (Axes{k, n}));
  EXPECT_EQ(w.replica_axes, (Axes{b}));
  // Devices 0 and 1 of the grid (b 0, n 0, k 0 and k 1) hold partial sums of the same block.
  EXPECT_EQ(block_of(y, c, 0).begin, block_of(y, c, 1).begin);
  EXPECT_EQ(block_of(y, c, 0).end, block_of(y, c, 1).end);
}

TEST(ShardingLayout, ElementSizeFollowsDtype) {
  graph::Graph g;
  test::tensor(g, "a", {4, 6}, graph::TensorRole::input, graph::DType::f16);
  test::tensor(g, "b", {6, 2}, graph::TensorRole::parameter, graph::DType::f16);
  test::tensor(g, "c", {4, 2}, graph::TensorRole::activation, graph::DType::f16);
  const auto s = graph::describe(g, test::op(g, "MatMul", {"a", "b"}, {"c"}));
  const Config c = test::config(s, {{"m", 2}});
  const TensorLayout a = input_layout(g, s, c, 0);
  EXPECT_EQ(a.element_size, 2);
  EXPECT_DOUBLE_EQ(a.shard_bytes(), 2.0 * 2 * 6);
  EXPECT_THROW(input_layout(g, s, c, 2), Error);
  EXPECT_THROW(output_layout(g, s, c, 1), Error);
}

// A stride-2 conv maps the input's 15 rows onto 8 output rows: split 8 ways, the input is cut
// into 8 proportional parts of ceil(15/8) = 2 rows (the last one short), not into parts of 1.
TEST(ShardingLayout, StridedConvSplitsInputProportionally) {
  graph::Graph g;
  test::tensor(g, "x", {2, 3, 15, 15}, graph::TensorRole::input);
  test::tensor(g, "w", {4, 3, 1, 1}, graph::TensorRole::parameter);
  test::tensor(g, "y", {2, 4, 8, 8});
  const auto s = graph::describe(g, test::op(g, "Conv", {"x", "w"}, {"y"}, {{"strides", Ints{2, 2}}}));
  const int oh = s.find_dim("oh"), n = s.find_dim("n");
  const Config c = test::config(s, {{"n", 2}, {"oh", 8}});
  const TensorLayout x = input_layout(g, s, c, 0);
  EXPECT_EQ(x.dim_axis, (Axes{n, -1, oh, -1}));
  EXPECT_EQ(x.parts, (Axes{2, 1, 8, 1}));
  EXPECT_DOUBLE_EQ(x.shard_bytes(), 4.0 * 1 * 3 * 2 * 15);
  const TensorLayout w = input_layout(g, s, c, 1);
  EXPECT_EQ(w.replica_axes, (Axes{n, oh}));
  // The blocks of all 16 positions tile the input exactly once.
  std::int64_t covered = 0;
  for (int p = 0; p < c.devices(); ++p) {
    covered += block_of(x, c, p).elements();
  }
  EXPECT_EQ(covered, 2 * 3 * 15 * 15);
  // Position 7 is (n 0, oh 7): the last, short part of the rows.
  const Block last = block_of(x, c, 7);
  EXPECT_EQ(last.begin, (Ints{0, 0, 14, 0}));
  EXPECT_EQ(last.end, (Ints{1, 3, 15, 15}));
  // The output's rows, 8 of them, one per part.
  const Block y7 = block_of(output_layout(g, s, c, 0), c, 7);
  EXPECT_EQ(y7.begin, (Ints{0, 0, 7, 0}));
  EXPECT_EQ(y7.end, (Ints{1, 4, 8, 8}));
}

// A dim indexing two tensor dims (a diagonal) cuts only the first of them.
TEST(ShardingLayout, RepeatedDimSplitsFirstOccurrence) {
  graph::Graph g;
  test::tensor(g, "a", {6, 6}, graph::TensorRole::input);
  test::tensor(g, "d", {6});
  const auto s = graph::describe(g, test::op(g, "Einsum", {"a"}, {"d"}, {{"equation", std::string("ii->i")}}));
  ASSERT_EQ(s.inputs[0].dims.size(), 2u);
  ASSERT_EQ(s.inputs[0].dims[0], s.inputs[0].dims[1]);
  const int i = s.inputs[0].dims[0];
  Config c;
  c.splits.assign(s.dims.size(), 1);
  c.splits[static_cast<std::size_t>(i)] = 3;
  const TensorLayout a = input_layout(g, s, c, 0);
  EXPECT_EQ(a.dim_axis, (Axes{i, -1}));
  EXPECT_EQ(a.parts, (Axes{3, 1}));
  EXPECT_TRUE(a.replica_axes.empty());
}

TEST(ShardingLayout, ReplicatedConfigHoldsEverything) {
  const test::TwoLayers t;
  const Config c = test::config(t.fc1, {});
  const TensorLayout y = output_layout(t.g, t.fc1, c, 0);
  EXPECT_EQ(y.parts, (Axes{1, 1}));
  EXPECT_EQ(block_of(y, c, 0).elements(), 8 * 12);
  EXPECT_DOUBLE_EQ(y.shard_bytes(), 4.0 * 8 * 12);
}

// A reduce-scatter sums in place only where the slices lie one after another in the summed
// block's memory: a split of the leading dims, in order.
TEST(ShardingLayout, SlicesTileInOrderOnlyAlongTheLeadingDims) {
  const Block whole{{0, 0, 0}, {4, 6, 8}};
  const Block rows_a{{0, 0, 0}, {2, 6, 8}}, rows_b{{2, 0, 0}, {4, 6, 8}};
  EXPECT_TRUE(sharding::tiles_in_order(whole, std::vector<Block>{rows_a, rows_b}));
  EXPECT_FALSE(sharding::tiles_in_order(whole, std::vector<Block>{rows_b, rows_a})); // out of order
  EXPECT_FALSE(sharding::tiles_in_order(whole, std::vector<Block>{rows_a}));         // not all of it
  // A cut of the middle dim of a leading index of extent 1 is one run.
  const Block one{{1, 0, 0}, {2, 6, 8}};
  const Block mid_a{{1, 0, 0}, {2, 3, 8}}, mid_b{{1, 3, 0}, {2, 6, 8}};
  EXPECT_TRUE(sharding::tiles_in_order(one, std::vector<Block>{mid_a, mid_b}));
  // The same cut where the leading dim is longer: strided pieces, packed first.
  const Block cols_a{{0, 0, 0}, {4, 3, 8}}, cols_b{{0, 3, 0}, {4, 6, 8}};
  EXPECT_FALSE(sharding::tiles_in_order(whole, std::vector<Block>{cols_a, cols_b}));
  // Features split: strided as well.
  const Block f_a{{0, 0, 0}, {4, 6, 4}}, f_b{{0, 0, 4}, {4, 6, 8}};
  EXPECT_FALSE(sharding::tiles_in_order(whole, std::vector<Block>{f_a, f_b}));
  // Within an offset block, and a piece that reaches outside it.
  const Block inner{{2, 0, 0}, {4, 6, 8}};
  const Block in_a{{2, 0, 0}, {3, 6, 8}}, in_b{{3, 0, 0}, {4, 6, 8}};
  EXPECT_TRUE(sharding::tiles_in_order(inner, std::vector<Block>{in_a, in_b}));
  EXPECT_FALSE(sharding::tiles_in_order(inner, std::vector<Block>{rows_a, in_b}));
}

} // namespace
} // namespace partita
