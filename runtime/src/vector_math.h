#pragma once

// exp and erf in float as branch-free arithmetic, so that a loop over them vectorizes (glibc's
// expf and erff are scalar calls: an Erf layer ran at a few ns an element). The loops live in
// vector_kernels.cpp, compiled with -fno-trapping-math: without it GCC keeps the float selects
// as branches and the loop scalar (7 ns an element for erf; 0.4 with AVX-512). Accuracy: exp within
// about 2 ulp over its float range; erf within 3e-7 absolute and 1e-6 relative (a series near 0,
// Abramowitz & Stegun 7.1.26 with this exp beyond), below what --verify and the kernel tests tolerate.

#include <bit>
#include <cmath>
#include <cstdint>

namespace partita::runtime::vmath {

// e^x: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by its degree-6 Taylor polynomial (error below
// 1e-8 relative there), 2^n put in the exponent bits. Clamped to [e^-87.3, e^88] (normal floats).
inline float exp(float x) {
  constexpr float log2e = 1.44269504088896341F;
  constexpr float ln2_hi = 0.693145751953125F; // ln 2 split so that n * ln2_hi is exact
  constexpr float ln2_lo = 1.428606765330187e-06F;
  x = x < -87.3F ? -87.3F : (x > 88.F ? 88.F : x);
  const float n = static_cast<float>(static_cast<int>(x * log2e + std::copysign(0.5F, x)));
  const float r = (x - n * ln2_hi) - n * ln2_lo;
  float p = 1.F / 720;
  p = p * r + 1.F / 120;
  p = p * r + 1.F / 24;
  p = p * r + 1.F / 6;
  p = p * r + 0.5F;
  p = p * r + 1.F;
  p = p * r + 1.F;
  const auto bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

// erf(x): below |x| = 0.5 its Taylor series to x^13 (1 - q would cancel there), above it
// 1 - (a1 t + ... + a5 t^5) e^(-x^2) with t = 1 / (1 + p |x|); odd in x. Both are computed and one
// is selected by a bit mask, so that the loop stays branch-free.
inline float erf(float x) {
  const float a = std::fabs(x);
  const float x2 = x * x;
  float s = 1.F / 9360;
  s = s * x2 - 1.F / 1320;
  s = s * x2 + 1.F / 216;
  s = s * x2 - 1.F / 42;
  s = s * x2 + 1.F / 10;
  s = s * x2 - 1.F / 3;
  s = s * x2 + 1.F;
  const float series = 1.1283791670955126F * x * s;
  const float t = 1.F / (1.F + 0.3275911F * a);
  float q = 1.061405429F;
  q = q * t - 1.453152027F;
  q = q * t + 1.421413741F;
  q = q * t - 0.284496736F;
  q = q * t + 0.254829592F;
  const float y = std::copysign(1.F - q * t * vmath::exp(-x2), x);
  const auto near0 = static_cast<std::uint32_t>(-static_cast<std::int32_t>(a < 0.5F)); // all ones or none
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(series) & near0) |
                              (std::bit_cast<std::uint32_t>(y) & ~near0));
}

} // namespace partita::runtime::vmath
