#pragma once

// The CPU backend's element-wise loops that oneDNN 2.6 has no primitive for (erf; sin and cos;
// the optimizers' weight updates), in a translation unit of their own: compiled with
// -fno-trapping-math and -fno-math-errno so that GCC turns their float selects into blends and
// their square roots into instructions and vectorizes them, and on x86-64 cloned for AVX-512 and
// AVX2 (the best one picked at load time), since the build targets the baseline x86-64. (Adam's
// update ran scalar at 3.7 ns an element, four times SGD's rate per byte.)

#include <cstdint>

namespace partita::runtime::vector_kernels {

void erf_forward(std::int64_t n, const float* x, float* y);
// dx = dy * 2 / sqrt(pi) * exp(-x^2)
void erf_backward(std::int64_t n, const float* x, const float* dy, float* dx);
void sin_forward(std::int64_t n, const float* x, float* y);
void cos_forward(std::int64_t n, const float* x, float* y);
void sin_backward(std::int64_t n, const float* x, const float* dy, float* dx); // dx = dy cos x
void cos_backward(std::int64_t n, const float* x, const float* dy, float* dx); // dx = -dy sin x

// The softmax's backward pass, y its output: dx = y (dy - the sum over the axis of y dy), the tensor
// seen as [outer, length, inner] around the axis. oneDNN 2.6 has it only as its scalar reference
// implementation where the CPU lacks AVX-512 (7.6 ns an element on an AVX2 EPYC, a dozen times
// what element-wise work of its bytes takes).
void softmax_backward(std::int64_t outer, std::int64_t length, std::int64_t inner, const float* y, const float* dy,
                      float* dx);

// Per row of x ([rows, norm]): the mean and the (population) variance, what layer normalization's
// backward pass reads of its forward pass. oneDNN 2.6 computes them only inside a forward pass that
// also writes y: the backward pass ran a whole forward pass into a scratch y for them, 3.5-4 times
// the forward's time in all.
void row_moments(std::int64_t rows, std::int64_t norm, const float* x, float* mean, float* variance);

// w -= lr g
void sgd_update(std::int64_t n, float learning_rate, const float* gradient, float* weights);
// v = momentum v + g; w -= lr v
void momentum_update(std::int64_t n, float learning_rate, float momentum, const float* gradient, float* velocity,
                     float* weights);
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; w -= lr (m / first) / (sqrt(v / second) + eps), where
// first and second are the bias corrections 1 - b1^t and 1 - b2^t.
void adam_update(std::int64_t n, float learning_rate, float beta1, float beta2, float epsilon, float first,
                 float second, const float* gradient, float* m, float* v, float* weights);

} // namespace partita::runtime::vector_kernels
