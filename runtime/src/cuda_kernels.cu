// The CUDA backend's own kernels (cuda_kernels.h). Grid-stride loops over 64-bit element counts;
// reductions one block per row or channel, summed through shared memory.

#include "cuda_kernels.h"
#include "rounding.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace partita::runtime::cuda {
namespace {

constexpr int block_threads = 256;

unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + block_threads - 1) / block_threads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, 65535));
}

// How `outputs` sums of `summed` elements each are cut so that a large GPU has enough threads:
// chunks of at least 32 summed elements, one thread per chunk and output, about 2^18 threads in all
// (1 chunk when the outputs alone are that many). Returns {chunks, elements per chunk}.
std::pair<std::int64_t, std::int64_t> sum_chunks(std::int64_t outputs, std::int64_t summed) {
  constexpr std::int64_t busy = std::int64_t{1} << 18, least = 32;
  std::int64_t chunks = 1;
  if (outputs > 0 && outputs < busy && summed >= 2 * least) {
    chunks = std::clamp<std::int64_t>(std::min((busy + outputs - 1) / outputs, summed / least), 1, 65535);
  }
  const std::int64_t per_chunk = std::max<std::int64_t>(1, (summed + chunks - 1) / chunks);
  return {(summed + per_chunk - 1) / per_chunk, per_chunk};
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA kernel ") + what + ": " + cudaGetErrorString(e));
  }
}

void check_rank(std::size_t rank, const char* what) {
  if (rank > static_cast<std::size_t>(max_rank)) {
    throw std::runtime_error(std::string(what) + ": tensors of rank " + std::to_string(rank) +
                             " (the CUDA backend's kernels take up to 8 dims)");
  }
}

// Sum over the block's threads; every thread gets the total.
__device__ float block_sum(float v) {
  __shared__ float partial[block_threads];
  __syncthreads(); // the previous call's readers are done with `partial`
  partial[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      partial[threadIdx.x] += partial[threadIdx.x + half];
    }
    __syncthreads();
  }
  return partial[0];
}

__device__ float block_max(float v) {
  __shared__ float partial[block_threads];
  __syncthreads();
  partial[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + half]);
    }
    __syncthreads();
  }
  return partial[0];
}

// Softmax over the last dim, one block per row of `norm` elements: y = exp(x - max) / sum.
__global__ void softmax_rows_forward_kernel(std::int64_t norm, const float* x, float* y) {
  const float* xr = x + blockIdx.x * norm;
  float* yr = y + blockIdx.x * norm;
  float m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < norm; j += blockDim.x) {
    m = fmaxf(m, xr[j]);
  }
  m = block_max(m);
  float s = 0.F;
  for (std::int64_t j = threadIdx.x; j < norm; j += blockDim.x) {
    s += expf(xr[j] - m);
  }
  const float inv = 1.F / block_sum(s);
  for (std::int64_t j = threadIdx.x; j < norm; j += blockDim.x) {
    yr[j] = expf(xr[j] - m) * inv;
  }
}

// dx = y * (dy - sum(dy * y)) over each row.
__global__ void softmax_rows_backward_kernel(std::int64_t norm, const float* y, const float* dy, float* dx) {
  const std::int64_t base = blockIdx.x * norm;
  float d = 0.F;
  for (std::int64_t j = threadIdx.x; j < norm; j += blockDim.x) {
    d += dy[base + j] * y[base + j];
  }
  d = block_sum(d);
  for (std::int64_t j = threadIdx.x; j < norm; j += blockDim.x) {
    dx[base + j] = y[base + j] * (dy[base + j] - d);
  }
}

__device__ float eltwise_value(Eltwise kind, float x) {
  switch (kind) {
  case Eltwise::relu: return x > 0.F ? x : 0.F;
  case Eltwise::tanh: return tanhf(x);
  case Eltwise::sigmoid: return 1.F / (1.F + expf(-x));
  case Eltwise::gelu: return 0.5F * x * (1.F + erff(x * 0.70710678118654752F));
  case Eltwise::erf: return erff(x);
  case Eltwise::exp: return expf(x);
  case Eltwise::sin: return sinf(x);
  case Eltwise::cos: return cosf(x);
  }
  return 0.F;
}

// d f(x) / dx.
__device__ float eltwise_derivative(Eltwise kind, float x) {
  switch (kind) {
  case Eltwise::relu: return x > 0.F ? 1.F : 0.F;
  case Eltwise::tanh: {
    const float t = tanhf(x);
    return 1.F - t * t;
  }
  case Eltwise::sigmoid: {
    const float s = 1.F / (1.F + expf(-x));
    return s * (1.F - s);
  }
  case Eltwise::gelu: // Phi(x) + x * phi(x)
    return 0.5F * (1.F + erff(x * 0.70710678118654752F)) + x * 0.39894228040143268F * expf(-0.5F * x * x);
  case Eltwise::erf: return 1.1283791670955126F * expf(-x * x);
  case Eltwise::exp: return expf(x);
  case Eltwise::sin: return cosf(x);
  case Eltwise::cos: return -sinf(x);
  }
  return 0.F;
}

__global__ void eltwise_forward_kernel(Eltwise kind, std::int64_t n, const float* x, float* y) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    y[i] = eltwise_value(kind, x[i]);
  }
}

