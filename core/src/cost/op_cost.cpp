#include "partita/cost/op_cost.h"

#include "partita/cluster/collectives.h"
#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <span>
#include <unordered_map>

namespace partita::cost {

namespace {

using cluster::Collective;
using graph::TensorRole;

bool uses_matrix_units(graph::OpClass c) {
  return c == graph::OpClass::contraction || c == graph::OpClass::convolution || c == graph::OpClass::recurrent;
}

// The operand bytes a matrix product reads from memory, on top of its arithmetic: its products'
// inputs, less those the kernel before has just written (the sweep timed GEMMs on operands in
// memory; here an input 512x256 just written made a 512x256x256 product 10% faster, a warm
// weight 3-5%). Forward: Y = A B reads the inputs that are not fresh (a weight; an activation
// produced long before). Backward: dA = dY B^T reads B (kept since the forward pass) and dB =
// A^T dY reads A, each with the output's gradient fresh from its consumers' backward pass.
struct OperandBytes {
  double forward = 0, backward = 0;
};

OperandBytes cold_operand_bytes(const graph::Graph& g, const graph::Op& op, const std::vector<double>& inputs,
                                const std::vector<bool>& fresh) {
  const auto gradient = [&](std::size_t i) {
    return i < op.inputs.size() && op.inputs[i] != graph::no_tensor && graph::gets_gradient(g.tensor(op.inputs[i]));
  };
  OperandBytes p;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    p.forward += fresh[i] ? 0.0 : inputs[i];
  }
  if (inputs.size() >= 2) { // an Einsum of one operand has no second product
    p.backward = (gradient(0) ? inputs[1] : 0.0) + (gradient(1) ? inputs[0] : 0.0);
  }
  return p;
}

// Whether a memory-bound kernel finds a tensor in cache: written by the kernel just before it (an
// op at most two places away in the graph's order, a reshape between), and not by a matrix
// product or convolution, whose blocked kernels leave their output mostly in memory: here a bias
// add of 512x256 after a loop wrote its input took 30 us, after a GEMM wrote it 35 us, on an input
// in memory 39 us, and a residual add reads the stream its block started from, long before.
bool writes_to_cache(const graph::Graph& g, graph::OpId writer) {
  const auto* d = graph::find_descriptor(g.op(writer).type);
  return d == nullptr || !uses_matrix_units(d->op_class);
}

bool written_just_before(const graph::Graph& g, graph::OpId id, const graph::Tensor& t) {
  return t.role == TensorRole::activation && t.producer >= 0 && t.producer < id && id - t.producer <= 2 &&
         writes_to_cache(g, t.producer);
}

// The backward pass: the output's gradient is fresh when every consumer's backward pass (the
// kernels just before this op's, in reverse order) wrote it to cache.
bool gradient_written_just_before(const graph::Graph& g, graph::OpId id) {
  for (const graph::TensorId out : g.op(id).outputs) {
    if (out == graph::no_tensor) {
      continue;
    }
    for (const graph::OpId c : g.tensor(out).consumers) {
      if (c <= id || c - id > 2 || !writes_to_cache(g, c)) {
        return false;
      }
    }
  }
  return true;
}

// Whether a contraction runs as a batch of products on each device: an iteration dim that both
// operands carry, not reduced, spans more than one index of the device's block (attention's
// Q K^T and P V; not a layer's X W, whose weight has no batch).
bool batched_product(const graph::OpSemantics& s, const sharding::Config& config) {
  if (s.inputs.size() < 2) {
    return false;
  }
  const auto& b = s.inputs[1].dims;
  for (const int d : s.inputs[0].dims) {
    if (d < 0 || s.dims[static_cast<std::size_t>(d)].reduction || std::find(b.begin(), b.end(), d) == b.end()) {
      continue;
    }
    const std::int64_t parts = std::max(1, config.splits[static_cast<std::size_t>(d)]);
    if ((s.dims[static_cast<std::size_t>(d)].size + parts - 1) / parts > 1) {
      return true;
    }
  }
  return false;
}

} // namespace

std::optional<cluster::TimedProduct> product_shape(const graph::Graph& g, const graph::Op& op,
                                                   const graph::OpSemantics& s, const sharding::Config& config) {
  if (s.op_class != graph::OpClass::contraction || s.compute_class != graph::ComputeClass::matmul || s.steps > 1 ||
      op.inputs.size() != 2 || s.inputs.size() != 2 || op.outputs.size() != 1 ||
      config.splits.size() != s.dims.size() || op.inputs[0] == graph::no_tensor || op.inputs[1] == graph::no_tensor) {
    return std::nullopt;
  }
  const graph::Tensor& ta = g.tensor(op.inputs[0]);
  const graph::Tensor& tb = g.tensor(op.inputs[1]);
  const std::vector<int>& da = s.inputs[0].dims;
  const std::vector<int>& db = s.inputs[1].dims;
  const std::size_t ra = ta.shape.size(), rb = tb.shape.size();
  if (ra < 2 || rb < 2 || da.size() != ra || db.size() != rb) {
    return std::nullopt;
  }
  // One summed dim, A's last axis and B's next to last; m and n are not summed.
  const int kd = da[ra - 1], md = da[ra - 2], nd = db[rb - 1];
  const auto reduction = [&](int d) { return d >= 0 && s.dims[static_cast<std::size_t>(d)].reduction; };
  if (!reduction(kd) || db[rb - 2] != kd || reduction(md) || reduction(nd) ||
      std::count_if(s.dims.begin(), s.dims.end(), [](const graph::IterDim& d) { return d.reduction; }) != 1) {
    return std::nullopt;
  }
  // A device's extent of a tensor axis: the largest piece of its iteration dim, or the axis whole
  // where no dim indexes it (a broadcast axis).
  const auto extent = [&](const graph::Tensor& t, const std::vector<int>& dims, std::size_t axis) {
    const int d = dims[axis];
    if (d < 0) {
      return t.shape[axis];
    }
    const std::int64_t parts = std::max(1, config.splits[static_cast<std::size_t>(d)]);
    return (s.dims[static_cast<std::size_t>(d)].size + parts - 1) / parts;
  };
  cluster::TimedProduct p;
  p.k = extent(ta, da, ra - 1);
  p.m = extent(ta, da, ra - 2);
  p.n = extent(tb, db, rb - 1);
  std::int64_t lead = 1;
  for (std::size_t axis = 0; axis + 2 < ra; ++axis) {
    lead *= extent(ta, da, axis);
  }
  if (rb == 2) {
    p.m *= lead;
  } else {
    if (ra != rb) {
      return std::nullopt;
    }
    for (std::size_t axis = 0; axis + 2 < ra; ++axis) {
      if (extent(ta, da, axis) != extent(tb, db, axis)) {
        return std::nullopt; // broadcast batch dims: no kernel of this form
      }
    }
    p.batch = lead;
  }
  return p;
}

bool packs_operands(graph::OpClass op_class, graph::ComputeClass family, const cluster::Device& device) {
  return op_class == graph::OpClass::contraction &&
         (family == graph::ComputeClass::matmul || family == graph::ComputeClass::matmul_backward ||
          family == graph::ComputeClass::matmul_batched_backward) &&
         device.matmul_operand_bandwidth > 0;
}

