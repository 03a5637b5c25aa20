// Normalizations and softmax. The iteration space is the input's shape. Dims that statistics are
// taken over are reductions and may not be split (a split would need the statistics exchanged
// inside the op), except BatchNorm's batch and spatial dims: splitting those is what data (and
// spatial) parallelism does, so they stay splittable and are marked as statistics dims. A split
// of them synchronizes the statistics across the split (sync-BN: an all-reduce of two values per
// channel forward and two backward, priced by cost::op_cost), so the sharded op equals the
// unsharded one; per-device statistics would make the result depend on the split.
//
// FLOPs per element follow fvcore and DeepSpeed's profiler: a normalization is ~4 per element
// (mean, variance, normalize), 5 with an affine scale and shift; its backward ~8 for the data
// gradient, 2 for the scale gradient and 1 for the shift gradient. Training-mode costs are used
// for BatchNorm even in an inference export, since Partita costs training.

#include "graph/op_helpers.h"

namespace partita::graph::detail {
namespace {

constexpr double norm_fwd = 4;      // per element, without affine
constexpr double affine_fwd = 1;    // per element, scale and shift (fused multiply-add)
constexpr double norm_bwd_data = 8; // per element
constexpr double scale_bwd = 2;     // per element: sum(dy * xhat)
constexpr double shift_bwd = 1;     // per element: sum(dy)
constexpr double softmax_fwd = 5;   // max, subtract, exp, sum, divide
constexpr double softmax_bwd = 4;   // dx = y * (dy - sum(dy * y))
constexpr double lp_norm_fwd = 3;   // |x|^p, sum, divide (root per row is negligible)
constexpr double lp_norm_bwd = 6;

// One iteration dim per dim of input 0, named d0, d1, ...; returns their indices.
std::vector<int> input_space(const Op& op, const Graph& g, OpSemantics& s) {
  const Tensor& x = input(op, g, 0);
  std::vector<int> dims;
  for (std::size_t i = 0; i < x.shape.size(); ++i) {
    dims.push_back(add_dim(s, fmt::format("d{}", i), x.shape[i]));
  }
  return dims;
}

// Marks dims as statistics axes: summed over, kept whole.
void make_reduction(OpSemantics& s, const std::vector<int>& dims) {
  for (int d : dims) {
    s.dims[static_cast<std::size_t>(d)].reduction = true;
    s.dims[static_cast<std::size_t>(d)].splittable = false;
  }
}

// Maps a parameter right-aligned onto `target` dims where sizes agree (broadcast dims unmapped).
std::vector<int> right_aligned(const Op& op, const OpSemantics& s, const Tensor& t, const std::vector<int>& target) {
  if (t.shape.size() > target.size()) {
    fail(op, fmt::format("tensor '{}' of shape {} has more dims than the {} it scales", t.name, shape_string(t.shape),
                         target.size()));
  }
  std::vector<int> dims(t.shape.size(), -1);
  const std::size_t offset = target.size() - t.shape.size();
  for (std::size_t j = 0; j < t.shape.size(); ++j) {
    const int d = target[offset + j];
    if (t.shape[j] == s.dims[static_cast<std::size_t>(d)].size) {
      dims[j] = d;
    } else if (t.shape[j] != 1) {
      fail(op, fmt::format("tensor '{}' of shape {} does not broadcast over the normalized dims", t.name,
                           shape_string(t.shape)));
    }
  }
  return dims;
}

// Maps an extra output (saved mean, inverse std) of the input's rank with reduced dims kept as 1,
// or of rank 1 over `channel`.
void map_stat_output(const Op& op, const Graph& g, OpSemantics& s, std::size_t k, const std::vector<int>& x_dims,
                     int channel) {
  if (k >= op.outputs.size() || op.outputs[k] == no_tensor) {
    return;
  }
  const Tensor& t = output(op, g, k);
  std::vector<int> dims(t.shape.size(), -1);
  if (t.shape.size() == x_dims.size()) {
    for (std::size_t j = 0; j < dims.size(); ++j) {
      const int d = x_dims[j];
      dims[j] = !s.dims[static_cast<std::size_t>(d)].reduction && t.shape[j] == s.dims[static_cast<std::size_t>(d)].size
                    ? d
                    : -1;
    }
  } else if (t.shape.size() == 1 && channel >= 0 && t.shape[0] == s.dims[static_cast<std::size_t>(channel)].size) {
    dims[0] = channel;
  }
  map_output(op, g, s, k, dims);
}

// Costs of y = scale * normalize(x) + shift over the input's elements.
void norm_costs(const Op& op, const Graph& g, OpSemantics& s, std::size_t scale, std::size_t shift) {
  const double elems = s.iteration_points();
  const bool affine = has_input(op, scale) || has_input(op, shift);
  s.fwd_flops = (norm_fwd + (affine ? affine_fwd : 0)) * elems;
  add_grad_flops(op, g, s, 0, norm_bwd_data * elems);
  add_grad_flops(op, g, s, scale, scale_bwd * elems);
  add_grad_flops(op, g, s, shift, shift_bwd * elems);
}

// X[N, C, s...]: per-channel statistics over the batch and spatial dims, scale/B/mean/var over C.
void describe_batch_norm(const Op& op, const Graph& g, OpSemantics& s) {
  const Tensor& x = input(op, g, 0);
  if (x.shape.size() < 2) {
    fail(op, fmt::format("input '{}' must have rank >= 2 (N, C, ...), got {}", x.name, shape_string(x.shape)));
  }
  std::vector<int> dims{add_dim(s, "n", x.shape[0]), add_dim(s, "c", x.shape[1])};
  const std::size_t spatial = x.shape.size() - 2;
  for (std::size_t i = 0; i < spatial; ++i) {
    dims.push_back(add_dim(s, spatial_name("", i, spatial), x.shape[2 + i]));
  }
  for (const int d : dims) {
    s.dims[static_cast<std::size_t>(d)].statistics = d != dims[1];
  }
  map_input(op, g, s, 0, dims);
  for (std::size_t i = 1; i < 5; ++i) {
    map_input(op, g, s, i, {dims[1]});
  }
  map_output(op, g, s, 0, dims);
  // Training mode adds running mean/var (and, before opset 14, saved mean/var), all over C.
  for (std::size_t k = 1; k < op.outputs.size(); ++k) {
    map_stat_output(op, g, s, k, dims, dims[1]);
  }
  norm_costs(op, g, s, 1, 2);
}

// Statistics over dims [axis, rank); Scale and B broadcast over those dims.
void describe_layer_norm(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = input_space(op, g, s);
  const int axis = normalize_axis(op, op.attr_int("axis", -1), dims.size());
  const std::vector<int> normalized(dims.begin() + axis, dims.end());
  make_reduction(s, normalized);
  map_input(op, g, s, 0, dims);
  for (std::size_t i = 1; i < 3; ++i) {
    if (has_input(op, i)) {
      map_input(op, g, s, i, right_aligned(op, s, input(op, g, i), normalized));
    }
  }
  map_output(op, g, s, 0, dims);
  map_stat_output(op, g, s, 1, dims, -1);
  map_stat_output(op, g, s, 2, dims, -1);
  norm_costs(op, g, s, 1, 2);
}

// X[N, C, s...]: statistics per (n, c) over the spatial dims; scale and B over C.
void describe_instance_norm(const Op& op, const Graph& g, OpSemantics& s) {
  const Tensor& x = input(op, g, 0);
  if (x.shape.size() < 3) {
    fail(op, fmt::format("input '{}' must have rank >= 3 (N, C, spatial...), got {}", x.name, shape_string(x.shape)));
  }
  std::vector<int> dims{add_dim(s, "n", x.shape[0]), add_dim(s, "c", x.shape[1])};
  const std::size_t spatial = x.shape.size() - 2;
  for (std::size_t i = 0; i < spatial; ++i) {
    dims.push_back(add_dim(s, spatial_name("", i, spatial), x.shape[2 + i], true, false));
  }
  map_input(op, g, s, 0, dims);
  map_input(op, g, s, 1, {dims[1]});
  map_input(op, g, s, 2, {dims[1]});
  map_output(op, g, s, 0, dims);
  norm_costs(op, g, s, 1, 2);
}

// X[N, C, s...] with C = groups x channels-per-group: X's channels are indexed by the group dim
// (groups are contiguous channel blocks, so splitting groups splits channels); the channels within
// a group and the spatial dims are statistics axes. Scale and bias are [groups] in opset 18 and
// [C] in opset 21; either is split with the groups.
void describe_group_norm(const Op& op, const Graph& g, OpSemantics& s) {
  const Tensor& x = input(op, g, 0);
  if (x.shape.size() < 2) {
    fail(op, fmt::format("input '{}' must have rank >= 2 (N, C, ...), got {}", x.name, shape_string(x.shape)));
  }
  const std::int64_t groups = op.attr_int("num_groups", 0);
  if (groups < 1 || x.shape[1] % groups != 0) {
    fail(op, fmt::format("num_groups {} does not divide the {} channels", groups, x.shape[1]));
  }
  const int dn = add_dim(s, "n", x.shape[0]);
  const int dg = add_dim(s, "g", groups);
  std::vector<int> stats{add_dim(s, "cg", x.shape[1] / groups)};
  std::vector<int> x_map{dn, dg};
  const std::size_t spatial = x.shape.size() - 2;
  for (std::size_t i = 0; i < spatial; ++i) {
    stats.push_back(add_dim(s, spatial_name("", i, spatial), x.shape[2 + i]));
    x_map.push_back(stats.back());
  }
  make_reduction(s, stats);
  for (std::size_t i = 1; i < 3; ++i) {
    if (has_input(op, i)) {
      const Shape& p = input(op, g, i).shape;
      if (p.size() != 1 || (p[0] != groups && p[0] != x.shape[1])) {
        fail(op, fmt::format("input {} of shape {} is neither [num_groups] nor [C]", i, shape_string(p)));
      }
    }
  }
  map_input(op, g, s, 0, x_map);
  map_input(op, g, s, 1, {dg});
  map_input(op, g, s, 2, {dg});
  map_output(op, g, s, 0, x_map);
  norm_costs(op, g, s, 1, 2);
}

// y = x / ||x||_p along one axis.
void describe_lp_norm(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = input_space(op, g, s);
  const int axis = normalize_axis(op, op.attr_int("axis", -1), dims.size());
  make_reduction(s, {dims[static_cast<std::size_t>(axis)]});
  map_input(op, g, s, 0, dims);
  map_output(op, g, s, 0, dims);
  pointwise_costs(op, g, s, lp_norm_fwd, lp_norm_bwd);
}

// Softmax over one axis. Before opset 13 the input was coerced to 2-D at `axis` (default 1) and
// normalized over all trailing dims; from opset 13 over the single `axis` (default -1). The
// importer does not pass the opset, so an absent axis means the last one (the two agree for the
// usual last-axis softmax) and an explicit axis is read with opset-13 meaning.
void describe_softmax(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = input_space(op, g, s);
  const int axis = normalize_axis(op, op.attr_int("axis", -1), dims.size());
  make_reduction(s, {dims[static_cast<std::size_t>(axis)]});
  map_input(op, g, s, 0, dims);
  map_output(op, g, s, 0, dims);
  pointwise_costs(op, g, s, softmax_fwd, softmax_bwd);
  // The backward pass, dx = y (dy - sum(y dy)) along the axis, streams y and dy without a
  // transcendental: an element-wise kernel. (BERT's 1 MB of attention probabilities took 90 us
  // backward here, and 176 us forward, through exp.)
  s.backward_kernel = KernelClass::eltwise;
}

constexpr InputSlot D = InputSlot::data;
constexpr InputSlot W = InputSlot::weight;
constexpr InputSlot S = InputSlot::state;

const OpDescriptor table[] = {
    {"BatchNormalization", OpClass::normalization, {D, W, W, S, S}, describe_batch_norm},
    {"LayerNormalization", OpClass::normalization, {D, W, W}, describe_layer_norm},
    {"InstanceNormalization", OpClass::normalization, {D, W, W}, describe_instance_norm},
    {"GroupNormalization", OpClass::normalization, {D, W, W}, describe_group_norm},
    {"LpNormalization", OpClass::normalization, {D}, describe_lp_norm},
    {"Softmax", OpClass::softmax, {D}, describe_softmax},
    {"LogSoftmax", OpClass::softmax, {D}, describe_softmax},
};

} // namespace

std::span<const OpDescriptor> normalization_ops() {
  return table;
}

} // namespace partita::graph::detail
