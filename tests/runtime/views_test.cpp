// When partita-run hands a view's input buffer over as its output (no copy): exactly when the two
// shards hold the same elements in the same order. And Transpose's kernel (a tiled copy) forward
// and backward against direct indexing, whole and on a block.

#include "op_kernels.h"
#include "shard.h"

#include "partita/graph/graph.h"

#include <gtest/gtest.h>

#include <limits>
#include <numeric>

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

struct TransposeCase {
  graph::Graph g;
  graph::OpId id = -1;
  std::vector<std::int64_t> perm;
  TransposeCase(graph::Shape in, std::vector<std::int64_t> p) : perm(std::move(p)) {
    graph::Tensor x, y;
    x.name = "x";
    x.shape = in;
    y.name = "y";
    for (const auto d : perm) {
      y.shape.push_back(in[static_cast<std::size_t>(d)]);
    }
    graph::Op op;
    op.name = "transpose";
    op.type = "Transpose";
    op.attrs["perm"] = perm;
    op.inputs = {g.add_tensor(x)};
    op.outputs = {g.add_tensor(y)};
    id = g.add_op(op);
  }
  // Forward on the input block `in` (values: their global flat index), backward of a dY whose
  // values are their own global flat index; both checked element by element.
  void check(const sharding::Block& in) const {
    const auto& xs = g.tensor(g.op(id).inputs[0]).shape;
    const auto& ys = g.tensor(g.op(id).outputs[0]).shape;
    const std::size_t r = perm.size();
    sharding::Block out{std::vector<std::int64_t>(r), std::vector<std::int64_t>(r)};
    for (std::size_t d = 0; d < r; ++d) {
      out.begin[d] = in.begin[static_cast<std::size_t>(perm[d])];
      out.end[d] = in.end[static_cast<std::size_t>(perm[d])];
    }
    Shard x = make_shard(in), y = make_shard(out), dy = make_shard(out), dx = make_shard(in);
    // Global flat index of each local element of a block, row-major.
    const auto global = [](const sharding::Block& b, const graph::Shape& shape, std::int64_t local) {
      std::int64_t flat = 0;
      std::vector<std::int64_t> c(b.begin.size());
      for (std::size_t d = b.begin.size(); d-- > 0;) {
        const auto extent = b.end[d] - b.begin[d];
        c[d] = b.begin[d] + local % extent;
        local /= extent;
      }
      for (std::size_t d = 0; d < c.size(); ++d) {
        flat = flat * shape[d] + c[d];
      }
      return std::pair{flat, c};
    };
    for (std::int64_t i = 0; i < x.elements(); ++i) {
      x.data[static_cast<std::size_t>(i)] = static_cast<float>(global(in, xs, i).first);
    }
    for (std::int64_t i = 0; i < dy.elements(); ++i) {
      dy.data[static_cast<std::size_t>(i)] = static_cast<float>(global(out, ys, i).first);
    }
    std::fill(dx.data.begin(), dx.data.end(), std::numeric_limits<float>::quiet_NaN());
    OpBuffers buf;
    buf.inputs = {&x};
    buf.outputs = {&y};
    auto backend = make_cpu_backend(1);
    run_forward(*backend, g, id, buf);
    run_backward(*backend, g, id, buf, {&dy}, {&dx});
    for (std::int64_t i = 0; i < y.elements(); ++i) {
      const auto [flat, c] = global(out, ys, i);
      std::int64_t want = 0; // y[c] = x[c'] with c'[perm[d]] = c[d]
      std::vector<std::int64_t> src(r);
      for (std::size_t d = 0; d < r; ++d) {
        src[static_cast<std::size_t>(perm[d])] = c[d];
      }
      for (std::size_t d = 0; d < r; ++d) {
        want = want * xs[d] + src[d];
      }
      ASSERT_EQ(y.data[static_cast<std::size_t>(i)], static_cast<float>(want)) << "y at local " << i;
      // dX at src is dY at c: the element of dy whose global index is `flat`.
      std::int64_t local = 0;
      for (std::size_t d = 0; d < r; ++d) {
        local = local * (in.end[d] - in.begin[d]) + (src[d] - in.begin[d]);
      }
      ASSERT_EQ(dx.data[static_cast<std::size_t>(local)], static_cast<float>(flat)) << "dx at local " << local;
    }
  }
};

TEST(TransposeKernel, MatchesIndexingForwardAndBackward) {
  TransposeCase({70, 45}, {1, 0}).check({{0, 0}, {70, 45}}); // more than one 32 x 32 tile each way
  TransposeCase({4, 33, 5, 40}, {0, 2, 1, 3}).check({{0, 0, 0, 0}, {4, 33, 5, 40}}); // last dim stays last
  TransposeCase({3, 37, 50}, {2, 0, 1}).check({{0, 0, 0}, {3, 37, 50}});
  TransposeCase({3, 37, 50}, {0, 2, 1}).check({{1, 3, 10}, {3, 30, 45}}); // a block of a sharded tensor
}

} // namespace
} // namespace partita::runtime
