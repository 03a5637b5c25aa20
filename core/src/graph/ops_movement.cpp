// Data movement: ops that copy bytes without arithmetic (0 FLOPs; the generic code counts the
// bytes). The iteration space is the output's shape unless said otherwise; an input dim maps to
// the output dim that it becomes, and a dim that is cut, gathered or rearranged is read whole
// (-1). Dims the op works along as a whole (the concat axis, the split axis, the top-k axis) are
// not splittable. Gather on a parameter is an embedding lookup.

#include "graph/op_helpers.h"

#include <numeric>

namespace partita::graph::detail {
namespace {

// One splittable dim per dim of output `k`, named d0, d1, ...
std::vector<int> output_space(const Op& op, const Graph& g, OpSemantics& s, std::size_t k = 0) {
  std::vector<int> dims;
  const Shape& y = output(op, g, k).shape;
  for (std::size_t i = 0; i < y.size(); ++i) {
    dims.push_back(add_dim(s, fmt::format("d{}", i), y[i]));
  }
  return dims;
}

void keep_whole(OpSemantics& s, int d) {
  s.dims[static_cast<std::size_t>(d)].splittable = false;
}

// Maps `shape` onto `dims` position by position (right-aligned when ranks differ, as numpy
// broadcasting does) wherever the sizes agree; other dims are read whole.
std::vector<int> equal_size_map(const OpSemantics& s, const Shape& shape, const std::vector<int>& dims) {
  std::vector<int> out(shape.size(), -1);
  if (shape.size() > dims.size()) {
    return out;
  }
  const std::size_t offset = dims.size() - shape.size();
  for (std::size_t j = 0; j < shape.size(); ++j) {
    const int d = dims[offset + j];
    if (shape[j] == s.dims[static_cast<std::size_t>(d)].size) {
      out[j] = d;
    }
  }
  return out;
}

void require_rank(const Op& op, const Tensor& t, std::size_t rank) {
  if (t.shape.size() != rank) {
    fail(op, fmt::format("tensor '{}' of shape {} should have rank {}", t.name, shape_string(t.shape), rank));
  }
}

// Known integer contents of input i, or nullopt.
std::optional<std::vector<std::int64_t>> int_input(const Op& op, const Graph& g, std::size_t i) {
  return has_input(op, i) ? input(op, g, i).int_values : std::nullopt;
}

void describe_transpose(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  std::vector<std::int64_t> perm = op.attr_ints("perm");
  if (perm.empty()) {
    perm.resize(dims.size());
    std::iota(perm.rbegin(), perm.rend(), 0); // default: reverse the dims
  }
  require_rank(op, input(op, g, 0), perm.size());
  std::vector<int> x_map(perm.size(), -1);
  for (std::size_t i = 0; i < perm.size(); ++i) {
    x_map[static_cast<std::size_t>(normalize_axis(op, perm[i], perm.size()))] = dims[i];
  }
  map_input(op, g, s, 0, x_map);
  map_output(op, g, s, 0, dims);
  // Rows stay rows when the last dim stays last (attention's heads transpose, 0,2,1,3): a copy of
  // runs. Otherwise every element moves across the rows: a kernel of its own, several times slower.
  if (!perm.empty() && normalize_axis(op, perm.back(), perm.size()) != static_cast<int>(perm.size()) - 1) {
    s.forward_kernel = s.backward_kernel = KernelClass::transpose;
  }
}

void describe_concat(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  const int axis = normalize_axis(op, op.attr_int("axis", 0), dims.size());
  keep_whole(s, dims[static_cast<std::size_t>(axis)]);
  std::int64_t total = 0;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    const Tensor& t = input(op, g, i);
    require_rank(op, t, dims.size());
    std::vector<int> m = dims;
    m[static_cast<std::size_t>(axis)] = -1;
    map_input(op, g, s, i, m);
    total += t.shape[static_cast<std::size_t>(axis)];
  }
  if (total != s.dims[static_cast<std::size_t>(dims[static_cast<std::size_t>(axis)])].size) {
    fail(op, fmt::format("inputs add up to {} along axis {}, the output has {}", total, axis,
                         output(op, g, 0).shape[static_cast<std::size_t>(axis)]));
  }
  map_output(op, g, s, 0, dims);
}

// The part sizes (attribute `split`, input 1, or opset 18's num_outputs) are already on the
// output tensors; the description reads those.
void describe_split(const Op& op, const Graph& g, OpSemantics& s) {
  const Tensor& x = input(op, g, 0);
  std::vector<int> dims;
  for (std::size_t i = 0; i < x.shape.size(); ++i) {
    dims.push_back(add_dim(s, fmt::format("d{}", i), x.shape[i]));
  }
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), dims.size()));
  keep_whole(s, dims[axis]);
  map_input(op, g, s, 0, dims);
  std::vector<int> part = dims;
  part[axis] = -1;
  std::int64_t total = 0;
  for (std::size_t k = 0; k < op.outputs.size(); ++k) {
    require_rank(op, output(op, g, k), dims.size());
    map_output(op, g, s, k, part);
    total += output(op, g, k).shape[axis];
  }
  if (total != x.shape[axis]) {
    fail(op, fmt::format("outputs add up to {} along axis {}, the input has {}", total, axis, x.shape[axis]));
  }
}

