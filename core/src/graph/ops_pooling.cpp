// Pools and reductions. A windowed pool is laid out like a depthwise convolution without weights:
// n, c, output spatial dims (a spatial split reads a halo) and unsplittable kernel dims. Global
// pools and Reduce* ops reduce whole dims. A split Reduce* dim leaves partial results combined
// across devices (sum, max, ...), as any reduction; a global pool's and ArgMax's reduced dims stay
// whole, the latter because partial arg-maxima are not a plain all-reduce.

#include "graph/op_helpers.h"

#include <set>

namespace partita::graph::detail {
namespace {

// X[N, C, s...] -> Y[N, C, o...] over windows of kernel_shape; MaxPool may output Indices like Y.
template <int Fwd, int Bwd> void describe_window_pool(const Op& op, const Graph& g, OpSemantics& s) {
  const Tensor& x = input(op, g, 0);
  const Tensor& y = output(op, g, 0);
  if (x.shape.size() < 3 || y.shape.size() != x.shape.size()) {
    fail(op, fmt::format("input {} and output {} must be [N, C, spatial...] of equal rank", shape_string(x.shape),
                         shape_string(y.shape)));
  }
  const std::size_t spatial = x.shape.size() - 2;
  const std::vector<std::int64_t> kernel = op.attr_ints("kernel_shape");
  if (kernel.size() != spatial) {
    fail(op, fmt::format("kernel_shape has {} entries for {} spatial dims", kernel.size(), spatial));
  }
  std::vector<int> dims{add_dim(s, "n", x.shape[0]), add_dim(s, "c", x.shape[1])};
  for (std::size_t i = 0; i < spatial; ++i) {
    dims.push_back(add_dim(s, spatial_name("o", i, spatial), y.shape[2 + i]));
  }
  for (std::size_t i = 0; i < spatial; ++i) {
    add_dim(s, spatial_name("k", i, spatial), kernel[i], true, false);
  }
  map_input(op, g, s, 0, dims);
  for (std::size_t k = 0; k < op.outputs.size(); ++k) {
    map_output(op, g, s, k, dims);
  }
  pointwise_costs(op, g, s, Fwd, Bwd);
}

// MaxPool's backward routes each output gradient to its arg-max: one FLOP per output element.
void describe_max_pool(const Op& op, const Graph& g, OpSemantics& s) {
  describe_window_pool<1, 0>(op, g, s);
  add_grad_flops(op, g, s, 0, static_cast<double>(output(op, g, 0).elements()));
}

// X[N, C, s...] -> Y[N, C, 1...].
template <int Fwd, int Bwd> void describe_global_pool(const Op& op, const Graph& g, OpSemantics& s) {
  const Tensor& x = input(op, g, 0);
  if (x.shape.size() < 2) {
    fail(op, fmt::format("input '{}' must have rank >= 2 (N, C, ...), got {}", x.name, shape_string(x.shape)));
  }
  std::vector<int> dims{add_dim(s, "n", x.shape[0]), add_dim(s, "c", x.shape[1])};
  std::vector<int> y_map = dims;
  const std::size_t spatial = x.shape.size() - 2;
  for (std::size_t i = 0; i < spatial; ++i) {
    dims.push_back(add_dim(s, spatial_name("", i, spatial), x.shape[2 + i], true, false));
    y_map.push_back(-1);
  }
  map_input(op, g, s, 0, dims);
  map_output(op, g, s, 0, y_map);
  pointwise_costs(op, g, s, Fwd, Bwd);
}

// The reduced axes: attribute `axes`, or input 1 (ReduceSum from opset 13, all Reduce* from
// opset 18). Empty means all axes, or none with noop_with_empty_axes.
std::set<std::size_t> reduced_axes(const Op& op, const Graph& g, std::size_t rank) {
  std::vector<std::int64_t> axes;
  if (has_input(op, 1)) {
    const Tensor& a = input(op, g, 1);
    if (!a.int_values) {
      fail(op, fmt::format("the values of axes input '{}' are not known", a.name));
    }
    axes = *a.int_values;
  } else if (op.has_attr("axes")) {
    axes = op.attr_ints("axes");
  }
  std::set<std::size_t> out;
  if (axes.empty()) {
    if (op.attr_int("noop_with_empty_axes", 0) == 0) {
      for (std::size_t i = 0; i < rank; ++i) {
        out.insert(i);
      }
    }
    return out;
  }
  for (std::int64_t a : axes) {
    out.insert(static_cast<std::size_t>(normalize_axis(op, a, rank)));
  }
  return out;
}

// One dim per input dim; reduced dims are reductions, absent from the output or kept as size 1.
template <int Fwd, int Bwd, bool SplitReduced> void describe_reduce(const Op& op, const Graph& g, OpSemantics& s) {
  const Tensor& x = input(op, g, 0);
  const Tensor& y = output(op, g, 0);
  // ArgMax/ArgMin reduce one axis, default 0, and have no axes list.
  const bool arg = op.type == "ArgMax" || op.type == "ArgMin";
  std::set<std::size_t> axes;
  if (arg) {
    axes.insert(static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), x.shape.size())));
  } else {
    axes = reduced_axes(op, g, x.shape.size());
  }
  const bool keep = op.attr_int("keepdims", 1) != 0;
  std::vector<int> dims, y_map;
  for (std::size_t i = 0; i < x.shape.size(); ++i) {
    const bool reduced = axes.count(i) != 0;
    dims.push_back(add_dim(s, fmt::format("d{}", i), x.shape[i], reduced, !reduced || SplitReduced));
    if (!reduced) {
      y_map.push_back(dims.back());
    } else if (keep) {
      y_map.push_back(-1);
    }
  }
  if (y_map.size() != y.shape.size()) {
    fail(op, fmt::format("output {} does not match reducing {} over {} axes with keepdims={}", shape_string(y.shape),
                         shape_string(x.shape), axes.size(), keep ? 1 : 0));
  }
  map_input(op, g, s, 0, dims);
  map_output(op, g, s, 0, y_map);
  pointwise_costs(op, g, s, Fwd, Bwd);
}

