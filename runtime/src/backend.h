#pragma once

// The kernels partita-run needs, behind one small interface, on dense row-major fp32 buffers.
// The CPU backend (oneDNN) is the one implementation today. A CUDA backend (cuBLAS/cuDNN
// kernels, NCCL collectives bootstrapped over MPI, CUDA events for timing) is planned for issue 5's
// next part: it implements this interface and is picked at run time when a GPU is present.

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace partita::runtime {

using Dims = std::vector<std::int64_t>;

enum class Eltwise : std::uint8_t { relu, tanh, sigmoid, gelu, erf, exp, sin, cos };
enum class Binary : std::uint8_t { add, sub, mul, div };

struct MatmulShape {
  std::int64_t batch = 1, m = 1, n = 1, k = 1;
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // C[b] = op(A[b]) * op(B[b]) for every batch b; A is [m, k] (stored [k, m] when trans_a), B is
  // [k, n] (stored [n, k] when trans_b), C is [m, n].
  virtual void matmul(const MatmulShape& s, const float* a, bool trans_a, const float* b, bool trans_b, float* c) = 0;

  virtual void eltwise_forward(Eltwise kind, std::int64_t n, const float* x, float* y) = 0;
  // dx from the forward input x.
  virtual void eltwise_backward(Eltwise kind, std::int64_t n, const float* x, const float* dy, float* dx) = 0;

  // c = a (op) b with numpy broadcasting; all three have the same rank, a and b have 1 where they
  // broadcast.
  virtual void binary(Binary kind, const Dims& a_dims, const float* a, const Dims& b_dims, const float* b,
                      const Dims& c_dims, float* c) = 0;
  // dst = src summed over the dims where dst has 1 and src does not (same rank).
  virtual void reduce_sum(const Dims& src_dims, const float* src, const Dims& dst_dims, float* dst) = 0;

  virtual void softmax_forward(const Dims& dims, int axis, const float* x, float* y) = 0;
  // dx from the forward output y.
  virtual void softmax_backward(const Dims& dims, int axis, const float* y, const float* dy, float* dx) = 0;

  // Layer normalization over the last `norm` elements of every row of x ([rows, norm]):
  // y = (x - mean) / sqrt(var + epsilon) * scale + shift; scale and shift have `norm` elements.
  // mean and inv_std (rows elements each) are written when not nullptr.
  virtual void layer_norm_forward(std::int64_t rows, std::int64_t norm, float epsilon, const float* x,
                                  const float* scale, const float* shift, float* y, float* mean, float* inv_std) = 0;
  // dx, and d_scale / d_shift (summed over this shard's rows) when not nullptr.
  virtual void layer_norm_backward(std::int64_t rows, std::int64_t norm, float epsilon, const float* x,
                                   const float* scale, const float* dy, float* dx, float* d_scale, float* d_shift) = 0;

  // Plain SGD: weights -= learning_rate * gradient, over n elements.
  virtual void sgd_update(std::int64_t n, float learning_rate, const float* gradient, float* weights) = 0;

  // The stand-in for an op without a kernel: reads and writes `bytes` bytes of memory.
  virtual void memory_bound(std::int64_t bytes) = 0;
};

// oneDNN on the CPU, `threads` OpenMP threads per rank.
std::unique_ptr<Backend> make_cpu_backend(int threads);

} // namespace partita::runtime