__global__ void eltwise_backward_kernel(Eltwise kind, std::int64_t n, const float* x, const float* dy, float* dx) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    dx[i] = dy[i] * eltwise_derivative(kind, x[i]);
  }
}

__device__ inline float apply(Binary kind, float x, float y) {
  switch (kind) {
  case Binary::add: return x + y;
  case Binary::sub: return x - y;
  case Binary::mul: return x * y;
  case Binary::div: return x / y;
  }
  return 0.F;
}

// The general broadcast: each element's coordinates found by division, in the index type U
// (32-bit where the tensors allow: a 64-bit division costs the GPU several times a 32-bit one, and
// with a division and a remainder per dim per element the kernel was bound by them, not by memory).
template <class U>
__global__ void binary_kernel(Binary kind, Broadcast s, U n, const float* a, const float* b, float* c) {
  for (U i = blockIdx.x * U{blockDim.x} + threadIdx.x; i < n; i += U{gridDim.x} * blockDim.x) {
    U rest = i, ia = 0, ib = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const U extent = static_cast<U>(s.out[d]);
      const U coord = rest % extent;
      rest /= extent;
      ia += coord * static_cast<U>(s.a_stride[d]);
      ib += coord * static_cast<U>(s.b_stride[d]);
    }
    c[i] = apply(kind, a[ia], b[ib]);
  }
}

// Both inputs as long as the output (a residual add): no index arithmetic.
__global__ void binary_same_kernel(Binary kind, std::int64_t n, const float* a, const float* b, float* c) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    c[i] = apply(kind, a[i], b[i]);
  }
}

// Dims of extent 1 dropped and neighbours merged where both inputs run on across them alike
// (contiguous in both, broadcast in both): a bias add [b, s, h] + [1, 1, h] becomes
// [b * s, h] + [0, 1], a residual add one dim.
Broadcast merged(const Broadcast& s) {
  Broadcast r;
  for (int d = 0; d < s.rank; ++d) {
    if (s.out[d] == 1) {
      continue;
    }
    if (r.rank > 0) {
      const int last = r.rank - 1;
      if (r.a_stride[last] == s.a_stride[d] * s.out[d] && r.b_stride[last] == s.b_stride[d] * s.out[d]) {
        r.out[last] *= s.out[d];
        r.a_stride[last] = s.a_stride[d];
        r.b_stride[last] = s.b_stride[d];
        continue;
      }
    }
    r.out[r.rank] = s.out[d];
    r.a_stride[r.rank] = s.a_stride[d];
    r.b_stride[r.rank] = s.b_stride[d];
    ++r.rank;
  }
  return r;
}

// The dims of a sum: for each kept dim the source stride of a destination coordinate, and the
// extents and source strides of the summed dims.
struct Reduction {
  int rank = 0, summed = 0;
  std::int64_t dst_extent[max_rank] = {}, dst_stride_in_src[max_rank] = {};
  std::int64_t sum_extent[max_rank] = {}, sum_stride[max_rank] = {};
  std::int64_t count = 1; // elements summed per destination element
};

// Chunk blockIdx.y of every destination element's sum: the summed elements [k0, k1) of it, written
// to dst[blockIdx.y * n + i] (the whole sum when there is one chunk).
// In the index type U (32-bit where the source allows, as binary_kernel).
template <class U> __global__ void reduce_sum_kernel(Reduction r, U n, U per_chunk, const float* src, float* dst) {
  const U count = static_cast<U>(r.count);
  const U k0 = blockIdx.y * per_chunk;
  const U k1 = k0 + per_chunk < count ? k0 + per_chunk : count;
  for (U i = blockIdx.x * U{blockDim.x} + threadIdx.x; i < n; i += U{gridDim.x} * blockDim.x) {
    U rest = i, base = 0;
    for (int d = r.rank - 1; d >= 0; --d) {
      const U extent = static_cast<U>(r.dst_extent[d]);
      base += (rest % extent) * static_cast<U>(r.dst_stride_in_src[d]);
      rest /= extent;
    }
    float sum = 0.F;
    for (U k = k0; k < k1; ++k) {
      U krest = k, off = base;
      for (int d = r.summed - 1; d >= 0; --d) {
        const U extent = static_cast<U>(r.sum_extent[d]);
        off += (krest % extent) * static_cast<U>(r.sum_stride[d]);
        krest /= extent;
      }
      sum += src[off];
    }
    dst[blockIdx.y * n + i] = sum;
  }
}

// dst[i] = the sum of the chunks' partial sums, in chunk order (the same result every run).
__global__ void sum_chunks_kernel(std::int64_t n, std::int64_t chunks, const float* partial, float* dst) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    float sum = 0.F;
    for (std::int64_t c = 0; c < chunks; ++c) {
      sum += partial[c * n + i];
    }
    dst[i] = sum;
  }
}

// One block per row: mean and 1 / sqrt(var + epsilon) of row `row`.
__device__ void row_statistics(const float* x, std::int64_t norm, float epsilon, float& mean, float& inv_std) {
  float s = 0.F;
  for (std::int64_t j = threadIdx.x; j < norm; j += blockDim.x) {
    s += x[j];
  }
  mean = block_sum(s) / static_cast<float>(norm);
  float q = 0.F;
  for (std::int64_t j = threadIdx.x; j < norm; j += blockDim.x) {
    const float d = x[j] - mean;
    q += d * d;
  }
  inv_std = rsqrtf(block_sum(q) / static_cast<float>(norm) + epsilon);
}

