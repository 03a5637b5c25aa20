// Conv, pools and BatchNormalization on local shards (op_kernels.h says how shards relate to the
// op). Window ops compute their output block from the input rows its windows read: the shard's
// own rows, or, under a spatial split, the rows plus the halo the executor fetched (halo.h). The
// padding of a block is what is left of the op's padding at its edges, so a block and the whole
// tensor compute the same numbers.
//
// BatchNormalization runs in training mode (batch statistics), as core prices it. When core's
// description has its statistics dims split (cost::statistics_axes), the statistics are summed
// over the split group (sync-BN) through OpBuffers::sum_statistics.

#include "op_kernels_cnn.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <numeric>

namespace partita::runtime::cnn {
namespace {

bool is_window_pool(const std::string& type) {
  return type == "MaxPool" || type == "AveragePool";
}

bool is_global_pool(const std::string& type) {
  return type == "GlobalAveragePool" || type == "GlobalMaxPool";
}

// One spatial axis of a window op, ONNX's way.
struct Axis {
  std::int64_t kernel = 1, stride = 1, dilation = 1, pad_begin = 0, pad_end = 0;
  std::int64_t extent() const { return (kernel - 1) * dilation + 1; }
};

std::array<Axis, 2> window_axes(const graph::Graph& g, const graph::Op& op) {
  const auto& x = g.tensor(op.inputs[0]).shape;
  const auto& y = g.tensor(op.outputs[0]).shape;
  std::vector<std::int64_t> kernel = op.attr_ints("kernel_shape");
  if (kernel.empty() && op.type == "Conv") {
    const auto& w = g.tensor(op.inputs[1]).shape;
    kernel.assign(w.begin() + 2, w.end());
  }
  const auto strides = op.attr_ints("strides", {1, 1});
  const auto dilations = op.attr_ints("dilations", {1, 1});
  const auto pads = op.attr_ints("pads", {0, 0, 0, 0});
  const auto auto_pad = op.attr_string("auto_pad", "NOTSET");
  if (kernel.size() != 2 || strides.size() != 2 || dilations.size() != 2 || pads.size() != 4) {
    throw Error(fmt::format("op '{}' ({}): kernel_shape {}, strides {}, dilations {}, pads {} do not describe a 2-D "
                            "window",
                            op.name, op.type, kernel, strides, dilations, pads));
  }
  std::array<Axis, 2> a;
  for (std::size_t i = 0; i < 2; ++i) {
    a[i] = {kernel[i], strides[i], dilations[i], pads[i], pads[i + 2]};
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const auto total = std::max<std::int64_t>(0, (y[2 + i] - 1) * a[i].stride + a[i].extent() - x[2 + i]);
      a[i].pad_begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      a[i].pad_end = total - a[i].pad_begin;
    } else if (auto_pad == "VALID") {
      a[i].pad_begin = a[i].pad_end = 0;
    }
  }
  return a;
}

// Input rows [first, last) that output rows [o0, o1) read, clipped to the input's `size` rows.
std::pair<std::int64_t, std::int64_t> rows_read(const Axis& a, std::int64_t o0, std::int64_t o1, std::int64_t size) {
  if (o1 <= o0) {
    return {0, 0};
  }
  return {std::clamp<std::int64_t>(o0 * a.stride - a.pad_begin, 0, size),
          std::clamp<std::int64_t>((o1 - 1) * a.stride - a.pad_begin + a.extent(), 0, size)};
}

// The window of a block: the op's padding where the block reaches the tensor's edge (and beyond
// it, for a ceil_mode pool's last window), none inside.
Window2d local_window(const std::array<Axis, 2>& a, const sharding::Block& in, const sharding::Block& out) {
  Window2d w;
  w.kh = a[0].kernel;
  w.kw = a[1].kernel;
  w.stride_h = a[0].stride;
  w.stride_w = a[1].stride;
  w.dilation_h = a[0].dilation;
  w.dilation_w = a[1].dilation;
  const auto before = [&](std::size_t i) {
    return in.begin[2 + i] - (out.begin[2 + i] * a[i].stride - a[i].pad_begin);
  };
  const auto after = [&](std::size_t i) {
    return (out.end[2 + i] - 1) * a[i].stride - a[i].pad_begin + a[i].extent() - in.end[2 + i];
  };
  w.pad_top = before(0);
  w.pad_left = before(1);
  w.pad_bottom = after(0);
  w.pad_right = after(1);
  return w;
}

// Global channels [first, last) of X that a Conv's output block reads: a group's slice.
std::pair<std::int64_t, std::int64_t> conv_channels_read(const graph::Graph& g, const graph::Op& op,
                                                         const sharding::Block& x_block,
                                                         const sharding::Block& w_block) {
  const auto& x = g.tensor(op.inputs[0]).shape;
  const auto& y = g.tensor(op.outputs[0]).shape;
  const std::int64_t groups = op.attr_int("group", 1);
  if (groups == 1 || groups == x[1]) { // X's channels are split with ci (or with co, depthwise)
    return {x_block.begin[1], x_block.end[1]};
  }
  const std::int64_t in_per_group = x[1] / groups, out_per_group = y[1] / groups;
  const std::int64_t co0 = w_block.begin[0], co1 = w_block.end[0];
  if (co0 % out_per_group != 0 || co1 % out_per_group != 0 || w_block.begin[1] != 0 || w_block.end[1] != in_per_group) {
    throw Error(fmt::format("op '{}' (Conv, group {}): this rank's weight block (output channels {}..{}, input "
                            "channels {}..{}) does not hold whole groups of {} output and {} input channels; plan "
                            "it with a split of the output channels by whole groups",
                            op.name, groups, co0, co1, w_block.begin[1], w_block.end[1], out_per_group, in_per_group));
  }
  return {co0 / out_per_group * in_per_group, co1 / out_per_group * in_per_group};
}

// The region of X (global coordinates) a window op's output block reads.
sharding::Block input_region(const graph::Graph& g, const graph::Op& op, const sharding::Block& x_block,
                             const sharding::Block* w_block, const sharding::Block& y_block) {
  const auto& x = g.tensor(op.inputs[0]).shape;
  sharding::Block r = x_block;
  if (op.type == "Conv" && w_block != nullptr) {
    std::tie(r.begin[1], r.end[1]) = conv_channels_read(g, op, x_block, *w_block);
  }
  if (is_global_pool(op.type)) {
    return r;
  }
  const auto a = window_axes(g, op);
  for (std::size_t i = 0; i < 2; ++i) {
    std::tie(r.begin[2 + i], r.end[2 + i]) = rows_read(a[i], y_block.begin[2 + i], y_block.end[2 + i], x[2 + i]);
  }
  return r;
}

bool contains(const sharding::Block& outer, const sharding::Block& inner) {
  for (std::size_t d = 0; d < outer.begin.size(); ++d) {
    if (inner.begin[d] < outer.begin[d] || inner.end[d] > outer.end[d]) {
      return false;
    }
  }
  return true;
}

std::string block_string(const sharding::Block& b) {
  return fmt::format("[{}]..[{}]", fmt::join(b.begin, ","), fmt::join(b.end, ","));
}

// X restricted to `region`: the shard itself when it is exactly that, else a packed copy.
struct Region {
  sharding::Block block;
  Floats copy;
  const float* data = nullptr;
};

Region read_region(Backend& backend, const graph::Op& op, const Shard& x, const sharding::Block& region) {
  if (!contains(x.block, region)) {
    throw Error(fmt::format("op '{}' ({}): its output block reads input region {}, which this rank's input block {} "
                            "does not hold (a spatial split reads a halo from its neighbours)",
                            op.name, op.type, block_string(region), block_string(x.block)));
  }
  Region r{region, {}, x.data.data()};
  if (region.begin != x.block.begin || region.end != x.block.end) {
    r.copy = uninitialized_floats(static_cast<std::size_t>(region.elements()));
    std::int64_t from = 0, to = 0;
    const StridedCopy c = region_copy(x.block, region, region, from, to);
    backend.copy(c, x.data.data() + from, r.copy.data() + to, false);
    r.data = r.copy.data();
  }
  return r;
}

// Writes a gradient computed over `region` into `dx` (zero outside it).
void write_region(Backend& backend, Shard& dx, const sharding::Block& region, const Floats& values) {
  if (region.begin != dx.block.begin || region.end != dx.block.end) {
    backend.fill(dx.elements(), 0.F, dx.data.data());
  }
  std::int64_t from = 0, to = 0;
  const StridedCopy c = region_copy(region, dx.block, region, from, to);
  backend.copy(c, values.data() + from, dx.data.data() + to, false);
}

std::int64_t extent(const sharding::Block& b, std::size_t d) {
  return b.end[d] - b.begin[d];
}

struct ConvPlan {
  ConvShape shape;
  sharding::Block x_region;
  bool adds_bias = false; // this rank holds the first block of ci: it adds the bias (once per partial sum)
};

ConvPlan conv_plan(const graph::Graph& g, const graph::Op& op, const OpBuffers& buf) {
  const Shard& x = *buf.inputs[0];
  const Shard& w = *buf.inputs[1];
  const Shard& y = *buf.outputs[0];
  ConvPlan p;
  p.x_region = input_region(g, op, x.block, &w.block, y.block);
  const auto& r = p.x_region;
  auto& s = p.shape;
  s.n = extent(r, 0);
  s.c_in = extent(r, 1);
  s.c_out = extent(y.block, 1);
  s.h = extent(r, 2);
  s.w = extent(r, 3);
  s.oh = extent(y.block, 2);
  s.ow = extent(y.block, 3);
  s.groups = s.c_in / extent(w.block, 1);
  s.window = local_window(window_axes(g, op), r, y.block);
  if (s.groups * extent(w.block, 1) != s.c_in || s.c_out % s.groups != 0 || extent(w.block, 0) != s.c_out) {
    throw Error(fmt::format("op '{}' (Conv): local blocks disagree: input channels {}, weight {}, output channels {}",
                            op.name, s.c_in, block_string(w.block), s.c_out));
  }
  p.adds_bias = buf.inputs.size() > 2 && buf.inputs[2] != nullptr && w.block.begin[1] == 0;
  return p;
}

Pool pool_kind(const graph::Op& op) {
  if (op.type == "MaxPool" || op.type == "GlobalMaxPool") {
    return Pool::max;
  }
  return op.attr_int("count_include_pad", 0) != 0 ? Pool::average_include_padding : Pool::average_exclude_padding;
}

struct PoolPlan {
  PoolShape shape;
  sharding::Block x_region;
};

PoolPlan pool_plan(const graph::Graph& g, const graph::Op& op, const Shard& x, const Shard& y) {
  PoolPlan p;
  p.x_region = input_region(g, op, x.block, nullptr, y.block);
  const auto& r = p.x_region;
  auto& s = p.shape;
  s.n = extent(r, 0);
  s.c = extent(r, 1);
  if (is_global_pool(op.type)) { // the spatial dims as one column: a window over all of it
    s.h = 1;
    for (std::size_t d = 2; d < r.begin.size(); ++d) {
      s.h *= extent(r, d);
    }
    s.window.kh = s.h;
    return p;
  }
  s.h = extent(r, 2);
  s.w = extent(r, 3);
  s.oh = extent(y.block, 2);
  s.ow = extent(y.block, 3);
  s.window = local_window(window_axes(g, op), r, y.block);
  return p;
}

BatchNormShape batch_norm_shape(const graph::Op& op, const Shard& x) {
  BatchNormShape s;
  const auto e = x.extents();
  s.n = e[0];
  s.c = e[1];
  for (std::size_t d = 2; d < e.size(); ++d) {
    s.spatial *= e[d];
  }
  s.epsilon = static_cast<float>(op.attr_float("epsilon", 1e-5));
  return s;
}

// Elements per channel the statistics are taken over: the whole tensor's batch and spatial dims.
std::int64_t statistics_count(const graph::Graph& g, const graph::Op& op) {
  const auto& x = g.tensor(op.inputs[0]).shape;
  std::int64_t n = x[0];
  for (std::size_t d = 2; d < x.size(); ++d) {
    n *= x[d];
  }
  return n;
}

std::int64_t local_count(const BatchNormShape& s) {
  return s.n * s.spatial;
}

void batch_norm_forward(Backend& backend, const graph::Graph& g, const graph::Op& op, const OpBuffers& buf) {
  const Shard& x = *buf.inputs[0];
  const auto s = batch_norm_shape(op, x);
  const auto c = static_cast<std::size_t>(s.c);
  if (buf.saved == nullptr) {
    throw Error(
        fmt::format("op '{}' (BatchNormalization): no room to keep the statistics for the backward pass", op.name));
  }
  auto& saved = *buf.saved; // mean, variance
  if (saved.size() != 2 * c) {
    saved = uninitialized_floats(2 * c); // the forward kernel writes both
  }
  float* mean = saved.data();
  float* variance = saved.data() + c;
  const float* scale = buf.inputs[1]->data.data();
  const float* shift = buf.inputs[2]->data.data();
  float* y = buf.outputs[0]->data.data();
  backend.batch_norm_forward(s, x.data.data(), scale, shift, mean, variance, false, y);
  if (buf.sum_statistics) {
    // The host turns the statistics into sums for the group's MPI reduction (a copy of them where
    // the tensor memory is the device's). This shard's count x (mean, mean of squares), summed over
    // the group, gives the batch's.
    backend.synchronize();
    HostView stats(saved, HostView::read_write);
    float* host_mean = stats.data();
    float* host_variance = stats.data() + c;
    const auto m = static_cast<float>(local_count(s));
    std::vector<float> sums(2 * c);
    for (std::size_t i = 0; i < c; ++i) {
      sums[i] = m * host_mean[i];
      sums[c + i] = m * (host_variance[i] + host_mean[i] * host_mean[i]);
    }
    buf.sum_statistics(sums.data(), static_cast<std::int64_t>(sums.size()));
    const auto total = static_cast<float>(statistics_count(g, op));
    for (std::size_t i = 0; i < c; ++i) {
      host_mean[i] = sums[i] / total;
      host_variance[i] = std::max(0.F, sums[c + i] / total - host_mean[i] * host_mean[i]);
    }
    stats.commit();
    backend.batch_norm_forward(s, x.data.data(), scale, shift, mean, variance, true, y);
    backend.synchronize();
  }
  // Training mode's optional outputs: running mean and variance, updated with momentum.
  const float momentum = static_cast<float>(op.attr_float("momentum", 0.9));
  for (std::size_t k = 1; k < 3 && k < buf.outputs.size(); ++k) {
    if (buf.outputs[k] == nullptr) {
      continue;
    }
    const float* running =
        buf.inputs.size() > k + 2 && buf.inputs[k + 2] != nullptr ? buf.inputs[k + 2]->data.data() : nullptr;
    const float* current = k == 1 ? mean : variance;
    const auto n = static_cast<std::int64_t>(c);
    float* out = buf.outputs[k]->data.data();
    backend.scale(n, 1.F - momentum, current, out);
    if (running != nullptr) {
      Floats kept = uninitialized_floats(c);
      backend.scale(n, momentum, running, kept.data());
      backend.binary(Binary::add, {n}, kept.data(), {n}, out, {n}, out);
    }
  }
}

void batch_norm_backward(Backend& backend, const graph::Graph& g, const graph::Op& op, const OpBuffers& buf,
                         const Shard& dy, const std::vector<Shard*>& d_in) {
  const Shard& x = *buf.inputs[0];
  const auto s = batch_norm_shape(op, x);
  const auto c = static_cast<std::size_t>(s.c);
  const auto& saved = *buf.saved;
  if (saved.size() != 2 * c) {
    throw Error(fmt::format("op '{}' (BatchNormalization): backward before forward", op.name));
  }
  const float* mean = saved.data();
  const float* variance = saved.data() + c;
  const float* scale = buf.inputs[1]->data.data();
  const auto wants = [&](std::size_t i) { return i < d_in.size() && d_in[i] != nullptr; };
  Floats dx_scratch = uninitialized_floats(wants(0) ? 0 : static_cast<std::size_t>(x.elements()));
  Floats d_scale = uninitialized_floats(c), d_shift = uninitialized_floats(c);
  float* dx = wants(0) ? d_in[0]->data.data() : dx_scratch.data();
  const bool synced = static_cast<bool>(buf.sum_statistics);
  backend.batch_norm_backward(s, x.data.data(), scale, mean, variance, dy.data.data(), synced, dx, d_scale.data(),
                              d_shift.data());
  if (synced) {
    // The host gathers d_scale and d_shift for the group's MPI reduction. The part of dx through
    // the batch's statistics needs the batch's sums of dy * xhat and dy; the weight gradients stay
    // this shard's partial sums (the executor reduces them).
    std::vector<float> totals(2 * c);
    to_host(d_scale, 0, std::span<float>(totals.data(), c));
    to_host(d_shift, 0, std::span<float>(totals.data() + c, c));
    buf.sum_statistics(totals.data(), static_cast<std::int64_t>(totals.size()));
    const Floats summed = floats_from_host(totals);
    backend.batch_norm_backward_statistics(s, statistics_count(g, op), x.data.data(), scale, mean, variance,
                                           summed.data(), summed.data() + c, dx);
    backend.synchronize();
  }
  if (wants(1)) {
    backend.copy(contiguous_copy(static_cast<std::int64_t>(c)), d_scale.data(), d_in[1]->data.data(), false);
  }
  if (wants(2)) {
    backend.copy(contiguous_copy(static_cast<std::int64_t>(c)), d_shift.data(), d_in[2]->data.data(), false);
  }
}

} // namespace

