#pragma once

// The value types the Backend's kernels take: shapes, windows and kinds of op. Kept apart from
// backend.h (which needs MPI) so that the CUDA kernels (nvcc) can include them alone.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace partita::runtime {

using Dims = std::vector<std::int64_t>;

// A tensor seen as [outer, length, inner] around one of its dims (softmax's axis): the dims before
// it multiplied, its own, the dims after it multiplied.
struct AroundAxis {
  std::int64_t outer = 1, length = 1, inner = 1;
};
inline AroundAxis around_axis(const Dims& dims, int axis) {
  AroundAxis a;
  const auto at = static_cast<std::size_t>(axis);
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (d < at) {
      a.outer *= dims[d];
    } else if (d == at) {
      a.length = dims[d];
    } else {
      a.inner *= dims[d];
    }
  }
  return a;
}

enum class Eltwise : std::uint8_t { relu, tanh, sigmoid, gelu, erf, exp, sin, cos };
enum class Binary : std::uint8_t { add, sub, mul, div };

// A box of `extent` elements copied between two buffers that each hold it with their own strides
// (in elements, per dim of the box): a transpose (permuted source strides), a slice, a split or a
// concatenation (a box inside a larger buffer, its offset applied to the pointer), a block of a
// shard. Dims of extent 1 are dropped and dims that run on in both buffers merged first
// (strided_copy in backend.h), so that any copy of the runtime fits max_copy_rank dims.
inline constexpr int max_copy_rank = 8;
struct StridedCopy {
  int rank = 0;
  std::int64_t extent[max_copy_rank] = {};
  std::int64_t src_stride[max_copy_rank] = {};
  std::int64_t dst_stride[max_copy_rank] = {};
  std::int64_t elements() const {
    std::int64_t n = 1;
    for (int d = 0; d < rank; ++d) {
      n *= extent[d];
    }
    return n;
  }
};

// An ONNX Gather as rows of a table: data [outer, rows, inner] (the rows this shard holds, the
// first of them global row `first_row` of an axis of `axis_size`), indices [count] held as floats,
// y [outer, count, inner]. A negative index counts from the axis's end; a row another rank holds
// (an embedding split over its vocabulary) reads as 0: a partial sum.
struct GatherShape {
  std::int64_t outer = 1, count = 1, inner = 1;
  std::int64_t rows = 1, first_row = 0, axis_size = 1;
};

// The element-wise ops with a boolean in them: comparisons (1 or 0) and Where (a ? b : c), each
// input broadcast to the output (numpy rules).
enum class Select : std::uint8_t { greater, less, equal, greater_or_equal, less_or_equal, where };

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
// Elements of X [n, c_in, h, w], W [c_out, c_in / groups, kh, kw] and Y [n, c_out, oh, ow].
inline std::int64_t input_elements(const ConvShape& s) {
  return s.n * s.c_in * s.h * s.w;
}
inline std::int64_t weight_elements(const ConvShape& s) {
  return s.c_out * (s.c_in / s.groups) * s.window.kh * s.window.kw;
}
inline std::int64_t output_elements(const ConvShape& s) {
  return s.n * s.c_out * s.oh * s.ow;
}

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

} // namespace partita::runtime
