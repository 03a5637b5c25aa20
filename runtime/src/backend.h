#pragma once

// The kernels partita-run needs, behind one small interface, on dense row-major fp32 buffers.
// The CPU backend (oneDNN) is the one implementation today. A CUDA backend (cuBLAS/cuDNN
// kernels, NCCL collectives bootstrapped over MPI, CUDA events for timing) is planned for issue 5's
// next part: it implements this interface and is picked at run time when a GPU is present.

#include "partita/graph/error.h"

#include <fmt/format.h>

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

// A 2-D window (convolution or pooling) as ONNX states it: dilation 1 is a dense window; pads
// may differ per side (the bottom/right pads of a ceil_mode pool are extended to reach the output).
struct Window2d {
  std::int64_t kh = 1, kw = 1;
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t dilation_h = 1, dilation_w = 1;
  std::int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

// X [n, c_in, h, w], W [c_out, c_in / groups, kh, kw], bias [c_out], Y [n, c_out, oh, ow].
struct ConvShape {
  std::int64_t n = 1, c_in = 1, c_out = 1, groups = 1;
  std::int64_t h = 1, w = 1, oh = 1, ow = 1;
  Window2d window;
};

// X [n, c, h, w], Y [n, c, oh, ow].
struct PoolShape {
  std::int64_t n = 1, c = 1, h = 1, w = 1, oh = 1, ow = 1;
  Window2d window;
};

// Average pools divide by the whole window (padding counted) or by the input elements it covers.
enum class Pool : std::uint8_t { max, average_include_padding, average_exclude_padding };

// X [n, c, spatial]: statistics per channel over n and spatial.
struct BatchNormShape {
  std::int64_t n = 1, c = 1, spatial = 1;
  float epsilon = 1e-5F;
};

// Recurrent layers as ONNX defines them (LSTM, GRU, RNN), time-major, in ONNX's layouts and gate
// orders (LSTM i, o, f, c; GRU z, r, h): X [seq, batch, input], W [dirs, gates * hidden, input],
// R [dirs, gates * hidden, hidden], B [dirs, 2 * gates * hidden] (W's biases, then R's),
// P [dirs, 3 * hidden] (LSTM peepholes i, o, f), initial_h, initial_c, Y_h and Y_c
// [dirs, batch, hidden], Y [seq, dirs, batch, hidden]. A reverse layer reads X from its last step.
// Activations are ONNX's defaults (LSTM sigmoid/tanh/tanh, GRU sigmoid/tanh, RNN as named).
enum class Cell : std::uint8_t { lstm, gru, gru_linear_before_reset, rnn_tanh, rnn_relu, rnn_sigmoid };
enum class RecurrentDirection : std::uint8_t { forward, reverse, bidirectional };

struct RecurrentShape {
  Cell cell = Cell::lstm;
  RecurrentDirection direction = RecurrentDirection::forward;
  std::int64_t seq = 1, batch = 1, input = 1, hidden = 1;
  std::int64_t directions() const { return direction == RecurrentDirection::bidirectional ? 2 : 1; }
  std::int64_t gates() const {
    return cell == Cell::lstm ? 4 : cell == Cell::gru || cell == Cell::gru_linear_before_reset ? 3 : 1;
  }
};

// The forward pass's inputs; a nullptr B, P, initial_h or initial_c is zeros (P: no peepholes).
struct RecurrentInputs {
  const float* x = nullptr;
  const float* w = nullptr;
  const float* r = nullptr;
  const float* b = nullptr;
  const float* p = nullptr;
  const float* initial_h = nullptr;
  const float* initial_c = nullptr;
};
// Outputs (nullptr: not wanted; Y_c is LSTM's only).
struct RecurrentOutputs {
  float* y = nullptr;
  float* y_h = nullptr;
  float* y_c = nullptr;
};
// The gradients of Y, Y_h and Y_c (nullptr: zero).
struct RecurrentOutputGradients {
  const float* dy = nullptr;
  const float* dy_h = nullptr;
  const float* dy_c = nullptr;
};
// Gradients of the inputs, written whole (nullptr: not wanted; dp only with peepholes).
struct RecurrentInputGradients {
  float* dx = nullptr;
  float* dw = nullptr;
  float* dr = nullptr;
  float* db = nullptr;
  float* dp = nullptr;
  float* d_initial_h = nullptr;
  float* d_initial_c = nullptr;
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

  // Y = conv(X, W) (+ bias when not nullptr).
  virtual void conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) = 0;
  virtual void conv_backward_data(const ConvShape& s, const float* w, const float* dy, float* dx) = 0;
  // dW, and d_bias (dY summed over n and the spatial dims) when not nullptr.
  virtual void conv_backward_weights(const ConvShape& s, const float* x, const float* dy, float* dw,
                                     float* d_bias) = 0;

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
                                 std::vector<float>& saved) {
    (void)s, (void)in, (void)out, (void)saved;
    throw Error(fmt::format("backend '{}' has no recurrent (LSTM, GRU, RNN) kernels", name()));
  }
  // With the same inputs and the `saved` of the forward pass.
  virtual void recurrent_backward(const RecurrentShape& s, const RecurrentInputs& in, const std::vector<float>& saved,
                                  const RecurrentOutputGradients& d_out, const RecurrentInputGradients& d_in) {
    (void)s, (void)in, (void)saved, (void)d_out, (void)d_in;
    throw Error(fmt::format("backend '{}' has no recurrent (LSTM, GRU, RNN) kernels", name()));
  }

  // Plain SGD: weights -= learning_rate * gradient, over n elements.
  virtual void sgd_update(std::int64_t n, float learning_rate, const float* gradient, float* weights) = 0;

  // The stand-in for an op without a kernel: reads and writes `bytes` bytes of memory.
  virtual void memory_bound(std::int64_t bytes) = 0;
};

// oneDNN on the CPU, `threads` OpenMP threads per rank.
std::unique_ptr<Backend> make_cpu_backend(int threads);

} // namespace partita::runtime
