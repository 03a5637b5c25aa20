// The CPU backend's element-wise kernels that are not oneDNN's: erf forward and backward (a
// vectorized exp and erf, runtime/src/vector_math.h) against the C library, and the sum over
// leading dims (a bias gradient) against a direct loop, beside a sum oneDNN still does; softmax's
// and layer normalization's backward passes against their formulas.

#include "backend.h"
#include "vector_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace partita::runtime {
namespace {

TEST(VectorMath, ExpIsWithinAFewUlpOverTheFloatRange) {
  for (float x = -87.F; x <= 88.F; x += 0.00731F) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_NEAR(vmath::exp(x) / want, 1.0, 5e-7) << "x = " << x;
  }
  EXPECT_EQ(vmath::exp(0.F), 1.F);
  EXPECT_GT(vmath::exp(-1000.F), 0.F); // clamped, not a denormal or garbage
  EXPECT_TRUE(std::isfinite(vmath::exp(1000.F)));
}

TEST(VectorMath, ErfIsWithinThreeTenMillionthsAndOneMillionthRelativeAndOdd) {
  for (float x = -6.F; x <= 6.F; x += 0.000917F) {
    const double want = std::erf(static_cast<double>(x));
    EXPECT_NEAR(vmath::erf(x), want, std::min(3e-7, 1e-6 * std::fabs(want) + 1e-12)) << "x = " << x;
    EXPECT_EQ(vmath::erf(-x), -vmath::erf(x));
  }
}

TEST(CpuBackend, ErfForwardAndBackwardMatchTheLibrary) {
  auto backend = make_cpu_backend(1);
  const std::int64_t n = 10007; // not a multiple of a vector
  std::vector<float> x(n), y(n), dy(n), dx(n);
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = -4.F + 8.F * static_cast<float>(i) / static_cast<float>(n);
    dy[i] = 0.5F + 0.001F * static_cast<float>(i % 100);
  }
  backend->eltwise_forward(Eltwise::erf, n, x.data(), y.data());
  backend->eltwise_backward(Eltwise::erf, n, x.data(), dy.data(), dx.data());
  for (std::int64_t i = 0; i < n; ++i) {
    const double xi = x[i];
    ASSERT_NEAR(y[i], std::erf(xi), 3e-7) << "at " << i;
    ASSERT_NEAR(dx[i], dy[i] * 2 / std::sqrt(M_PI) * std::exp(-xi * xi), 1e-6) << "at " << i;
  }
}

std::vector<float> ramp(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>((i * 37) % 101) / 101.F - 0.5F;
  }
  return v;
}

// Layer normalization's backward pass (oneDNN's kernel on the statistics of the backend's own
// loop, row_moments) against its formula in double: with xhat = (x - mean) / sqrt(var + eps) and
// g = dy scale, dx = (g - mean(g) - xhat mean(g xhat)) / sqrt(var + eps); d_scale and d_shift sum
// dy xhat and dy over the rows. Rows of a large mean and a small spread, where the variance taken
// as a difference of two sums would lose its digits.
TEST(CpuBackend, LayerNormBackwardIsItsFormula) {
  auto backend = make_cpu_backend(1);
  const std::int64_t rows = 7, norm = 37; // 37: not a multiple of a vector
  const float epsilon = 1e-5F;
  std::vector<float> x(rows * norm), dy(rows * norm), dx(rows * norm), scale(norm), d_scale(norm), d_shift(norm);
  for (std::int64_t i = 0; i < rows * norm; ++i) {
    x[i] = 10.F * static_cast<float>(i / norm) + std::sin(0.37F * static_cast<float>(i));
    dy[i] = std::cos(0.11F * static_cast<float>(i));
  }
  for (std::int64_t k = 0; k < norm; ++k) {
    scale[k] = 0.5F + 0.03F * static_cast<float>(k);
  }
  backend->layer_norm_backward(rows, norm, epsilon, x.data(), scale.data(), dy.data(), dx.data(), d_scale.data(),
                               d_shift.data());
  std::vector<double> want_scale(norm, 0.0), want_shift(norm, 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto row = [&](const std::vector<float>& v, std::int64_t k) { return static_cast<double>(v[r * norm + k]); };
    double mean = 0, var = 0;
    for (std::int64_t k = 0; k < norm; ++k) {
      mean += row(x, k) / norm;
    }
    for (std::int64_t k = 0; k < norm; ++k) {
      var += (row(x, k) - mean) * (row(x, k) - mean) / norm;
    }
    const double inv = 1 / std::sqrt(var + epsilon);
    double g_mean = 0, gx_mean = 0;
    for (std::int64_t k = 0; k < norm; ++k) {
      const double xhat = (row(x, k) - mean) * inv, g = row(dy, k) * scale[k];
      g_mean += g / norm;
      gx_mean += g * xhat / norm;
      want_scale[k] += row(dy, k) * xhat;
      want_shift[k] += row(dy, k);
    }
    for (std::int64_t k = 0; k < norm; ++k) {
      const double xhat = (row(x, k) - mean) * inv, g = row(dy, k) * scale[k];
      const double want = (g - g_mean - xhat * gx_mean) * inv;
      ASSERT_NEAR(dx[r * norm + k], want, 1e-4 * (1 + std::fabs(want))) << "row " << r << ", element " << k;
    }
  }
  for (std::int64_t k = 0; k < norm; ++k) {
    ASSERT_NEAR(d_scale[k], want_scale[k], 1e-4 * (1 + std::fabs(want_scale[k]))) << "d_scale " << k;
    ASSERT_NEAR(d_shift[k], want_shift[k], 1e-4 * (1 + std::fabs(want_shift[k]))) << "d_shift " << k;
  }
}