bool handles(const std::string& type) {
  return type == "Conv" || type == "BatchNormalization" || is_window_pool(type) || is_global_pool(type);
}

std::string missing_kernel(const graph::Graph& g, graph::OpId id) {
  const graph::Op& op = g.op(id);
  const auto rank = g.tensor(op.inputs[0]).shape.size();
  if (op.type == "BatchNormalization") {
    if (rank < 2 || op.inputs.size() < 3 || op.inputs[1] == graph::no_tensor || op.inputs[2] == graph::no_tensor) {
      return "BatchNormalization without [N, C, ...] input, scale and bias";
    }
    return {};
  }
  if (is_global_pool(op.type)) {
    return rank >= 3 ? std::string() : fmt::format("{} of a rank-{} input", op.type, rank);
  }
  if (rank != 4) {
    return fmt::format("{} on a rank-{} input (2-D windows only)", op.type, rank);
  }
  if (op.type == "MaxPool" && op.outputs.size() > 1 && op.outputs[1] != graph::no_tensor) {
    return "MaxPool's Indices output";
  }
  if (op.type == "Conv") {
    const auto& x = g.tensor(op.inputs[0]).shape;
    const auto& y = g.tensor(op.outputs[0]).shape;
    const std::int64_t groups = op.attr_int("group", 1);
    if (groups == x[1] && groups > 1 && y[1] != x[1]) {
      return "depthwise Conv with a channel multiplier";
    }
    return {};
  }
  // ONNX counts a ceil_mode window's overhang beyond the pads out of the divisor even with
  // count_include_pad; oneDNN would count it.
  if (op.type == "AveragePool" && pool_kind(op) == Pool::average_include_padding) {
    const auto a = window_axes(g, op);
    const auto& x = g.tensor(op.inputs[0]).shape;
    const auto& y = g.tensor(op.outputs[0]).shape;
    for (std::size_t i = 0; i < 2; ++i) {
      if ((y[2 + i] - 1) * a[i].stride - a[i].pad_begin + a[i].extent() > x[2 + i] + a[i].pad_end) {
        return "AveragePool with count_include_pad whose ceil_mode windows overhang the pads";
      }
    }
  }
  return {};
}

