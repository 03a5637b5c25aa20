#pragma once

// The CUDA backend's own kernels (cuda_kernels.cu), for what no cuBLAS or cuDNN call does as
// ONNX means it: element-wise ops and their derivatives, broadcasting binary ops, sums over dims,
// layer normalization, batch-norm statistics and the gradient through them, zero padding, 2-D
// pooling windows cuDNN cannot express (asymmetric pads, dilation), the transposes around cuDNN's
// recurrent layers, and the data movement of an iteration (strided copies, scales, fills, gathers,
// comparisons and Where). Every launch goes on `stream` and returns at once; launch errors are
// thrown as partita::Error.

#include "kernel_shapes.h"
#include "rounding.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace partita::runtime::cuda {

inline constexpr int max_rank = 8;

// Row-major extents and, per input, the stride of each output dim in that input (0 where it
// broadcasts).
struct Broadcast {
  int rank = 0;
  std::int64_t out[max_rank] = {};
  std::int64_t a_stride[max_rank] = {};
  std::int64_t b_stride[max_rank] = {};
};

// Three inputs broadcast to one output: Where's condition and its two sources (c unused for a
// comparison).
struct Broadcast3 {
  int rank = 0;
  std::int64_t out[max_rank] = {};
  std::int64_t a_stride[max_rank] = {};
  std::int64_t b_stride[max_rank] = {};
  std::int64_t c_stride[max_rank] = {};
};

// The Backend's data movement (backend.h): a strided box copy (or add), y = a * x, a fill, an
// embedding's gather and its scatter-add (atomic adds: the order of a row's sums may differ from
// run to run), comparisons and Where.
void copy(cudaStream_t stream, const StridedCopy& c, const float* src, float* dst, bool accumulate);
void scale(cudaStream_t stream, std::int64_t n, float a, const float* x, float* y);
void fill(cudaStream_t stream, std::int64_t n, float value, float* y);
// y = x rounded to the format (rounding.h); y may be x. flag[0] = 1 where any of x is not finite.
void round_into(cudaStream_t stream, Rounding r, std::int64_t n, const float* x, float* y);
void flag_nonfinite(cudaStream_t stream, std::int64_t n, const float* x, float* flag);
void gather(cudaStream_t stream, const GatherShape& s, const float* data, const float* indices, float* y);
void gather_backward(cudaStream_t stream, const GatherShape& s, const float* indices, const float* dy, float* d_data);
void select(cudaStream_t stream, Select kind, const Broadcast3& shape, const float* a, const float* b, const float* c,
            float* y);

void eltwise_forward(cudaStream_t stream, Eltwise kind, std::int64_t n, const float* x, float* y);
void eltwise_backward(cudaStream_t stream, Eltwise kind, std::int64_t n, const float* x, const float* dy, float* dx);
void binary(cudaStream_t stream, Binary kind, const Broadcast& shape, const float* a, const float* b, float* c);
// dst = src summed over the dims where dst_dims is 1 and src_dims is not (same rank <= max_rank).
void reduce_sum(cudaStream_t stream, const Dims& src_dims, const float* src, const Dims& dst_dims, float* dst);

// Softmax over the last dim of [rows, norm] (forward from x; backward from the output y).
void softmax_rows_forward(cudaStream_t stream, std::int64_t rows, std::int64_t norm, const float* x, float* y);
void softmax_rows_backward(cudaStream_t stream, std::int64_t rows, std::int64_t norm, const float* y, const float* dy,
                           float* dx);
void layer_norm_forward(cudaStream_t stream, std::int64_t rows, std::int64_t norm, float epsilon, const float* x,
                        const float* scale, const float* shift, float* y, float* mean, float* inv_std);
// dx (when not nullptr) and d_scale / d_shift (when not nullptr); `scratch` holds 2 * rows floats.
void layer_norm_backward(cudaStream_t stream, std::int64_t rows, std::int64_t norm, float epsilon, const float* x,
                         const float* scale, const float* dy, float* dx, float* d_scale, float* d_shift,
                         float* scratch);

// Per channel of X [n, c, spatial]: mean and population variance.
void batch_norm_statistics(cudaStream_t stream, const BatchNormShape& s, const float* x, float* mean, float* variance);
// With given statistics: d_scale = sum(dy * xhat), d_shift = sum(dy) per channel, and (when dx is
// not nullptr) dx = dy * scale / sigma.
void batch_norm_backward_given(cudaStream_t stream, const BatchNormShape& s, const float* x, const float* scale,
                               const float* mean, const float* variance, const float* dy, float* dx, float* d_scale,
                               float* d_shift);
// dx -= scale / sigma * (d_shift + xhat * d_scale) / count.
void batch_norm_backward_statistics(cudaStream_t stream, const BatchNormShape& s, std::int64_t count, const float* x,
                                    const float* scale, const float* mean, const float* variance, const float* d_scale,
                                    const float* d_shift, float* dx);

// planes images [h, w] into [h + top + bottom, w + left + right], the border filled with `value`.
void pad2d(cudaStream_t stream, std::int64_t planes, std::int64_t h, std::int64_t w, std::int64_t top,
           std::int64_t left, std::int64_t bottom, std::int64_t right, float value, const float* x, float* padded);
// The inverse: the [h, w] interior of each padded plane.
void crop2d(cudaStream_t stream, std::int64_t planes, std::int64_t h, std::int64_t w, std::int64_t top,
            std::int64_t left, std::int64_t bottom, std::int64_t right, const float* padded, float* x);

// out[0, n) = value (cuDNN's sequence lengths, which it reads on the device).
void fill(cudaStream_t stream, std::int64_t n, std::int32_t value, std::int32_t* out);
// Time-major sequences [seq, a, b, width] into [seq, b, a, width] (the two middle dims swapped),
// the time axis reversed when `reverse`: a recurrent layer's Y between cuDNN's layout and ONNX's,
// and X read from its last step.
void sequence_transpose(cudaStream_t stream, std::int64_t seq, std::int64_t a, std::int64_t b, std::int64_t width,
                        bool reverse, const float* from, float* to);

// Direct 2-D pooling over any window (dx is zeroed and accumulated by the backward pass).
void pool_forward(cudaStream_t stream, Pool kind, const PoolShape& s, const float* x, float* y);
void pool_backward(cudaStream_t stream, Pool kind, const PoolShape& s, const float* x, const float* dy, float* dx);

// The optimizer steps (backend.h's formulas): one fused element-wise kernel each. Adam takes its
// bias corrections 1 - beta^step from the caller.
void momentum_update(cudaStream_t stream, std::int64_t n, float learning_rate, float momentum, const float* gradient,
                     float* velocity, float* weights);
void adam_update(cudaStream_t stream, std::int64_t n, float learning_rate, float beta1, float beta2, float epsilon,
                 float correction1, float correction2, const float* gradient, float* m, float* v, float* weights);

} // namespace partita::runtime::cuda