// Softmax's backward pass (the backend's own loop: oneDNN 2.6 has only a scalar one without
// AVX-512) against dx = y (dy - sum over the axis of y dy) in double, along the innermost axis
// and along a middle one, of a forward pass oneDNN computes.
TEST(CpuBackend, SoftmaxBackwardIsTheJacobianTransposeProduct) {
  auto backend = make_cpu_backend(1);
  const std::vector<std::int64_t> dims{3, 5, 37}; // 37: not a multiple of a vector
  const std::int64_t n = 3 * 5 * 37;
  std::vector<float> x(n), y(n), dy(n), dx(n);
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = std::sin(0.37F * static_cast<float>(i)) * 3.F;
    dy[i] = std::cos(0.11F * static_cast<float>(i));
  }
  for (const int axis : {2, 1}) {
    backend->softmax_forward(dims, axis, x.data(), y.data());
    backend->softmax_backward(dims, axis, y.data(), dy.data(), dx.data());
    const std::int64_t length = dims[static_cast<std::size_t>(axis)], inner = axis == 2 ? 1 : dims[2];
    const std::int64_t outer = n / (length * inner);
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t i = 0; i < inner; ++i) {
        double dot = 0;
        for (std::int64_t k = 0; k < length; ++k) {
          const auto at = (o * length + k) * inner + i;
          dot += static_cast<double>(y[at]) * dy[at];
        }
        for (std::int64_t k = 0; k < length; ++k) {
          const auto at = (o * length + k) * inner + i;
          ASSERT_NEAR(dx[at], y[at] * (dy[at] - dot), 1e-6) << "axis " << axis << ", element " << at;
        }
      }
    }
  }
}

TEST(CpuBackend, SumOverLeadingDimsIsTheBiasGradient) {
  auto backend = make_cpu_backend(1);
  const Dims src{3, 5, 7};
  const auto x = ramp(3 * 5 * 7);
  std::vector<float> bias(7, -1.F), rows(5 * 7, -1.F);
  backend->reduce_sum(src, x.data(), Dims{1, 1, 7}, bias.data());
  backend->reduce_sum(src, x.data(), Dims{1, 5, 7}, rows.data());
  for (int k = 0; k < 7; ++k) {
    double want = 0;
    for (int i = 0; i < 15; ++i) {
      want += x[static_cast<std::size_t>(i * 7 + k)];
    }
    EXPECT_NEAR(bias[static_cast<std::size_t>(k)], want, 1e-5) << "column " << k;
  }
  for (int j = 0; j < 35; ++j) {
    const double want =
        x[static_cast<std::size_t>(j)] + x[static_cast<std::size_t>(35 + j)] + x[static_cast<std::size_t>(70 + j)];
    EXPECT_NEAR(rows[static_cast<std::size_t>(j)], want, 1e-5) << "element " << j;
  }
}

TEST(CpuBackend, SumOverInnerDimsStillReduces) {
  auto backend = make_cpu_backend(1);
  const auto x = ramp(4 * 6);
  std::vector<float> out(4, -1.F);
  backend->reduce_sum(Dims{4, 6}, x.data(), Dims{4, 1}, out.data());
  for (int i = 0; i < 4; ++i) {
    double want = 0;
    for (int j = 0; j < 6; ++j) {
      want += x[static_cast<std::size_t>(i * 6 + j)];
    }
    EXPECT_NEAR(out[static_cast<std::size_t>(i)], want, 1e-5) << "row " << i;
  }
}

} // namespace
} // namespace partita::runtime