double stored_bytes(const graph::Tensor& t, double shard_bytes, const TrainingSetup& setup) {
  return graph::trains_as_float(t) ? shard_bytes * setup.value_bytes() / static_cast<double>(graph::dtype_size(t.dtype))
                                   : shard_bytes;
}

namespace {

// How many groups of `groups` have a member on the node of the first group's first device:
// they cross the network at the same time and share that node's NICs.
int groups_sharing_a_node(const std::vector<std::vector<int>>& groups, const cluster::Cluster& c) {
  if (groups.empty() || groups.front().empty()) {
    return 1;
  }
  const int node = c.node_of(groups.front().front());
  int n = 0;
  for (const auto& group : groups) {
    if (std::any_of(group.begin(), group.end(), [&](int d) { return c.node_of(d) == node; })) {
      ++n;
    }
  }
  return std::max(n, 1);
}

// The slowest group's time for one collective run by every group at once.
// What a group's collective cost depends on: on a switched node, how many of its devices sit on
// each node it spans; on a direct-link node (DGX-1), also which devices inside the node.
// Into `sig`, whose buffer is reused (the searches price hundreds of thousands of ops).
void group_signature(std::span<const int> group, const cluster::Cluster& c, std::vector<int>& sig) {
  sig.clear();
  if (!c.intra_switched) {
    for (int d : group) {
      sig.push_back(d % c.devices_per_node);
    }
  }
  sig.push_back(-1);
  const std::size_t first = sig.size();
  int node = -1;
  for (int d : group) { // in ascending order
    if (c.node_of(d) != node) {
      node = c.node_of(d);
      sig.push_back(0);
    }
    ++sig.back();
  }
  std::sort(sig.begin() + static_cast<std::ptrdiff_t>(first), sig.end());
}

} // namespace

GroupShapes group_shapes(const cluster::Cluster& c, const std::vector<std::vector<int>>& groups) {
  GroupShapes out;
  out.sharing = groups_sharing_a_node(groups, c);
  // The signatures met (buffers kept per thread): a few at most.
  thread_local std::vector<std::vector<int>> seen;
  thread_local std::vector<int> sorted, sig;
  std::size_t count = 0;
  for (const auto& group : groups) {
    if (group.size() < 2) {
      continue;
    }
    std::span<const int> ascending = group;
    if (!std::is_sorted(group.begin(), group.end())) {
      sorted.assign(group.begin(), group.end());
      std::sort(sorted.begin(), sorted.end());
      ascending = sorted;
    }
    group_signature(ascending, c, sig);
    const auto end = seen.begin() + static_cast<std::ptrdiff_t>(count);
    if (std::find(seen.begin(), end, sig) != end) {
      continue;
    }
    if (count == seen.size()) {
      seen.emplace_back();
    }
    seen[count++] = sig;
    out.distinct.push_back(group);
  }
  return out;
}

const GroupShapes& device_group_shapes(const cluster::Cluster& c, const sharding::Config& config,
                                       std::span<const int> devices, std::span<const int> axes, bool across_copies) {
  // The key: what the shapes read of the cluster (node size, switched or not), of the layout
  // (splits, axes, copies) and the devices, a run of consecutive ids as its first and length.
  thread_local std::vector<std::int64_t> key;
  key.assign({c.devices_per_node, c.intra_switched ? 1 : 0, across_copies ? 1 : 0});
  key.insert(key.end(), config.splits.begin(), config.splits.end());
  key.push_back(-1);
  key.insert(key.end(), axes.begin(), axes.end());
  key.push_back(-1);
  bool consecutive = true;
  for (std::size_t i = 1; i < devices.size() && consecutive; ++i) {
    consecutive = devices[i] == devices[i - 1] + 1;
  }
  if (consecutive && !devices.empty()) {
    key.insert(key.end(), {devices.front(), -static_cast<std::int64_t>(devices.size())});
  } else {
    key.insert(key.end(), devices.begin(), devices.end());
  }
  struct Hash {
    std::size_t operator()(const std::vector<std::int64_t>& k) const {
      std::uint64_t h = 0x9E3779B97F4A7C15ULL;
      for (const std::int64_t v : k) {
        h = (h ^ static_cast<std::uint64_t>(v)) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
      }
      return static_cast<std::size_t>(h);
    }
  };
  thread_local std::unordered_map<std::vector<std::int64_t>, GroupShapes, Hash> memo;
  thread_local std::size_t held = 0; // the integers the memo holds, keys and groups
  if (const auto it = memo.find(key); it != memo.end()) {
    return it->second;
  }
  auto shapes = group_shapes(c, device_groups(config, devices, axes, across_copies));
  std::size_t size = key.size();
  for (const auto& group : shapes.distinct) {
    size += group.size();
  }
  // A bound on the memory (32 MiB of integers, the layouts of a search of every op's
  // configurations on 1,024 devices): past it, the memo starts again.
  if (held + size > (std::size_t{8} << 20)) {
    memo.clear();
    held = 0;
  }
  held += size;
  return memo.emplace(key, std::move(shapes)).first->second;
}

// The slowest group's time for one collective run by every group at once. Groups of the same
// shape cost the same: each shape is costed once.
cluster::CollectiveCost collective_on_groups(const cluster::Cluster& c, Collective kind,
                                             const std::vector<std::vector<int>>& groups, double bytes, bool explain) {
  return collective_on_groups(c, kind, group_shapes(c, groups), bytes, explain);
}

cluster::CollectiveCost collective_on_groups(const cluster::Cluster& c, Collective kind, const GroupShapes& shapes,
                                             double bytes, bool explain) {
  cluster::CollectiveCost worst;
  for (const auto& group : shapes.distinct) {
    auto cost = explain ? cluster::collective_cost(c, kind, group, bytes, cluster::Algorithm::automatic, shapes.sharing)
                        : cluster::collective_cost_unexplained(c, kind, group, bytes, cluster::Algorithm::automatic,
                                                               shapes.sharing);
    if (cost.seconds > worst.seconds) {
      worst = std::move(cost);
    }
  }
  return worst;
}