__global__ void layer_norm_forward_kernel(std::int64_t norm, float epsilon, const float* x, const float* scale,
                                          const float* shift, float* y, float* mean_out, float* inv_std_out) {
  const std::int64_t row = blockIdx.x;
  const float* xr = x + row * norm;
  float mean = 0.F, inv_std = 0.F;
  row_statistics(xr, norm, epsilon, mean, inv_std);
  for (std::int64_t j = threadIdx.x; j < norm; j += blockDim.x) {
    y[row * norm + j] = (xr[j] - mean) * inv_std * scale[j] + shift[j];
  }
  if (threadIdx.x == 0) {
    if (mean_out != nullptr) {
      mean_out[row] = mean;
    }
    if (inv_std_out != nullptr) {
      inv_std_out[row] = inv_std;
    }
  }
}

__global__ void layer_norm_backward_rows(std::int64_t rows, std::int64_t norm, float epsilon, const float* x,
                                         const float* scale, const float* dy, float* dx, float* stats) {
  const std::int64_t row = blockIdx.x;
  const float* xr = x + row * norm;
  const float* dyr = dy + row * norm;
  float mean = 0.F, inv_std = 0.F;
  row_statistics(xr, norm, epsilon, mean, inv_std);
  float a = 0.F, b = 0.F; // sums of g and g * xhat, g = dy * scale
  for (std::int64_t j = threadIdx.x; j < norm; j += blockDim.x) {
    const float g = dyr[j] * scale[j];
    a += g;
    b += g * (xr[j] - mean) * inv_std;
  }
  a = block_sum(a) / static_cast<float>(norm);
  b = block_sum(b) / static_cast<float>(norm);
  if (dx != nullptr) {
    for (std::int64_t j = threadIdx.x; j < norm; j += blockDim.x) {
      const float xhat = (xr[j] - mean) * inv_std;
      dx[row * norm + j] = inv_std * (dyr[j] * scale[j] - a - xhat * b);
    }
  }
  if (threadIdx.x == 0) {
    stats[row] = mean;
    stats[rows + row] = inv_std;
  }
}

// Rows [blockIdx.y * per_chunk, ...) of every column's sums, into partial[2 * blockIdx.y * norm + j]
// (d_scale's) and partial[(2 * blockIdx.y + 1) * norm + j] (d_shift's).
__global__ void layer_norm_backward_columns(std::int64_t rows, std::int64_t norm, std::int64_t per_chunk,
                                            const float* x, const float* dy, const float* stats, float* partial) {
  const std::int64_t r0 = blockIdx.y * per_chunk;
  const std::int64_t r1 = r0 + per_chunk < rows ? r0 + per_chunk : rows;
  for (std::int64_t j = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; j < norm;
       j += std::int64_t{gridDim.x} * blockDim.x) {
    float ds = 0.F, db = 0.F;
    for (std::int64_t r = r0; r < r1; ++r) {
      const float g = dy[r * norm + j];
      ds += g * (x[r * norm + j] - stats[r]) * stats[rows + r];
      db += g;
    }
    partial[2 * blockIdx.y * norm + j] = ds;
    partial[(2 * blockIdx.y + 1) * norm + j] = db;
  }
}

// The chunks' partial sums of each column, in chunk order.
__global__ void layer_norm_sum_chunks(std::int64_t norm, std::int64_t chunks, const float* partial, float* d_scale,
                                      float* d_shift) {
  for (std::int64_t j = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; j < norm;
       j += std::int64_t{gridDim.x} * blockDim.x) {
    float ds = 0.F, db = 0.F;
    for (std::int64_t c = 0; c < chunks; ++c) {
      ds += partial[2 * c * norm + j];
      db += partial[(2 * c + 1) * norm + j];
    }
    if (d_scale != nullptr) {
      d_scale[j] = ds;
    }
    if (d_shift != nullptr) {
      d_shift[j] = db;
    }
  }
}

// One block per channel of X [n, c, spatial].
__global__ void batch_norm_statistics_kernel(BatchNormShape s, const float* x, float* mean_out, float* variance_out) {
  const std::int64_t ch = blockIdx.x;
  const std::int64_t m = s.n * s.spatial;
  float sum = 0.F;
  for (std::int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    sum += x[((k / s.spatial) * s.c + ch) * s.spatial + k % s.spatial];
  }
  const float mean = block_sum(sum) / static_cast<float>(m);
  float q = 0.F;
  for (std::int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const float d = x[((k / s.spatial) * s.c + ch) * s.spatial + k % s.spatial] - mean;
    q += d * d;
  }
  const float variance = block_sum(q) / static_cast<float>(m);
  if (threadIdx.x == 0) {
    mean_out[ch] = mean;
    variance_out[ch] = variance;
  }
}

