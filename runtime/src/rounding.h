#pragma once

// Mixed precision as partita-run computes it: the operands of a matrix product or convolution
// rounded to a narrower format (to nearest, ties to even, as a hardware conversion does) and kept
// in fp32, products accumulated in fp32. One definition, for the CPU backend's loops and the CUDA
// kernels (compiled by nvcc as __host__ __device__ functions), so that both backends round alike.
//
// tf32: 10 mantissa bits, fp32's exponent range. bf16: 7 mantissa bits, fp32's exponent range.
// fp16: 10 mantissa bits, normal numbers from 2^-14 to 65504, subnormals down to 2^-24, and
// everything from 65520 on (what rounds past 65504) infinite.

#include <cstdint>
#include <cstring>
#include <math.h> // NOLINT: fabsf, copysignf, rintf and INFINITY, in host and device code alike

#ifdef __CUDACC__
#define PARTITA_HOST_DEVICE __host__ __device__
#else
#define PARTITA_HOST_DEVICE
#endif

namespace partita::runtime {

enum class Rounding : std::uint8_t { none, tf32, fp16, bf16 };

// x with its lowest `dropped` mantissa bits rounded away (to nearest, ties to even); infinities
// and NaN unchanged, a value past the largest finite one rounds to infinity.
PARTITA_HOST_DEVICE inline float round_mantissa(float x, int dropped) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000U) == 0x7f800000U) {
    return x;
  }
  u += ((1U << (dropped - 1)) - 1U) + ((u >> dropped) & 1U);
  u &= ~((1U << dropped) - 1U);
  std::memcpy(&x, &u, sizeof u);
  return x;
}

PARTITA_HOST_DEVICE inline float round_fp16(float x) {
  const float a = fabsf(x);
  if (!(a < 65520.F)) { // NaN, or past fp16's largest finite value 65504 once rounded
    return a != a ? x : copysignf(INFINITY, x);
  }
  if (a < 6.103515625e-05F) { // below fp16's smallest normal 2^-14: a multiple of 2^-24
    return copysignf(rintf(a * 16777216.F) * 5.9604644775390625e-08F, x);
  }
  return round_mantissa(x, 13);
}

PARTITA_HOST_DEVICE inline float round_to(Rounding r, float x) {
  switch (r) {
  case Rounding::tf32: return round_mantissa(x, 13);
  case Rounding::fp16: return round_fp16(x);
  case Rounding::bf16: return round_mantissa(x, 16);
  case Rounding::none: break;
  }
  return x;
}

} // namespace partita::runtime
