// The kernel sweeps past their range (SweepExtension): sizes go on while a call is expected to
// last at most the given time, and stop at once where it would not. Runs the CPU backend's kernels
// on one MPI rank (MPI_Init without mpirun); what is asserted is which sizes ran, never a time:
// the limits tried are far apart from any time a tiny kernel takes, busy machine or not.

#include "backends.h"
#include "sweeps.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>

namespace partita::runtime {
namespace {

const SweepBudget tiny{0.0002, 1, 3};

double largest(const std::vector<KernelTiming>& rows) {
  double m = 0;
  for (const auto& r : rows) {
    m = std::max(m, r.flops);
  }
  return m;
}

TEST(SweepExtension, GemmsGoPastTheRangeOnlyWhileACallIsShortEnough) {
  auto backend = make_backend("cpu", 1, MPI_COMM_WORLD);
  const auto plain = gemm_sweep(*backend, MPI_COMM_WORLD, tiny, 4, 5, 2);
  // Within the range: 10^4 .. 10^5 FLOPs (rounded shapes land near them).
  EXPECT_LT(largest(plain), 1.5e5);
  // Ten seconds a call: every size up to 10^6 runs, for every family.
  const auto extended = gemm_sweep(*backend, MPI_COMM_WORLD, tiny, 4, 5, 2, {6, 10.0});
  EXPECT_EQ(extended.size(), plain.size() + 4 * 2);
  EXPECT_GT(largest(extended), 0.6e6);
  // A nanosecond a call: nothing past the range.
  const auto stopped = gemm_sweep(*backend, MPI_COMM_WORLD, tiny, 4, 5, 2, {6, 1e-9});
  EXPECT_EQ(stopped.size(), plain.size());
  EXPECT_LT(largest(stopped), 1.5e5);
}

TEST(SweepExtension, LargerConvolutionsRunSmallestFirstWhileACallIsShortEnough) {
  auto backend = make_backend("cpu", 1, MPI_COMM_WORLD);
  const auto cases = conv_cases(5, 6, {1});
  auto larger = conv_cases(6.5, 7, {1});
  ASSERT_FALSE(cases.empty());
  ASSERT_GE(larger.size(), 2U);
  std::ranges::reverse(larger); // given in any order
  const auto plain = conv_sweep(*backend, MPI_COMM_WORLD, tiny, cases);
  EXPECT_EQ(plain.size(), 2 * cases.size());
  const auto extended = conv_sweep(*backend, MPI_COMM_WORLD, tiny, cases, larger, {0, 10.0});
  ASSERT_EQ(extended.size(), 2 * (cases.size() + larger.size()));
  for (std::size_t i = 2 * cases.size() + 2; i < extended.size(); i += 2) {
    EXPECT_LE(extended[i - 2].flops, extended[i].flops) << extended[i].kernel; // forward rows, ascending
  }
  EXPECT_EQ(conv_sweep(*backend, MPI_COMM_WORLD, tiny, cases, larger, {0, 1e-9}).size(), plain.size());
  EXPECT_EQ(conv_sweep(*backend, MPI_COMM_WORLD, tiny, cases, larger).size(), plain.size());
}

} // namespace
} // namespace partita::runtime

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  MPI_Init(&argc, &argv);
  const int failed = RUN_ALL_TESTS();
  MPI_Finalize();
  return failed;
}