__global__ void batch_norm_backward_given_kernel(BatchNormShape s, const float* x, const float* scale,
                                                 const float* mean, const float* variance, const float* dy, float* dx,
                                                 float* d_scale, float* d_shift) {
  const std::int64_t ch = blockIdx.x;
  const std::int64_t m = s.n * s.spatial;
  const float inv_std = rsqrtf(variance[ch] + s.epsilon);
  float sx = 0.F, sd = 0.F;
  for (std::int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const std::int64_t i = ((k / s.spatial) * s.c + ch) * s.spatial + k % s.spatial;
    sx += dy[i] * (x[i] - mean[ch]) * inv_std;
    sd += dy[i];
    if (dx != nullptr) {
      dx[i] = dy[i] * scale[ch] * inv_std;
    }
  }
  sx = block_sum(sx);
  sd = block_sum(sd);
  if (threadIdx.x == 0) {
    d_scale[ch] = sx;
    d_shift[ch] = sd;
  }
}

__global__ void batch_norm_backward_statistics_kernel(BatchNormShape s, float per_count, const float* x,
                                                      const float* scale, const float* mean, const float* variance,
                                                      const float* d_scale, const float* d_shift, float* dx) {
  const std::int64_t n = s.n * s.c * s.spatial;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t ch = (i / s.spatial) % s.c;
    const float inv_std = rsqrtf(variance[ch] + s.epsilon);
    const float xhat = (x[i] - mean[ch]) * inv_std;
    dx[i] -= scale[ch] * inv_std * per_count * (d_shift[ch] + xhat * d_scale[ch]);
  }
}

struct Frame {
  std::int64_t h, w, top, left, ph, pw; // interior extents, its offset, padded extents
};

__global__ void pad2d_kernel(std::int64_t planes, Frame f, float value, const float* x, float* padded) {
  const std::int64_t n = planes * f.ph * f.pw;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t col = i % f.pw, row = (i / f.pw) % f.ph, plane = i / (f.pw * f.ph);
    const std::int64_t r = row - f.top, c = col - f.left;
    padded[i] = r >= 0 && r < f.h && c >= 0 && c < f.w ? x[(plane * f.h + r) * f.w + c] : value;
  }
}

__global__ void fill_kernel(std::int64_t n, std::int32_t value, std::int32_t* out) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    out[i] = value;
  }
}

// Destination [seq, b, a, width] from source [seq, a, b, width], source step seq - 1 - t when
// `reverse`.
__global__ void sequence_transpose_kernel(std::int64_t seq, std::int64_t a, std::int64_t b, std::int64_t width,
                                          bool reverse, const float* from, float* to) {
  const std::int64_t n = seq * a * b * width;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t w = i % width, ia = (i / width) % a, ib = (i / (width * a)) % b, t = i / (width * a * b);
    const std::int64_t source_t = reverse ? seq - 1 - t : t;
    to[i] = from[((source_t * a + ia) * b + ib) * width + w];
  }
}

__global__ void crop2d_kernel(std::int64_t planes, Frame f, const float* padded, float* x) {
  const std::int64_t n = planes * f.h * f.w;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t c = i % f.w, r = (i / f.w) % f.h, plane = i / (f.w * f.h);
    x[i] = padded[(plane * f.ph + r + f.top) * f.pw + c + f.left];
  }
}

// The input elements of output element (plane, oy, ox): visits (input offset) for each one in bounds.
template <class Visit>
__device__ void for_window(const PoolShape& s, std::int64_t plane, std::int64_t oy, std::int64_t ox, Visit visit) {
  const Window2d& w = s.window;
  for (std::int64_t ky = 0; ky < w.kh; ++ky) {
    const std::int64_t iy = oy * w.stride_h - w.pad_top + ky * w.dilation_h;
    if (iy < 0 || iy >= s.h) {
      continue;
    }
    for (std::int64_t kx = 0; kx < w.kw; ++kx) {
      const std::int64_t ix = ox * w.stride_w - w.pad_left + kx * w.dilation_w;
      if (ix >= 0 && ix < s.w) {
        visit((plane * s.h + iy) * s.w + ix);
      }
    }
  }
}

__global__ void pool_forward_kernel(Pool kind, PoolShape s, const float* x, float* y) {
  const std::int64_t n = s.n * s.c * s.oh * s.ow;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t ox = i % s.ow, oy = (i / s.ow) % s.oh, plane = i / (s.ow * s.oh);
    float best = -INFINITY, sum = 0.F;
    std::int64_t count = 0;
    for_window(s, plane, oy, ox, [&](std::int64_t at) {
      best = fmaxf(best, x[at]);
      sum += x[at];
      ++count;
    });
    if (kind == Pool::max) {
      y[i] = count > 0 ? best : 0.F;
    } else if (kind == Pool::average_include_padding) {
      y[i] = sum / static_cast<float>(s.window.kh * s.window.kw);
    } else {
      y[i] = count > 0 ? sum / static_cast<float>(count) : 0.F;
    }
  }
}

__global__ void pool_backward_kernel(Pool kind, PoolShape s, const float* x, const float* dy, float* dx) {
  const std::int64_t n = s.n * s.c * s.oh * s.ow;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t ox = i % s.ow, oy = (i / s.ow) % s.oh, plane = i / (s.ow * s.oh);
    if (kind == Pool::max) { // the first arg-max takes the gradient
      float best = -INFINITY;
      std::int64_t arg = -1;
      for_window(s, plane, oy, ox, [&](std::int64_t at) {
        if (arg < 0 || x[at] > best) {
          best = x[at];
          arg = at;
        }
      });
      if (arg >= 0) {
        atomicAdd(dx + arg, dy[i]);
      }
      continue;
    }
    std::int64_t count = 0;
    for_window(s, plane, oy, ox, [&](std::int64_t) { ++count; });
    const float divisor = kind == Pool::average_include_padding ? static_cast<float>(s.window.kh * s.window.kw)
                                                                : static_cast<float>(count);
    if (count > 0) {
      const float g = dy[i] / divisor;
      for_window(s, plane, oy, ox, [&](std::int64_t at) { atomicAdd(dx + at, g); });
    }
  }
}

