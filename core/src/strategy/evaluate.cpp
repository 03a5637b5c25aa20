#include "partita/cluster/collectives.h"
#include "partita/graph/error.h"
#include "partita/sharding/redistribution.h"
#include "partita/strategy/strategy.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <unordered_map>

namespace partita::strategy {

int OpAssignment::copies() const {
  const int k = config.devices();
  return k > 0 ? static_cast<int>(devices.size()) / k : 0;
}

std::vector<int> OpAssignment::copy(int c) const {
  const auto k = static_cast<std::size_t>(config.devices());
  return {devices.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(c) * k),
          devices.begin() + static_cast<std::ptrdiff_t>((static_cast<std::size_t>(c) + 1) * k)};
}

std::string_view schedule_name(Schedule s) {
  switch (s) {
  case Schedule::gpipe: return "gpipe";
  case Schedule::one_f_one_b: return "1f1b";
  case Schedule::interleaved: return "interleaved";
  }
  return "?";
}

int batch_size(const graph::Graph& g) {
  for (graph::TensorId t : g.graph_inputs) {
    const auto& shape = g.tensor(t).shape;
    if (!shape.empty()) {
      return static_cast<int>(shape.front());
    }
  }
  return 1;
}

namespace {

// `seen_list`, when given, says whether a device list was checked before (an Evaluator's lists).
// `ops`: check every op's assignment too (a layout already checked under another setup skips them:
// the setup and the micro-batch count change nothing of them).
void check(const graph::Graph& g, const cluster::Cluster& cluster, const Strategy& st,
           const std::vector<graph::OpSemantics>& sem, const std::function<bool(std::size_t op)>& seen_list = {},
           bool ops = true) {
  if (st.ops.size() != g.ops().size()) {
    throw Error(
        fmt::format("strategy '{}' assigns {} ops, the model has {}", st.family, st.ops.size(), g.ops().size()));
  }
  std::vector<bool> seen(ops ? static_cast<std::size_t>(cluster.device_count()) : 0, false);
  for (std::size_t i = 0; ops && i < st.ops.size(); ++i) {
    const auto& a = st.ops[i];
    const auto& name = g.op(static_cast<graph::OpId>(i)).name;
    if (a.config.splits.size() != sem[i].dims.size()) {
      throw Error(fmt::format("strategy '{}', op '{}': {} split factors for {} iteration dimensions", st.family, name,
                              a.config.splits.size(), sem[i].dims.size()));
    }
    const int k = a.config.devices();
    if (k < 1 || a.devices.empty() || a.devices.size() % static_cast<std::size_t>(k) != 0) {
      throw Error(fmt::format("strategy '{}', op '{}': {} devices is not a multiple of the {} its configuration needs",
                              st.family, name, a.devices.size(), k));
    }
    if (seen_list && seen_list(i)) {
      continue;
    }
    for (int d : a.devices) {
      const bool inside = d >= 0 && d < cluster.device_count();
      if (!inside || seen[static_cast<std::size_t>(d)]) {
        throw Error(fmt::format("strategy '{}', op '{}': device {} is {}", st.family, name, d,
                                !inside ? "not in the cluster" : "listed twice"));
      }
      seen[static_cast<std::size_t>(d)] = true;
    }
    for (int d : a.devices) {
      seen[static_cast<std::size_t>(d)] = false;
    }
  }
  if (st.pipeline) {
    const auto& pl = *st.pipeline;
    if (pl.stage_of_op.size() != g.ops().size() || pl.micro_batches < 1 || pl.stages < 1 || pl.chunks < 1) {
      throw Error(fmt::format(
          "strategy '{}': the pipeline needs a stage per op, >= 1 stage, >= 1 micro-batch and >= 1 chunk per stage",
          st.family));
    }
    for (std::size_t i = 0; i < pl.stage_of_op.size(); ++i) {
      if (pl.stage_of_op[i] < 0 || pl.stage_of_op[i] >= pl.virtual_stages()) {
        throw Error(fmt::format("strategy '{}', op '{}': stage {} is not one of the pipeline's {}", st.family,
                                g.op(static_cast<graph::OpId>(i)).name, pl.stage_of_op[i], pl.virtual_stages()));
      }
    }
    try {
      check_schedule(pl);
    } catch (const Error& e) {
      throw Error(fmt::format("strategy '{}': {}", st.family, e.what()));
    }
  }
}

// Which output slot of `producer` is `tensor`.
std::size_t output_index(const graph::Op& producer, graph::TensorId tensor) {
  for (std::size_t i = 0; i < producer.outputs.size(); ++i) {
    if (producer.outputs[i] == tensor) {
      return i;
    }
  }
  return 0;
}

// The slowest group's time to carry out one redistribution. Groups that sit alike on their nodes
// (the same local devices on as many nodes) cost the same on a cluster of equal nodes: each shape
// is priced once.
// How a group sits on its nodes: per device, its node's rank among the group's nodes x node size +
// its local id (groups list their devices in ascending order). On a switched cluster, where a
// collective's cost reads only how many of its devices each node holds (cluster::CollectiveMemo),
// those counts, largest first.
void node_shape(const cluster::Cluster& cluster, std::span<const int> group, std::vector<int>& shape) {
  shape.clear();
  int rank = -1, last_node = -1;
  if (cluster.intra_switched) {
    for (const int d : group) {
      const int node = cluster.node_of(d);
      if (node != last_node) {
        shape.push_back(0);
        last_node = node;
      }
      ++shape.back();
    }
    std::sort(shape.begin(), shape.end(), std::greater<>());
    return;
  }
  for (const int d : group) {
    const int node = cluster.node_of(d);
    rank += node != last_node ? 1 : 0;
    last_node = node;
    shape.push_back(rank * cluster.devices_per_node + d % cluster.devices_per_node);
  }
}

// The groups move_cost prices: those of two devices or more, the first of each node shape.
template <class Visit>
void for_each_distinct_group(const cluster::Cluster& cluster, const sharding::Redistribution& r, Visit visit) {
  if (r.groups.size() == 1) { // the common case, and no shapes to compare
    if (r.groups[0].size() >= 2) {
      visit(std::size_t{0});
    }
    return;
  }
  // The shapes seen, in buffers kept per thread (the search asks for millions of moves): the first
  // `seen` of `priced`.
  thread_local std::vector<std::vector<int>> priced;
  thread_local std::vector<int> shape;
  std::size_t seen = 0;
  for (std::size_t i = 0; i < r.groups.size(); ++i) {
    if (r.groups[i].size() < 2) {
      continue;
    }
    node_shape(cluster, r.groups[i], shape);
    const auto end = priced.begin() + static_cast<std::ptrdiff_t>(seen);
    if (std::find(priced.begin(), end, shape) != end) {
      continue;
    }
    if (seen == priced.size()) {
      priced.emplace_back();
    }
    priced[seen++] = shape;
    visit(i);
  }
}

// `max_bytes_in`: r's, scaled as its caller takes it.
// `distinct`: r's groups are those already (keep_priced_groups'), each priced.
cluster::CollectiveCost move_cost(const cluster::Cluster& cluster, const sharding::Redistribution& r,
                                  double max_bytes_in, bool explain, bool distinct) {
  cluster::CollectiveCost worst;
  const auto price = [&](std::size_t i) {
    const auto group = r.groups[i];
    const auto p = static_cast<double>(group.size());
    const auto cost = explain ? cluster::collective_cost : cluster::collective_cost_unexplained;
    cluster::CollectiveCost c;
    switch (r.pattern) {
    case sharding::Pattern::all_gather:
      c = cost(cluster, cluster::Collective::all_gather, group, max_bytes_in * p / (p - 1),
               cluster::Algorithm::automatic, 1);
      break;
    case sharding::Pattern::send_recv:
      if (group.size() == 2) {
        c = cost(cluster, cluster::Collective::send_recv, group, max_bytes_in, cluster::Algorithm::automatic, 1);
        break;
      }
      [[fallthrough]]; // several senders and receivers: a many-to-many exchange
    default:
      c = cost(cluster, cluster::Collective::all_to_all, group, max_bytes_in * p / (p - 1),
               cluster::Algorithm::automatic, 1);
      break;
    }
    if (c.seconds > worst.seconds) {
      worst = std::move(c);
    }
  };
  if (distinct) {
    for (std::size_t i = 0; i < r.groups.size(); ++i) {
      price(i);
    }
  } else {
    for_each_distinct_group(cluster, r, price);
  }
  return worst;
}

// A redistribution's byte counts x units (the search's geometries count bytes per unit of a
// tensor) x a scale (the training precision, a micro-batch's share), read without copying its
// groups.
struct ScaledMove {
  ScaledMove(const sharding::Redistribution& r, double units, double scale, bool distinct)
      : move(r), max_bytes_in(r.max_bytes_in * units * scale), max_block_bytes(r.max_block_bytes * units * scale),
        pattern(r.pattern), distinct(distinct) {}
  cluster::CollectiveCost cost(const cluster::Cluster& cluster, bool explain) const {
    return max_bytes_in > 0 ? move_cost(cluster, move, max_bytes_in, explain, distinct) : cluster::CollectiveCost{};
  }
  const sharding::Redistribution& move;
  double max_bytes_in, max_block_bytes;
  sharding::Pattern pattern;
  bool distinct; // move's groups are keep_priced_groups' already
};

// Which device holds which block of input `i`: the blocks follow from the tensor, how its dims
// are split, the grid (split factors, last split dim fastest) and the device list (or, given, an
// id that stands for it: `list` >= 0).
std::vector<std::int64_t> placement_key(const graph::Graph& g, const graph::OpSemantics& s, const OpAssignment& a,
                                        std::size_t i, graph::TensorId tensor, int list = -1) {
  const auto layout = sharding::input_layout(g, s, a.config, i);
  std::vector<std::int64_t> key{tensor, -1};
  const auto grid = sharding::block_signature(layout, a.config);
  key.insert(key.end(), grid.begin(), grid.end());
  key.push_back(-1);
  if (list >= 0) {
    key.push_back(-2 - list);
  } else {
    key.insert(key.end(), a.devices.begin(), a.devices.end());
  }
  return key;
}

// The memory traffic of a redistribution on the busiest device, beside the transfer (partita-run's
// exchange): it writes its whole block, copying what it holds itself and unpacking what arrives,
// and packs what it sends (as much as it receives, for the exchanges plans make). A gradient going
// back is added into the producer's gradient: read, read and write; the gradient added was just
// written by the consumer's backward pass (a fresh read).
double local_copy_seconds(double bytes_in, double block_bytes, bool accumulate, const cluster::Cluster& cluster,
                          const cost::TrainingSetup& setup) {
  // Contiguous rows, streamed: the element-wise family's rate (the copy family is the remap of
  // Transpose and Split, element by element where rows do not line up).
  if (!accumulate) {
    const double bytes = 2.0 * block_bytes + 2.0 * bytes_in;
    return bytes > 0 ? cost::kernel_time(0, bytes, cluster.device, setup.precision, graph::KernelClass::eltwise) : 0.0;
  }
  // Added into the block in place (the accumulate family: read, read and write over what was
  // read), the packing of what it sends apart.
  const double add = block_bytes > 0
                         ? cost::kernel_time(0, 3.0 * block_bytes, cluster.device, setup.precision,
                                             graph::KernelClass::accumulate, graph::ComputeClass::matmul, block_bytes)
                         : 0.0;
  const double pack =
      bytes_in > 0 ? cost::kernel_time(0, 2.0 * bytes_in, cluster.device, setup.precision, graph::KernelClass::eltwise)
                   : 0.0;
  return add + pack;
}

// The grid position of `device` in op assignment `x` (-1: not one of its devices).
int grid_position(const OpAssignment& x, int device) {
  const auto it = std::find(x.devices.begin(), x.devices.end(), device);
  return it == x.devices.end() ? -1 : static_cast<int>(it - x.devices.begin()) % std::max(1, x.config.devices());
}

// Whether, in every group, the devices hold pairwise distinct blocks of `layout` under `a`, each
// inside the block of `whole` (under `w`) that device holds and 1/|group| of it: what a
// reduce-scatter over the group leaves.
bool slices_in_groups(const sharding::TensorLayout& layout, const OpAssignment& a, const sharding::TensorLayout& whole,
                      const OpAssignment& w, const std::vector<std::vector<int>>& groups) {
  const auto position = grid_position;
  for (const auto& group : groups) {
    if (group.size() < 2) {
      continue;
    }
    std::set<std::vector<std::int64_t>> begins;
    for (const int d : group) {
      const int pa = position(a, d), pw = position(w, d);
      if (pa < 0 || pw < 0) {
        return false;
      }
      const auto slice = sharding::block_of(layout, a.config, pa);
      const auto all = sharding::block_of(whole, w.config, pw);
      if (slice.elements() * static_cast<std::int64_t>(group.size()) != all.elements() ||
          !begins.insert(slice.begin).second) {
        return false;
      }
      for (std::size_t k = 0; k < slice.begin.size(); ++k) {
        if (slice.begin[k] < all.begin[k] || slice.end[k] > all.end[k]) {
          return false;
        }
      }
    }
  }
  return true;
}

bool has_one_reader(const graph::Graph& g, graph::TensorId t) {
  const auto& readers = g.tensor(t).consumers;
  return readers.size() == 1 && !g.is_graph_output(t) &&
         std::count(g.op(readers[0]).inputs.begin(), g.op(readers[0]).inputs.end(), t) == 1;
}

// Whether partita-run packs a reduce-scatter of `whole` (op `a`'s shard, summed over each group)
// into the slices `parts` keeps (under `pa`, one per device of the group, in the group's order):
// when the slices do not lie one after another in the shard (sharding::tiles_in_order, the test
// the executor makes on the same blocks). Called where slices_in_groups holds: every device of
// a group is one of both ops'.
bool scatter_packs(const sharding::TensorLayout& whole, const OpAssignment& a, const sharding::TensorLayout& parts,
                   const OpAssignment& pa, const std::vector<std::vector<int>>& groups) {
  const auto position = grid_position;
  std::vector<sharding::Block> slices;
  for (const auto& group : groups) {
    if (group.size() < 2) {
      continue;
    }
    slices.clear();
    for (const int d : group) {
      slices.push_back(sharding::block_of(parts, pa.config, position(pa, d)));
    }
    if (!sharding::tiles_in_order(sharding::block_of(whole, a.config, position(a, group[0])), slices)) {
      return true;
    }
  }
  return false;
}

// Sequence parallelism (Korthikanti et al. 2022): op `id`'s partial-sum all-reduces whose one
// reader keeps a distinct slice on each device of the group, and its input-gradient all-reduces
// whose producer keeps such slices, are reduce-scatters.
void reduce_scatters(const graph::Graph& g, const std::vector<graph::OpSemantics>& sem,
                     const std::vector<OpAssignment>& ops, graph::OpId id, const cluster::Cluster& cluster,
                     const cost::TrainingSetup& setup, cost::OpCost& c, bool explain, int micro) {
  const auto& op = g.op(id);
  const auto& a = ops[static_cast<std::size_t>(id)];
  const auto& s = sem[static_cast<std::size_t>(id)];
  // The term becomes a reduce-scatter of `t`'s shard over the same groups. partita-run sums in
  // place where the slices lie one after another in the shard; otherwise it packs the shard
  // slice by slice first and copies its own slice of the sum back (memory-bound copies beside
  // the transfer, priced as a redistribution's).
  const auto reduce_scatter = [&](cost::Term& term, graph::TensorId t, const std::vector<std::vector<int>>& groups,
                                  double shard_bytes, bool packs, std::string_view why) {
    // Once per micro-batch, its share each time (as the all-reduce it replaces).
    const double bytes = cost::stored_bytes(g.tensor(t), shard_bytes, setup) / micro;
    const auto rs = cost::collective_on_groups(cluster, cluster::Collective::reduce_scatter, groups, bytes, explain);
    std::size_t members = 1;
    for (const auto& group : groups) {
      members = std::max(members, group.size());
    }
    const double copies =
        packs ? local_copy_seconds(bytes / static_cast<double>(members), bytes, false, cluster, setup) : 0.0;
    term.value = micro * (rs.seconds + copies);
    term.formula = explain
                       ? fmt::format("'{}' {}, {}{}{}", g.tensor(t).name, why,
                                     micro > 1 ? fmt::format("{} micro-batches x ", micro) : std::string(), rs.formula,
                                     packs ? fmt::format("; its slices are strided in the shard: packed first and "
                                                         "its own slice copied back, {:.4g} ms",
                                                         copies * 1e3)
                                           : std::string())
                       : std::string();
  };
  for (auto& term : c.time) {
    if (term.slot < 0) {
      continue;
    }
    const auto slot = static_cast<std::size_t>(term.slot);
    if (term.name == cost::term::forward_reduce) {
      if (!output_reduce_scatters(g, sem, ops, id, slot, setup.sequence_parallel)) {
        continue;
      }
      const auto out = sharding::output_layout(g, s, a.config, slot);
      const auto groups = cost::device_groups(a.config, a.devices, out.partial_axes, false);
      const graph::OpId reader = g.tensor(op.outputs[slot]).consumers[0];
      const auto& ra = ops[static_cast<std::size_t>(reader)];
      const auto& reader_inputs = g.op(reader).inputs;
      const auto read = sharding::input_layout(
          g, sem[static_cast<std::size_t>(reader)], ra.config,
          static_cast<std::size_t>(std::find(reader_inputs.begin(), reader_inputs.end(), op.outputs[slot]) -
                                   reader_inputs.begin()));
      reduce_scatter(term, op.outputs[slot], groups, out.shard_bytes(), scatter_packs(out, a, read, ra, groups),
                     "is a partial sum whose one reader keeps a slice of it on each device (sequence parallelism): "
                     "reduce-scatter");
    } else if (term.name == cost::term::backward_reduce) {
      if (!input_gradient_reduce_scatters(g, sem, ops, id, slot, setup.sequence_parallel)) {
        continue;
      }
      const auto in = sharding::input_layout(g, s, a.config, slot);
      const auto groups = cost::device_groups(a.config, a.devices, in.replica_axes, false);
      const auto t = op.inputs[slot];
      const graph::OpId producer = g.tensor(t).producer;
      const auto& pa = ops[static_cast<std::size_t>(producer)];
      const auto& outputs = g.op(producer).outputs;
      const auto held = sharding::output_layout(
          g, sem[static_cast<std::size_t>(producer)], pa.config,
          static_cast<std::size_t>(std::find(outputs.begin(), outputs.end(), t) - outputs.begin()));
      reduce_scatter(term, t, groups, in.shard_bytes(), scatter_packs(in, a, held, pa, groups),
                     "is read whole by its group and its producer keeps a slice of it on each device (sequence "
                     "parallelism): its gradient is reduce-scattered");
    }
  }
}

} // namespace