namespace {

// A formula's text when the caller asked for one (a front end's inspector), otherwise none and no
// formatting at all (the searches price hundreds of thousands of ops and read only the numbers).
template <typename Text> std::string explained(bool explain, Text&& text) {
  return explain ? std::string(text()) : std::string();
}

std::string axes_text(const graph::OpSemantics& s, const sharding::Config& config, const std::vector<int>& axes) {
  std::vector<std::string> parts;
  for (int a : axes) {
    parts.push_back(
        fmt::format("{}:{}", s.dims[static_cast<std::size_t>(a)].name, config.splits[static_cast<std::size_t>(a)]));
  }
  return fmt::format("{}", fmt::join(parts, " x "));
}

int axes_size(const sharding::Config& config, const std::vector<int>& axes) {
  int n = 1;
  for (int a : axes) {
    n *= config.splits[static_cast<std::size_t>(a)];
  }
  return n;
}

// A window op (convolution, pooling) whose output spatial dim "o<x>" is split reads, beyond its
// own block of the input, the rows its kernel "k<x>" reaches into the neighbours' blocks: a halo
// of (k-1) x dilation + 1 - stride rows, exchanged with the neighbour along that axis in the
// forward pass and again (as gradients) in the backward pass.
void halo_terms(const graph::Graph& g, const graph::OpSemantics& s, const sharding::Config& config,
                std::span<const int> devices, const cluster::Cluster& cluster, const TrainingSetup& setup,
                std::vector<Term>& out, bool explain, int micro) {
  if (s.op_class != graph::OpClass::convolution && s.op_class != graph::OpClass::pooling) {
    return;
  }
  if (s.inputs.empty() || s.inputs[0].tensor == graph::no_tensor) {
    return;
  }
  const auto& x = g.tensor(s.inputs[0].tensor);
  const auto layout = sharding::input_layout(g, s, config, 0);
  const auto& access = s.inputs[0].dims;
  for (std::size_t j = 2; j < access.size(); ++j) {
    const int d = access[j];
    if (d < 0 || config.splits[static_cast<std::size_t>(d)] <= 1) {
      continue;
    }
    const std::string& name = s.dims[static_cast<std::size_t>(d)].name;
    if (name.empty() || name[0] != 'o') {
      continue;
    }
    const int k = s.find_dim("k" + name.substr(1));
    if (k < 0) {
      continue;
    }
    const std::int64_t kernel = s.dims[static_cast<std::size_t>(k)].size;
    const std::int64_t extent = x.shape[j];
    const std::int64_t out_extent = s.dims[static_cast<std::size_t>(d)].size;
    const std::int64_t stride = out_extent > 0 ? std::max<std::int64_t>(1, extent / out_extent) : 1;
    const std::int64_t rows = kernel - stride; // dilation 1; padding does not change what neighbours hold
    if (rows <= 0) {
      continue;
    }
    const double row_bytes = stored_bytes(x, layout.shard_bytes(), setup) /
                             std::max<double>(1.0, std::ceil(static_cast<double>(extent) / layout.parts[j]));
    const double bytes = static_cast<double>(rows) * row_bytes / micro; // per micro-batch
    // The neighbour: the next device along this axis (grid position 0's and the one a step of the
    // axis away: the last split dim varies fastest).
    std::size_t step = 1;
    for (std::size_t a = static_cast<std::size_t>(d) + 1; a < config.splits.size(); ++a) {
      step *= static_cast<std::size_t>(config.splits[a]);
    }
    if (step >= devices.size()) {
      continue;
    }
    const std::array<int, 2> pair{devices[0], devices[step]};
    const auto c = explain ? cluster::collective_cost(cluster, Collective::send_recv, pair, bytes)
                           : cluster::collective_cost_unexplained(cluster, Collective::send_recv, pair, bytes);
    out.push_back({std::string(term::halo_exchange), 2 * micro * c.seconds,
                   explained(explain,
                             [&] {
                               return fmt::format(
                                   "'{}' split {} ways along {}: a {}x kernel reads {} rows of {:.4g} KB from its "
                                   "neighbour, forward and backward{}: 2 x {}",
                                   x.name, config.splits[static_cast<std::size_t>(d)], name, kernel, rows,
                                   row_bytes / micro / 1e3,
                                   micro > 1 ? fmt::format(", each of {} micro-batches", micro) : std::string(),
                                   c.formula);
                             }),
                   micro * c.seconds});
  }
}

// Statistics taken over split dims (sync-BN): the per-channel sum and sum of squares are
// all-reduced over the split in the forward pass, the sums of dy and dy * xhat in the backward
// pass; always fp32, two values per channel of this device's block each time.
void statistics_terms(const graph::OpSemantics& s, const sharding::Config& config, std::span<const int> devices,
                      const cluster::Cluster& cluster, std::vector<Term>& out, bool explain, int micro) {
  const auto axes = statistics_axes(s, config);
  if (axes.empty()) {
    return;
  }
  double channels = 1; // this device's share of the dims the statistics are kept per
  for (std::size_t d = 0; d < s.dims.size(); ++d) {
    if (!s.dims[d].statistics) {
      channels *= std::ceil(static_cast<double>(s.dims[d].size) / config.splits[d]);
    }
  }
  const double bytes = 2 * channels * 4;
  const auto& groups = device_group_shapes(cluster, config, devices, axes, false);
  const auto c = collective_on_groups(cluster, Collective::all_reduce, groups, bytes, explain);
  // Per channel, whatever the samples: every micro-batch all-reduces the same bytes.
  out.push_back({std::string(term::statistics_sync), 2 * micro * c.seconds,
                 explained(explain,
                           [&] {
                             return fmt::format(
                                 "statistics over {} are synchronized: 2 values x {:.0f} channels, forward and "
                                 "backward{}: 2 x {}",
                                 axes_text(s, config, axes), channels,
                                 micro > 1 ? fmt::format(", each of {} micro-batches", micro) : std::string(),
                                 c.formula);
                           }),
                 micro * c.seconds});
}

} // namespace

std::vector<int> statistics_axes(const graph::OpSemantics& s, const sharding::Config& config) {
  std::vector<int> axes;
  for (std::size_t d = 0; d < s.dims.size() && d < config.splits.size(); ++d) {
    if (s.dims[d].statistics && config.splits[d] > 1) {
      axes.push_back(static_cast<int>(d));
    }
  }
  return axes;
}

std::vector<std::vector<int>> device_groups(const sharding::Config& config, std::span<const int> devices,
                                            std::span<const int> axes, bool across_copies) {
  const int k = config.devices();
  const int copies = static_cast<int>(devices.size()) / k;
  std::vector<int> positions(static_cast<std::size_t>(k));
  for (int i = 0; i < k; ++i) {
    positions[static_cast<std::size_t>(i)] = i;
  }
  auto position_groups = axes.empty() ? [&] {
    std::vector<std::vector<int>> singles;
    for (int i = 0; i < k; ++i) {
      singles.push_back({i});
    }
    return singles;
  }()
                                            : sharding::groups_along(config, positions, axes);
  if (copies == 1) { // the common case: each position's device in place
    auto groups = std::move(position_groups);
    for (auto& g : groups) {
      for (int& p : g) {
        p = devices[static_cast<std::size_t>(p)];
      }
    }
    return groups;
  }
  std::vector<std::vector<int>> groups;
  groups.reserve(position_groups.size() * static_cast<std::size_t>(across_copies ? 1 : copies));
  for (const auto& pg : position_groups) {
    if (across_copies) {
      std::vector<int> group;
      group.reserve(pg.size() * static_cast<std::size_t>(copies));
      for (int c = 0; c < copies; ++c) {
        for (int p : pg) {
          group.push_back(devices[static_cast<std::size_t>(c * k + p)]);
        }
      }
      groups.push_back(std::move(group));
    } else {
      for (int c = 0; c < copies; ++c) {
        std::vector<int> group;
        group.reserve(pg.size());
        for (int p : pg) {
          group.push_back(devices[static_cast<std::size_t>(c * k + p)]);
        }
        groups.push_back(std::move(group));
      }
    }
  }
  return groups;
}

