// Mixed precision's rounding (rounding.h) against the formats' definitions, and the CPU backend's
// matrix products and convolutions under it: the same as fp32 kernels on operands rounded first,
// and not the same as fp32 on the operands as they are.

#include "backend.h"
#include "rounding.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace partita::runtime {
namespace {

TEST(Rounding, Bf16KeepsEightSignificantBitsTiesToEven) {
  EXPECT_EQ(round_to(Rounding::bf16, 1.F + 0x1p-8F), 1.F);                      // a tie: to the even 1
  EXPECT_EQ(round_to(Rounding::bf16, 1.F + 0x1p-8F + 0x1p-20F), 1.F + 0x1p-7F); // past the tie: up
  EXPECT_EQ(round_to(Rounding::bf16, 1.F + 3 * 0x1p-8F), 1.F + 0x1p-6F);        // a tie from an odd last bit: up
  EXPECT_EQ(round_to(Rounding::bf16, -3.F), -3.F);
  const float big = round_to(Rounding::bf16, 1e30F); // fp32's exponents kept, the low 16 bits gone
  EXPECT_NEAR(big, 1e30F, 1e30F * 0x1p-8F);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(big) & 0xffffU, 0U);
  EXPECT_TRUE(std::isinf(round_to(Rounding::bf16, std::numeric_limits<float>::max())));
  EXPECT_TRUE(std::isnan(round_to(Rounding::bf16, std::numeric_limits<float>::quiet_NaN())));
}

TEST(Rounding, Fp16HasItsRangeAndSubnormals) {
  EXPECT_EQ(round_to(Rounding::fp16, 1.F + 0x1p-11F), 1.F); // a tie: to even
  EXPECT_EQ(round_to(Rounding::fp16, 1.F + 3 * 0x1p-11F), 1.F + 0x1p-9F);
  EXPECT_EQ(round_to(Rounding::fp16, 65504.F), 65504.F); // the largest finite
  EXPECT_EQ(round_to(Rounding::fp16, 65519.F), 65504.F);
  EXPECT_TRUE(std::isinf(round_to(Rounding::fp16, 65520.F))); // rounds past it
  EXPECT_TRUE(std::isinf(round_to(Rounding::fp16, -1e6F)));
  EXPECT_LT(round_to(Rounding::fp16, -1e6F), 0.F);
  EXPECT_EQ(round_to(Rounding::fp16, 0x1p-24F), 0x1p-24F);            // the smallest subnormal
  EXPECT_EQ(round_to(Rounding::fp16, 0x1p-25F), 0.F);                 // half of it: a tie, to even 0
  EXPECT_EQ(round_to(Rounding::fp16, 3 * 0x1p-25F), 0x1p-23F);        // 1.5 of it: to even 2
  EXPECT_EQ(round_to(Rounding::fp16, 1e-9F), 0.F);                    // underflows
  EXPECT_EQ(round_to(Rounding::fp16, 0x1p-14F + 0x1p-25F), 0x1p-14F); // a normal's 10 bits
}

TEST(Rounding, Tf32KeepsElevenSignificantBitsAndFp32Range) {
  EXPECT_EQ(round_to(Rounding::tf32, 1.F + 0x1p-11F), 1.F);
  EXPECT_EQ(round_to(Rounding::tf32, 1.F + 0x1p-10F), 1.F + 0x1p-10F);
  const float big = round_to(Rounding::tf32, 1e30F);
  EXPECT_NEAR(big, 1e30F, 1e30F * 0x1p-11F);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(big) & 0x1fffU, 0U);
  EXPECT_EQ(round_to(Rounding::none, 1.F + 0x1p-20F), 1.F + 0x1p-20F);
}

std::vector<float> values(std::size_t n, float step) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = 0.3F + step * static_cast<float>(i % 97) - 0.01F * static_cast<float>(i % 13);
  }
  return v;
}

