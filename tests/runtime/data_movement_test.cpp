// The CPU backend's data movement (Backend::copy, scale, fill, gather, select) against direct
// loops: the host code the op kernels ran before it moved behind the Backend, so the results are
// bit for bit the same.

#include "backend.h"

#include "partita/graph/error.h"

#include <gtest/gtest.h>

#include <vector>

namespace partita::runtime {
namespace {

std::vector<float> iota_floats(std::size_t n, float from = 0.F) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = from + static_cast<float>(i);
  }
  return v;
}

TEST(StridedCopy, DropsUnitDimsAndMergesDimsThatRunOnInBothBuffers) {
  const auto c = strided_copy({2, 1, 3, 4}, {12, 12, 4, 1}, {12, 12, 4, 1});
  ASSERT_EQ(c.rank, 1);
  EXPECT_EQ(c.extent[0], 24);
  // A transpose keeps its two dims apart.
  const auto t = strided_copy({3, 4}, {1, 3}, {4, 1});
  ASSERT_EQ(t.rank, 2);
  EXPECT_EQ(t.elements(), 12);
  EXPECT_EQ(strided_copy({5, 0, 2}, {2, 2, 1}, {2, 2, 1}).elements(), 0);
  EXPECT_EQ(row_major_strides({2, 3, 4}), (Dims{12, 4, 1}));
}

TEST(CpuBackend, CopyTransposesEveryPermutationOfARank3Block) {
  auto backend = make_cpu_backend(1);
  const Dims in{5, 37, 33}; // tiles that do not divide the dims
  const auto strides = row_major_strides(in);
  const auto x = iota_floats(5 * 37 * 33);
  const std::vector<std::vector<std::size_t>> perms{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (const auto& perm : perms) {
    const Dims out{in[perm[0]], in[perm[1]], in[perm[2]]};
    const Dims step{strides[perm[0]], strides[perm[1]], strides[perm[2]]};
    std::vector<float> y(x.size(), -1.F);
    backend->copy(strided_copy(out, step, row_major_strides(out)), x.data(), y.data(), false);
    std::size_t o = 0;
    for (std::int64_t i = 0; i < out[0]; ++i) {
      for (std::int64_t j = 0; j < out[1]; ++j) {
        for (std::int64_t k = 0; k < out[2]; ++k, ++o) {
          ASSERT_EQ(y[o], x[static_cast<std::size_t>(i * step[0] + j * step[1] + k * step[2])])
              << "perm " << perm[0] << perm[1] << perm[2] << " at " << o;
        }
      }
    }
    // Back again, added onto what is there: twice the input.
    std::vector<float> back(x);
    backend->copy(strided_copy(out, row_major_strides(out), step), y.data(), back.data(), true);
    for (std::size_t e = 0; e < x.size(); ++e) {
      ASSERT_EQ(back[e], 2.F * x[e]);
    }
  }
}

TEST(CpuBackend, CopyWritesABoxInsideALargerBuffer) {
  auto backend = make_cpu_backend(1);
  // Rows 1..2 and columns 2..4 of a [4, 6] buffer into a [2, 3] one (a slice), then back (a strided
  // write), and a column-strided box with no dense dim at all.
  const auto x = iota_floats(24);
  std::vector<float> part(6);
  backend->copy(strided_copy({2, 3}, {6, 1}, {3, 1}), x.data() + 1 * 6 + 2, part.data(), false);
  EXPECT_EQ(part, (std::vector<float>{8, 9, 10, 14, 15, 16}));
  std::vector<float> whole(24, 0.F);
  backend->copy(strided_copy({2, 3}, {3, 1}, {6, 1}), part.data(), whole.data() + 8, false);
  EXPECT_EQ(whole[8], 8.F);
  EXPECT_EQ(whole[16], 16.F);
  EXPECT_EQ(whole[7], 0.F);
  std::vector<float> every_other(4);
  backend->copy(strided_copy({2, 2}, {12, 2}, {2, 1}), x.data(), every_other.data(), false);
  EXPECT_EQ(every_other, (std::vector<float>{0, 2, 12, 14}));
}

TEST(CpuBackend, ScaleAndFill) {
  auto backend = make_cpu_backend(1);
  std::vector<float> v{1.F, -2.F, 3.5F};
  backend->scale(3, -1.F, v.data(), v.data());
  EXPECT_EQ(v, (std::vector<float>{-1.F, 2.F, -3.5F}));
  backend->fill(2, 7.F, v.data());
  EXPECT_EQ(v, (std::vector<float>{7.F, 7.F, -3.5F}));
}

TEST(CpuBackend, GatherReadsHeldRowsAndZeroesRowsHeldElsewhere) {
  auto backend = make_cpu_backend(1);
  // Rows 2..4 of a 6-row table of 2 columns; indices name rows 3, 0 (elsewhere), -1 (row 5,
  // elsewhere) and 2.
  GatherShape s;
  s.count = 4;
  s.inner = 2;
  s.rows = 3;
  s.first_row = 2;
  s.axis_size = 6;
  const std::vector<float> table{20, 21, 30, 31, 40, 41};
  const std::vector<float> indices{3, 0, -1, 2};
  std::vector<float> y(8, -1.F);
  backend->gather(s, table.data(), indices.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{30, 31, 0, 0, 0, 0, 20, 21}));
  // The gradient adds every row read by several indices.
  const std::vector<float> twice{3, 3, 2, 0};
  const std::vector<float> dy{1, 2, 10, 20, 100, 200, 1000, 2000};
  std::vector<float> d_table(6, -1.F);
  backend->gather_backward(s, twice.data(), dy.data(), d_table.data());
  EXPECT_EQ(d_table, (std::vector<float>{100, 200, 11, 22, 0, 0}));
  const std::vector<float> bad{6};
  s.count = 1;
  EXPECT_THROW(backend->gather(s, table.data(), bad.data(), y.data()), Error);
}

TEST(CpuBackend, SelectComparesAndPicksWithBroadcasting) {
  auto backend = make_cpu_backend(1);
  const std::vector<float> a{1, 5, 3, 7}; // [2, 2]
  const std::vector<float> b{4};          // [1, 1]
  std::vector<float> y(4);
  backend->select(Select::greater, {2, 2}, {2, 2}, a.data(), {1, 1}, b.data(), {}, nullptr, y.data());
  EXPECT_EQ(y, (std::vector<float>{0, 1, 0, 1}));
  backend->select(Select::less_or_equal, {2, 2}, {2, 2}, a.data(), {1, 1}, b.data(), {}, nullptr, y.data());
  EXPECT_EQ(y, (std::vector<float>{1, 0, 1, 0}));
  const std::vector<float> condition{1, 0}; // [1, 2]: one per column
  const std::vector<float> other{-1, -2};   // [2, 1]: one per row
  backend->select(Select::where, {2, 2}, {1, 2}, condition.data(), {2, 2}, a.data(), {2, 1}, other.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{1, -1, 3, -2}));
}

} // namespace
} // namespace partita::runtime