// A dim the slice keeps whole maps through; a reversed dim (negative step) is reordered and read
// whole, as is a cut one.
void describe_slice(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  const Tensor& x = input(op, g, 0);
  require_rank(op, x, dims.size());
  std::vector<int> x_map = equal_size_map(s, x.shape, dims);
  const auto steps = int_input(op, g, 4);
  if (steps) {
    std::vector<std::int64_t> axes = op.attr_ints("axes");
    if (const auto a = int_input(op, g, 3)) {
      axes = *a;
    }
    if (axes.empty()) {
      axes.resize(steps->size());
      std::iota(axes.begin(), axes.end(), 0);
    }
    for (std::size_t i = 0; i < axes.size() && i < steps->size(); ++i) {
      if ((*steps)[i] < 0) {
        x_map[static_cast<std::size_t>(normalize_axis(op, axes[i], dims.size()))] = -1;
      }
    }
  }
  map_input(op, g, s, 0, x_map);
  map_output(op, g, s, 0, dims);
}

// Y = data[:axis] + indices.shape + data[axis+1:]. On a parameter it is an embedding lookup: the
// gathered axis becomes a vocabulary dim v, a reduction (Y is a one-hot product with the table),
// so splitting v is a vocabulary-parallel embedding whose partial outputs are summed. Its weight
// gradient scatter-adds one embedding row per index.
void describe_gather(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  const Tensor& data = input(op, g, 0);
  const Tensor& idx = input(op, g, 1);
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), data.shape.size()));
  const std::size_t r_idx = idx.shape.size();
  if (dims.size() != data.shape.size() - 1 + r_idx) {
    fail(op, fmt::format("output rank {} is not data rank {} - 1 + indices rank {}", dims.size(), data.shape.size(),
                         r_idx));
  }
  const bool embedding = data.role == TensorRole::parameter;
  std::vector<int> data_map(data.shape.size(), -1);
  for (std::size_t j = 0; j < data.shape.size(); ++j) {
    if (j < axis) {
      data_map[j] = dims[j];
    } else if (j > axis) {
      data_map[j] = dims[j - 1 + r_idx];
    } else if (embedding) {
      data_map[j] = add_dim(s, "v", data.shape[j], true);
    }
  }
  map_input(op, g, s, 0, data_map);
  map_input(op, g, s, 1,
            std::vector<int>(dims.begin() + static_cast<std::ptrdiff_t>(axis),
                             dims.begin() + static_cast<std::ptrdiff_t>(axis + r_idx)));
  map_output(op, g, s, 0, dims);
  s.inputs[0].read_by_index = true;
  if (embedding) {
    s.op_class = OpClass::embedding;
    add_grad_flops(op, g, s, 0, static_cast<double>(output(op, g, 0).elements()));
  }
}

