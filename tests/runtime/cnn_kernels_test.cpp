// The CPU backend's CNN kernels against direct loops written from the ONNX definitions:
// convolution (strides, pads, dilations, groups) forward and both backward passes, max and
// average pooling forward and backward, batch normalization forward and backward, and the
// sync-BN split: two halves of a batch with summed statistics give the whole batch's gradient.

#include "backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace partita::runtime {
namespace {

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5F, 0.5F);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = u(rng);
  }
  return v;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance) << "at " << i;
  }
}

std::int64_t in_row(const Window2d& w, std::int64_t o, std::int64_t k, bool height) {
  return height ? o * w.stride_h - w.pad_top + k * w.dilation_h : o * w.stride_w - w.pad_left + k * w.dilation_w;
}

// y[n, co, oh, ow] = b[co] + sum_{ci, kh, kw} x[n, g*cig + ci, ih, iw] w[co, ci, kh, kw]; dx and
// dw by the same sum, transposed.
struct NaiveConv {
  const ConvShape& s;
  std::int64_t cig() const { return s.c_in / s.groups; }
  std::int64_t cog() const { return s.c_out / s.groups; }

  template <class F> void each(F&& f) const {
    for (std::int64_t n = 0; n < s.n; ++n)
      for (std::int64_t co = 0; co < s.c_out; ++co)
        for (std::int64_t oh = 0; oh < s.oh; ++oh)
          for (std::int64_t ow = 0; ow < s.ow; ++ow)
            for (std::int64_t ci = 0; ci < cig(); ++ci)
              for (std::int64_t kh = 0; kh < s.window.kh; ++kh)
                for (std::int64_t kw = 0; kw < s.window.kw; ++kw) {
                  const auto ih = in_row(s.window, oh, kh, true), iw = in_row(s.window, ow, kw, false);
                  if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) {
                    continue;
                  }
                  const auto c = co / cog() * cig() + ci;
                  f(((n * s.c_out + co) * s.oh + oh) * s.ow + ow, ((n * s.c_in + c) * s.h + ih) * s.w + iw,
                    ((co * cig() + ci) * s.window.kh + kh) * s.window.kw + kw);
                }
  }
};

class CnnKernels : public ::testing::Test {
protected:
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
};

TEST_F(CnnKernels, ConvolutionMatchesTheDefinition) {
  for (const std::int64_t groups : {1, 2}) {
    ConvShape s;
    s.n = 2;
    s.c_in = 4;
    s.c_out = 6;
    s.groups = groups;
    s.h = 9;
    s.w = 7;
    s.window = {3, 2, 2, 1, 2, 1, 2, 1, 1, 0}; // 3x2 kernel, stride 2x1, dilation 2x1, pads t2 l1 b1 r0
    s.oh = (s.h + 2 + 1 - 5) / 2 + 1;
    s.ow = (s.w + 1 + 0 - 2) / 1 + 1;
    const auto nx = static_cast<std::size_t>(s.n * s.c_in * s.h * s.w);
    const auto nw = static_cast<std::size_t>(s.c_out * (s.c_in / groups) * 3 * 2);
    const auto ny = static_cast<std::size_t>(s.n * s.c_out * s.oh * s.ow);
    const auto x = random_values(nx, 1), w = random_values(nw, 2), b = random_values(6, 3), dy = random_values(ny, 4);
    std::vector<float> y_ref(ny), dx_ref(nx, 0.F), dw_ref(nw, 0.F), db_ref(6, 0.F);
    for (std::size_t i = 0; i < ny; ++i) {
      y_ref[i] = b[i / static_cast<std::size_t>(s.oh * s.ow) % 6];
      db_ref[i / static_cast<std::size_t>(s.oh * s.ow) % 6] += dy[i];
    }
    NaiveConv{s}.each([&](std::int64_t yi, std::int64_t xi, std::int64_t wi) {
      const auto yu = static_cast<std::size_t>(yi), xu = static_cast<std::size_t>(xi),
                 wu = static_cast<std::size_t>(wi);
      y_ref[yu] += x[xu] * w[wu];
      dx_ref[xu] += dy[yu] * w[wu];
      dw_ref[wu] += dy[yu] * x[xu];
    });
    std::vector<float> y(ny), dx(nx), dw(nw), db(6);
    backend->conv_forward(s, x.data(), w.data(), b.data(), y.data());
    backend->conv_backward_data(s, w.data(), dy.data(), dx.data());
    backend->conv_backward_weights(s, x.data(), dy.data(), dw.data(), db.data());
    expect_near(y, y_ref, 1e-5F);
    expect_near(dx, dx_ref, 1e-5F);
    expect_near(dw, dw_ref, 1e-5F);
    expect_near(db, db_ref, 1e-5F);
  }
}