bool output_reduce_scatters(const graph::Graph& g, const std::vector<graph::OpSemantics>& sem,
                            const std::vector<OpAssignment>& ops, graph::OpId id, std::size_t output,
                            bool sequence_parallel) {
  const graph::TensorId t = g.op(id).outputs.at(output);
  if (!sequence_parallel || t == graph::no_tensor || !has_one_reader(g, t)) {
    return false;
  }
  const auto& a = ops[static_cast<std::size_t>(id)];
  const auto out = sharding::output_layout(g, sem[static_cast<std::size_t>(id)], a.config, output);
  if (out.partial_axes.empty()) {
    return false;
  }
  const graph::OpId reader = g.tensor(t).consumers[0];
  const auto& ra = ops[static_cast<std::size_t>(reader)];
  const auto& inputs = g.op(reader).inputs;
  const auto input = static_cast<std::size_t>(std::find(inputs.begin(), inputs.end(), t) - inputs.begin());
  const auto groups = cost::device_groups(a.config, a.devices, out.partial_axes, false);
  return slices_in_groups(sharding::input_layout(g, sem[static_cast<std::size_t>(reader)], ra.config, input), ra, out,
                          a, groups);
}

bool input_gradient_reduce_scatters(const graph::Graph& g, const std::vector<graph::OpSemantics>& sem,
                                    const std::vector<OpAssignment>& ops, graph::OpId id, std::size_t input,
                                    bool sequence_parallel) {
  const graph::TensorId t = g.op(id).inputs.at(input);
  if (!sequence_parallel || t == graph::no_tensor || g.tensor(t).producer < 0 || !has_one_reader(g, t)) {
    return false;
  }
  const graph::OpId producer = g.tensor(t).producer;
  const auto& a = ops[static_cast<std::size_t>(id)];
  const auto& pa = ops[static_cast<std::size_t>(producer)];
  const auto& outputs = g.op(producer).outputs;
  const auto output = static_cast<std::size_t>(std::find(outputs.begin(), outputs.end(), t) - outputs.begin());
  const auto from = sharding::output_layout(g, sem[static_cast<std::size_t>(producer)], pa.config, output);
  const auto in = sharding::input_layout(g, sem[static_cast<std::size_t>(id)], a.config, input);
  if (!from.partial_axes.empty() || in.replica_axes.empty()) {
    return false;
  }
  const auto groups = cost::device_groups(a.config, a.devices, in.replica_axes, false);
  return slices_in_groups(from, pa, in, a, groups);
}

void keep_priced_groups(const cluster::Cluster& cluster, MoveGeometry& geometry) {
  for (auto* r : {&geometry.forward, &geometry.backward}) {
    thread_local std::vector<char> priced;
    priced.assign(r->groups.size(), 0);
    for_each_distinct_group(cluster, *r, [&](std::size_t i) { priced[i] = 1; });
    r->groups.keep_if([&](std::size_t i) { return priced[i] != 0; });
  }
  geometry.priced_groups_only = true;
}

namespace {

void move_geometry(const sharding::TensorLayout& from, const sharding::Config& from_config,
                   std::span<const int> from_devices, const sharding::TensorLayout& to,
                   const sharding::Config& to_config, std::span<const int> to_devices, int node_bits, MoveGeometry& m,
                   bool alike_by_xor = false) {
  m.consumer_shard_bytes = to.shard_bytes();
  m.priced_groups_only = false;
  if (std::equal(from_devices.begin(), from_devices.end(), to_devices.begin(), to_devices.end()) &&
      sharding::same_block_signature(from, from_config, to, to_config)) {
    m.same_blocks = true;
    m.forward = m.backward = sharding::Redistribution{};
    return;
  }
  m.same_blocks = false;
  // Copies of a grid hold the same blocks, so every device of either side takes part. The
  // gradient goes back the other way: from this op's input layout (reduced over its replicas by
  // the op's own input-gradient reduce) to the producer's output layout, often a mere slice.
  sharding::redistribute_both(from, from_config, from_devices, to, to_config, to_devices, node_bits, m.forward,
                              m.backward, alike_by_xor);
}

MoveGeometry move_geometry(const sharding::TensorLayout& from, const sharding::Config& from_config,
                           std::span<const int> from_devices, const sharding::TensorLayout& to,
                           const sharding::Config& to_config, std::span<const int> to_devices, int node_bits) {
  MoveGeometry m;
  move_geometry(from, from_config, from_devices, to, to_config, to_devices, node_bits, m);
  return m;
}

} // namespace