__global__ void momentum_kernel(std::int64_t n, float learning_rate, float momentum, const float* gradient,
                                float* velocity, float* weights) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const float u = momentum * velocity[i] + gradient[i];
    velocity[i] = u;
    weights[i] -= learning_rate * u;
  }
}

__global__ void adam_kernel(std::int64_t n, float learning_rate, float beta1, float beta2, float epsilon,
                            float correction1, float correction2, const float* gradient, float* m, float* v,
                            float* weights) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const float g = gradient[i];
    const float mi = beta1 * m[i] + (1.F - beta1) * g;
    const float vi = beta2 * v[i] + (1.F - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    weights[i] -= learning_rate * (mi / correction1) / (sqrtf(vi / correction2) + epsilon);
  }
}

__global__ void copy_kernel(StridedCopy c, std::int64_t n, const float* src, float* dst, bool accumulate) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    std::int64_t rest = i, from = 0, to = 0;
    for (int d = c.rank - 1; d >= 0; --d) {
      const std::int64_t coord = rest % c.extent[d];
      rest /= c.extent[d];
      from += coord * c.src_stride[d];
      to += coord * c.dst_stride[d];
    }
    dst[to] = accumulate ? dst[to] + src[from] : src[from];
  }
}

__global__ void scale_kernel(std::int64_t n, float a, const float* x, float* y) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    y[i] = x[i] * a;
  }
}

__global__ void round_kernel(Rounding r, std::int64_t n, const float* x, float* y) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    y[i] = round_to(r, x[i]);
  }
}

// Every thread that finds a non-finite value writes the same 1: no atomics needed.
__global__ void flag_nonfinite_kernel(std::int64_t n, const float* x, float* flag) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    if (!isfinite(x[i])) {
      flag[0] = 1;
    }
  }
}

__global__ void fill_kernel(std::int64_t n, float value, float* y) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    y[i] = value;
  }
}

// The held row index j names (relative to the shard's first row), -1 for a row held elsewhere and
// -2 for an index outside the axis.
__device__ std::int64_t gather_row(const GatherShape& s, const float* indices, std::int64_t j) {
  auto row = static_cast<std::int64_t>(llroundf(indices[j]));
  if (row < 0) {
    row += s.axis_size;
  }
  if (row < 0 || row >= s.axis_size) {
    return -2;
  }
  row -= s.first_row;
  return row >= 0 && row < s.rows ? row : -1;
}

__global__ void gather_kernel(GatherShape s, std::int64_t n, const float* data, const float* indices, float* y) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t in = i % s.inner, j = (i / s.inner) % s.count, o = i / (s.inner * s.count);
    const std::int64_t row = gather_row(s, indices, j);
    y[i] = row >= 0 ? data[(o * s.rows + row) * s.inner + in] : row == -1 ? 0.F : nanf("");
  }
}

__global__ void gather_backward_kernel(GatherShape s, std::int64_t n, const float* indices, const float* dy,
                                       float* d_data) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t in = i % s.inner, j = (i / s.inner) % s.count, o = i / (s.inner * s.count);
    const std::int64_t row = gather_row(s, indices, j);
    if (row >= 0) {
      atomicAdd(d_data + (o * s.rows + row) * s.inner + in, dy[i]);
    }
  }
}

__global__ void select_kernel(Select kind, Broadcast3 s, std::int64_t n, const float* a, const float* b, const float* c,
                              float* y) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    std::int64_t rest = i, ia = 0, ib = 0, ic = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const std::int64_t coord = rest % s.out[d];
      rest /= s.out[d];
      ia += coord * s.a_stride[d];
      ib += coord * s.b_stride[d];
      ic += coord * s.c_stride[d];
    }
    const float u = a[ia], v = b[ib];
    switch (kind) {
    case Select::greater: y[i] = u > v ? 1.F : 0.F; break;
    case Select::less: y[i] = u < v ? 1.F : 0.F; break;
    case Select::equal: y[i] = u == v ? 1.F : 0.F; break;
    case Select::greater_or_equal: y[i] = u >= v ? 1.F : 0.F; break;
    case Select::less_or_equal: y[i] = u <= v ? 1.F : 0.F; break;
    case Select::where: y[i] = u != 0.F ? v : c[ic]; break;
    }
  }
}

} // namespace

void momentum_update(cudaStream_t stream, std::int64_t n, float learning_rate, float momentum, const float* gradient,
                     float* velocity, float* weights) {
  momentum_kernel<<<grid_for(n), block_threads, 0, stream>>>(n, learning_rate, momentum, gradient, velocity, weights);
  check_launch("momentum_update");
}

