// When partita-run hands a view's input buffer over as its output (no copy): exactly when the two
// shards hold the same elements in the same order.

#include "op_kernels.h"
#include "shard.h"

#include "partita/graph/graph.h"

#include <gtest/gtest.h>

namespace partita::runtime {
namespace {

struct ReshapeCase {
  graph::Graph g;
  graph::OpId id = -1;
  ReshapeCase(graph::Shape in, graph::Shape out) {
    graph::Tensor x, y;
    x.name = "x";
    x.shape = std::move(in);
    y.name = "y";
    y.shape = std::move(out);
    graph::Op op;
    op.name = "reshape";
    op.type = "Reshape";
    op.inputs = {g.add_tensor(x)};
    op.outputs = {g.add_tensor(y)};
    id = g.add_op(op);
  }
  bool view(sharding::Block in, sharding::Block out) const {
    return is_buffer_view(g, id, make_shard(in), make_shard(out));
  }
};

TEST(BufferView, HeadSplitOfAReshapeIsAView) {
  // [B, S, H*D] -> [B, S, H, D] with the heads split in two: each half is not one run of the
  // tensor, but each shard's own row-major order is the same walk.
  const ReshapeCase r({2, 3, 8}, {2, 3, 2, 4});
  EXPECT_TRUE(r.view({{0, 0, 4}, {2, 3, 8}}, {{0, 0, 1, 0}, {2, 3, 2, 4}}));
  EXPECT_TRUE(r.view({{0, 0, 0}, {2, 3, 4}}, {{0, 0, 0, 0}, {2, 3, 1, 4}}));
  // The batch split: one run of the tensor on both sides.
  EXPECT_TRUE(r.view({{1, 0, 0}, {2, 3, 8}}, {{1, 0, 0, 0}, {2, 3, 2, 4}}));
}

TEST(BufferView, MismatchedBlocksAreCopied) {
  const ReshapeCase r({2, 3, 8}, {2, 3, 2, 4});
  // The input's first half of the heads against the output's second half.
  EXPECT_FALSE(r.view({{0, 0, 0}, {2, 3, 4}}, {{0, 0, 1, 0}, {2, 3, 2, 4}}));
  // Split on D (the inner dim of the run) against a head split: same count, other elements.
  EXPECT_FALSE(r.view({{0, 0, 0}, {2, 3, 4}}, {{0, 0, 0, 0}, {2, 3, 2, 2}}));
  // Merging [B, S] with S split: the shard's rows are not in the output block's order.
  const ReshapeCase m({2, 4, 3}, {8, 3});
  EXPECT_FALSE(m.view({{0, 0, 0}, {2, 2, 3}}, {{0, 0}, {4, 3}}));
  EXPECT_TRUE(m.view({{1, 0, 0}, {2, 4, 3}}, {{4, 0}, {8, 3}}));
}

TEST(BufferView, DimsOfExtentOneAndMergedRunsCompareEqual) {
  const ReshapeCase r({4, 1, 6}, {24});
  EXPECT_TRUE(r.view({{2, 0, 0}, {3, 1, 6}}, {{12}, {18}}));
  EXPECT_FALSE(r.view({{2, 0, 0}, {3, 1, 6}}, {{6}, {12}}));
}

} // namespace
} // namespace partita::runtime