// Y[i...] = data[i with dim axis replaced by indices[i...]]: Y has the indices' shape.
void describe_gather_elements(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  const Tensor& data = input(op, g, 0);
  require_rank(op, data, dims.size());
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), dims.size()));
  std::vector<int> data_map = equal_size_map(s, data.shape, dims);
  data_map[axis] = -1;
  map_input(op, g, s, 0, data_map);
  map_input(op, g, s, 1, dims);
  map_output(op, g, s, 0, dims);
  s.inputs[0].read_by_index = true; // an element of data per element of the output
}

// Y = indices.shape[:-1] + data.shape[batch_dims + q:], q = indices.shape[-1].
void describe_gather_nd(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  const Tensor& data = input(op, g, 0);
  const Tensor& idx = input(op, g, 1);
  const auto b = static_cast<std::size_t>(op.attr_int("batch_dims", 0));
  if (idx.shape.empty() || b + static_cast<std::size_t>(idx.shape.back()) > data.shape.size()) {
    fail(op, fmt::format("indices {} do not index data {}", shape_string(idx.shape), shape_string(data.shape)));
  }
  const std::size_t q = static_cast<std::size_t>(idx.shape.back());
  const std::size_t lead = idx.shape.size() - 1;
  if (dims.size() != lead + data.shape.size() - b - q) {
    fail(op, fmt::format("output rank {} does not match data {} and indices {}", dims.size(), shape_string(data.shape),
                         shape_string(idx.shape)));
  }
  std::vector<int> data_map(data.shape.size(), -1);
  for (std::size_t j = 0; j < data.shape.size(); ++j) {
    if (j < b) {
      data_map[j] = dims[j];
    } else if (j >= b + q) {
      data_map[j] = dims[lead + j - b - q];
    }
  }
  std::vector<int> idx_map(dims.begin(), dims.begin() + static_cast<std::ptrdiff_t>(lead));
  idx_map.push_back(-1);
  map_input(op, g, s, 0, data_map);
  map_input(op, g, s, 1, idx_map);
  map_output(op, g, s, 0, dims);
  s.inputs[0].read_by_index = true; // the slices the indices pick, no more than the output holds
}

// Y = data with updates[i..., :] written at data[indices[i...], :]: the trailing dims of updates
// are data's trailing dims; the scattered-into dims are read whole.
void describe_scatter_nd(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  const Tensor& idx = input(op, g, 1);
  const Tensor& upd = input(op, g, 2);
  require_rank(op, input(op, g, 0), dims.size());
  if (idx.shape.empty() || static_cast<std::size_t>(idx.shape.back()) > dims.size()) {
    fail(op, fmt::format("indices {} do not index an output of rank {}", shape_string(idx.shape), dims.size()));
  }
  const std::size_t q = static_cast<std::size_t>(idx.shape.back());
  const std::size_t lead = idx.shape.size() - 1;
  require_rank(op, upd, lead + dims.size() - q);
  std::vector<int> upd_map(upd.shape.size(), -1);
  for (std::size_t j = lead; j < upd.shape.size(); ++j) {
    const int d = dims[q + j - lead];
    upd_map[j] = upd.shape[j] == s.dims[static_cast<std::size_t>(d)].size ? d : -1;
  }
  map_input(op, g, s, 0, dims);
  map_input(op, g, s, 2, upd_map);
  map_output(op, g, s, 0, dims);
}

// Y = data with updates[i...] written along `axis` at indices[i...].
void describe_scatter_elements(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", 0), dims.size()));
  map_input(op, g, s, 0, dims);
  for (std::size_t i = 1; i < 3; ++i) {
    const Tensor& t = input(op, g, i);
    require_rank(op, t, dims.size());
    std::vector<int> m = equal_size_map(s, t.shape, dims);
    m[axis] = -1;
    map_input(op, g, s, i, m);
  }
  map_output(op, g, s, 0, dims);
}

// Expand, Tile, Pad, Trilu: input 0 maps wherever a dim keeps its size.
void describe_same_size(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  map_input(op, g, s, 0, equal_size_map(s, input(op, g, 0).shape, dims));
  map_output(op, g, s, 0, dims);
}