double OpCost::time_total() const {
  double t = 0;
  for (const auto& x : time) {
    t += x.value;
  }
  return t;
}

double OpCost::memory_total() const {
  double m = 0;
  for (const auto& x : memory) {
    m += x.value;
  }
  return m;
}

bool is_compute_term(std::string_view name) {
  return name == term::forward_compute || name == term::backward_compute || name == term::recompute ||
         name == term::optimizer_step;
}

bool is_redistribution_term(std::string_view name) {
  return name == term::redistribution || name == term::redistribution_copies;
}

double OpCost::redistribution_time() const {
  double t = 0;
  for (const auto& x : time) {
    if (is_redistribution_term(x.name)) {
      t += x.value;
    }
  }
  return t;
}

double OpCost::compute_time() const {
  double t = 0;
  for (const auto& x : time) {
    if (is_compute_term(x.name)) {
      t += x.value;
    }
  }
  return t;
}

double OpCost::communication_time() const {
  return time_total() - compute_time();
}

double OpCost::get(std::string_view name) const {
  double v = 0;
  for (const auto& x : time) {
    if (x.name == name) {
      v += x.value;
    }
  }
  for (const auto& x : memory) {
    if (x.name == name) {
      v += x.value;
    }
  }
  return v;
}

double kernel_time(double flops, double bytes, const cluster::Device& device, cluster::Precision precision,
                   graph::KernelClass kernel, graph::ComputeClass compute_class, double fresh_bytes,
                   std::optional<double> operand_bytes, bool matrix_units, int kernels) {
  if (flops <= 0 && bytes <= 0) {
    return 0;
  }
  kernels = std::max(1, kernels);
  const double peak = device.peak(precision);
  const double efficiency = matrix_units ? device.compute_efficiency_for(compute_class, flops / kernels) : 1.0;
  const double compute = flops > 0 && peak > 0 ? flops / (peak * efficiency) : 0;
  const double launches = kernels * device.kernel_launch_overhead;
  if (operand_bytes && compute > 0 && device.matmul_operand_bandwidth > 0) {
    return compute + *operand_bytes / device.matmul_operand_bandwidth + launches;
  }
  // The curves are timed on operands in memory; a read of what the kernel before wrote costs less,
  // by how much the family's own fresh-read timing says (Device::fresh_read_for). A plain
  // element-wise pass gains most; one that computes on its bytes gains what the host's arithmetic
  // leaves (Erf of 2 MB: 215 us after a Div wrote its input, 232 us on an input in memory, on an
  // AVX2 EPYC); a family never timed so (a reduction) reads at full cost.
  const double fresh = std::clamp(fresh_bytes, 0.0, bytes);
  const double fresh_cost = fresh > 0 ? device.fresh_read_for(kernel, bytes) : 1.0;
  const double memory =
      bytes > 0 && device.memory_bandwidth > 0
          ? (bytes - fresh * (1 - fresh_cost)) / (device.memory_bandwidth * device.memory_efficiency_for(kernel, bytes))
          : 0;
  return std::max(compute, memory) + launches;
}

std::string cost_signature(const graph::Graph& g, graph::OpId id, const graph::OpSemantics& s, Saved saved) {
  const graph::Op& op = g.op(id);
  std::string out = fmt::format(
      "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", op.type, static_cast<int>(s.op_class), s.macs, s.fwd_flops,
      s.bwd_data_flops, s.bwd_weight_flops, s.fwd_bytes_read, s.fwd_bytes_written, s.bwd_bytes, s.backward_reads_inputs,
      static_cast<int>(s.forward_kernel), static_cast<int>(s.backward_kernel), static_cast<int>(s.compute_class),
      s.backward_reduction_bytes, s.opaque_reason, static_cast<int>(saved), gradient_written_just_before(g, id));
  if (s.steps > 1) {
    out += fmt::format("|steps{},{},{},{},{},{}", s.steps, s.step_fwd_flops, s.step_bwd_flops, s.step_input,
                       s.step_fwd_bytes, s.step_bwd_bytes);
  }
  for (const auto& d : s.dims) {
    out += fmt::format("|d{},{},{},{},{}", d.name, d.size, d.reduction, d.splittable, d.statistics);
  }
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    out += fmt::format("|i{}:{}", fmt::join(s.inputs[i].dims, ","),
                       i < s.slots.size() ? static_cast<int>(s.slots[i]) : -1);
  }
  for (const auto& o : s.outputs) {
    out += fmt::format("|o{}", fmt::join(o.dims, ","));
  }
  for (const graph::TensorId t : op.inputs) {
    if (t == graph::no_tensor) {
      out += "|-";
      continue;
    }
    const graph::Tensor& x = g.tensor(t);
    out += fmt::format("|I{}:{}:{}:{}:{}:{}", fmt::join(x.shape, ","), static_cast<int>(x.dtype),
                       static_cast<int>(x.role), graph::gets_gradient(x), written_just_before(g, id, x), x.quantized);
  }
  for (const graph::TensorId t : op.outputs) {
    if (t == graph::no_tensor) {
      out += "|-";
      continue;
    }
    const graph::Tensor& x = g.tensor(t);
    out += fmt::format("|O{}:{}:{}:{}:{}:{}", fmt::join(x.shape, ","), static_cast<int>(x.dtype),
                       graph::gets_gradient(x), g.is_graph_output(t), x.consumers.size(), x.quantized);
  }
  return out;
}

