#include "vector_kernels.h"

#include "vector_math.h"

#include <cmath>

// GCC (not clang) on x86-64: one clone of each loop per instruction set, dispatched by ifunc.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PARTITA_VECTOR_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
#else
#define PARTITA_VECTOR_CLONES
#endif

namespace partita::runtime::vector_kernels {

PARTITA_VECTOR_CLONES void erf_forward(std::int64_t n, const float* x, float* y) {
#pragma omp parallel for simd
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = vmath::erf(x[i]);
  }
}

PARTITA_VECTOR_CLONES void erf_backward(std::int64_t n, const float* x, const float* dy, float* dx) {
  constexpr float two_over_sqrt_pi = 1.1283791670955126F;
#pragma omp parallel for simd
  for (std::int64_t i = 0; i < n; ++i) {
    dx[i] = dy[i] * two_over_sqrt_pi * vmath::exp(-x[i] * x[i]);
  }
}

// sin and cos stay glibc's scalar calls (libmvec's vector versions need -ffast-math).
void sin_forward(std::int64_t n, const float* x, float* y) {
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = std::sin(x[i]);
  }
}

void cos_forward(std::int64_t n, const float* x, float* y) {
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = std::cos(x[i]);
  }
}

void sin_backward(std::int64_t n, const float* x, const float* dy, float* dx) {
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) {
    dx[i] = dy[i] * std::cos(x[i]);
  }
}

void cos_backward(std::int64_t n, const float* x, const float* dy, float* dx) {
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) {
    dx[i] = -dy[i] * std::sin(x[i]);
  }
}

} // namespace partita::runtime::vector_kernels