MoveGeometry move_geometry(const sharding::TensorLayout& from, const sharding::Config& from_config,
                           std::span<const int> from_devices, const sharding::TensorLayout& to,
                           const sharding::Config& to_config, std::span<const int> to_devices) {
  return move_geometry(from, from_config, from_devices, to, to_config, to_devices, -1);
}

namespace {

// Groups that sit on their nodes alike are priced once, so those moved by whole nodes need not be
// listed (node_shape: node d / devices_per_node, whole nodes are bits when it is a power of two).
int node_bits_of(const cluster::Cluster& cluster) {
  const int per_node = cluster.devices_per_node;
  return per_node > 0 && (per_node & (per_node - 1)) == 0 ? std::countr_zero(static_cast<unsigned>(per_node)) : -1;
}

} // namespace

MoveGeometry priced_move_geometry(const sharding::TensorLayout& from, const sharding::Config& from_config,
                                  std::span<const int> from_devices, const sharding::TensorLayout& to,
                                  const sharding::Config& to_config, std::span<const int> to_devices,
                                  const cluster::Cluster& cluster) {
  MoveGeometry m;
  priced_move_geometry(from, from_config, from_devices, to, to_config, to_devices, cluster, m);
  return m;
}

void priced_move_geometry(const sharding::TensorLayout& from, const sharding::Config& from_config,
                          std::span<const int> from_devices, const sharding::TensorLayout& to,
                          const sharding::Config& to_config, std::span<const int> to_devices,
                          const cluster::Cluster& cluster, MoveGeometry& out) {
  // On a switched node a group is priced by how many of its devices each node holds (alike under
  // any exclusive or of the device ids where nodes are powers of two: node_bits).
  const int node_bits = node_bits_of(cluster);
  move_geometry(from, from_config, from_devices, to, to_config, to_devices, node_bits, out,
                node_bits >= 0 && cluster.intra_switched);
  keep_priced_groups(cluster, out);
}

MoveGeometry move_geometry(const sharding::TensorLayout& from, const OpAssignment& producer,
                           const sharding::TensorLayout& to, const OpAssignment& consumer) {
  return move_geometry(from, producer.config, producer.devices, to, consumer.config, consumer.devices);
}

namespace {

// move_terms of a geometry whose byte counts are per unit of the tensor, x `units`: their sum,
// and the terms themselves into `terms` where it is given (the search asks only for the sum).
double move_terms_into(const MoveGeometry& geometry, double units, const MoveContext& context,
                       const cluster::Cluster& cluster, const cost::TrainingSetup& setup, bool explain,
                       std::vector<cost::Term>* terms) {
  const double consumer_shard_bytes = geometry.consumer_shard_bytes * units;
  // Per micro-batch: a micro-batch's share of the bytes, m times; sent once: the whole, once.
  const double m = context.once ? 1 : context.micro_batches;
  const double scale = context.scale / m;
  const std::string times = explain && m > 1 ? fmt::format("{} micro-batches x ", context.micro_batches) : "";
  // Sent once: each later micro-batch copies the first's block.
  const double later_copies =
      context.once && context.micro_batches > 1 && !geometry.same_blocks
          ? (context.micro_batches - 1) *
                local_copy_seconds(0, consumer_shard_bytes * context.scale, false, cluster, setup)
          : 0.0;
  if (geometry.same_blocks) {
    // The same blocks on the same devices: nothing moves, and the reader works on the producer's
    // buffer. Its gradient too, unless the tensor has several readers (or is a graph output, whose
    // loss gradient is there first): then each adds its part into the producer's gradient.
    if (!context.gradient || !(context.several_readers || context.graph_output)) {
      return 0;
    }
    const double bytes = consumer_shard_bytes * scale;
    const double add = m * local_copy_seconds(0, bytes, true, cluster, setup);
    if (terms == nullptr) {
      return add;
    }
    terms->push_back(
        cost::Term{std::string(cost::term::redistribution_copies), add,
                   explain ? fmt::format("'{}' from '{}': the same blocks; backward adds {}{:.4g} MB into the "
                                         "producer's gradient ({})",
                                         context.tensor, context.producer, times, bytes / 1e6,
                                         context.several_readers ? "the tensor has several readers" : "a graph output")
                           : std::string(),
                   add});
    return add;
  }
  const sharding::Redistribution nothing;
  const ScaledMove forward(geometry.forward, units, scale, geometry.priced_groups_only);
  // A mask computed from constants: no gradient goes back.
  const ScaledMove backward(context.gradient ? geometry.backward : nothing, units, scale, geometry.priced_groups_only);
  const double backward_copies =
      m * local_copy_seconds(backward.max_bytes_in, backward.max_block_bytes, true, cluster, setup);
  const double copies = m * local_copy_seconds(forward.max_bytes_in, forward.max_block_bytes, false, cluster, setup) +
                        backward_copies + later_copies;
  const bool moves = forward.max_bytes_in > 0 || backward.max_bytes_in > 0;
  cluster::CollectiveCost f, b;
  if (moves) {
    f = forward.cost(cluster, explain);
    b = backward.cost(cluster, explain);
  }
  const double transfer = moves ? m * (f.seconds + b.seconds) : 0.0;
  const double sum = transfer + (copies > 0 ? copies : 0.0);
  if (terms == nullptr) {
    return sum;
  }
  if (moves) {
    terms->push_back(
        {std::string(cost::term::redistribution), transfer,
         explain ? fmt::format("'{}' from '{}': {}forward {} of {:.4g} MB per device{}; backward {} of {:.4g} MB{}{}",
                               context.tensor, context.producer, times, sharding::pattern_name(forward.pattern),
                               forward.max_bytes_in / 1e6, f.formula.empty() ? "" : " (" + f.formula + ")",
                               sharding::pattern_name(backward.pattern), backward.max_bytes_in / 1e6,
                               b.formula.empty() ? "" : " (" + b.formula + ")",
                               context.once ? fmt::format("; the same in every micro-batch: sent once, with the first "
                                                          "of {}",
                                                          context.micro_batches)
                                            : "")
                 : std::string(),
         m * b.seconds});
  }
  if (copies > 0) {
    terms->push_back(
        {std::string(cost::term::redistribution_copies), copies,
         explain ? fmt::format("'{}': {}forward writes a block of {:.4g} MB and packs {:.4g} MB; backward "
                               "adds {:.4g} MB into the producer's gradient and packs {:.4g} MB "
                               "(memory-bound copies){}",
                               context.tensor, times, forward.max_block_bytes / 1e6, forward.max_bytes_in / 1e6,
                               backward.max_block_bytes / 1e6, backward.max_bytes_in / 1e6,
                               later_copies > 0
                                   ? fmt::format("; {} later micro-batches copy the first's "
                                                 "{:.4g} MB",
                                                 context.micro_batches - 1, consumer_shard_bytes * context.scale / 1e6)
                                   : "")
                 : std::string(),
         backward_copies});
  }
  return sum;
}

} // namespace

std::vector<cost::Term> move_terms(const MoveGeometry& geometry, const MoveContext& context,
                                   const cluster::Cluster& cluster, const cost::TrainingSetup& setup, bool explain) {
  std::vector<cost::Term> terms;
  move_terms_into(geometry, 1, context, cluster, setup, explain, &terms);
  return terms;
}

bool priced_alike(const MoveContext& a, const MoveContext& b) {
  // Every field move_terms_into reads but the names.
  return a.scale == b.scale && a.gradient == b.gradient && a.several_readers == b.several_readers &&
         a.graph_output == b.graph_output && a.micro_batches == b.micro_batches && a.once == b.once;
}

double move_seconds(const MoveGeometry& geometry, double units, const MoveContext& context,
                    const cluster::Cluster& cluster, const cost::TrainingSetup& setup) {
  return move_terms_into(geometry, units, context, cluster, setup, false, nullptr);
}

namespace {

// The least kernel_time(0, bytes, ..., family k, fresh_bytes = fresh) can be: the family's memory
// curve at its best point (`best`: d.memory_curve(k).most()), every fresh byte read for free, and the launch.
double least_pass_seconds(double bytes, double fresh, double best, const cluster::Device& d) {
  if (bytes <= 0) {
    return 0;
  }
  const double memory = d.memory_bandwidth > 0 && best > 0 ? (bytes - fresh) / (d.memory_bandwidth * best) : 0.0;
  return std::max(0.0, memory) + d.kernel_launch_overhead;
}

// The least latency any message between two devices can meet: every link's, under every protocol
// and every collective's own figures (a link without bandwidth carries nothing: a message on it
// costs without bound).
double least_latency(const cluster::Cluster& cluster) {
  double least = std::numeric_limits<double>::infinity();
  const auto consider = [&least](double bandwidth, double latency) {
    if (bandwidth > 0) {
      least = std::min(least, latency);
    }
  };
  for (const auto* link : {&cluster.intra_link, &cluster.intra_fallback, &cluster.nic}) {
    consider(link->bandwidth, link->latency);
    for (const auto& p : link->protocols) {
      consider(p.bandwidth, p.latency);
    }
    for (const auto& c : link->collectives) {
      consider(c.bandwidth, c.latency);
      for (const auto& p : c.protocols) {
        consider(p.bandwidth, p.latency);
      }
    }
  }
  return std::isfinite(least) ? std::max(0.0, least) : 0.0;
}

// The most bandwidth any collective's estimate can give one device's traffic on a cluster of
// switched nodes (every link inside a node the switch's, every one between nodes a NIC, up to a
// node's NICs together): every link's, under every protocol and every collective's own figures.
// 0 elsewhere (a mesh's rings and exchanges add up direct lanes: no bound is claimed there).
double most_bandwidth(const cluster::Cluster& cluster) {
  if (!cluster.intra_switched) {
    return 0;
  }
  double most = 0;
  const auto consider = [&most](const cluster::Link& link, double links) {
    const auto rate = [&](double bandwidth) { most = std::max(most, bandwidth * links); };
    rate(link.bandwidth);
    for (const auto& p : link.protocols) {
      rate(p.bandwidth);
    }
    for (const auto& c : link.collectives) {
      rate(c.bandwidth);
      for (const auto& p : c.protocols) {
        rate(p.bandwidth);
      }
    }
  };
  consider(cluster.intra_link, 1);
  consider(cluster.intra_fallback, 1);
  consider(cluster.nic, std::max(1, cluster.nics_per_node));
  return most;
}

} // namespace

MoveBoundRates move_bound_rates(const cluster::Cluster& cluster) {
  return {least_latency(cluster), most_bandwidth(cluster),
          cluster.device.memory_curve(graph::KernelClass::eltwise).most(),
          cluster.device.memory_curve(graph::KernelClass::accumulate).most()};
}