// Resize, Upsample, DepthToSpace, SpaceToDepth: a block of output rows or columns reads the
// proportional block of input (plus an interpolation halo), so spatial dims map although their
// sizes differ. Channels map only when kept, since DepthToSpace interleaves them.
void describe_rescale(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  const Tensor& x = input(op, g, 0);
  require_rank(op, x, dims.size());
  std::vector<int> x_map = equal_size_map(s, x.shape, dims);
  for (std::size_t j = 2; j < dims.size(); ++j) {
    x_map[j] = dims[j];
  }
  map_input(op, g, s, 0, x_map);
  map_output(op, g, s, 0, dims);
}

// Y = indices.shape with a depth dim inserted at `axis`.
void describe_one_hot(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  require_rank(op, input(op, g, 0), dims.size() - 1);
  const auto axis = static_cast<std::size_t>(normalize_axis(op, op.attr_int("axis", -1), dims.size()));
  std::vector<int> idx_map = dims;
  idx_map.erase(idx_map.begin() + static_cast<std::ptrdiff_t>(axis));
  map_input(op, g, s, 0, idx_map);
  map_output(op, g, s, 0, dims);
}

// The iteration space is the input's; the scanned or selected axis stays whole.
template <bool Scan> void describe_along_axis(const Op& op, const Graph& g, OpSemantics& s) {
  const Tensor& x = input(op, g, 0);
  std::vector<int> dims;
  for (std::size_t i = 0; i < x.shape.size(); ++i) {
    dims.push_back(add_dim(s, fmt::format("d{}", i), x.shape[i]));
  }
  std::int64_t axis = -1; // TopK's default
  if (Scan) {
    const auto a = int_input(op, g, 1);
    if (!a || a->size() != 1) {
      fail(op, "the value of the axis input is not known");
    }
    axis = a->front();
  } else {
    axis = op.attr_int("axis", -1);
  }
  const auto ax = static_cast<std::size_t>(normalize_axis(op, axis, dims.size()));
  keep_whole(s, dims[ax]);
  map_input(op, g, s, 0, dims);
  std::vector<int> y_map = dims;
  if (!Scan) {
    y_map[ax] = -1; // k of the axis's entries
  }
  for (std::size_t k = 0; k < op.outputs.size(); ++k) {
    map_output(op, g, s, k, y_map);
  }
  if (Scan) {
    pointwise_costs(op, g, s, 1, 1); // a running sum is one add per element, unlike the rest here
  }
}

constexpr InputSlot D = InputSlot::data;
constexpr InputSlot I = InputSlot::index;
constexpr OpClass M = OpClass::data_movement;

const OpDescriptor table[] = {
    {"Transpose", M, {D}, describe_transpose},
    {"Concat", M, {D}, describe_concat},
    {"Split", M, {D, I}, describe_split},
    {"Slice", M, {D, I}, describe_slice},
    {"Gather", M, {D, I}, describe_gather},
    {"GatherElements", M, {D, I}, describe_gather_elements},
    {"GatherND", M, {D, I}, describe_gather_nd},
    {"ScatterND", M, {D, I, D}, describe_scatter_nd},
    {"ScatterElements", M, {D, I, D}, describe_scatter_elements},
    {"Scatter", M, {D, I, D}, describe_scatter_elements},
    {"Expand", M, {D, I}, describe_same_size},
    {"Tile", M, {D, I}, describe_same_size},
    {"Pad", M, {D, I}, describe_same_size},
    {"Trilu", M, {D, I}, describe_same_size},
    {"Resize", M, {D, I}, describe_rescale},
    {"Upsample", M, {D, I}, describe_rescale},
    {"DepthToSpace", M, {D}, describe_rescale},
    {"SpaceToDepth", M, {D}, describe_rescale},
    {"OneHot", M, {I}, describe_one_hot},
    {"TopK", M, {D, I}, describe_along_axis<false>},
    {"CumSum", M, {D, I}, describe_along_axis<true>},
};

} // namespace

std::span<const OpDescriptor> movement_ops() {
  return table;
}

} // namespace partita::graph::detail