constexpr InputSlot D = InputSlot::data;
constexpr InputSlot I = InputSlot::index;

// FLOPs per iteration point (per input element visited): a compare or add each, squares and
// absolute values one more, exp/log four more (as in ops_elementwise.cpp).
const OpDescriptor table[] = {
    {"MaxPool", OpClass::pooling, {D}, describe_max_pool},
    {"AveragePool", OpClass::pooling, {D}, describe_window_pool<1, 1>},
    {"LpPool", OpClass::pooling, {D}, describe_window_pool<2, 3>},
    {"GlobalAveragePool", OpClass::pooling, {D}, describe_global_pool<1, 1>},
    {"GlobalMaxPool", OpClass::pooling, {D}, describe_global_pool<1, 1>},
    {"GlobalLpPool", OpClass::pooling, {D}, describe_global_pool<2, 3>},
    {"ReduceMean", OpClass::reduction, {D, I}, describe_reduce<1, 1, true>},
    {"ReduceSum", OpClass::reduction, {D, I}, describe_reduce<1, 1, true>},
    {"ReduceMax", OpClass::reduction, {D, I}, describe_reduce<1, 1, true>},
    {"ReduceMin", OpClass::reduction, {D, I}, describe_reduce<1, 1, true>},
    {"ReduceProd", OpClass::reduction, {D, I}, describe_reduce<1, 2, true>},
    {"ReduceL1", OpClass::reduction, {D, I}, describe_reduce<2, 2, true>},
    {"ReduceL2", OpClass::reduction, {D, I}, describe_reduce<2, 2, true>},
    {"ReduceSumSquare", OpClass::reduction, {D, I}, describe_reduce<2, 2, true>},
    {"ReduceLogSumExp", OpClass::reduction, {D, I}, describe_reduce<6, 5, true>},
    {"ArgMax", OpClass::reduction, {D}, describe_reduce<1, 0, false>},
    {"ArgMin", OpClass::reduction, {D}, describe_reduce<1, 0, false>},
};

} // namespace

std::span<const OpDescriptor> pooling_ops() {
  return table;
}

} // namespace partita::graph::detail