double move_seconds_lower_bound(double consumer_block_bytes, double producer_block_bytes, double shared_bytes,
                                const MoveContext& context, const MoveBoundRates& rates,
                                const cluster::Cluster& cluster, const cost::TrainingSetup& setup) {
  // move_terms_into where the blocks are not the same. Device 0 holds the first part of every dim
  // on both sides: it receives its consumer block less what the two share, and each other device
  // can send it at most that much (no producer block meets a consumer block in more than the
  // least of their parts, dim by dim), so its group counts at least 1 + received / shared devices.
  // The transfer: the group's collective at least as many latency steps as any estimate takes
  // for that many devices (a ring or an exchange p - 1, two levels of k x m = p at least
  // 2 sqrt(p) - 2), each at the least latency of any link; its bandwidth term below.
  // The copies: what writing the consumer's block and packing what device 0 receives
  // (local_copy_seconds) and adding the gradient into the producer's block cost, at the best
  // efficiency the device's curves give; the later micro-batches' copies of a tensor sent once,
  // as they are.
  const double m = context.once ? 1 : context.micro_batches;
  const double scale = context.scale / m;
  const double received = std::max(0.0, consumer_block_bytes - shared_bytes);
  const double sent_back = std::max(0.0, producer_block_bytes - shared_bytes);
  const double later_copies =
      context.once && context.micro_batches > 1
          ? (context.micro_batches - 1) *
                local_copy_seconds(0, consumer_block_bytes * context.scale, false, cluster, setup)
          : 0.0;
  const double forward =
      m * least_pass_seconds(2 * (consumer_block_bytes + received) * scale, 0, rates.eltwise_most, cluster.device);
  const double backward = context.gradient
                              ? m * (least_pass_seconds(3 * producer_block_bytes * scale, producer_block_bytes * scale,
                                                        rates.accumulate_most, cluster.device) +
                                     least_pass_seconds(2 * sent_back * scale, 0, rates.eltwise_most, cluster.device))
                              : 0.0;
  const auto steps = [&](double bytes) {
    if (bytes <= 0 || shared_bytes <= 0) {
      return 0.0;
    }
    const double p = 1 + std::ceil(bytes / shared_bytes);
    return p < 4 ? p - 1 : std::min(p - 1, std::ceil(2 * std::sqrt(p)) - 2);
  };
  // Bandwidth: a device's bytes in over a ring, two levels or a send, each at most the most any
  // link gives; an exchange across nodes splits them between the switch and the NICs, each at
  // most that: at least bytes / (2 x the most).
  const double most = rates.most_bandwidth;
  const auto streamed = [&](double bytes) { return most > 0 ? bytes * scale / (2 * most) : 0.0; };
  const double transfer = m * (rates.least_latency * (steps(received) + (context.gradient ? steps(sent_back) : 0)) +
                               streamed(received) + (context.gradient ? streamed(sent_back) : 0));
  return later_copies + forward + backward + transfer;
}

std::vector<TiedWeight> tied_weights(const graph::Graph& g) {
  std::map<graph::TensorId, std::vector<std::pair<graph::OpId, std::size_t>>> readers;
  for (const auto id : g.topological_order()) {
    const auto& op = g.op(id);
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const graph::TensorId t = op.inputs[i];
      if (t == graph::no_tensor) {
        continue;
      }
      const auto& tensor = g.tensor(t);
      const auto slot = graph::input_slot(op, i);
      if (tensor.role == graph::TensorRole::parameter && graph::trains_as_float(tensor) &&
          graph::gets_gradient(tensor) && slot != graph::InputSlot::index && slot != graph::InputSlot::state) {
        readers[t].emplace_back(id, i);
      }
    }
  }
  std::vector<TiedWeight> out;
  for (auto& [t, list] : readers) {
    if (list.size() >= 2) {
      out.push_back({t, std::move(list)});
    }
  }
  return out;
}

std::vector<std::vector<std::size_t>> shared_parameters(const graph::Graph& g,
                                                        const std::vector<graph::OpSemantics>& sem,
                                                        const std::vector<OpAssignment>& ops) {
  return shared_parameters(g, sem, ops, tied_weights(g));
}

std::vector<std::vector<std::size_t>> shared_parameters(const graph::Graph& g,
                                                        const std::vector<graph::OpSemantics>& sem,
                                                        const std::vector<OpAssignment>& ops,
                                                        const std::vector<TiedWeight>& ties) {
  std::vector<std::vector<std::size_t>> out(g.ops().size());
  for (const auto& tie : ties) {
    const auto [first, first_input] = tie.readers.front();
    const auto& fa = ops[static_cast<std::size_t>(first)];
    const auto to = sharding::input_layout(g, sem[static_cast<std::size_t>(first)], fa.config, first_input);
    for (std::size_t r = 1; r < tie.readers.size(); ++r) {
      const auto [other, other_input] = tie.readers[r];
      const auto& oa = ops[static_cast<std::size_t>(other)];
      const auto from = sharding::input_layout(g, sem[static_cast<std::size_t>(other)], oa.config, other_input);
      if (move_geometry(from, oa, to, fa).same_blocks) {
        out[static_cast<std::size_t>(other)].push_back(other_input);
      }
    }
  }
  return out;
}

std::vector<cost::Term> tied_gradient_terms(const MoveGeometry& geometry, const MoveContext& context,
                                            const cluster::Cluster& cluster, const cost::TrainingSetup& setup,
                                            bool explain) {
  const double scale = context.scale * setup.gradient_bytes() / setup.value_bytes(); // gradients at their width
  if (geometry.same_blocks) {
    const double bytes = geometry.consumer_shard_bytes * scale;
    const double seconds =
        local_copy_seconds(0, bytes, true, cluster, setup) + local_copy_seconds(0, bytes, false, cluster, setup);
    return {cost::Term{std::string(cost::term::gradient_sync), seconds,
                       explain ? fmt::format("'{}' is read by several ops (tied): each adds the other's gradient "
                                             "shard of {:.4g} MB into its own and copies the sum back (memory-bound)",
                                             context.tensor, bytes / 1e6)
                               : std::string()}};
  }
  // The other reader's gradient into the first's layout, added; the sum back into the other's layout.
  const ScaledMove there(geometry.forward, 1, scale, geometry.priced_groups_only);
  const ScaledMove back(geometry.backward, 1, scale, geometry.priced_groups_only);
  const auto f = there.cost(cluster, explain);
  const auto b = back.cost(cluster, explain);
  const double copies = local_copy_seconds(there.max_bytes_in, there.max_block_bytes, true, cluster, setup) +
                        local_copy_seconds(back.max_bytes_in, back.max_block_bytes, false, cluster, setup);
  return {cost::Term{
      std::string(cost::term::gradient_sync), f.seconds + b.seconds + copies,
      explain ? fmt::format("'{}' is read by several ops (tied): the other reader's gradient {} of {:.4g} MB per "
                            "device into this op's layout and added{}, the sum {} of {:.4g} MB back{}; copies {:.4g} "
                            "ms",
                            context.tensor, sharding::pattern_name(there.pattern), there.max_bytes_in / 1e6,
                            f.formula.empty() ? "" : " (" + f.formula + ")", sharding::pattern_name(back.pattern),
                            back.max_bytes_in / 1e6, b.formula.empty() ? "" : " (" + b.formula + ")", copies * 1e3)
              : std::string()}};
}

MoveContext move_context(const graph::Graph& g, graph::OpId consumer, std::size_t input,
                         const cost::TrainingSetup& setup, int micro_batches) {
  const auto& op = g.op(consumer);
  const graph::TensorId t = op.inputs[input];
  const auto& tensor = g.tensor(t);
  MoveContext c;
  // Layouts count the graph's element type; values travel at the training precision.
  c.scale =
      graph::trains_as_float(tensor) ? setup.value_bytes() / static_cast<double>(graph::dtype_size(tensor.dtype)) : 1.0;
  c.gradient = graph::gets_gradient(tensor);
  c.several_readers = tensor.consumers.size() > 1 || std::count(op.inputs.begin(), op.inputs.end(), t) > 1;
  c.graph_output = g.is_graph_output(t);
  c.tensor = tensor.name;
  c.micro_batches = std::max(1, micro_batches);
  if (tensor.producer >= 0) {
    c.producer = g.op(tensor.producer).name;
  }
  return c;
}

std::vector<cost::Term> input_redistribution(const graph::Graph& g, const std::vector<graph::OpSemantics>& sem,
                                             const std::vector<OpAssignment>& ops, const cluster::Cluster& cluster,
                                             const cost::TrainingSetup& setup, graph::OpId id, std::size_t input,
                                             int micro_batches, bool explain, bool once) {
  const auto& op = g.op(id);
  const graph::TensorId t = op.inputs[input];
  if (t == graph::no_tensor || g.tensor(t).producer < 0) {
    return {};
  }
  const graph::OpId prod = g.tensor(t).producer;
  const auto& a = ops[static_cast<std::size_t>(id)];
  const auto& pa = ops[static_cast<std::size_t>(prod)];
  const auto from =
      sharding::output_layout(g, sem[static_cast<std::size_t>(prod)], pa.config, output_index(g.op(prod), t));
  const auto to = sharding::input_layout(g, sem[static_cast<std::size_t>(id)], a.config, input);
  auto context = move_context(g, id, input, setup, micro_batches);
  context.once = once;
  return move_terms(move_geometry(from, pa, to, a), context, cluster, setup, explain);
}

bool sent_once(const graph::Graph& g, const Strategy& st, graph::OpId consumer, std::size_t input) {
  if (!st.pipeline || st.pipeline->stage_of_op.size() != g.ops().size()) {
    return false;
  }
  const graph::TensorId t = g.op(consumer).inputs.at(input);
  if (t == graph::no_tensor || g.tensor(t).producer < 0 || !g.tensor(t).fixed) {
    return false;
  }
  const auto& stage = st.pipeline->stage_of_op;
  return stage[static_cast<std::size_t>(g.tensor(t).producer)] != stage[static_cast<std::size_t>(consumer)];
}

namespace {

// What evaluate() asks of its pricing: the model's semantics and order, which outputs the backward
// pass keeps, and each op's own terms and each input's move. evaluate() prices every op afresh;
// an Evaluator prices each class of equal ops once (numbers only).
// Terms summed the way an iteration adds them up (evaluate_with's classes), once per priced op or
// input rather than term by term at every evaluation.
struct Sums {
  double total = 0, sync = 0, step = 0, compute = 0 /* compute terms but the step */, redistribution = 0,
         communication = 0;
  double parameters = 0, gradients = 0, optimizer_state = 0, activations = 0, workspace = 0;

  void add(const cost::Term& term) {
    total += term.value;
    if (term.name == cost::term::optimizer_step) {
      step += term.value;
    } else if (cost::is_compute_term(term.name)) {
      compute += term.value;
    } else if (cost::is_redistribution_term(term.name)) {
      redistribution += term.value;
    } else if (term.name == cost::term::gradient_sync) {
      sync += term.value;
    } else {
      communication += term.value;
    }
  }
  void add(const Sums& o) {
    total += o.total;
    sync += o.sync;
    step += o.step;
    compute += o.compute;
    redistribution += o.redistribution;
    communication += o.communication;
  }
};

// An op priced: its terms and their sums (memory by name as OpCost::get reads it).
struct PricedOp {
  cost::OpCost cost;
  Sums sums;

