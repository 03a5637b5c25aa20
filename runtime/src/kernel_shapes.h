#pragma once

// The value types the Backend's kernels take: shapes, windows and kinds of op. Kept apart from
// backend.h (which needs MPI) so that the CUDA kernels (nvcc) can include them alone.

#include <cstdint>
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

} // namespace partita::runtime