void adam_update(cudaStream_t stream, std::int64_t n, float learning_rate, float beta1, float beta2, float epsilon,
                 float correction1, float correction2, const float* gradient, float* m, float* v, float* weights) {
  adam_kernel<<<grid_for(n), block_threads, 0, stream>>>(n, learning_rate, beta1, beta2, epsilon, correction1,
                                                         correction2, gradient, m, v, weights);
  check_launch("adam_update");
}

void eltwise_forward(cudaStream_t stream, Eltwise kind, std::int64_t n, const float* x, float* y) {
  eltwise_forward_kernel<<<grid_for(n), block_threads, 0, stream>>>(kind, n, x, y);
  check_launch("eltwise_forward");
}

void eltwise_backward(cudaStream_t stream, Eltwise kind, std::int64_t n, const float* x, const float* dy, float* dx) {
  eltwise_backward_kernel<<<grid_for(n), block_threads, 0, stream>>>(kind, n, x, dy, dx);
  check_launch("eltwise_backward");
}

void binary(cudaStream_t stream, Binary kind, const Broadcast& given, const float* a, const float* b, float* c) {
  const Broadcast shape = merged(given);
  std::int64_t n = 1, a_span = 1, b_span = 1; // elements, and how far each input's offsets reach
  for (int d = 0; d < shape.rank; ++d) {
    n *= shape.out[d];
    a_span += (shape.out[d] - 1) * shape.a_stride[d];
    b_span += (shape.out[d] - 1) * shape.b_stride[d];
  }
  if (n == 0) {
    return;
  }
  if (shape.rank <= 1 && (shape.rank == 0 || (shape.a_stride[0] == 1 && shape.b_stride[0] == 1))) {
    binary_same_kernel<<<grid_for(n), block_threads, 0, stream>>>(kind, n, a, b, c);
  } else if (std::max({n, a_span, b_span}) < (std::int64_t{1} << 31)) {
    binary_kernel<std::uint32_t>
        <<<grid_for(n), block_threads, 0, stream>>>(kind, shape, static_cast<std::uint32_t>(n), a, b, c);
  } else {
    binary_kernel<std::int64_t><<<grid_for(n), block_threads, 0, stream>>>(kind, shape, n, a, b, c);
  }
  check_launch("binary");
}

void reduce_sum(cudaStream_t stream, const Dims& src_dims, const float* src, const Dims& dst_dims, float* dst) {
  check_rank(src_dims.size(), "reduce_sum");
  Reduction r;
  r.rank = static_cast<int>(src_dims.size());
  std::int64_t stride = 1, n = 1;
  for (int d = r.rank - 1; d >= 0; --d) {
    const auto u = static_cast<std::size_t>(d);
    r.dst_extent[d] = dst_dims[u];
    r.dst_stride_in_src[d] = stride;
    stride *= src_dims[u];
    n *= dst_dims[u];
  }
  // The summed dims, outermost first.
  stride = 1;
  std::int64_t strides[max_rank] = {};
  for (int d = r.rank - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= src_dims[static_cast<std::size_t>(d)];
  }
  for (int d = 0; d < r.rank; ++d) {
    const auto u = static_cast<std::size_t>(d);
    if (dst_dims[u] == 1 && src_dims[u] != 1) {
      // Merged with the summed dim before when the two run on in the source (a bias gradient's
      // batch and sequence dims): one division less per element summed.
      if (r.summed > 0 && r.sum_stride[r.summed - 1] == strides[d] * src_dims[u]) {
        r.sum_extent[r.summed - 1] *= src_dims[u];
        r.sum_stride[r.summed - 1] = strides[d];
      } else {
        r.sum_extent[r.summed] = src_dims[u];
        r.sum_stride[r.summed] = strides[d];
        ++r.summed;
      }
      r.count *= src_dims[u];
    }
  }
  // The kept dims of extent 1 (the summed ones, and any other) take no part in a destination's
  // offset: dropped.
  int kept = 0;
  for (int d = 0; d < r.rank; ++d) {
    if (r.dst_extent[d] != 1) {
      r.dst_extent[kept] = r.dst_extent[d];
      r.dst_stride_in_src[kept] = r.dst_stride_in_src[d];
      ++kept;
    }
  }
  r.rank = kept;
  const bool narrow = stride < (std::int64_t{1} << 31); // the source's elements: every offset below
  // A thread per destination element leaves a GPU idle when there are few of them and each sums
  // many (a bias gradient: 4,096 sums of 512 rows each ran at 2 GB/s on an H100): the summed
  // elements are then cut into chunks, each a thread's, and the chunks' sums added in order.
  const auto [chunks, per_chunk] = sum_chunks(n, r.count);
  if (chunks <= 1) {
    if (narrow) {
      reduce_sum_kernel<std::uint32_t><<<grid_for(n), block_threads, 0, stream>>>(
          r, static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(r.count), src, dst);
    } else {
      reduce_sum_kernel<std::int64_t><<<grid_for(n), block_threads, 0, stream>>>(r, n, r.count, src, dst);
    }
    check_launch("reduce_sum");
    return;
  }
  float* partial = nullptr;
  const cudaError_t e =
      cudaMallocAsync(reinterpret_cast<void**>(&partial), static_cast<std::size_t>(chunks * n) * sizeof(float), stream);
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("cudaMallocAsync (reduce_sum's partial sums): ") + cudaGetErrorString(e));
  }
  const dim3 grid(grid_for(n), static_cast<unsigned>(chunks));
  if (narrow && chunks * n < (std::int64_t{1} << 31)) {
    reduce_sum_kernel<std::uint32_t><<<grid, block_threads, 0, stream>>>(
        r, static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(per_chunk), src, partial);
  } else {
    reduce_sum_kernel<std::int64_t><<<grid, block_threads, 0, stream>>>(r, n, per_chunk, src, partial);
  }
  check_launch("reduce_sum");
  sum_chunks_kernel<<<grid_for(n), block_threads, 0, stream>>>(n, chunks, partial, dst);
  check_launch("reduce_sum (chunks)");
  (void)cudaFreeAsync(partial, stream);
}