namespace {

OpCost op_cost_on(const cluster::Device& dev, const graph::Graph& g, graph::OpId id, const graph::OpSemantics& s,
                  const sharding::Config& config, std::span<const int> devices, const cluster::Cluster& cluster,
                  const TrainingSetup& setup, Saved saved, std::span<const std::size_t> shared_parameters,
                  int micro_batches, bool explain) {
  const graph::Op& op = g.op(id);
  const int micro = std::max(1, micro_batches);
  if (config.splits.size() != s.dims.size()) {
    throw Error(fmt::format("op '{}': the configuration has {} factors for {} iteration dimensions", op.name,
                            config.splits.size(), s.dims.size()));
  }
  if (devices.empty() || devices.size() % static_cast<std::size_t>(config.devices()) != 0) {
    throw Error(fmt::format("op '{}': configuration {} needs a multiple of {} devices, {} given", op.name,
                            sharding::to_string(config, s), config.devices(), devices.size()));
  }
  const int copies = static_cast<int>(devices.size()) / config.devices();
  // Micro-batches: every kernel and every collective on activations runs once per micro-batch, on
  // its share of the samples, reading the whole weights each time (and, backward, adding into the
  // whole weight gradients): m kernels at the efficiency of a micro-batch's size, m launches, m
  // collectives' latencies. What is per tensor of the iteration (gradient synchronization, the
  // optimizer step) runs once. `batched`: a tensor whose bytes a micro-batch divides.
  const double m = micro;
  const auto batched = [&](const graph::Tensor& t) {
    return t.role != TensorRole::parameter && t.role != TensorRole::state && t.role != TensorRole::constant;
  };
  OpCost cost;
  const int parts = config.devices();
  const cluster::Precision precision = uses_matrix_units(s.op_class) ? setup.precision : cluster::Precision::fp32;
  const double scale = setup.value_bytes() / 4.0; // graph tensors are f32

  // Compute: the iteration space divides evenly over the grid; bytes are the shards touched.
  // fresh_in: the inputs the kernel just before has written to cache (written_just_before), which
  // a memory-bound kernel reads faster; weights and the batch were last touched long before.
  // Bytes per micro-batch: `input_shards` a micro-batch's (the weights whole), `whole` the
  // unbatched inputs' (weights, state, constants).
  // A table read by index (a gather's) gives up at most the rows its output holds: one micro-batch's
  // output shard's bytes.
  double out_shards = 0;
  for (std::size_t i = 0; i < op.outputs.size(); ++i) {
    if (op.outputs[i] != graph::no_tensor) {
      out_shards +=
          stored_bytes(g.tensor(op.outputs[i]), sharding::output_layout(g, s, config, i).shard_bytes(), setup);
    }
  }
  double shard_in = 0, fresh_in = 0, whole = 0;
  std::vector<double> input_shards(op.inputs.size(), 0.0);
  std::vector<bool> input_fresh(op.inputs.size(), false);
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    if (op.inputs[i] != graph::no_tensor) {
      const auto layout = sharding::input_layout(g, s, config, i);
      const graph::Tensor& t = g.tensor(op.inputs[i]);
      double b = stored_bytes(t, layout.shard_bytes(), setup) / (batched(t) ? m : 1.0);
      if (i < s.inputs.size() && s.inputs[i].read_by_index) {
        b = std::min(b, out_shards / m);
      }
      input_shards[i] = b;
      shard_in += b;
      whole += batched(t) ? 0.0 : b;
      if (written_just_before(g, id, t)) {
        input_fresh[i] = true;
        fresh_in += b;
      }
    }
  }
  // reset_out: the output gradients set before the backward pass begins: zeroed where several
  // consumers add theirs, the loss gradient copied in where the output is the graph's.
  double shard_out = 0, reset_out = 0;
  for (std::size_t i = 0; i < op.outputs.size(); ++i) {
    if (op.outputs[i] != graph::no_tensor) {
      const auto layout = sharding::output_layout(g, s, config, i);
      const graph::Tensor& t = g.tensor(op.outputs[i]);
      const double b = stored_bytes(t, layout.shard_bytes(), setup);
      shard_out += b;
      if (graph::gets_gradient(t)) {
        const bool graph_output = g.is_graph_output(op.outputs[i]);
        reset_out += graph_output ? 2 * b : t.consumers.size() >= 2 ? b : 0.0;
      }
    }
  }
  // The FLOPs of both passes run at the efficiency of the op's compute family (a convolution's
  // own curve when calibrated, else the GEMM curve); the text names the curve that priced them.
  const graph::ComputeClass family = s.compute_class;
  const std::string peak_text = explained(explain, [&] {
    return !uses_matrix_units(s.op_class) ? fmt::format("{} peak", cluster::precision_name(precision))
           : family == graph::ComputeClass::matmul || dev.has_compute_curve(family)
               ? fmt::format("{} peak x {} efficiency", cluster::precision_name(precision),
                             graph::compute_class_name(family))
               : fmt::format("{} peak x matmul efficiency (no {} curve)", cluster::precision_name(precision),
                             graph::compute_class_name(family));
  });
  // A product's backward pass reads an operand transposed in each of its products (dA = dY B^T,
  // dB = A^T dY): the matmul family's run on a curve of their own where one was calibrated, a
  // batched product's on the batched one where there is one (Device::compute_efficiency_for falls
  // back to the GEMM curve).
  const graph::ComputeClass bwd_family =
      s.op_class != graph::OpClass::contraction || family != graph::ComputeClass::matmul ? family
      : batched_product(s, config) && dev.has_compute_curve(graph::ComputeClass::matmul_batched_backward)
          ? graph::ComputeClass::matmul_batched_backward
          : graph::ComputeClass::matmul_backward;
  const std::string bwd_peak_text =
      bwd_family != family && dev.has_compute_curve(bwd_family)
          ? explained(explain,
                      [&] {
                        return fmt::format("{} peak x {} efficiency", cluster::precision_name(precision),
                                           graph::compute_class_name(bwd_family));
                      })
          : peak_text;
  // Compute: one micro-batch's FLOPs and bytes, m times.
  const double out_mb = shard_out / m;
  const double fwd_flops = s.fwd_flops / parts / m;
  const double fwd_bytes = s.op_class == graph::OpClass::shape ? 0 : shard_in + out_mb;
  const bool packs = packs_operands(s.op_class, family, dev);
  const OperandBytes operand_bytes = packs ? cold_operand_bytes(g, op, input_shards, input_fresh) : OperandBytes{};
  const OperandBytes* operands = packs ? &operand_bytes : nullptr;
  // A recurrence: its dependent steps run one after the other, each a small product at its own
  // size on the efficiency curve (a step of GNMT's 1024-wide LSTM at batch 8 is 67 MFLOP, where
  // the whole layer is 10 GFLOP), reading the recurrent weights again, plus its launch; the rest of
  // the FLOPs (the input projection, the weight gradients) run as one product over every step.
  const bool recurrence = s.steps > 1 && uses_matrix_units(s.op_class);
  const double steps = recurrence ? static_cast<double>(s.steps) : 0.0;
  const double step_weight =
      recurrence && s.step_input >= 0 && static_cast<std::size_t>(s.step_input) < input_shards.size()
          ? input_shards[static_cast<std::size_t>(s.step_input)]
          : 0.0;
  const auto steps_time = [&](double flops, double gate_bytes) {
    return recurrence && flops > 0 ? steps * (kernel_time(flops / parts / steps / m, step_weight, dev, precision,
                                                          graph::KernelClass::eltwise, family, 0, std::nullopt, true) +
                                              kernel_time(0, gate_bytes * scale / parts / steps / m, dev, precision,
                                                          graph::KernelClass::eltwise))
                                   : 0.0;
  };
  const auto steps_text = [&](double flops, double gate_bytes, double time) {
    return explain && recurrence && flops > 0
               ? fmt::format(" + {} dependent steps, each a product of {:.4g} MFLOP reading {:.4g} MB of recurrent "
                             "weights and its gate functions ({:.4g} KB element-wise): {:.4g} ms",
                             s.steps, flops / parts / steps / m / 1e6, step_weight / 1e6,
                             gate_bytes * scale / parts / steps / m / 1e3, time * 1e3)
               : std::string();
  };
  const double fwd_steps = steps_time(s.step_fwd_flops, s.step_fwd_bytes);
  const double fwd_batched = recurrence ? std::max(0.0, fwd_flops - s.step_fwd_flops / parts / m) : fwd_flops;
  // A product calibrated at this very shape (partita calibrate --for-model) takes its measured
  // times: one micro-batch (a pipeline's micro-batches run products of other shapes) in fp32 (the
  // precision it was timed in).
  const cluster::TimedProduct* timed = [&]() -> const cluster::TimedProduct* {
    if (dev.timed_products.empty() || micro != 1 || precision != cluster::Precision::fp32 || scale != 1.0) {
      return nullptr;
    }
    const auto p = product_shape(g, op, s, config);
    return p ? dev.timed_product(p->batch, p->m, p->n, p->k) : nullptr;
  }();
  const auto timed_text = [&] {
    return fmt::format("a {}x{}x{}x{} product (batch x m x n x k) on each device", timed->batch, timed->m, timed->n,
                       timed->k);
  };
  const double fwd = s.op_class == graph::OpClass::shape ? 0
                     : timed                             ? timed->forward
                             : m * (kernel_time(fwd_batched, fwd_bytes, dev, precision, s.forward_kernel, family,
                                                fresh_in, operands ? std::optional(operands->forward) : std::nullopt,
                                                uses_matrix_units(s.op_class)) +
                                    fwd_steps);
  // With micro-batches the text shows one micro-batch's figures, times m.
  const auto per_micro = [&](std::string text) {
    return m > 1 ? fmt::format("{} micro-batches x ({}; weights whole each time)", micro, text) : text;
  };
  const std::string operand_text =
      explain && operands
          ? fmt::format(", {:.4g} MB of operands read from memory at {:.4g} GB/s on top of the arithmetic",
                        operands->backward / 1e6, dev.matmul_operand_bandwidth / 1e9)
          : std::string();
  const auto fresh_text = [&](double fresh, std::string_view what, graph::KernelClass kernel, double bytes) {
    return explain && fresh > 0 && dev.fresh_read_for(kernel, bytes) < 1
               ? fmt::format(" ({:.4g} MB of it {}, read at the fresh-read rate)", fresh / 1e6, what)
               : std::string();
  };
  cost.time.push_back(
      {std::string(term::forward_compute), fwd, explained(explain, [&] {
         if (timed) {
           return fmt::format("{}: {:.4g} ms as calibration timed that shape on this device ({:.4g} GFLOP)",
                              timed_text(), timed->forward * 1e3, fwd_flops / 1e9);
         }
         return per_micro(
             operands ? fmt::format("{:.4g} GFLOP / {} + {:.4g} MB / {:.4g} GB/s matmul operand bandwidth (the "
                                    "operands no kernel has just written, read on top of the arithmetic) + launch, on "
                                    "1/{} of the iteration space",
                                    fwd_flops / 1e9, peak_text, operands->forward / 1e6,
                                    dev.matmul_operand_bandwidth / 1e9, parts)
                      : fmt::format(
                            "max({:.4g} GFLOP / {}, {:.4g} MB{} / {} memory bandwidth) + launch{}, on 1/{} of "
                            "the iteration space",
                            fwd_batched / 1e9, peak_text, fwd_bytes / 1e6,
                            fresh_text(fresh_in, "inputs just written by the ops before", s.forward_kernel, fwd_bytes),
                            graph::kernel_class_name(s.forward_kernel),
                            steps_text(s.step_fwd_flops, s.step_fwd_bytes, fwd_steps), parts));
       })});
  const double bwd_flops = (s.bwd_data_flops + s.bwd_weight_flops) / parts / m;
  // A micro-batch's backward reads the whole weights and adds into the whole weight gradients
  // (twice the unbatched inputs' bytes); the rest of its bytes are its share of the samples'.
  const double bwd_all =
      s.bwd_bytes > 0 && s.fwd_bytes_read + s.fwd_bytes_written > 0 ? s.bwd_bytes * scale / parts : 0;
  const double bwd_whole = std::min(2 * whole, bwd_all);
  const double bwd_bytes = bwd_all > 0 ? (bwd_all - bwd_whole) / m + bwd_whole : 0.0;
  // The gradients of broadcast inputs (a bias) are reduction kernels of their own.
  const double reduction_bytes =
      bwd_bytes > 0 ? std::min(s.backward_reduction_bytes * scale / parts / m, bwd_bytes) : 0.0;
  // The output's gradient was just written by its consumers' backward pass: the data-gradient
  // kernel reads it fresh, and so does the reduction of broadcast inputs' gradients.
  const bool dy_fresh = gradient_written_just_before(g, id);
  // Before the backward pass the runtime zeroes (or seeds) the output gradients: a pass over their
  // memory, apart from the kernels (about 2% of a GPT-2 iteration here).
  const double reset =
      bwd_bytes > 0 && reset_out > 0 ? kernel_time(0, reset_out / m, dev, precision, graph::KernelClass::eltwise) : 0.0;
  const std::string reset_text =
      explain && reset > 0
          ? fmt::format(", and {:.4g} MB of output gradients set first (zeroed for the consumers to add to, or "
                        "the loss gradient copied in)",
                        reset_out / m / 1e6)
          : std::string();
  const double fresh_dy = dy_fresh ? std::min(out_mb, bwd_bytes - reduction_bytes) : 0.0;
  const double fresh_reduction = dy_fresh ? reduction_bytes : 0.0;
  const double bwd_steps = steps_time(s.step_bwd_flops, s.step_bwd_bytes);
  const double bwd_batched = recurrence ? std::max(0.0, bwd_flops - s.step_bwd_flops / parts / m) : bwd_flops;
  // A product's backward pass is a product per input that takes a gradient (dA = dY B^T,
  // dB = A^T dY), each of the forward's FLOPs: each runs at its own size on the efficiency curve,
  // which is fitted on single products (the sum of them would read the curve at twice the size).
  const double backward_products =
      !recurrence && uses_matrix_units(s.op_class) && fwd_flops > 0 ? std::round(bwd_batched / fwd_flops) : 1.0;
  const int bwd_kernels =
      backward_products >= 1 && std::abs(bwd_batched - backward_products * fwd_flops) <= 1e-9 * bwd_batched
          ? static_cast<int>(backward_products)
          : 1;
  // A timed product's backward pass: the products of the inputs that take a gradient, as timed.
  const double timed_bwd = timed ? (graph::gets_gradient(g.tensor(op.inputs[0])) ? timed->data_gradient : 0.0) +
                                       (graph::gets_gradient(g.tensor(op.inputs[1])) ? timed->weight_gradient : 0.0)
                                 : 0.0;
  const double bwd =
      m * ((timed && bwd_batched > 0 ? timed_bwd
            : bwd_batched > 0 || bwd_bytes > reduction_bytes
                ? kernel_time(bwd_batched, bwd_bytes - reduction_bytes, dev, precision, s.backward_kernel, bwd_family,
                              fresh_dy, operands ? std::optional(operands->backward) : std::nullopt,
                              uses_matrix_units(s.op_class), bwd_kernels)
                : 0.0) +
           bwd_steps +
           (reduction_bytes > 0 ? kernel_time(0, reduction_bytes, dev, precision, graph::KernelClass::reduction,
                                              graph::ComputeClass::matmul, fresh_reduction)
                                : 0.0) +
           reset);
  const std::string products_text =
      explain && bwd_kernels > 1 ? fmt::format(" ({} products of {:.4g} GFLOP, each at its own size on the curve)",
                                               bwd_kernels, bwd_batched / bwd_kernels / 1e9)
                                 : std::string();
  const std::string through_time_text =
      explain && recurrence && s.step_bwd_flops > 0
          ? fmt::format(" ({:.4g} GFLOP of it through time{})", s.step_bwd_flops / parts / m / 1e9,
                        steps_text(s.step_bwd_flops, s.step_bwd_bytes, bwd_steps))
          : std::string();
  cost.time.push_back(
      {std::string(term::backward_compute), bwd, explained(explain, [&] {
         if (timed && bwd_batched > 0) {
           return fmt::format(
               "{}: data gradient {:.4g} ms{} + weight gradient {:.4g} ms{} as calibration timed that shape on this "
               "device{}{}",
               timed_text(), timed->data_gradient * 1e3,
               graph::gets_gradient(g.tensor(op.inputs[0])) ? "" : " (not taken: the input takes no gradient)",
               timed->weight_gradient * 1e3,
               graph::gets_gradient(g.tensor(op.inputs[1])) ? "" : " (not taken: the input takes no gradient)",
               reduction_bytes > 0 ? fmt::format(", and {:.4g} MB through reduction kernels", reduction_bytes / 1e6)
                                   : std::string(),
               reset_text);
         }
         return per_micro(
             reduction_bytes > 0
                 ? fmt::format(
                       "data gradients {:.4g} GFLOP + weight gradients {:.4g} GFLOP at {}{}, {:.4g} MB{} through {} "
                       "kernels{} and {:.4g} MB{} through reduction kernels (broadcast inputs' gradients){}{}, on "
                       "1/{} of the space",
                       s.bwd_data_flops / parts / m / 1e9, s.bwd_weight_flops / parts / m / 1e9, bwd_peak_text,
                       products_text, (bwd_bytes - reduction_bytes) / 1e6,
                       fresh_text(operands ? 0 : fresh_dy, "the output's gradient", s.backward_kernel,
                                  bwd_bytes - reduction_bytes),
                       graph::kernel_class_name(s.backward_kernel), operand_text, reduction_bytes / 1e6,
                       fresh_text(fresh_reduction, "the output's gradient", graph::KernelClass::reduction,
                                  reduction_bytes),
                       reset_text, through_time_text, parts)
                 : fmt::format(
                       "data gradients {:.4g} GFLOP + weight gradients {:.4g} GFLOP at {}{}, {:.4g} MB{} through {} "
                       "kernels{}{}{}, on 1/{} of the space",
                       s.bwd_data_flops / parts / m / 1e9, s.bwd_weight_flops / parts / m / 1e9, bwd_peak_text,
                       products_text, bwd_bytes / 1e6,
                       fresh_text(operands ? 0 : fresh_dy, "the output's gradient", s.backward_kernel,
                                  bwd_bytes - reduction_bytes),
                       graph::kernel_class_name(s.backward_kernel), operand_text, reset_text, through_time_text,
                       parts));
       })});
  if (saved == Saved::recomputed && fwd > 0) {
    cost.time.push_back({std::string(term::recompute), fwd,
                         explained(explain, [] { return "the forward pass again, before the backward pass"; })});
  }