  void summarize() {
    sums = {};
    for (const auto& term : cost.time) {
      sums.add(term);
    }
    sums.parameters = cost.get(cost::term::parameters);
    sums.gradients = cost.get(cost::term::gradients);
    sums.optimizer_state = cost.get(cost::term::optimizer_state);
    sums.activations = cost.get(cost::term::activations);
    sums.workspace = cost.get(cost::term::workspace);
  }
};

// An input's move priced: its terms, the sums of its transfer (`redistribution` terms: not paid
// again where the tensor was already sent to the same placement) and of the rest (copies).
struct PricedInput {
  std::vector<cost::Term> terms;
  Sums transfer, rest;
  bool sends = false;

  void summarize() {
    transfer = {};
    rest = {};
    sends = false;
    for (const auto& term : terms) {
      if (term.name == cost::term::redistribution) {
        sends = true;
        transfer.add(term);
      } else {
        rest.add(term);
      }
    }
  }
};

class Pricing {
public:
  virtual ~Pricing() = default;
  // `prepared`: the id of a layout prepared for `st` (Evaluator::prepare), or -1.
  virtual void begin(const Strategy& /*st*/, int /*prepared*/) {}
  virtual const std::vector<graph::OpSemantics>& semantics() = 0;
  virtual const std::vector<graph::OpId>& order() = 0;
  virtual const std::vector<cost::Saved>& saved(cost::Recompute policy) = 0;
  virtual const std::vector<TiedWeight>& ties() = 0;
  // Valid until the next call of the same function.
  virtual const PricedOp& op(const Strategy& st, graph::OpId id, std::span<const std::size_t> shared,
                             const std::vector<cost::Saved>& keep, const cost::TrainingSetup& setup) = 0;
  virtual const PricedInput& input(const Strategy& st, graph::OpId id, std::size_t i,
                                   const cost::TrainingSetup& setup) = 0;
  // Where op `id`'s input `i` is placed (which device holds which block: placement_key) as an id,
  // equal for equal placements within an evaluation.
  virtual int placement(const Strategy& st, graph::OpId id, std::size_t i) = 0;
  // Memory summed per list of devices, spread onto the devices at the end (fewer additions, the
  // same sums up to their order), rather than device by device as each op comes.
  virtual bool by_device_list() const = 0;
  // An id per distinct device list: op `id`'s in the strategy begin() was given (by_device_list only).
  virtual int list_of(graph::OpId id) = 0;
  // Whether begin()'s strategy is a prepared layout whose ops' assignments a former evaluation
  // checked; mark_checked() records that this one did.
  virtual bool ops_checked() const { return false; }
  virtual void mark_checked() {}
  // Where a prepared layout keeps its ops' shared_parameters() (they depend on the ops alone), or
  // null.
  virtual std::optional<std::vector<std::vector<std::size_t>>>* layout_shared() { return nullptr; }
};

// `per_op`: fill Prediction::ops (each op's terms); without, only the totals and memory.
Prediction evaluate_with(const graph::Graph& g, const cluster::Cluster& cluster, const Strategy& st,
                         const cost::TrainingSetup& given, Pricing& pricing, bool per_op = true, int prepared = -1) {
  const cost::TrainingSetup& setup = st.setup ? *st.setup : given;
  pricing.begin(st, prepared);
  const auto& sem = pricing.semantics();
  std::vector<bool> checked;
  check(
      g, cluster, st, sem,
      [&](std::size_t op) {
        if (!pricing.by_device_list()) {
          return false;
        }
        const auto id = static_cast<std::size_t>(pricing.list_of(static_cast<graph::OpId>(op)));
        if (id >= checked.size()) {
          checked.resize(id + 1, false);
        }
        const bool before = checked[id];
        checked[id] = true;
        return before;
      },
      !pricing.ops_checked());
  pricing.mark_checked();
  const auto& order = pricing.order();
  const auto& keep = pricing.saved(setup.recompute);
  std::map<graph::OpId, std::vector<const TiedWeight*>> ties_of; // by first reader
  for (const auto& tie : pricing.ties()) {
    ties_of[tie.readers.front().first].push_back(&tie);
  }
  std::vector<std::vector<std::size_t>> own_shared;
  const std::vector<std::vector<std::size_t>>* shared_of = nullptr;
  if (auto* kept = pricing.layout_shared(); kept != nullptr) {
    if (!kept->has_value()) {
      *kept = shared_parameters(g, sem, st.ops, pricing.ties());
    }
    shared_of = &**kept;
  } else {
    own_shared = shared_parameters(g, sem, st.ops, pricing.ties());
    shared_of = &own_shared;
  }
  const auto& shared = *shared_of;

  Prediction p;
  p.batch = batch_size(g);
  if (per_op) {
    p.ops.resize(g.ops().size());
  }
  p.memory.resize(static_cast<std::size_t>(cluster.device_count()));
  p.memory_capacity = cluster.device.memory_capacity;
  // Per virtual stage (a stage's chunk; the stage itself without chunks), folded onto the stages'
  // devices below.
  const int stages = st.pipeline ? st.pipeline->virtual_stages() : 1;
  const int device_stages = st.pipeline ? st.pipeline->stages : 1;
  const int chunks = st.pipeline ? st.pipeline->chunks : 1;
  const int micro = st.pipeline ? st.pipeline->micro_batches : 1;
  std::vector<double> stage_time(static_cast<std::size_t>(stages), 0.0); // without gradient sync
  // Once per iteration, after the last micro-batch, every stage at once: gradient sync and step.
  std::vector<double> stage_sync(static_cast<std::size_t>(stages), 0.0);
  std::vector<double> stage_step(static_cast<std::size_t>(stages), 0.0);
  std::vector<double> stage_compute(static_cast<std::size_t>(stages), 0.0);
  std::vector<char> moved; // per placement id (Pricing::placement): sent there already
  std::vector<bool> used(static_cast<std::size_t>(cluster.device_count()), false);
  // Interleaved: one micro-batch's activations per (device, virtual stage), device-major, and
  // whether any op put some there.
  const bool interleaved = st.pipeline && st.pipeline->schedule == Schedule::interleaved;
  std::vector<double> chunk_bytes(interleaved ? static_cast<std::size_t>(cluster.device_count()) * stages : 0, 0.0);
  std::vector<char> chunk_held(chunk_bytes.size(), 0);
  const auto chunk_slot = [&](int d, int v) {
    return static_cast<std::size_t>(d) * static_cast<std::size_t>(stages) + static_cast<std::size_t>(v);
  };
  // by_device_list: the same, per device list (spread onto the devices after the loop).
  std::vector<DeviceMemory> list_memory;
  std::vector<const std::vector<int>*> list_devices;
  std::map<std::pair<int, int>, double> list_chunk_activations;
  double* last_chunk = nullptr; // list_chunk_activations' entry of last_chunk_key
  std::pair<int, int> last_chunk_key{-1, -1};
  double compute = 0, communication = 0, redistribution = 0, sync = 0, step = 0;

  std::vector<cost::Term> extra; // per_op: an op's input moves and tied-gradient sums, after its own terms
  std::vector<int> input_of_term;
  for (graph::OpId id : order) {
    const auto& op = g.op(id);
    const auto& a = st.ops[static_cast<std::size_t>(id)];
    const auto& s = sem[static_cast<std::size_t>(id)];
    const PricedOp& priced = pricing.op(st, id, shared[static_cast<std::size_t>(id)], keep, setup);
    const cost::OpCost& c = priced.cost;
    Sums sums = priced.sums;
    extra.clear();
    input_of_term.assign(per_op ? c.time.size() : 0, -1);
    // Inputs produced by another op arrive in that op's output layout. A tensor moved into a
    // layout once (say, gathered for Q, K and V) is not sent again for the next consumer; each
    // consumer still copies it into its own buffer, and adds its gradient back.
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      if (op.inputs[i] == graph::no_tensor) {
        continue;
      }
      const PricedInput& move = pricing.input(st, id, i, setup);
      // Where the input is sent (not only copied), whether it was sent there already.
      bool sent = false;
      if (move.sends) {
        const auto place = static_cast<std::size_t>(pricing.placement(st, id, i));
        if (place >= moved.size()) {
          moved.resize(place + 1, 0);
        }
        sent = moved[place] != 0;
        moved[place] = 1;
      }
      sums.add(move.rest);
      if (!sent) {
        sums.add(move.transfer);
      }
      if (per_op) {
        for (const auto& term : move.terms) {
          if (!(sent && term.name == cost::term::redistribution)) {
            extra.push_back(term);
            input_of_term.push_back(static_cast<int>(i));
          }
        }
      }
    }
    // A tied weight's gradients summed between its readers' layouts, on its first reader.
    if (const auto it = ties_of.find(id); it != ties_of.end()) {
      for (const TiedWeight* tie_of : it->second) {
        const TiedWeight& tie = *tie_of;
        const auto [first, first_input] = tie.readers.front();
        const auto to = sharding::input_layout(g, s, a.config, first_input);
        const auto context = move_context(g, first, first_input, setup);
        for (std::size_t r = 1; r < tie.readers.size(); ++r) {
          const auto [other, other_input] = tie.readers[r];
          const auto& oa = st.ops[static_cast<std::size_t>(other)];
          const auto from = sharding::input_layout(g, sem[static_cast<std::size_t>(other)], oa.config, other_input);
          for (auto& term : tied_gradient_terms(move_geometry(from, oa, to, a), context, cluster, setup, per_op)) {
            sums.add(term);
            if (per_op) {
              extra.push_back(std::move(term));
            }
          }
        }
      }
    }
    const double total = sums.total, sync_time = sums.sync, step_time = sums.step;
    compute += sums.compute;
    step += sums.step;
    redistribution += sums.redistribution;
    sync += sums.sync;
    communication += sums.communication;
    const int stage = st.pipeline ? st.pipeline->stage_of_op[static_cast<std::size_t>(id)] : 0;
    stage_time[static_cast<std::size_t>(stage)] += total - sync_time - step_time;
    stage_compute[static_cast<std::size_t>(stage)] += sums.compute;
    stage_sync[static_cast<std::size_t>(stage)] += sync_time + step_time;
    stage_step[static_cast<std::size_t>(stage)] += step_time;
    // Memory: activations of the micro-batches a stage holds at once (1F1B: stages - stage). Under
    // the interleaved schedule a stage holds more micro-batches of its first chunks than of its
    // last: its program is walked below, chunk by chunk.
    const bool by_chunk = st.pipeline && st.pipeline->schedule == Schedule::interleaved;
    const double in_flight = by_chunk      ? 0.0
                             : st.pipeline ? micro_batches_in_flight(*st.pipeline, stage % device_stages) / micro
                                           : 1.0;
    const double parameters = priced.sums.parameters, gradients = priced.sums.gradients,
                 optimizer_state = priced.sums.optimizer_state, activations = priced.sums.activations,
                 workspace = priced.sums.workspace / micro;
    if (pricing.by_device_list()) {
      const int list = pricing.list_of(id);
      if (static_cast<std::size_t>(list) >= list_memory.size()) {
        list_memory.resize(static_cast<std::size_t>(list) + 1);
        list_devices.resize(static_cast<std::size_t>(list) + 1);
      }
      if (list_devices[static_cast<std::size_t>(list)] == nullptr) {
        list_devices[static_cast<std::size_t>(list)] = &a.devices;
      }
      auto& m = list_memory[static_cast<std::size_t>(list)];
      m.parameters += parameters;
      m.gradients += gradients;
      m.optimizer_state += optimizer_state;
      m.activations += activations * in_flight;
      if (by_chunk) {
        // Ops in a row mostly share their list and stage: the last entry first.
        if (last_chunk == nullptr || last_chunk_key != std::make_pair(list, stage)) {
          last_chunk_key = {list, stage};
          last_chunk = &list_chunk_activations[last_chunk_key];
        }
        *last_chunk += activations / micro;
      }
      m.workspace = std::max(m.workspace, workspace);
    } else {
      for (int d : a.devices) {
        used[static_cast<std::size_t>(d)] = true;
        auto& m = p.memory[static_cast<std::size_t>(d)];
        m.parameters += parameters;
        m.gradients += gradients;
        m.optimizer_state += optimizer_state;
        m.activations += activations * in_flight;
        if (by_chunk) {
          chunk_bytes[chunk_slot(d, stage)] += activations / micro;
          chunk_held[chunk_slot(d, stage)] = 1;
        }
        m.workspace = std::max(m.workspace, workspace);
      }
    }
    if (per_op) {
      cost::OpCost own = c;
      own.time.insert(own.time.end(), std::make_move_iterator(extra.begin()), std::make_move_iterator(extra.end()));
      input_of_term.resize(own.time.size(), -1);
      p.ops[static_cast<std::size_t>(id)] = OpPrediction{std::move(own), total, input_of_term};
    }
  }