void softmax_rows_forward(cudaStream_t stream, std::int64_t rows, std::int64_t norm, const float* x, float* y) {
  for (std::int64_t r0 = 0; r0 < rows;
       r0 += 65535) { // a grid's x dim holds 2^31 - 1 blocks; 65535 per launch is plenty
    const std::int64_t n = std::min<std::int64_t>(65535, rows - r0);
    softmax_rows_forward_kernel<<<static_cast<unsigned>(n), block_threads, 0, stream>>>(norm, x + r0 * norm,
                                                                                        y + r0 * norm);
    check_launch("softmax_forward");
  }
}

void softmax_rows_backward(cudaStream_t stream, std::int64_t rows, std::int64_t norm, const float* y, const float* dy,
                           float* dx) {
  for (std::int64_t r0 = 0; r0 < rows; r0 += 65535) {
    const std::int64_t n = std::min<std::int64_t>(65535, rows - r0);
    softmax_rows_backward_kernel<<<static_cast<unsigned>(n), block_threads, 0, stream>>>(
        norm, y + r0 * norm, dy + r0 * norm, dx + r0 * norm);
    check_launch("softmax_backward");
  }
}

void layer_norm_forward(cudaStream_t stream, std::int64_t rows, std::int64_t norm, float epsilon, const float* x,
                        const float* scale, const float* shift, float* y, float* mean, float* inv_std) {
  if (rows == 0) {
    return;
  }
  layer_norm_forward_kernel<<<static_cast<unsigned>(rows), block_threads, 0, stream>>>(norm, epsilon, x, scale, shift,
                                                                                       y, mean, inv_std);
  check_launch("layer_norm_forward");
}

void layer_norm_backward(cudaStream_t stream, std::int64_t rows, std::int64_t norm, float epsilon, const float* x,
                         const float* scale, const float* dy, float* dx, float* d_scale, float* d_shift,
                         float* scratch) {
  if (rows == 0) {
    return;
  }
  layer_norm_backward_rows<<<static_cast<unsigned>(rows), block_threads, 0, stream>>>(rows, norm, epsilon, x, scale, dy,
                                                                                      dx, scratch);
  check_launch("layer_norm_backward (rows)");
  if (d_scale != nullptr || d_shift != nullptr) {
    // A thread per column summing every row left an H100 nearly idle (GPT-2's 768 columns of 1,024
    // rows: 0.2 ms, 15 times its forward): the rows are cut into chunks, as reduce_sum does.
    const auto [used, per_chunk] = sum_chunks(norm, rows);
    float* partial = nullptr;
    const cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&partial),
                                          static_cast<std::size_t>(2 * used * norm) * sizeof(float), stream);
    if (e != cudaSuccess) {
      throw std::runtime_error(std::string("cudaMallocAsync (layer_norm_backward's partial sums): ") +
                               cudaGetErrorString(e));
    }
    const dim3 grid(grid_for(norm), static_cast<unsigned>(used));
    layer_norm_backward_columns<<<grid, block_threads, 0, stream>>>(rows, norm, per_chunk, x, dy, scratch, partial);
    check_launch("layer_norm_backward (columns)");
    layer_norm_sum_chunks<<<grid_for(norm), block_threads, 0, stream>>>(norm, used, partial, d_scale, d_shift);
    check_launch("layer_norm_backward (column sums)");
    (void)cudaFreeAsync(partial, stream);
  }
}

void batch_norm_statistics(cudaStream_t stream, const BatchNormShape& s, const float* x, float* mean, float* variance) {
  batch_norm_statistics_kernel<<<static_cast<unsigned>(s.c), block_threads, 0, stream>>>(s, x, mean, variance);
  check_launch("batch_norm_statistics");
}

void batch_norm_backward_given(cudaStream_t stream, const BatchNormShape& s, const float* x, const float* scale,
                               const float* mean, const float* variance, const float* dy, float* dx, float* d_scale,
                               float* d_shift) {
  batch_norm_backward_given_kernel<<<static_cast<unsigned>(s.c), block_threads, 0, stream>>>(
      s, x, scale, mean, variance, dy, dx, d_scale, d_shift);
  check_launch("batch_norm_backward (given statistics)");
}

void batch_norm_backward_statistics(cudaStream_t stream, const BatchNormShape& s, std::int64_t count, const float* x,
                                    const float* scale, const float* mean, const float* variance, const float* d_scale,
                                    const float* d_shift, float* dx) {
  batch_norm_backward_statistics_kernel<<<grid_for(s.n * s.c * s.spatial), block_threads, 0, stream>>>(
      s, 1.F / static_cast<float>(count), x, scale, mean, variance, d_scale, d_shift, dx);
  check_launch("batch_norm_backward_statistics");
}