std::vector<float> rounded(Rounding r, std::vector<float> v) {
  for (auto& x : v) {
    x = round_to(r, x);
  }
  return v;
}

TEST(CpuBackend, MixedPrecisionMatmulIsFp32OnRoundedOperands) {
  auto backend = make_cpu_backend(1);
  const MatmulShape s{2, 5, 7, 33};
  const auto a = values(2 * 5 * 33, 0.0123F), b = values(2 * 33 * 7, -0.0071F);
  for (const auto r : {Rounding::tf32, Rounding::fp16, Rounding::bf16}) {
    std::vector<float> mixed(2 * 5 * 7), expected(2 * 5 * 7), plain(2 * 5 * 7);
    backend->set_matrix_rounding(r);
    backend->matmul(s, a.data(), false, b.data(), true, mixed.data());
    backend->set_matrix_rounding(Rounding::none);
    const auto ra = rounded(r, a), rb = rounded(r, b);
    backend->matmul(s, ra.data(), false, rb.data(), true, expected.data());
    backend->matmul(s, a.data(), false, b.data(), true, plain.data());
    EXPECT_EQ(mixed, expected) << static_cast<int>(r);
    EXPECT_NE(mixed, plain) << static_cast<int>(r); // the rounding happened
  }
}

TEST(CpuBackend, MixedPrecisionConvolutionsAreFp32OnRoundedOperands) {
  auto backend = make_cpu_backend(1);
  ConvShape s;
  s.n = 2, s.c_in = 3, s.c_out = 4, s.h = s.w = 6, s.oh = s.ow = 6;
  s.window.kh = s.window.kw = 3;
  s.window.pad_top = s.window.pad_left = s.window.pad_bottom = s.window.pad_right = 1;
  const auto x = values(static_cast<std::size_t>(input_elements(s)), 0.0131F);
  const auto w = values(static_cast<std::size_t>(weight_elements(s)), -0.0173F);
  const auto dy = values(static_cast<std::size_t>(output_elements(s)), 0.0091F);
  const auto r = Rounding::bf16;
  const auto rx = rounded(r, x), rw = rounded(r, w), rdy = rounded(r, dy);
  std::vector<float> y(dy.size()), y_expected(dy.size()), dx(x.size()), dx_expected(x.size()), dw(w.size()),
      dw_expected(w.size());
  backend->set_matrix_rounding(r);
  backend->conv_forward(s, x.data(), w.data(), nullptr, y.data());
  backend->conv_backward_data(s, w.data(), dy.data(), dx.data());
  backend->conv_backward_weights(s, x.data(), dy.data(), dw.data(), nullptr);
  backend->set_matrix_rounding(Rounding::none);
  backend->conv_forward(s, rx.data(), rw.data(), nullptr, y_expected.data());
  backend->conv_backward_data(s, rw.data(), rdy.data(), dx_expected.data());
  backend->conv_backward_weights(s, rx.data(), rdy.data(), dw_expected.data(), nullptr);
  EXPECT_EQ(y, y_expected);
  EXPECT_EQ(dx, dx_expected);
  EXPECT_EQ(dw, dw_expected);
}

TEST(CpuBackend, FlagsNonFiniteValuesAndScopesRestoreTheArithmetic) {
  auto backend = make_cpu_backend(1);
  float flag = 0;
  const std::vector<float> fine{1.F, -2.F, 3e38F};
  backend->flag_nonfinite(3, fine.data(), &flag);
  EXPECT_EQ(flag, 0.F);
  const std::vector<float> bad{1.F, std::numeric_limits<float>::infinity(), 0.F};
  backend->flag_nonfinite(3, bad.data(), &flag);
  EXPECT_EQ(flag, 1.F);
  {
    const MatrixPrecisionScope scope(*backend, Rounding::fp16);
    EXPECT_EQ(backend->matrix_rounding(), Rounding::fp16);
  }
  EXPECT_EQ(backend->matrix_rounding(), Rounding::none);
}

} // namespace
} // namespace partita::runtime