sharding::Block window_input_region(const graph::Graph& g, graph::OpId id, const sharding::Block& x_block,
                                    const sharding::Block& y_block) {
  const graph::Op& op = g.op(id);
  // Only rows: the channel slice a grouped Conv reads is inside the block it holds.
  if (is_global_pool(op.type)) {
    return x_block;
  }
  return input_region(g, op, x_block, nullptr, y_block);
}

void forward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buf) {
  const graph::Op& op = g.op(id);
  if (op.type == "BatchNormalization") {
    batch_norm_forward(backend, g, op, buf);
    return;
  }
  const Shard& x = *buf.inputs[0];
  Shard& y = *buf.outputs[0];
  if (op.type == "Conv") {
    const auto p = conv_plan(g, op, buf);
    const auto in = read_region(backend, op, x, p.x_region);
    backend.conv_forward(p.shape, in.data, buf.inputs[1]->data.data(),
                         p.adds_bias ? buf.inputs[2]->data.data() : nullptr, y.data.data());
    return;
  }
  const auto p = pool_plan(g, op, x, y);
  const auto in = read_region(backend, op, x, p.x_region);
  backend.pool_forward(pool_kind(op), p.shape, in.data, y.data.data());
}

void backward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buf,
              const std::vector<const Shard*>& d_out, const std::vector<Shard*>& d_in) {
  const graph::Op& op = g.op(id);
  const auto wants = [&](std::size_t i) { return i < d_in.size() && d_in[i] != nullptr; };
  const Shard& dy = *d_out[0];
  if (op.type == "BatchNormalization") {
    batch_norm_backward(backend, g, op, buf, dy, d_in);
    return;
  }
  const Shard& x = *buf.inputs[0];
  if (op.type == "Conv") {
    const auto p = conv_plan(g, op, buf);
    const auto in = read_region(backend, op, x, p.x_region);
    if (wants(0)) {
      Floats dx = uninitialized_floats(static_cast<std::size_t>(p.x_region.elements()));
      backend.conv_backward_data(p.shape, buf.inputs[1]->data.data(), dy.data.data(), dx.data());
      write_region(backend, *d_in[0], p.x_region, dx);
    }
    if (wants(1) || wants(2)) {
      Floats dw = uninitialized_floats(wants(1) ? 0 : static_cast<std::size_t>(buf.inputs[1]->elements()));
      Floats db = uninitialized_floats(static_cast<std::size_t>(p.shape.c_out));
      backend.conv_backward_weights(p.shape, in.data, dy.data.data(), wants(1) ? d_in[1]->data.data() : dw.data(),
                                    wants(2) ? db.data() : nullptr);
      if (wants(2)) { // only the rank that added the bias: the replica reduction over ci then counts it once
        if (p.adds_bias) {
          backend.copy(contiguous_copy(d_in[2]->elements()), db.data(), d_in[2]->data.data(), false);
        } else {
          backend.fill(d_in[2]->elements(), 0.F, d_in[2]->data.data());
        }
      }
    }
    return;
  }
  if (wants(0)) {
    const auto p = pool_plan(g, op, x, dy);
    const auto in = read_region(backend, op, x, p.x_region);
    Floats dx = uninitialized_floats(static_cast<std::size_t>(p.x_region.elements()));
    backend.pool_backward(pool_kind(op), p.shape, in.data, dy.data.data(), dx.data());
    write_region(backend, *d_in[0], p.x_region, dx);
  }
}

} // namespace partita::runtime::cnn
