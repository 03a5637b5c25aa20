// The CPU backend's matrix product against a product in double, every way it may run: a product
// reading A transposed runs, on its first calls, in place and on a plain copy of A alternately
// (FasterWay times both) and then the faster way. FasterWay's choice on given times.

#include "backend.h"
#include "faster_way.h"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

namespace partita::runtime {
namespace {

std::vector<float> values(std::size_t n, float step) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>((i * 29) % 97) * step - 0.4F;
  }
  return v;
}

// C[b] = op(A[b]) op(B[b]) in double, A stored [k, m] when trans_a, B stored [n, k] when trans_b.
std::vector<double> reference(const MatmulShape& s, const std::vector<float>& a, bool trans_a,
                              const std::vector<float>& b, bool trans_b) {
  std::vector<double> c(static_cast<std::size_t>(s.batch * s.m * s.n));
  for (std::int64_t p = 0; p < s.batch; ++p) {
    const float* ap = a.data() + p * s.m * s.k;
    const float* bp = b.data() + p * s.k * s.n;
    for (std::int64_t i = 0; i < s.m; ++i) {
      for (std::int64_t j = 0; j < s.n; ++j) {
        double sum = 0;
        for (std::int64_t l = 0; l < s.k; ++l) {
          sum += static_cast<double>(trans_a ? ap[l * s.m + i] : ap[i * s.k + l]) *
                 static_cast<double>(trans_b ? bp[j * s.k + l] : bp[l * s.n + j]);
        }
        c[static_cast<std::size_t>((p * s.m + i) * s.n + j)] = sum;
      }
    }
  }
  return c;
}

TEST(CpuBackend, ProductsReadingATransposedAreRightEveryWayTheyRun) {
  auto backend = make_cpu_backend(1);
  for (const bool trans_b : {false, true}) {
    const MatmulShape s{2, 37, 19, 53};
    const auto a = values(static_cast<std::size_t>(s.batch * s.m * s.k), 0.01F);
    const auto b = values(static_cast<std::size_t>(s.batch * s.k * s.n), -0.007F);
    const auto want = reference(s, a, true, b, trans_b);
    // 3 timed calls of each way, then the chosen one.
    for (int call = 0; call < 9; ++call) {
      std::vector<float> c(want.size(), -1.F);
      backend->matmul(s, a.data(), true, b.data(), trans_b, c.data());
      for (std::size_t i = 0; i < c.size(); ++i) {
        ASSERT_NEAR(c[i], want[i], 1e-4) << "B transposed " << trans_b << ", call " << call << ", element " << i;
      }
    }
  }
}

TEST(FasterWay, TimesBothWaysAlternatelyThenKeepsTheFaster) {
  FasterWay<int> ways(2);
  EXPECT_FALSE(ways.decided(7));
  const double seconds[2] = {3.0, 2.0};
  std::vector<int> order;
  for (int call = 0; call < 4; ++call) {
    const int w = ways.way(7);
    order.push_back(w);
    ways.timed(7, seconds[w] + (call == 2 ? 5.0 : 0.0)); // a disturbance in one of way 0's calls
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_TRUE(ways.decided(7));
  EXPECT_EQ(ways.way(7), 1);
  ways.timed(7, 0.001); // ignored once decided
  EXPECT_EQ(ways.way(7), 1);
  // Another problem is timed afresh; equal times keep way 0 (in place, no copy).
  EXPECT_EQ(ways.way(8), 0);
  for (int call = 0; call < 4; ++call) {
    ways.timed(8, 1.0);
  }
  EXPECT_TRUE(ways.decided(8));
  EXPECT_EQ(ways.way(8), 0);
}

TEST(FasterWay, ALowestTimeDecidesNotTheMean) {
  FasterWay<std::tuple<int, bool>> ways(3);
  const std::tuple<int, bool> key{1, true};
  // Way 0: 1.0 once, then disturbed; way 1: steady 1.5.
  const double times[6] = {1.0, 1.5, 9.0, 1.5, 9.0, 1.5};
  for (const double t : times) {
    ways.timed(key, t);
  }
  EXPECT_EQ(ways.way(key), 0);
}

} // namespace
} // namespace partita::runtime