  for (std::size_t list = 0; list < list_memory.size(); ++list) {
    if (list_devices[list] == nullptr) {
      continue;
    }
    const auto& lm = list_memory[list];
    for (const int d : *list_devices[list]) {
      used[static_cast<std::size_t>(d)] = true;
      auto& m = p.memory[static_cast<std::size_t>(d)];
      m.parameters += lm.parameters;
      m.gradients += lm.gradients;
      m.optimizer_state += lm.optimizer_state;
      m.activations += lm.activations;
      m.workspace = std::max(m.workspace, lm.workspace);
    }
  }
  for (const auto& [key, bytes] : list_chunk_activations) {
    for (const int d : *list_devices[static_cast<std::size_t>(key.first)]) {
      chunk_bytes[chunk_slot(d, key.second)] += bytes;
      chunk_held[chunk_slot(d, key.second)] = 1;
    }
  }
  p.iteration = {{"compute", compute, "forward, backward and recomputation kernels, summed over ops"},
                 {"communication", communication, "partial-sum and input-gradient reductions inside ops"},
                 {"redistribution", redistribution, "moving tensors between producer and consumer layouts"},
                 {"gradient sync", sync, "weight-gradient all-reduce over replicas"},
                 {"optimizer step", step, "the update of every weight shard (each stage of a pipeline at once)"}};
  if (st.pipeline) {
    // Each stage's devices run all their chunks; with V chunks the fill and drain pass through
    // one chunk at a time, so the bubble is (stages - 1) / V of the slowest stage's micro-batch.
    auto fold = [&](const std::vector<double>& per_chunk) {
      std::vector<double> out(static_cast<std::size_t>(device_stages), 0.0);
      for (int v = 0; v < stages; ++v) {
        out[static_cast<std::size_t>(v % device_stages)] += per_chunk[static_cast<std::size_t>(v)];
      }
      return out;
    };
    const auto device_time = fold(stage_time), device_sync = fold(stage_sync), device_step = fold(stage_step),
               device_compute = fold(stage_compute);
    const double slowest = *std::max_element(device_time.begin(), device_time.end()) / micro;
    const double bubble = (device_stages - 1) * slowest / chunks;
    const double steady = micro * slowest;
    const double sync_max = *std::max_element(device_sync.begin(), device_sync.end());
    p.iteration.push_back(
        {"pipeline bubble", bubble,
         chunks > 1 ? fmt::format("({} stages - 1) x slowest stage per micro-batch {:.4g} ms / {} chunks ({})",
                                  device_stages, slowest * 1e3, chunks, schedule_name(st.pipeline->schedule))
                    : fmt::format("({} stages - 1) x slowest stage per micro-batch {:.4g} ms ({})", device_stages,
                                  slowest * 1e3, schedule_name(st.pipeline->schedule))});
    p.iteration_time = steady + bubble + sync_max;
    const auto slowest_stage = std::max_element(device_time.begin(), device_time.end()) - device_time.begin();
    p.compute_time = device_compute[static_cast<std::size_t>(slowest_stage)] *
                         (micro + static_cast<double>(device_stages - 1) / chunks) / micro +
                     *std::max_element(device_step.begin(), device_step.end());
  } else {
    p.iteration_time = compute + communication + redistribution + sync + step;
    p.compute_time = compute + step;
  }
  // Interleaved: each device's peak over its stage's program, a chunk's micro-batch held from its
  // forward to its backward.
  // Each stage's program once; each walk once per stage and bytes per chunk (the devices of a
  // stage mostly hold the same).
  std::map<int, std::vector<PipelineStep>> programs;
  std::map<std::pair<int, std::vector<double>>, double> walked;
  std::vector<char> its_stages(static_cast<std::size_t>(device_stages), 0);
  for (int d = 0; interleaved && d < cluster.device_count(); ++d) {
    std::fill(its_stages.begin(), its_stages.end(), 0);
    bool any = false;
    for (int v = 0; v < stages; ++v) {
      if (chunk_held[chunk_slot(d, v)] != 0) {
        its_stages[static_cast<std::size_t>(v % device_stages)] = 1;
        any = true;
      }
    }
    if (!any) {
      continue;
    }
    double peak = 0;
    for (int s = 0; s < device_stages; ++s) {
      if (its_stages[static_cast<std::size_t>(s)] == 0) {
        continue;
      }
      auto program = programs.find(s);
      if (program == programs.end()) {
        program = programs.emplace(s, pipeline_program(*st.pipeline, s)).first;
      }
      std::vector<double> per_chunk(static_cast<std::size_t>(chunks), 0.0);
      for (int v = 0; v < chunks; ++v) {
        per_chunk[static_cast<std::size_t>(v)] = chunk_bytes[chunk_slot(d, v * device_stages + s)];
      }
      auto key = std::make_pair(s, std::move(per_chunk));
      auto known = walked.find(key);
      if (known == walked.end()) {
        double held = 0, most = 0;
        for (const auto& step : program->second) {
          const double bytes = key.second[static_cast<std::size_t>(step.chunk)];
          held += step.forward ? bytes : -bytes;
          most = std::max(most, held);
        }
        known = walked.emplace(std::move(key), most).first;
      }
      peak += known->second;
    }
    p.memory[static_cast<std::size_t>(d)].activations += peak;
  }
  p.communication_time = p.iteration_time - p.compute_time;
  p.additive_time = p.iteration_time;
  p.samples_per_second = p.iteration_time > 0 ? p.batch / p.iteration_time : 0;
  std::vector<int> used_devices;
  for (std::size_t d = 0; d < used.size(); ++d) {
    if (used[d]) {
      used_devices.push_back(static_cast<int>(d));
    }
  }
  p.devices_used = static_cast<int>(used_devices.size());
  for (const auto& m : p.memory) {
    p.peak_memory = std::max(p.peak_memory, m.total());
  }
  p.fits = p.peak_memory <= p.memory_capacity;
  if (cluster.heterogeneous()) {
    // Each device against its own memory; the capacity shown is the least of the devices used.
    p.memory_capacity = cluster.smallest_memory(used_devices);
    p.fits = true;
    for (const int d : used_devices) {
      p.fits = p.fits && p.memory[static_cast<std::size_t>(d)].total() <= cluster.device_of(d).memory_capacity;
    }
  }
  p.notes = prediction_notes(g, setup);
  return p;
}

// Every op priced afresh, with its formulas.
class FreshPricing final : public Pricing {
public:
  // `explain`: the terms with their formulas (evaluate()'s), or numbers only (an Evaluator's).
  FreshPricing(const graph::Graph& g, const cluster::Cluster& cluster, bool explain = true)
      : m_g(g), m_cluster(cluster), m_explain(explain) {
    m_sem.reserve(g.ops().size());
    for (std::size_t i = 0; i < g.ops().size(); ++i) {
      m_sem.push_back(graph::describe(g, static_cast<graph::OpId>(i)));
    }
  }
  const std::vector<graph::OpSemantics>& semantics() override { return m_sem; }
  const std::vector<graph::OpId>& order() override {
    if (m_order.empty()) {
      m_order = m_g.topological_order();
    }
    return m_order;
  }
  const std::vector<cost::Saved>& saved(cost::Recompute policy) override {
    m_keep = saved_outputs(m_g, order(), m_sem, policy);
    return m_keep;
  }
  const std::vector<TiedWeight>& ties() override {
    if (!m_ties) {
      m_ties = tied_weights(m_g);
    }
    return *m_ties;
  }
  const PricedOp& op(const Strategy& st, graph::OpId id, std::span<const std::size_t> shared,
                     const std::vector<cost::Saved>& keep, const cost::TrainingSetup& setup) override {
    const auto& a = st.ops[static_cast<std::size_t>(id)];
    const int micro = st.pipeline ? st.pipeline->micro_batches : 1;
    m_op.cost = cost::op_cost(m_g, id, m_sem[static_cast<std::size_t>(id)], a.config, a.devices, m_cluster, setup,
                              keep[static_cast<std::size_t>(id)], shared, micro, m_explain);
    if (setup.sequence_parallel) {
      reduce_scatters(m_g, m_sem, st.ops, id, m_cluster, setup, m_op.cost, m_explain, micro);
    }
    m_op.summarize();
    return m_op;
  }
  const PricedInput& input(const Strategy& st, graph::OpId id, std::size_t i,
                           const cost::TrainingSetup& setup) override {
    m_input.terms =
        input_redistribution(m_g, m_sem, st.ops, m_cluster, setup, id, i, st.pipeline ? st.pipeline->micro_batches : 1,
                             m_explain, sent_once(m_g, st, id, i));
    m_input.summarize();
    return m_input;
  }
  bool by_device_list() const override { return false; }
  int list_of(graph::OpId) override { return 0; }
  void begin(const Strategy&, int) override { m_placements.clear(); }
  int placement(const Strategy& st, graph::OpId id, std::size_t i) override {
    const auto& op = m_g.op(id);
    auto key =
        placement_key(m_g, m_sem[static_cast<std::size_t>(id)], st.ops[static_cast<std::size_t>(id)], i, op.inputs[i]);
    return m_placements.emplace(std::move(key), static_cast<int>(m_placements.size())).first->second;
  }

private:
  const graph::Graph& m_g;
  const cluster::Cluster& m_cluster;
  bool m_explain;
  std::vector<graph::OpSemantics> m_sem;
  std::vector<graph::OpId> m_order;
  std::vector<cost::Saved> m_keep;
  std::optional<std::vector<TiedWeight>> m_ties;
  PricedOp m_op;                                         // op()'s last
  PricedInput m_input;                                   // input()'s last
  std::map<std::vector<std::int64_t>, int> m_placements; // this evaluation's
};

