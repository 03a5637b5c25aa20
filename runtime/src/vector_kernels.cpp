#include "vector_kernels.h"

#include "vector_math.h"

#include <cmath>
#include <cstddef>
#include <vector>

// GCC (not clang) on x86-64: one clone of each loop per instruction set, dispatched by ifunc.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PARTITA_VECTOR_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
#else
#define PARTITA_VECTOR_CLONES
#endif

namespace partita::runtime::vector_kernels {

PARTITA_VECTOR_CLONES void row_moments(std::int64_t rows, std::int64_t norm, const float* x, float* mean,
                                       float* variance) {
#pragma omp parallel for
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * norm;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t k = 0; k < norm; ++k) {
      sum += xr[k];
    }
    const float m = sum / static_cast<float>(norm);
    // Two passes over the row (it is in cache for the second): the squares of the deviations, not
    // the difference of two large sums.
    float squares = 0;
#pragma omp simd reduction(+ : squares)
    for (std::int64_t k = 0; k < norm; ++k) {
      const float d = xr[k] - m;
      squares += d * d;
    }
    mean[r] = m;
    variance[r] = squares / static_cast<float>(norm);
  }
}

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

PARTITA_VECTOR_CLONES void softmax_backward(std::int64_t outer, std::int64_t length, std::int64_t inner, const float* y,
                                            const float* dy, float* dx) {
  if (inner == 1) { // the axis innermost: one dot product a row
#pragma omp parallel for
    for (std::int64_t o = 0; o < outer; ++o) {
      const float* yo = y + o * length;
      const float* dyo = dy + o * length;
      float* dxo = dx + o * length;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (std::int64_t k = 0; k < length; ++k) {
        dot += yo[k] * dyo[k];
      }
#pragma omp simd
      for (std::int64_t k = 0; k < length; ++k) {
        dxo[k] = yo[k] * (dyo[k] - dot);
      }
    }
    return;
  }
#pragma omp parallel for
  for (std::int64_t o = 0; o < outer; ++o) {
    const std::int64_t base = o * length * inner;
    std::vector<float> dot(static_cast<std::size_t>(inner), 0.F); // per position along the inner dims
    for (std::int64_t k = 0; k < length; ++k) {
      const std::int64_t at = base + k * inner;
#pragma omp simd
      for (std::int64_t i = 0; i < inner; ++i) {
        dot[static_cast<std::size_t>(i)] += y[at + i] * dy[at + i];
      }
    }
    for (std::int64_t k = 0; k < length; ++k) {
      const std::int64_t at = base + k * inner;
#pragma omp simd
      for (std::int64_t i = 0; i < inner; ++i) {
        dx[at + i] = y[at + i] * (dy[at + i] - dot[static_cast<std::size_t>(i)]);
      }
    }
  }
}

PARTITA_VECTOR_CLONES void sgd_update(std::int64_t n, float learning_rate, const float* gradient, float* weights) {
#pragma omp parallel for simd
  for (std::int64_t i = 0; i < n; ++i) {
    weights[i] -= learning_rate * gradient[i];
  }
}

PARTITA_VECTOR_CLONES void momentum_update(std::int64_t n, float learning_rate, float momentum, const float* gradient,
                                           float* velocity, float* weights) {
#pragma omp parallel for simd
  for (std::int64_t i = 0; i < n; ++i) {
    velocity[i] = momentum * velocity[i] + gradient[i];
    weights[i] -= learning_rate * velocity[i];
  }
}

PARTITA_VECTOR_CLONES void adam_update(std::int64_t n, float learning_rate, float beta1, float beta2, float epsilon,
                                       float first, float second, const float* gradient, float* m, float* v,
                                       float* weights) {
#pragma omp parallel for simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = gradient[i];
    m[i] = beta1 * m[i] + (1.F - beta1) * g;
    v[i] = beta2 * v[i] + (1.F - beta2) * g * g;
    weights[i] -= learning_rate * (m[i] / first) / (std::sqrt(v[i] / second) + epsilon);
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