TEST_F(CnnKernels, PoolingMatchesTheDefinition) {
  PoolShape s;
  s.n = 2;
  s.c = 3;
  s.h = 7;
  s.w = 6;
  s.window = {3, 2, 2, 2, 1, 1, 1, 0, 2, 1}; // 3x2 window, stride 2, pads t1 l0 b2 r1
  s.oh = (s.h + 1 + 2 - 3) / 2 + 1;
  s.ow = (s.w + 0 + 1 - 2) / 2 + 1;
  const auto nx = static_cast<std::size_t>(s.n * s.c * s.h * s.w),
             ny = static_cast<std::size_t>(s.n * s.c * s.oh * s.ow);
  const auto x = random_values(nx, 5), dy = random_values(ny, 6);
  for (const Pool kind : {Pool::max, Pool::average_include_padding, Pool::average_exclude_padding}) {
    std::vector<float> y_ref(ny), dx_ref(nx, 0.F);
    for (std::int64_t p = 0; p < s.n * s.c; ++p)
      for (std::int64_t oh = 0; oh < s.oh; ++oh)
        for (std::int64_t ow = 0; ow < s.ow; ++ow) {
          const auto yi = static_cast<std::size_t>((p * s.oh + oh) * s.ow + ow);
          float best = -std::numeric_limits<float>::infinity(), sum = 0;
          std::size_t arg = 0;
          std::int64_t inside = 0, window = 0;
          for (std::int64_t kh = 0; kh < s.window.kh; ++kh)
            for (std::int64_t kw = 0; kw < s.window.kw; ++kw) {
              const auto ih = in_row(s.window, oh, kh, true), iw = in_row(s.window, ow, kw, false);
              ++window; // with padding counted, every position of the window

              if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) {
                continue;
              }
              const auto xi = static_cast<std::size_t>((p * s.h + ih) * s.w + iw);
              ++inside;
              sum += x[xi];
              if (x[xi] > best) {
                best = x[xi];
                arg = xi;
              }
            }
          if (kind == Pool::max) {
            y_ref[yi] = best;
            dx_ref[arg] += dy[yi];
            continue;
          }
          const auto divisor = static_cast<float>(kind == Pool::average_include_padding ? window : inside);
          y_ref[yi] = sum / divisor;
          for (std::int64_t kh = 0; kh < s.window.kh; ++kh)
            for (std::int64_t kw = 0; kw < s.window.kw; ++kw) {
              const auto ih = in_row(s.window, oh, kh, true), iw = in_row(s.window, ow, kw, false);
              if (ih >= 0 && ih < s.h && iw >= 0 && iw < s.w) {
                dx_ref[static_cast<std::size_t>((p * s.h + ih) * s.w + iw)] += dy[yi] / divisor;
              }
            }
        }
    std::vector<float> y(ny), dx(nx);
    backend->pool_forward(kind, s, x.data(), y.data());
    backend->pool_backward(kind, s, x.data(), dy.data(), dx.data());
    expect_near(y, y_ref, 1e-6F);
    expect_near(dx, dx_ref, 1e-6F);
  }
}

