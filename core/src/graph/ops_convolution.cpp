// Convolutions. Conv is a contraction over input channels (per group) and kernel positions; the
// output shape is already on the output tensor (the importer resolved strides, dilations, pads
// and auto_pad), so the description reads sizes rather than recomputing them. Spatial dims of
// the input map to the output's spatial dims: a spatial split reads a halo around its block,
// which the cost model adds; kernel dims are never split.

#include "graph/op_helpers.h"

namespace partita::graph::detail {
namespace {

struct ConvShapes {
  std::int64_t n = 0, c_in = 0, c_out = 0, group = 1;
  std::size_t spatial = 0; // number of spatial dims
};

// Checks ranks shared by Conv and ConvTranspose: X[N, C, s...], W[., ., k...], Y[N, C', s'...].
ConvShapes conv_shapes(const Op& op, const Graph& g) {
  const Tensor& x = input(op, g, 0);
  const Tensor& w = input(op, g, 1);
  const Tensor& y = output(op, g, 0);
  if (x.shape.size() < 3) {
    fail(op, fmt::format("input '{}' must have rank >= 3 (N, C, spatial...), got {}", x.name, shape_string(x.shape)));
  }
  if (w.shape.size() != x.shape.size() || y.shape.size() != x.shape.size()) {
    fail(op, fmt::format("input {}, weight {} and output {} ranks differ", shape_string(x.shape), shape_string(w.shape),
                         shape_string(y.shape)));
  }
  ConvShapes c;
  c.n = x.shape[0];
  c.c_in = x.shape[1];
  c.c_out = y.shape[1];
  c.group = op.attr_int("group", 1);
  c.spatial = x.shape.size() - 2;
  if (c.group < 1 || c.c_in % c.group != 0 || c.c_out % c.group != 0) {
    fail(op,
         fmt::format("group {} does not divide input channels {} and output channels {}", c.group, c.c_in, c.c_out));
  }
  return c;
}

// Adds the per-output-element bias add and its gradient (a sum over everything but channels).
void bias_costs(const Op& op, const Graph& g, OpSemantics& s) {
  if (!has_input(op, 2)) {
    return;
  }
  const auto y_elems = static_cast<double>(output(op, g, 0).elements());
  s.fwd_flops += y_elems;
  add_grad_flops(op, g, s, 2, y_elems);
}

// Y[n, co, o...] = sum_{ci, k...} X[n, g(co)*Cg + ci, o*stride + k*dilation - pad] * W[co, ci, k...] + B[co]
void describe_conv(const Op& op, const Graph& g, OpSemantics& s) {
  const ConvShapes c = conv_shapes(op, g);
  const Tensor& w = input(op, g, 1);
  const Tensor& y = output(op, g, 0);
  if (w.shape[0] != c.c_out || w.shape[1] != c.c_in / c.group) {
    fail(op, fmt::format("weight shape {} does not match [{}, {}, k...] for group {}", shape_string(w.shape), c.c_out,
                         c.c_in / c.group, c.group));
  }
  const bool depthwise = c.group > 1 && c.group == c.c_in;
  const int dn = add_dim(s, "n", c.n);
  const int dco = add_dim(s, "co", c.c_out);
  const int dci = add_dim(s, "ci", c.c_in / c.group, true);
  std::vector<int> out_sp, ker;
  for (std::size_t i = 0; i < c.spatial; ++i) {
    out_sp.push_back(add_dim(s, spatial_name("o", i, c.spatial), y.shape[2 + i]));
  }
  for (std::size_t i = 0; i < c.spatial; ++i) {
    ker.push_back(add_dim(s, spatial_name("k", i, c.spatial), w.shape[2 + i], true, false));
  }
  // X's channels are indexed by ci only without groups; a depthwise conv reads the channel of its
  // output channel; other grouped convs read a group's slice, which no single dim describes.
  const int x_channel = c.group == 1 ? dci : depthwise ? dco : -1;
  std::vector<int> x_map{dn, x_channel};
  x_map.insert(x_map.end(), out_sp.begin(), out_sp.end());
  std::vector<int> w_map{dco, dci};
  w_map.insert(w_map.end(), ker.begin(), ker.end());
  std::vector<int> y_map{dn, dco};
  y_map.insert(y_map.end(), out_sp.begin(), out_sp.end());
  map_input(op, g, s, 0, x_map);
  map_input(op, g, s, 1, w_map);
  map_input(op, g, s, 2, {dco});
  map_output(op, g, s, 0, y_map);
  contraction_costs(op, g, s, 2);
  bias_costs(op, g, s);
}

// Each input pixel scatters X[n, ci, i...] * W[ci, co, k...] into Y[n, g(ci)*Cg + co, i*stride + k*dilation - pad].
void describe_conv_transpose(const Op& op, const Graph& g, OpSemantics& s) {
  const ConvShapes c = conv_shapes(op, g);
  const Tensor& x = input(op, g, 0);
  const Tensor& w = input(op, g, 1);
  if (w.shape[0] != c.c_in || w.shape[1] != c.c_out / c.group) {
    fail(op, fmt::format("weight shape {} does not match [{}, {}, k...] for group {}", shape_string(w.shape), c.c_in,
                         c.c_out / c.group, c.group));
  }
  // With one input channel per group every output channel reads exactly one input channel, so ci
  // indexes the output and is no reduction.
  const bool depthwise = c.group > 1 && c.group == c.c_in;
  const int dn = add_dim(s, "n", c.n);
  const int dci = add_dim(s, "ci", c.c_in, !depthwise);
  const int dco = add_dim(s, "co", c.c_out / c.group);
  std::vector<int> in_sp, ker;
  for (std::size_t i = 0; i < c.spatial; ++i) {
    in_sp.push_back(add_dim(s, spatial_name("i", i, c.spatial), x.shape[2 + i]));
  }
  // Neighbouring input pixels overlap in the output: the kernel extent is summed over, never split.
  for (std::size_t i = 0; i < c.spatial; ++i) {
    ker.push_back(add_dim(s, spatial_name("k", i, c.spatial), w.shape[2 + i], true, false));
  }
  const int y_channel = c.group == 1 ? dco : depthwise ? dci : -1;
  std::vector<int> x_map{dn, dci};
  x_map.insert(x_map.end(), in_sp.begin(), in_sp.end());
  std::vector<int> w_map{dci, dco};
  w_map.insert(w_map.end(), ker.begin(), ker.end());
  std::vector<int> y_map{dn, y_channel};
  y_map.insert(y_map.end(), in_sp.begin(), in_sp.end());
  map_input(op, g, s, 0, x_map);
  map_input(op, g, s, 1, w_map);
  map_input(op, g, s, 2, {y_channel});
  map_output(op, g, s, 0, y_map);
  contraction_costs(op, g, s, 2);
  bias_costs(op, g, s);
}

constexpr InputSlot D = InputSlot::data;
constexpr InputSlot W = InputSlot::weight;

const OpDescriptor table[] = {
    {"Conv", OpClass::convolution, {D, W, W}, describe_conv},
    {"ConvTranspose", OpClass::convolution, {D, W, W}, describe_conv_transpose},
};

} // namespace

std::span<const OpDescriptor> convolution_ops() {
  return table;
}

} // namespace partita::graph::detail