  halo_terms(g, s, config, devices, cluster, setup, cost.time, explain, micro);
  statistics_terms(s, config, devices, cluster, cost.time, explain, micro);

  // Forward: a split reduction leaves partial sums, all-reduced over that axis's groups.
  for (std::size_t i = 0; i < op.outputs.size(); ++i) {
    if (op.outputs[i] == graph::no_tensor) {
      continue;
    }
    const auto layout = sharding::output_layout(g, s, config, i);
    if (layout.partial_axes.empty()) {
      continue;
    }
    const auto& groups = device_group_shapes(cluster, config, devices, layout.partial_axes, false);
    const double bytes = stored_bytes(g.tensor(op.outputs[i]), layout.shard_bytes(), setup) / m;
    const auto c = collective_on_groups(cluster, Collective::all_reduce, groups, bytes, explain);
    cost.time.push_back({std::string(term::forward_reduce), m * c.seconds,
                         explained(explain,
                                   [&] {
                                     return fmt::format(
                                         "'{}' is a partial sum over {}: {}{}", g.tensor(op.outputs[i]).name,
                                         axes_text(s, config, layout.partial_axes),
                                         m > 1 ? fmt::format("{} micro-batches x ", micro) : std::string(), c.formula);
                                   }),
                         0, static_cast<int>(i)});
  }