// Batch norm of the whole batch, and of its two halves with statistics summed across them as
// op_kernels_cnn.cpp does under a batch split: the same outputs and gradients.
TEST_F(CnnKernels, BatchNormOfHalvesWithSummedStatisticsIsTheWholeBatch) {
  const BatchNormShape whole{4, 3, 10, 1e-5F};
  const auto n = static_cast<std::size_t>(4 * 3 * 10), half = n / 2;
  const auto x = random_values(n, 7), dy = random_values(n, 8), scale = random_values(3, 9),
             shift = random_values(3, 10);
  std::vector<float> y(n), dx(n), mean(3), var(3), ds(3), db(3);
  backend->batch_norm_forward(whole, x.data(), scale.data(), shift.data(), mean.data(), var.data(), false, y.data());
  backend->batch_norm_backward(whole, x.data(), scale.data(), mean.data(), var.data(), dy.data(), false, dx.data(),
                               ds.data(), db.data());
  // The definition: mean, population variance, and dx = g/s (dy - mean(dy) - xhat mean(dy xhat)).
  for (std::size_t c = 0; c < 3; ++c) {
    double m = 0, v = 0, sdy = 0, sdyx = 0;
    const auto at = [&](std::size_t b, std::size_t i) { return (b * 3 + c) * 10 + i; };
    for (std::size_t b = 0; b < 4; ++b)
      for (std::size_t i = 0; i < 10; ++i)
        m += x[at(b, i)] / 40.0;
    for (std::size_t b = 0; b < 4; ++b)
      for (std::size_t i = 0; i < 10; ++i)
        v += (x[at(b, i)] - m) * (x[at(b, i)] - m) / 40.0;
    const double inv = 1.0 / std::sqrt(v + 1e-5);
    for (std::size_t b = 0; b < 4; ++b)
      for (std::size_t i = 0; i < 10; ++i) {
        sdy += dy[at(b, i)];
        sdyx += dy[at(b, i)] * (x[at(b, i)] - m) * inv;
        EXPECT_NEAR(y[at(b, i)], (x[at(b, i)] - m) * inv * scale[c] + shift[c], 1e-5);
      }
    EXPECT_NEAR(mean[c], m, 1e-6);
    EXPECT_NEAR(var[c], v, 1e-6);
    EXPECT_NEAR(ds[c], sdyx, 1e-4);
    EXPECT_NEAR(db[c], sdy, 1e-5);
    for (std::size_t b = 0; b < 4; ++b)
      for (std::size_t i = 0; i < 10; ++i) {
        const double xhat = (x[at(b, i)] - m) * inv;
        EXPECT_NEAR(dx[at(b, i)], scale[c] * inv * (dy[at(b, i)] - sdy / 40 - xhat * sdyx / 40), 1e-4);
      }
  }

  // Halves: local statistics first, summed as (count x mean, count x mean of squares).
  const BatchNormShape part{2, 3, 10, 1e-5F};
  std::vector<float> sums(6, 0.F);
  for (std::size_t h = 0; h < 2; ++h) {
    std::vector<float> yh(half), m(3), v(3);
    backend->batch_norm_forward(part, x.data() + h * half, scale.data(), shift.data(), m.data(), v.data(), false,
                                yh.data());
    for (std::size_t c = 0; c < 3; ++c) {
      sums[c] += 20 * m[c];
      sums[3 + c] += 20 * (v[c] + m[c] * m[c]);
    }
  }
  std::vector<float> gm(3), gv(3);
  for (std::size_t c = 0; c < 3; ++c) {
    gm[c] = sums[c] / 40;
    gv[c] = sums[3 + c] / 40 - gm[c] * gm[c];
  }
  std::vector<float> y2(n), dx2(n), totals(6, 0.F);
  std::vector<std::vector<float>> dsh(2, std::vector<float>(3)), dbh(2, std::vector<float>(3));
  for (std::size_t h = 0; h < 2; ++h) {
    backend->batch_norm_forward(part, x.data() + h * half, scale.data(), shift.data(), gm.data(), gv.data(), true,
                                y2.data() + h * half);
    backend->batch_norm_backward(part, x.data() + h * half, scale.data(), gm.data(), gv.data(), dy.data() + h * half,
                                 true, dx2.data() + h * half, dsh[h].data(), dbh[h].data());
    for (std::size_t c = 0; c < 3; ++c) {
      totals[c] += dsh[h][c];
      totals[3 + c] += dbh[h][c];
    }
  }
  for (std::size_t h = 0; h < 2; ++h) {
    backend->batch_norm_backward_statistics(part, 40, x.data() + h * half, scale.data(), gm.data(), gv.data(),
                                            totals.data(), totals.data() + 3, dx2.data() + h * half);
  }
  expect_near(y2, y, 1e-5F);
  expect_near(dx2, dx, 1e-5F);
  for (std::size_t c = 0; c < 3; ++c) {
    EXPECT_NEAR(totals[c], ds[c], 1e-5);
    EXPECT_NEAR(totals[3 + c], db[c], 1e-5);
  }
}

} // namespace
} // namespace partita::runtime