// Each class of equal ops priced once: ops with the same cost signature, layout, devices and
// setup have the same terms, and an input's move is the same where the producer's signature,
// layout and devices are too. The terms' formulas are those of the first op of the class.
class MemoPricing final : public Pricing {
public:
  MemoPricing(const graph::Graph& g, const cluster::Cluster& cluster)
      : m_fresh(g, cluster, false), m_g(g), m_cluster(cluster) {
    m_signature.assign(g.ops().size(), {-1, -1, -1});
    m_has_parameters.reserve(g.ops().size());
    for (const auto& op : g.ops()) {
      m_has_parameters.push_back(std::any_of(op.inputs.begin(), op.inputs.end(), [&](graph::TensorId t) {
        return t != graph::no_tensor && g.tensor(t).role == graph::TensorRole::parameter;
      }));
      std::uint32_t fixed = 0; // inputs that could be sent once (bit 31: any past the 31st)
      for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        const graph::TensorId t = op.inputs[i];
        if (t != graph::no_tensor && g.tensor(t).producer >= 0 && g.tensor(t).fixed) {
          fixed |= std::uint32_t{1} << std::min<std::size_t>(i, 31);
        }
      }
      m_fixed_inputs.push_back(fixed);
    }
  }
  // Each op's device list interned once per strategy (ops in a row mostly share theirs).
  void begin(const Strategy& st, int prepared) override {
    m_layout = prepared >= 0 ? &m_layouts.at(static_cast<std::size_t>(prepared)) : nullptr;
    if (m_layout != nullptr) {
      if (m_layout->op_list.size() != st.ops.size()) {
        throw Error("Evaluator: a layout prepared for another strategy");
      }
      return;
    }
    lists_of(st, m_op_list);
  }
  int list_of(graph::OpId id) override {
    return (m_layout != nullptr ? m_layout->op_list : m_op_list)[static_cast<std::size_t>(id)];
  }
  bool ops_checked() const override { return m_layout != nullptr && m_layout->checked; }
  std::optional<std::vector<std::vector<std::size_t>>>* layout_shared() override {
    return m_layout != nullptr ? &m_layout->shared : nullptr;
  }
  void mark_checked() override {
    if (m_layout != nullptr) {
      m_layout->checked = true;
    }
  }
  // A strategy's layout for predictions under several setups: its ops' lists, and (as asked) the
  // class of each op and input without the setup.
  int prepare(const Strategy& st) {
    Layout layout;
    lists_of(st, layout.op_list);
    std::size_t inputs = 0;
    layout.input_offset.reserve(st.ops.size());
    for (std::size_t i = 0; i < st.ops.size() && i < m_g.ops().size(); ++i) {
      layout.input_offset.push_back(inputs);
      inputs += m_g.op(static_cast<graph::OpId>(i)).inputs.size();
    }
    for (auto& classes : layout.op_class) {
      classes.assign(st.ops.size(), -1);
    }
    for (auto& classes : layout.input_class) {
      classes.assign(inputs, -1);
    }
    layout.placement.assign(inputs, -1);
    m_layouts.push_back(std::move(layout));
    return static_cast<int>(m_layouts.size()) - 1;
  }
  const std::vector<graph::OpSemantics>& semantics() override { return m_fresh.semantics(); }
  const std::vector<graph::OpId>& order() override { return m_fresh.order(); }
  const std::vector<cost::Saved>& saved(cost::Recompute policy) override {
    auto& keep = m_keep[static_cast<std::size_t>(policy)];
    if (!keep) {
      keep = saved_outputs(m_g, order(), semantics(), policy);
    }
    return *keep;
  }
  const std::vector<TiedWeight>& ties() override { return m_fresh.ties(); }
  const PricedOp& op(const Strategy& st, graph::OpId id, std::span<const std::size_t> shared,
                     const std::vector<cost::Saved>& keep, const cost::TrainingSetup& setup) override {
    // The op's class (layout, devices, neighbours), then the setup and, for ZeRO-2 and -3, which
    // synchronize every micro-batch (cost::op_cost), the micro-batches.
    const std::size_t variant = static_cast<std::size_t>(setup.recompute) * 2 + (setup.sequence_parallel ? 1 : 0);
    int cls = -1;
    if (m_layout != nullptr) {
      int& known = m_layout->op_class[variant][static_cast<std::size_t>(id)];
      if (known < 0) {
        known = op_class(st, id, shared, keep, setup.sequence_parallel);
      }
      cls = known;
    } else {
      cls = op_class(st, id, shared, keep, setup.sequence_parallel);
    }
    const bool parameters = m_has_parameters[static_cast<std::size_t>(id)];
    // Every kernel runs once per micro-batch (cost::op_cost): the micro-batches are part of the key.
    const int micro = st.pipeline ? st.pipeline->micro_batches : 1;
    const int set = setup_id(setup, parameters);
    const std::uint64_t key = (std::uint64_t{static_cast<std::uint32_t>(cls)} << 32) |
                              (std::uint64_t{static_cast<std::uint32_t>(set) & 0xffffU} << 16) |
                              (static_cast<std::uint32_t>(micro) & 0xffffU);
    if (set > 0xffff || micro > 0xffff) {
      throw Error("Evaluator: more setups or micro-batches than its keys hold");
    }
    if (const auto it = m_ops.find(key); it != m_ops.end()) {
      return it->second;
    }
    auto c = m_fresh.op(st, id, shared, keep, setup);
    strip(c.cost.time);
    strip(c.cost.memory);
    return m_ops.emplace(key, std::move(c)).first->second;
  }
  // Everything op() keys on but the setup: interned.
  int op_class(const Strategy& st, graph::OpId id, std::span<const std::size_t> shared,
               const std::vector<cost::Saved>& keep, bool sequence_parallel) {
    const auto& a = st.ops[static_cast<std::size_t>(id)];
    std::vector<int>& key = m_op_key; // its capacity kept: no allocation per op
    key.clear();
    append(key, signature(id, keep[static_cast<std::size_t>(id)]));
    // The devices by how they sit on the nodes (with the neighbours' below, jointly).
    std::array<int, 8> lists{};
    std::size_t list_count = 0;
    lists[list_count++] = list_of(id);
    append(key, static_cast<int>(a.config.splits.size()));
    for (const int f : a.config.splits) {
      append(key, f);
    }
    for (const auto i : shared) {
      append(key, static_cast<int>(i));
    }
    bool joint = true; // every neighbour's list joined the shape
    append(key, sequence_parallel ? 1 : 0);
    if (sequence_parallel) {
      // Its reduce-scatters look at the one reader of each output and the producer of each input.
      const auto& op = m_g.op(id);
      const auto neighbour = [&](graph::OpId other, std::size_t slot) {
        const auto& oa = st.ops[static_cast<std::size_t>(other)];
        append(key, signature(other, keep[static_cast<std::size_t>(other)]));
        append(key, static_cast<int>(slot));
        if (list_count < lists.size()) {
          lists[list_count++] = list_of(other);
        } else {
          joint = false;
          append(key, list_of(other));
        }
        for (const int f : oa.config.splits) {
          append(key, f);
        }
      };
      for (const graph::TensorId t : op.outputs) {
        if (t != graph::no_tensor && has_one_reader(m_g, t)) {
          const graph::OpId reader = m_g.tensor(t).consumers[0];
          const auto& inputs = m_g.op(reader).inputs;
          neighbour(reader, static_cast<std::size_t>(std::find(inputs.begin(), inputs.end(), t) - inputs.begin()));
        } else {
          append(key, -1);
        }
      }
      for (const graph::TensorId t : op.inputs) {
        if (t != graph::no_tensor && m_g.tensor(t).producer >= 0 && has_one_reader(m_g, t)) {
          const graph::OpId producer = m_g.tensor(t).producer;
          neighbour(producer, output_index(m_g.op(producer), t));
        } else {
          append(key, -2);
        }
      }
    }
    // Lists that could not join the shape are keyed by their own ids: then so is the op's.
    append(key, joint ? shape_id({lists.data(), list_count}) : -1);
    if (!joint) {
      for (std::size_t l = 0; l < list_count; ++l) {
        append(key, lists[l]);
      }
    }
    return m_op_classes.emplace(key, static_cast<int>(m_op_classes.size())).first->second;
  }
  const PricedInput& input(const Strategy& st, graph::OpId id, std::size_t i,
                           const cost::TrainingSetup& setup) override {
    static const PricedInput none;
    const auto& op = m_g.op(id);
    const graph::TensorId t = op.inputs[i];
    if (t == graph::no_tensor || m_g.tensor(t).producer < 0) {
      return none;
    }
    const auto policy = static_cast<std::size_t>(setup.recompute);
    int cls = -1;
    if (m_layout != nullptr) {
      int& known = m_layout->input_class[policy][m_layout->input_offset[static_cast<std::size_t>(id)] + i];
      if (known < 0) {
        known = input_class(st, id, i, setup.recompute);
      }
      cls = known;
    } else {
      cls = input_class(st, id, i, setup.recompute);
    }
    // A move runs once per micro-batch: the micro-batches are part of the key.
    const int micro = st.pipeline ? st.pipeline->micro_batches : 1;
    const int set = setup_id(setup, false);
    if (set > 0xffff || micro > 0xffff) {
      throw Error("Evaluator: more setups or micro-batches than its keys hold");
    }
    // Sent once or per micro-batch (sent_once: the stages of a strategy, not the layout's class).
    const bool fixed = (m_fixed_inputs[static_cast<std::size_t>(id)] >> std::min<std::size_t>(i, 31)) & 1U;
    const std::uint64_t once = fixed && sent_once(m_g, st, id, i) ? 1 : 0;
    const std::uint64_t key = ((std::uint64_t{static_cast<std::uint32_t>(cls)} << 1 | once) << 32) |
                              (std::uint64_t{static_cast<std::uint32_t>(set)} << 16) |
                              static_cast<std::uint32_t>(micro);
    if (const auto it = m_inputs.find(key); it != m_inputs.end()) {
      return it->second;
    }
    auto move = m_fresh.input(st, id, i, setup);
    strip(move.terms);
    return m_inputs.emplace(key, std::move(move)).first->second;
  }
  // Everything input() keys on but the setup: interned.
  int input_class(const Strategy& st, graph::OpId id, std::size_t i, cost::Recompute policy) {
    const auto& op = m_g.op(id);
    const graph::TensorId t = op.inputs[i];
    const graph::OpId prod = m_g.tensor(t).producer;
    const auto& a = st.ops[static_cast<std::size_t>(id)];
    const auto& pa = st.ops[static_cast<std::size_t>(prod)];
    const auto& keep = saved(policy);
    std::vector<int>& key = m_input_key;
    key.clear();
    append(key, signature(id, keep[static_cast<std::size_t>(id)]));
    append(key, signature(prod, keep[static_cast<std::size_t>(prod)]));
    append(key, static_cast<int>(i));
    append(key, static_cast<int>(output_index(m_g.op(prod), t)));
    append(key, static_cast<int>(std::count(op.inputs.begin(), op.inputs.end(), t)));
    const std::array<int, 2> lists{list_of(id), list_of(prod)};
    append(key, shape_id(lists));
    for (const auto* c : {&a.config, &pa.config}) {
      append(key, static_cast<int>(c->splits.size()));
      for (const int f : c->splits) {
        append(key, f);
      }
    }
    return m_input_classes.emplace(key, static_cast<int>(m_input_classes.size())).first->second;
  }
  bool by_device_list() const override { return true; }
  int placement(const Strategy& st, graph::OpId id, std::size_t i) override {
    int* known = nullptr;
    if (m_layout != nullptr) {
      known = &m_layout->placement[m_layout->input_offset[static_cast<std::size_t>(id)] + i];
      if (*known >= 0) {
        return *known;
      }
    }
    auto key = placement_key(m_g, semantics()[static_cast<std::size_t>(id)], st.ops[static_cast<std::size_t>(id)], i,
                             m_g.op(id).inputs[i], list_of(id));
    const int place = m_placements.emplace(std::move(key), static_cast<int>(m_placements.size())).first->second;
    if (known != nullptr) {
      *known = place;
    }
    return place;
  }