void pad2d(cudaStream_t stream, std::int64_t planes, std::int64_t h, std::int64_t w, std::int64_t top,
           std::int64_t left, std::int64_t bottom, std::int64_t right, float value, const float* x, float* padded) {
  const Frame f{h, w, top, left, h + top + bottom, w + left + right};
  pad2d_kernel<<<grid_for(planes * f.ph * f.pw), block_threads, 0, stream>>>(planes, f, value, x, padded);
  check_launch("pad2d");
}

void crop2d(cudaStream_t stream, std::int64_t planes, std::int64_t h, std::int64_t w, std::int64_t top,
            std::int64_t left, std::int64_t bottom, std::int64_t right, const float* padded, float* x) {
  const Frame f{h, w, top, left, h + top + bottom, w + left + right};
  crop2d_kernel<<<grid_for(planes * h * w), block_threads, 0, stream>>>(planes, f, padded, x);
  check_launch("crop2d");
}

void fill(cudaStream_t stream, std::int64_t n, std::int32_t value, std::int32_t* out) {
  fill_kernel<<<grid_for(n), block_threads, 0, stream>>>(n, value, out);
  check_launch("fill");
}

void sequence_transpose(cudaStream_t stream, std::int64_t seq, std::int64_t a, std::int64_t b, std::int64_t width,
                        bool reverse, const float* from, float* to) {
  sequence_transpose_kernel<<<grid_for(seq * a * b * width), block_threads, 0, stream>>>(seq, a, b, width, reverse,
                                                                                         from, to);
  check_launch("sequence_transpose");
}

void pool_forward(cudaStream_t stream, Pool kind, const PoolShape& s, const float* x, float* y) {
  pool_forward_kernel<<<grid_for(s.n * s.c * s.oh * s.ow), block_threads, 0, stream>>>(kind, s, x, y);
  check_launch("pool_forward");
}

void pool_backward(cudaStream_t stream, Pool kind, const PoolShape& s, const float* x, const float* dy, float* dx) {
  const auto bytes = static_cast<std::size_t>(s.n * s.c * s.h * s.w) * sizeof(float);
  const cudaError_t e = cudaMemsetAsync(dx, 0, bytes, stream);
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("cudaMemsetAsync (pool_backward): ") + cudaGetErrorString(e));
  }
  pool_backward_kernel<<<grid_for(s.n * s.c * s.oh * s.ow), block_threads, 0, stream>>>(kind, s, x, dy, dx);
  check_launch("pool_backward");
}

void copy(cudaStream_t stream, const StridedCopy& c, const float* src, float* dst, bool accumulate) {
  const std::int64_t n = c.elements();
  if (n == 0) {
    return;
  }
  copy_kernel<<<grid_for(n), block_threads, 0, stream>>>(c, n, src, dst, accumulate);
  check_launch("copy");
}

void scale(cudaStream_t stream, std::int64_t n, float a, const float* x, float* y) {
  if (n == 0) {
    return;
  }
  scale_kernel<<<grid_for(n), block_threads, 0, stream>>>(n, a, x, y);
  check_launch("scale");
}

void round_into(cudaStream_t stream, Rounding r, std::int64_t n, const float* x, float* y) {
  if (n == 0) {
    return;
  }
  round_kernel<<<grid_for(n), block_threads, 0, stream>>>(r, n, x, y);
  check_launch("round_into");
}

void flag_nonfinite(cudaStream_t stream, std::int64_t n, const float* x, float* flag) {
  if (n == 0) {
    return;
  }
  flag_nonfinite_kernel<<<grid_for(n), block_threads, 0, stream>>>(n, x, flag);
  check_launch("flag_nonfinite");
}

void fill(cudaStream_t stream, std::int64_t n, float value, float* y) {
  if (n == 0) {
    return;
  }
  fill_kernel<<<grid_for(n), block_threads, 0, stream>>>(n, value, y);
  check_launch("fill");
}

void gather(cudaStream_t stream, const GatherShape& s, const float* data, const float* indices, float* y) {
  const std::int64_t n = s.outer * s.count * s.inner;
  if (n == 0) {
    return;
  }
  gather_kernel<<<grid_for(n), block_threads, 0, stream>>>(s, n, data, indices, y);
  check_launch("gather");
}

void gather_backward(cudaStream_t stream, const GatherShape& s, const float* indices, const float* dy, float* d_data) {
  fill(stream, s.outer * s.rows * s.inner, 0.F, d_data);
  const std::int64_t n = s.outer * s.count * s.inner;
  if (n == 0) {
    return;
  }
  gather_backward_kernel<<<grid_for(n), block_threads, 0, stream>>>(s, n, indices, dy, d_data);
  check_launch("gather backward");
}

void select(cudaStream_t stream, Select kind, const Broadcast3& shape, const float* a, const float* b, const float* c,
            float* y) {
  std::int64_t n = 1;
  for (int d = 0; d < shape.rank; ++d) {
    n *= shape.out[d];
  }
  if (n == 0) {
    return;
  }
  select_kernel<<<grid_for(n), block_threads, 0, stream>>>(kind, shape, n, a, b, c, y);
  check_launch("select");
}

} // namespace partita::runtime::cuda
