#pragma once

// The kernels partita-run needs, behind one small interface, on dense row-major fp32 buffers that
// come from tensor_memory() (the host's memory, or a GPU backend's device memory), and the
// sum all-reduce, reduce-scatter and all-gather over a group of ranks. Two implementations: the CPU backend (oneDNN
// kernels, MPI collectives), always built, and the CUDA backend (cuBLAS/cuDNN kernels, NCCL collectives bootstrapped
// over MPI), built where the CUDA toolkit, cuDNN and NCCL are found (backends.h picks one at run time).
//
// A GPU's kernels run asynchronously: a caller that reads a result on the host, or takes a
// timestamp, calls synchronize() first.

#include "kernel_shapes.h"
#include "rounding.h"
#include "shard.h"
#include "tensor_memory.h"

#include <mpi.h>

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace partita::runtime {

struct AdamParameters {
  float learning_rate = 1e-3F;
  float beta1 = 0.9F, beta2 = 0.999F;
  float epsilon = 1e-8F;
};

// Adam's bias corrections 1 - beta^step, computed once per step in double (the kernels' shared
// formula, so that every backend divides by the same numbers).
struct AdamCorrection {
  float first = 1, second = 1;
};
inline AdamCorrection adam_correction(const AdamParameters& p, int step) {
  return {static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), step)),
          static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), step))};
}

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Waits until every kernel and collective started so far has finished (nothing to wait for on
  // the CPU, whose calls return when done).
  virtual void synchronize() {}
  // Whether the kernels run on the host and read what the host wrote where it left it (its
  // caches): the CPU backend. The calibration's fresh-read sweep measures only such a backend.
  virtual bool kernels_on_host() const { return true; }
  // Moves `count` floats of tensor memory to where the kernels read them, ahead of their first
  // use; nothing on the backends here (the CPU's memory is the kernels', the CUDA backend's tensors
  // are made on the GPU).
  virtual void prefetch(const float* data, std::int64_t count) { (void)data, (void)count; }
  // Timestamps in the queue of an asynchronous backend (kernels_on_host() false): mark() notes the
  // point the work queued so far has reached and returns its number; mark_times() waits for the
  // queue, then gives the time of every mark since the last call on the host's clock (MPI_Wtime),
  // indexed by number, and starts the numbering again. Unused by a backend whose calls return done.
  virtual std::size_t mark() { return 0; }
  virtual std::vector<double> mark_times() { return {}; }

  // The arithmetic of matrix products and convolutions (rounding.h): fp32 (Rounding::none), or
  // mixed precision, as PyTorch's autocast runs them: operands rounded to tf32, fp16 or bf16,
  // fp32 accumulation and fp32 results. The executor sets it for its passes (MatrixPrecisionScope);
  // recurrent layers, normalizations and the optimizer stay in fp32.
  void set_matrix_rounding(Rounding r) { m_matrix_rounding = r; }
  Rounding matrix_rounding() const { return m_matrix_rounding; }

  // flag[0] = 1 where any of the n floats is infinite or NaN, else flag[0] left as it is (a
  // mixed-precision step's overflow check; flag is tensor memory, read after synchronize()).
  virtual void flag_nonfinite(std::int64_t n, const float* x, float* flag) = 0;

  // Sums `count` floats in place over `comm` (nothing for MPI_COMM_NULL): every rank of `comm`
  // calls it with the same count, in the same order.
  virtual void all_reduce_sum(MPI_Comm comm, float* data, std::int64_t count) = 0;
  // The same sum started without waiting for it, after every kernel called before it, so that the
  // backward pass goes on while a weight's gradient is summed (DDP's overlap): `data` is neither
  // read nor written by the caller until all_reduce_wait() of the number returned.
  // all_reduce_progress() lets the sums started move on (MPI moves a nonblocking collective only
  // inside MPI calls). By default the sum runs at once and there is nothing to wait for (number 0).
  virtual std::size_t all_reduce_sum_start(MPI_Comm comm, float* data, std::int64_t count) {
    all_reduce_sum(comm, data, count);
    return 0;
  }
  virtual void all_reduce_progress() {}
  virtual void all_reduce_wait(std::size_t started) { (void)started; }

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

  // Y = conv(X, W) (+ bias when not nullptr).
  virtual void conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) = 0;
  virtual void conv_backward_data(const ConvShape& s, const float* w, const float* dy, float* dx) = 0;
  // dW, and d_bias (dY summed over n and the spatial dims) when not nullptr.
  virtual void conv_backward_weights(const ConvShape& s, const float* x, const float* dy, float* dw, float* d_bias) = 0;

  virtual void pool_forward(Pool kind, const PoolShape& s, const float* x, float* y) = 0;
  // dx from the forward input x (a max pool finds its arg-max again).
  virtual void pool_backward(Pool kind, const PoolShape& s, const float* x, const float* dy, float* dx) = 0;

  // Training-mode batch normalization, y = (x - mean) / sqrt(variance + epsilon) * scale + shift
  // with scale, shift, mean and variance over c. The statistics (population variance) of this
  // buffer are computed and written to mean and variance, or, with `given_statistics`, read from
  // them: the statistics of a larger batch this buffer is a part of (sync-BN).
  virtual void batch_norm_forward(const BatchNormShape& s, const float* x, const float* scale, const float* shift,
                                  float* mean, float* variance, bool given_statistics, float* y) = 0;
  // With the forward pass's statistics: d_scale = sum(dy * xhat) and d_shift = sum(dy) over this
  // buffer, and dx. Without `given_statistics` the statistics are this buffer's own and dx is
  // the whole gradient; with it they are constants here (dx = dy * scale / sigma) and the caller
  // adds their part with batch_norm_backward_statistics once the whole batch's sums are known.
  virtual void batch_norm_backward(const BatchNormShape& s, const float* x, const float* scale, const float* mean,
                                   const float* variance, const float* dy, bool given_statistics, float* dx,
                                   float* d_scale, float* d_shift) = 0;
  // dx -= scale / sigma * (d_shift + xhat * d_scale) / count: the gradient through statistics taken
  // over `count` elements per channel, whose sums of dy * xhat and dy are d_scale and d_shift.
  virtual void batch_norm_backward_statistics(const BatchNormShape& s, std::int64_t count, const float* x,
                                              const float* scale, const float* mean, const float* variance,
                                              const float* d_scale, const float* d_shift, float* dx) = 0;

  // A recurrent layer in training mode. `saved` receives what the backward pass needs (its contents
  // are the backend's: oneDNN keeps its workspace and the states there).
  virtual void recurrent_forward(const RecurrentShape& s, const RecurrentInputs& in, const RecurrentOutputs& out,
                                 Floats& saved) {
    (void)s, (void)in, (void)out, (void)saved;
    throw Error(fmt::format("backend '{}' has no recurrent (LSTM, GRU, RNN) kernels", name()));
  }
  // With the same inputs and the `saved` of the forward pass.
  virtual void recurrent_backward(const RecurrentShape& s, const RecurrentInputs& in, const Floats& saved,
                                  const RecurrentOutputGradients& d_out, const RecurrentInputGradients& d_in) {
    (void)s, (void)in, (void)saved, (void)d_out, (void)d_in;
    throw Error(fmt::format("backend '{}' has no recurrent (LSTM, GRU, RNN) kernels", name()));
  }

  // Reduce-scatter of a sum over `comm`: `data` holds the whole buffer on every rank, cut into
  // consecutive slices of counts[r] elements (r the rank in `comm`); this rank's slice of the sum
  // is written to `mine`, which may be its own slice of `data` (in place). Every rank of `comm`
  // passes the same counts.
  virtual void reduce_scatter_sum(MPI_Comm comm, const float* data, std::span<const std::int64_t> counts,
                                  float* mine) = 0;
  // All-gather in place: every rank's slice (counts as above) is at its offset in `data` on that
  // rank; afterwards every rank holds all of them.
  virtual void all_gather(MPI_Comm comm, std::span<const std::int64_t> counts, float* data) = 0;

  // The optimizer steps, each one fused element-wise kernel over n elements (a weight shard or
  // its ZeRO slice), the state buffers as long as the weights.
  // Plain SGD: weights -= learning_rate * gradient.
  virtual void sgd_update(std::int64_t n, float learning_rate, const float* gradient, float* weights) = 0;
  // SGD with momentum (heavy ball, as PyTorch): velocity = momentum * velocity + gradient;
  // weights -= learning_rate * velocity.
  virtual void momentum_update(std::int64_t n, float learning_rate, float momentum, const float* gradient,
                               float* velocity, float* weights) = 0;
  // Adam (Kingma & Ba) at step `step` (1 for the first), with bias correction:
  // m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
  // weights -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + epsilon).
  virtual void adam_update(std::int64_t n, const AdamParameters& p, int step, const float* gradient, float* m, float* v,
                           float* weights) = 0;

  // The data movement of a training iteration, so that nothing on the host touches tensor memory
  // between kernels (on a GPU the host cannot: tensors live in device memory, tensor_memory.h).
  // dst = src over the box `c` (dst += src with `accumulate`); src and dst do not overlap.
  virtual void copy(const StridedCopy& c, const float* src, float* dst, bool accumulate) = 0;
  // y = a * x over n elements (y may be x).
  virtual void scale(std::int64_t n, float a, const float* x, float* y) = 0;
  virtual void fill(std::int64_t n, float value, float* y) = 0;
  // Y = Gather(data, indices) (GatherShape); an index outside the axis throws on the CPU and reads
  // as NaN on a GPU, whose kernels cannot throw.
  virtual void gather(const GatherShape& s, const float* data, const float* indices, float* y) = 0;
  // Its gradient: d_data = 0, then every dy row added into the row its index names (rows held
  // elsewhere skipped).
  virtual void gather_backward(const GatherShape& s, const float* indices, const float* dy, float* d_data) = 0;
  // y = a (op) b for a comparison (1 or 0), y = a != 0 ? b : c for Where; every input broadcast to
  // y_dims (same rank, 1 where it broadcasts); c is nullptr for a comparison.
  virtual void select(Select kind, const Dims& y_dims, const Dims& a_dims, const float* a, const Dims& b_dims,
                      const float* b, const Dims& c_dims, const float* c, float* y) = 0;

  // The stand-in for an op without a kernel: reads and writes `bytes` bytes of memory.
  virtual void memory_bound(std::int64_t bytes) = 0;

private:
  Rounding m_matrix_rounding = Rounding::none;
};

// The backend's matrix arithmetic set for a scope, restored at its end.
class MatrixPrecisionScope {
public:
  MatrixPrecisionScope(Backend& backend, Rounding r) : m_backend(backend), m_previous(backend.matrix_rounding()) {
    backend.set_matrix_rounding(r);
  }
  ~MatrixPrecisionScope() { m_backend.set_matrix_rounding(m_previous); }
  MatrixPrecisionScope(const MatrixPrecisionScope&) = delete;
  MatrixPrecisionScope& operator=(const MatrixPrecisionScope&) = delete;

private:
  Backend& m_backend;
  Rounding m_previous;
};

// oneDNN on the CPU, `threads` OpenMP threads per rank.
std::unique_ptr<Backend> make_cpu_backend(int threads);

} // namespace partita::runtime