private:
  // Each op's device list, interned (ops in a row mostly share theirs).
  void lists_of(const Strategy& st, std::vector<int>& out) {
    out.resize(st.ops.size());
    const std::vector<int>* last = nullptr;
    for (std::size_t i = 0; i < st.ops.size(); ++i) {
      const auto& devices = st.ops[i].devices;
      out[i] = last != nullptr && *last == devices ? out[i - 1] : list_id(devices);
      last = &devices;
    }
  }
  int list_id(const std::vector<int>& devices) {
    const auto it = m_lists.emplace(devices, static_cast<int>(m_lists.size())).first;
    const int id = it->second;
    if (static_cast<std::size_t>(id) >= m_list_of.size()) {
      m_list_of.push_back(&it->first);
    }
    return id;
  }
  static void append(std::vector<int>& key, int v) { key.push_back(v); }
  // Device lists (by list_id) as the cost model sees them: on a cluster of equal nodes, each device
  // as its node's rank among the lists' nodes x node size + its local id, as node_shape() does for
  // one group. Lists that differ only by which (equal) nodes they occupy price the same: a pipeline's
  // stages on whole nodes share one shape. Several lists are shaped jointly (a move's producer and
  // consumer), so that how they sit against each other is kept. On mixed nodes the lists' own ids.
  int shape_id(std::span<const int> ids) {
    // One list or two (an op, a move): looked up by their ids packed in one number.
    const bool packed = ids.size() <= 2;
    const std::uint64_t pair = ids.size() == 1 ? static_cast<std::uint32_t>(ids[0])
                                               : (std::uint64_t{static_cast<std::uint32_t>(ids[0])} << 32) |
                                                     static_cast<std::uint32_t>(ids[1]) | (std::uint64_t{1} << 63);
    std::vector<int> key;
    if (packed) {
      if (const auto it = m_shape_of_pair.find(pair); it != m_shape_of_pair.end()) {
        return it->second;
      }
    } else {
      key.assign(ids.begin(), ids.end());
      if (const auto it = m_shape_of_lists.find(key); it != m_shape_of_lists.end()) {
        return it->second;
      }
    }
    std::vector<int> shape;
    if (m_cluster.heterogeneous()) {
      shape.assign(ids.begin(), ids.end());
      shape.insert(shape.begin(), -2);
    } else {
      std::vector<int> nodes;
      for (const int id : ids) {
        for (const int d : *m_list_of[static_cast<std::size_t>(id)]) {
          nodes.push_back(m_cluster.node_of(d));
        }
      }
      std::sort(nodes.begin(), nodes.end());
      nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
      for (const int id : ids) {
        const auto& list = *m_list_of[static_cast<std::size_t>(id)];
        shape.push_back(-1 - static_cast<int>(list.size()));
        for (const int d : list) {
          const auto rank = std::lower_bound(nodes.begin(), nodes.end(), m_cluster.node_of(d)) - nodes.begin();
          shape.push_back(static_cast<int>(rank) * m_cluster.devices_per_node + d % m_cluster.devices_per_node);
        }
      }
    }
    const int id = m_shapes.emplace(std::move(shape), static_cast<int>(m_shapes.size())).first->second;
    if (packed) {
      m_shape_of_pair.emplace(pair, id);
    } else {
      m_shape_of_lists.emplace(std::move(key), id);
    }
    return id;
  }
  // Numbers only: the formulas would name the first op of a class.
  static void strip(std::vector<cost::Term>& terms) {
    for (auto& t : terms) {
      t.formula.clear();
    }
  }
  int signature(graph::OpId id, cost::Saved saved) {
    int& sig = m_signature[static_cast<std::size_t>(id)][static_cast<std::size_t>(saved)];
    if (sig < 0) {
      auto text = cost::cost_signature(m_g, id, semantics()[static_cast<std::size_t>(id)], saved);
      sig = m_signatures.emplace(std::move(text), static_cast<int>(m_signatures.size())).first->second;
    }
    return sig;
  }
  // The part of the setup that an op's own terms read (cost::op_cost, reduce_scatters): the
  // precision always; the optimizer, the ZeRO stage and the gradients' width through parameters
  // only. Recomputation and sequence parallelism reach the terms through the op's class (what it
  // keeps, whether it reduce-scatters). A move (input_redistribution) reads the precision alone:
  // `parameters` false. Setups that differ elsewhere share their prices.
  int setup_id(const cost::TrainingSetup& s, bool parameters) {
    const auto key = parameters ? std::make_tuple(static_cast<int>(s.precision), static_cast<int>(s.optimizer),
                                                  s.zero_stage, s.fp32_gradients)
                                : std::make_tuple(static_cast<int>(s.precision), -1, -1, false);
    auto& last = m_last_setup[parameters ? 1 : 0];
    if (last && last->first == key) {
      return last->second; // one setup per evaluation: asked for every op
    }
    const int id = m_setups.emplace(key, static_cast<int>(m_setups.size())).first->second;
    last.emplace(key, id);
    return id;
  }

  FreshPricing m_fresh;
  const graph::Graph& m_g;
  const cluster::Cluster& m_cluster;
  std::array<std::optional<std::vector<cost::Saved>>, 3> m_keep;
  std::vector<std::array<int, 3>> m_signature; // per op and Saved: the interned cost signature
  struct ListHash {
    std::size_t operator()(const std::vector<int>& v) const {
      std::size_t h = 1469598103934665603ULL;
      for (const int d : v) {
        h = (h ^ static_cast<std::size_t>(d)) * 1099511628211ULL;
      }
      return h;
    }
  };
  std::unordered_map<std::string, int> m_signatures;
  std::unordered_map<std::vector<int>, int, ListHash> m_shape_of_lists; // list ids -> shape id
  std::unordered_map<std::uint64_t, int> m_shape_of_pair;               // one or two list ids -> shape id
  std::unordered_map<std::vector<int>, int, ListHash> m_shapes;
  std::unordered_map<std::vector<int>, int, ListHash> m_lists;
  std::vector<const std::vector<int>*> m_list_of; // id -> its list (keys of m_lists: stable)
  std::vector<int> m_op_list;                     // per op of the strategy begin() was given: its list's id
  std::map<std::tuple<int, int, int, bool>, int> m_setups;
  std::array<std::optional<std::pair<std::tuple<int, int, int, bool>, int>>, 2> m_last_setup; // without, with
  std::vector<bool> m_has_parameters;        // per op: reads a parameter (its terms read the optimizer and ZeRO)
  std::vector<std::uint32_t> m_fixed_inputs; // per op: its inputs that are fixed tensors (sent_once's first test)
  std::vector<int> m_op_key, m_input_key;    // reused by op() and input()
  std::unordered_map<std::vector<int>, int, ListHash> m_op_classes, m_input_classes;
  std::map<std::vector<std::int64_t>, int> m_placements;   // ids across evaluations (list ids in them)
  std::unordered_map<std::uint64_t, PricedOp> m_ops;       // (class, setup, micro-batches)
  std::unordered_map<std::uint64_t, PricedInput> m_inputs; // (class, setup)
  struct Layout {
    std::vector<int> op_list;
    std::vector<std::size_t> input_offset;       // per op: its first input's index in input_class
    std::array<std::vector<int>, 6> op_class;    // per recomputation x sequence parallelism; -1: not yet
    std::array<std::vector<int>, 3> input_class; // per recomputation; -1: not yet
    std::vector<int> placement;                  // per input: its placement id; -1: not yet
    bool checked = false;                        // its ops' assignments passed check()
    std::optional<std::vector<std::vector<std::size_t>>> shared; // shared_parameters(), once derived
  };
  std::deque<Layout> m_layouts;
  Layout* m_layout = nullptr; // the evaluation's, when prepared
};

} // namespace

struct Evaluator::Memo {
  MemoPricing pricing;
  const graph::Graph& g;
  const cluster::Cluster& cluster;
  // The collectives priced, across predictions (a new class's collectives are mostly ones priced
  // for another class, setup or micro-batch count before).
  std::unique_ptr<cluster::CollectiveMemo> collectives;
};

Evaluator::Evaluator(const graph::Graph& g, const cluster::Cluster& cluster)
    : m_memo(std::make_unique<Memo>(
          Memo{MemoPricing(g, cluster), g, cluster, std::make_unique<cluster::CollectiveMemo>(cluster)})) {}
Evaluator::~Evaluator() = default;

Prediction Evaluator::operator()(const Strategy& st, const cost::TrainingSetup& setup) {
  const cluster::CollectiveMemo::Use use(*m_memo->collectives);
  return evaluate_with(m_memo->g, m_memo->cluster, st, setup, m_memo->pricing);
}

Prediction Evaluator::totals(const Strategy& st, const cost::TrainingSetup& setup, int prepared) {
  const cluster::CollectiveMemo::Use use(*m_memo->collectives);
  return evaluate_with(m_memo->g, m_memo->cluster, st, setup, m_memo->pricing, false, prepared);
}

int Evaluator::prepare(const Strategy& st) {
  return m_memo->pricing.prepare(st);
}

Prediction evaluate(const graph::Graph& g, const cluster::Cluster& cluster, const Strategy& st,
                    const cost::TrainingSetup& setup) {
  FreshPricing pricing(g, cluster);
  return evaluate_with(g, cluster, st, setup, pricing);
}

std::vector<std::string> prediction_notes(const graph::Graph& g, const cost::TrainingSetup& setup) {
  std::vector<std::string> notes;
  std::int64_t weights = 0, weight_values = 0, values = 0;
  for (const auto& t : g.tensors()) {
    if (!t.quantized) {
      continue;
    }
    if (t.role == graph::TensorRole::parameter) {
      ++weights;
      weight_values += t.elements();
    } else {
      ++values;
    }
  }
  if (weights + values > 0) {
    notes.push_back(fmt::format(
        "quantized model: its {} integer weights ({} values) and {} quantized activations are costed as if trained "
        "at {}, as quantization-aware training would: the same arithmetic at that precision's speed, gradients "
        "through them, weights and optimizer state at that width",
        weights, weight_values, values, cluster::precision_name(setup.precision)));
  }
  return notes;
}

std::optional<std::size_t> fastest_that_fits(const std::vector<const Prediction*>& alternatives) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < alternatives.size(); ++i) {
    const Prediction* p = alternatives[i];
    if (p != nullptr && p->fits && (!best || p->iteration_time < alternatives[*best]->iteration_time)) {
      best = i;
    }
  }
  return best;
}

} // namespace partita::strategy