  // Backward and memory, per input: the one rule of DESIGN 3.2.1.
  double params = 0, grads = 0, optimizer = 0, stepped = 0; // stepped: weight values this device updates
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    if (op.inputs[i] == graph::no_tensor) {
      continue;
    }
    const graph::Tensor& t = g.tensor(op.inputs[i]);
    const graph::InputSlot slot = i < s.slots.size() ? s.slots[i] : graph::InputSlot::data;
    if (slot == graph::InputSlot::index || slot == graph::InputSlot::state || !graph::trains_as_float(t)) {
      continue;
    }
    const auto layout = sharding::input_layout(g, s, config, i);
    const double bytes = stored_bytes(t, layout.shard_bytes(), setup);
    // A tensor read whole along a replica axis gets a partial gradient on each device of the
    // axis: activations reduce it for their producer, weights synchronize it. Copies of the grid
    // compute the same thing from the same gradient, so they already agree and reduce nothing;
    // only ZeRO shards a weight's state over its copies too (and so reduce-scatters over them).
    const int axis_replicas = axes_size(config, layout.replica_axes);
    const bool sharded_state = t.role == TensorRole::parameter && setup.zero_stage >= 1;
    const int replicas = sharded_state ? axis_replicas * copies : axis_replicas;
    const bool replicated = replicas > 1;
    // Groups of one device reduce nothing: built only when there is something to reduce.
    static const GroupShapes none;
    const auto& groups =
        replicated ? device_group_shapes(cluster, config, devices, layout.replica_axes, sharded_state) : none;
    if (t.role == TensorRole::activation && graph::gets_gradient(t) && replicated) {
      const auto c = collective_on_groups(cluster, Collective::all_reduce, groups, bytes / m, explain);
      cost.time.push_back(
          {std::string(term::backward_reduce), m * c.seconds,
           explained(explain,
                     [&] {
                       return fmt::format(
                           "'{}' is read whole by the {} devices of {}, so its gradient is a partial sum "
                           "reduced over them: {}{}",
                           t.name, replicas, axes_text(s, config, layout.replica_axes),
                           m > 1 ? fmt::format("{} micro-batches x ", micro) : std::string(), c.formula);
                     }),
           0, static_cast<int>(i)});
    }
    if (t.role != TensorRole::parameter ||
        std::find(shared_parameters.begin(), shared_parameters.end(), i) != shared_parameters.end()) {
      continue;
    }
    const std::string over = explained(explain, [&] {
      return layout.replica_axes.empty() ? fmt::format("{} copies", copies)
             : copies > 1 && sharded_state
                 ? fmt::format("{} x {} copies", axes_text(s, config, layout.replica_axes), copies)
                 : axes_text(s, config, layout.replica_axes);
    });
    // Weights: a replica group synchronizes gradients; ZeRO shards state over that group. The
    // gradients are stored and reduced at their own width (fp32 beside 2-byte weights with
    // TrainingSetup::fp32_gradients).
    const double shard = setup.zero_stage >= 3 ? bytes / replicas : bytes;
    const double grad_bytes = bytes * setup.gradient_bytes() / setup.value_bytes();
    params += shard;
    grads += setup.zero_stage >= 2 ? grad_bytes / replicas : grad_bytes;
    optimizer += (setup.zero_stage >= 1 ? bytes / replicas : bytes) / setup.value_bytes() * setup.optimizer_bytes();
    stepped += (setup.zero_stage >= 1 ? bytes / replicas : bytes) / setup.value_bytes();
    if (!replicated) {
      continue;
    }
    if (setup.zero_stage == 0) {
      const auto c = collective_on_groups(cluster, Collective::all_reduce, groups, grad_bytes, explain);
      cost.time.push_back({std::string(term::gradient_sync), c.seconds, explained(explain, [&] {
                             return fmt::format("'{}' is replicated over {} ({} replicas): gradient all-reduce, {}",
                                                t.name, over, replicas, c.formula);
                           })});
    } else {
      const auto rs = collective_on_groups(cluster, Collective::reduce_scatter, groups, grad_bytes, explain);
      const auto ag = collective_on_groups(cluster, Collective::all_gather, groups, bytes, explain);
      // ZeRO-2 and -3 hold a gradient shard only: each micro-batch's gradients are reduce-scattered.
      const int scatters = setup.zero_stage >= 2 ? micro : 1;
      const std::string times = explain && scatters > 1 ? fmt::format("{} micro-batches x ", scatters) : std::string();
      if (setup.zero_stage < 3) {
        cost.time.push_back(
            {std::string(term::gradient_sync), scatters * rs.seconds + ag.seconds, explained(explain, [&] {
               return fmt::format("ZeRO-{}: gradient reduce-scatter{} and parameter all-gather over {} copies "
                                  "of '{}': {}{}; {}",
                                  setup.zero_stage, scatters > 1 ? " every micro-batch" : "", replicas, t.name, times,
                                  rs.formula, ag.formula);
             })});
      } else {
        // The updated shard stays sharded: every micro-batch's passes gather it (below).
        cost.time.push_back({std::string(term::gradient_sync), scatters * rs.seconds, explained(explain, [&] {
                               return fmt::format("ZeRO-3: gradient reduce-scatter over {} copies of '{}': {}{}",
                                                  replicas, t.name, times, rs.formula);
                             })});
        cost.time.push_back({std::string(term::parameter_gather), 2 * micro * ag.seconds,
                             explained(explain,
                                       [&] {
                                         return fmt::format(
                                             "ZeRO-3 gathers '{}' before the forward and the backward pass{}: {}2 x {}",
                                             t.name, micro > 1 ? " of every micro-batch" : "", times, ag.formula);
                                       }),
                             micro * ag.seconds});
      }
    }
  }
  if (stepped > 0) {
    const double step_bytes = stepped * setup.optimizer_step_bytes();
    cost.time.push_back(
        {std::string(term::optimizer_step), kernel_time(0, step_bytes, dev, precision, graph::KernelClass::optimizer),
         explained(explain, [&] {
           return fmt::format("{} step of {:.4g} M weight values{}: {:.4g} MB (weights, gradients, state) / "
                              "optimizer memory bandwidth + launch",
                              optimizer_name(setup.optimizer), stepped / 1e6,
                              setup.zero_stage >= 1 ? ", this device's ZeRO slice" : "", step_bytes / 1e6);
         })});
  }
  if (params > 0) {
    cost.memory.push_back({std::string(term::parameters), params, explained(explain, [&] {
                             return fmt::format("parameter shards at {} bytes per value{}", setup.value_bytes(),
                                                setup.zero_stage >= 3 ? ", sharded over replicas (ZeRO-3)" : "");
                           })});
    cost.memory.push_back({std::string(term::gradients), grads, explained(explain, [&] {
                             return fmt::format("{} at {} bytes per value",
                                                setup.zero_stage >= 2
                                                    ? "gradient shards, sharded over replicas (ZeRO-2)"
                                                    : "one gradient per parameter value",
                                                setup.gradient_bytes());
                           })});
    if (optimizer > 0) {
      cost.memory.push_back({std::string(term::optimizer_state), optimizer, explained(explain, [&] {
                               return fmt::format(
                                   "{} state{} = {} bytes per parameter{}", optimizer_name(setup.optimizer),
                                   setup.mixed() ? " + fp32 master weights" : "", setup.optimizer_bytes(),
                                   setup.zero_stage >= 1 ? ", sharded over replicas (ZeRO-1)" : "");
                             })});
    }
  }
  // Backward needs the output gradient and writes the input gradients: transient buffers, held
  // only while this op runs (a device's workspace is the largest of its ops', not their sum).
  double gradient_buffers = s.op_class == graph::OpClass::shape ? 0 : shard_out;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    if (op.inputs[i] != graph::no_tensor && g.tensor(op.inputs[i]).role == TensorRole::activation &&
        graph::gets_gradient(g.tensor(op.inputs[i])) && s.op_class != graph::OpClass::shape) {
      gradient_buffers +=
          stored_bytes(g.tensor(op.inputs[i]), sharding::input_layout(g, s, config, i).shard_bytes(), setup);
    }
  }
  if (gradient_buffers > 0) {
    cost.memory.push_back({std::string(term::workspace), gradient_buffers, explained(explain, [] {
                             return "output gradient and input gradients of the backward pass, held while the op runs";
                           })});
  }
  if (saved == Saved::kept && s.op_class != graph::OpClass::shape && shard_out > 0) {
    cost.memory.push_back({std::string(term::activations), shard_out,
                           explained(explain, [] { return "this op's output shard, kept for the backward pass"; })});
  }
  return cost;
}

} // namespace

// On a cluster of mixed nodes an op whose devices are of several kinds runs at its slowest: each
// kind prices the whole op, and the costliest counts (data parallel steps wait for the slowest).
OpCost op_cost(const graph::Graph& g, graph::OpId id, const graph::OpSemantics& s, const sharding::Config& config,
               std::span<const int> devices, const cluster::Cluster& cluster, const TrainingSetup& setup, Saved saved,
               std::span<const std::size_t> shared_parameters, int micro_batches, bool explain) {
  if (!cluster.heterogeneous()) {
    return op_cost_on(cluster.device, g, id, s, config, devices, cluster, setup, saved, shared_parameters,
                      micro_batches, explain);
  }
  std::optional<OpCost> slowest;
  for (const int k : cluster.kinds_of(devices)) {
    OpCost c = op_cost_on(cluster.kind(k), g, id, s, config, devices, cluster, setup, saved, shared_parameters,
                          micro_batches, explain);
    if (!slowest || c.time_total() > slowest->time_total()) {
      slowest = std::move(c);
    }
  }
  return *slowest;
}

} // namespace partita::cost
