#pragma once

// The CPU backend's element-wise loops that oneDNN 2.6 has no primitive for (erf; sin and cos),
// in a translation unit of their own: compiled with -fno-trapping-math so that GCC turns their
// float selects into blends and vectorizes them, and on x86-64 cloned for AVX-512 and AVX2 (the
// best one picked at load time), since the build targets the baseline x86-64.

#include <cstdint>

namespace partita::runtime::vector_kernels {

void erf_forward(std::int64_t n, const float* x, float* y);
// dx = dy * 2 / sqrt(pi) * exp(-x^2)
void erf_backward(std::int64_t n, const float* x, const float* dy, float* dx);
void sin_forward(std::int64_t n, const float* x, float* y);
void cos_forward(std::int64_t n, const float* x, float* y);
void sin_backward(std::int64_t n, const float* x, const float* dy, float* dx); // dx = dy cos x
void cos_backward(std::int64_t n, const float* x, const float* dy, float* dx); // dx = -dy sin x

} // namespace partita::runtime::vector_kernels
