// The alpha-beta model of collectives on a device group.
//
// p devices span m nodes with k_i of them on node i. Two link classes bound a collective:
//
// - Inside a node, (B_in, a_in) = the ring rate of the node's part of the group
//   (ring_topology.h): the switch port on a switched node; on a mesh (DGX-1) the rings that fit on
//   the direct lanes, each lane used in both directions; the fallback link when no ring fits. For
//   a group spanning nodes, the slowest node's part counts (a node holding one device has none).
// - Between nodes, every ring channel leaves a node through one NIC. A group can drive at most
//   one NIC per device it has on the node (GPU-NIC affinity), and `concurrent_groups` groups of
//   the same shape share the node's NICs evenly, so a group's rate out of a node is
//       B_net = nic.bandwidth * min(k, nics_per_node / concurrent_groups),   k = min_i k_i,
//   and a_net = nic.latency. A flat ring carries its full per-hop traffic across each node
//   boundary, so it runs at B = min(B_in, B_net) with a = max(a_in, a_net). Links inside a node
//   are not shared between concurrent groups (NVSwitch ports and NVLink lanes are per device).
//
// With (B, a), n = bytes as nccl-tests counts them:
//   ring all-reduce 2(p-1)/p n/B + 2(p-1)a; all-gather, reduce-scatter (p-1)/p n/B + (p-1)a;
//   broadcast (pipelined ring) n/B + (p-1)a; send/recv n/B + a.
//   tree all-reduce (double binary tree) 2 n/B + 2 ceil(log2 p) a.
//   all-to-all: every device sends n/p to each peer at once; inside a node as
//   intra_node_all_to_all (a: the slowest pair's), across nodes k_i n (p-k_i)/p bytes leave node i at
//   nic.bandwidth * min(k_i, nics_per_node / concurrent_groups); the slower part counts, plus
//   (p-1) a. On one switched node this is (p-1)/p n/B + (p-1)a.
//   hierarchical (collective_hierarchical.cpp): m blocks of k devices, one level inside the
//   blocks and one among the k same-position sub-groups carrying a 1/k shard each:
//     all-reduce = 2(k-1)/k n/B_in + 2(m-1)/m (n/k)/B_across + 2(k-1) a_in + 2(m-1) a_across;
//     all-gather, reduce-scatter = (k-1)/k n/B_in + (m-1)/m (n/k)/B_across + (k-1) a_in + (m-1) a_across.
//   Across nodes the blocks are the nodes (all holding the same k >= 2 devices of the group) and
//   B_across = nic.bandwidth * min(1, nics_per_node / (k concurrent_groups)), the k shard rings
//   together B_net again; inside one node any p = k x m with k, m >= 2 is a 2D ring.
// A link with figures of the collective's own (Link::collectives: calibrated, or a preset's published
// measurements) is taken at those; where the group runs on that link alone (inside a node, or one
// device per node on the network) by the ring formula they were read off (automatic picks ring).
// A link with several protocols (Link::protocols) is taken at the figures of the protocol that
// the collective's messages (message_bytes) run.
// Automatic takes the fastest applicable algorithm; one that does not apply (tree for anything but
// all-reduce; hierarchical for other collectives, a group with no k x m blocks, or nodes holding
// different numbers of the group's devices) falls back to ring, and the formula says so.

#include "partita/cluster/collectives.h"

#include "cluster/collective_model.h"
#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>
#include <vector>

namespace partita::cluster {

std::string_view collective_name(Collective c) {
  switch (c) {
  case Collective::all_reduce: return "all-reduce";
  case Collective::all_gather: return "all-gather";
  case Collective::reduce_scatter: return "reduce-scatter";
  case Collective::all_to_all: return "all-to-all";
  case Collective::broadcast: return "broadcast";
  case Collective::send_recv: return "send/recv";
  }
  return "unknown";
}

std::string_view algorithm_name(Algorithm a) {
  switch (a) {
  case Algorithm::automatic: return "automatic";
  case Algorithm::ring: return "ring";
  case Algorithm::tree: return "tree";
  case Algorithm::hierarchical: return "hierarchical";
  }
  return "unknown";
}

double bus_factor(Collective c, int p) {
  if (p <= 1) {
    return c == Collective::broadcast || c == Collective::send_recv ? 1.0 : 0.0;
  }
  const double q = static_cast<double>(p);
  switch (c) {
  case Collective::all_reduce: return 2.0 * (q - 1) / q;
  case Collective::all_gather:
  case Collective::reduce_scatter:
  case Collective::all_to_all: return (q - 1) / q;
  case Collective::broadcast:
  case Collective::send_recv: return 1.0;
  }
  return 1.0;
}

double message_bytes(Collective c, double bytes, int p) {
  switch (c) {
  case Collective::broadcast:
  case Collective::send_recv: return bytes;
  default: return bytes / std::max(p, 1);
  }
}

namespace {

bool has_collective_figures(const Cluster& c) {
  return !c.intra_link.collectives.empty() || !c.intra_fallback.collectives.empty() || !c.nic.collectives.empty();
}

// Figures measured for this collective as it ran on the links the group uses (calibrated, or a
// preset's published nccl-tests curve) already hold whichever algorithm the library picked, and
// they were read off the ring formula: the ring formula prices them, and no other algorithm may
// beat the measurement. A group spanning nodes uses the network's figures; the node's own
// figures say nothing of how the library runs between nodes.
bool measured_as_it_runs(const Cluster& c, Collective coll, std::span<const int> devices) {
  const auto name = collective_name(coll);
  std::vector<int> nodes;
  for (const int d : devices) {
    nodes.push_back(c.node_of(d));
  }
  std::sort(nodes.begin(), nodes.end());
  const bool one_node = nodes.front() == nodes.back();
  const bool one_per_node = std::adjacent_find(nodes.begin(), nodes.end()) == nodes.end();
  const auto has = [&](const Link& link) {
    return std::any_of(link.collectives.begin(), link.collectives.end(),
                       [&](const CollectiveFigures& f) { return f.collective == name; });
  };
  if (one_node) {
    return has(c.intra_link) || has(c.intra_fallback);
  }
  return one_per_node && has(c.nic);
}

bool has_protocols(const Cluster& c) {
  return !c.intra_link.protocols.empty() || !c.intra_fallback.protocols.empty() || !c.nic.protocols.empty();
}

void check_group(const Cluster& c, Collective coll, std::span<const int> devices, double bytes, int concurrent_groups) {
  const auto what = collective_name(coll);
  if (devices.empty()) {
    throw Error(fmt::format("{}: the device group is empty", what));
  }
  if (!std::isfinite(bytes) || bytes < 0) {
    throw Error(fmt::format("{}: the size must be zero or positive bytes, got {}", what, bytes));
  }
  if (concurrent_groups < 1) {
    throw Error(fmt::format("{}: concurrent_groups must be at least 1, got {}", what, concurrent_groups));
  }
  std::vector<int> sorted(devices.begin(), devices.end());
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= c.device_count()) {
      throw Error(fmt::format("{}: device {} is not in cluster '{}' (devices 0..{})", what, sorted[i], c.name,
                              c.device_count() - 1));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      throw Error(fmt::format("{}: device {} appears twice in the group", what, sorted[i]));
    }
  }
  if (coll == Collective::send_recv && devices.size() != 2) {
    throw Error(fmt::format("{}: needs exactly 2 devices (sender, receiver), got {}", what, devices.size()));
  }
}

} // namespace

namespace {

// `c` with other links, as a collective's cost reads it: its topology and links, not its device
// kinds' figures or its description (copying those cost more than the collective's arithmetic).
Cluster with_links(const Cluster& c, Link intra, Link fallback, Link nic) {
  Cluster out;
  out.name = c.name;
  out.nodes = c.nodes;
  out.devices_per_node = c.devices_per_node;
  out.node_groups.reserve(c.node_groups.size());
  for (const auto& group : c.node_groups) {
    out.node_groups.push_back(NodeGroup{group.nodes, {}}); // total_nodes() counts them
  }
  out.intra_link = std::move(intra);
  out.intra_switched = c.intra_switched;
  out.intra_pairs = c.intra_pairs;
  out.intra_fallback = std::move(fallback);
  out.nic = std::move(nic);
  out.nics_per_node = c.nics_per_node;
  return out;
}

// `checked`: the group was checked already (a call for the same group on other links).
CollectiveCost cost_of(const Cluster& cluster, Collective collective, std::span<const int> devices, double bytes,
                       Algorithm algorithm, int concurrent_groups, bool explain, bool checked = false) {
  if (devices.size() == 1 && collective != Collective::send_recv) {
    check_group(cluster, Collective::broadcast, devices, bytes, concurrent_groups);
    CollectiveCost none;
    none.algorithm = algorithm == Algorithm::automatic ? Algorithm::ring : algorithm;
    if (explain) {
      none.formula = fmt::format("{} on a single device moves nothing: 0 s", collective_name(collective));
    }
    return none;
  }
  if (!checked) {
    check_group(cluster, collective, devices, bytes, concurrent_groups);
  }
  if (has_collective_figures(cluster)) { // every link as this collective runs on it
    if (algorithm == Algorithm::automatic && measured_as_it_runs(cluster, collective, devices)) {
      algorithm = Algorithm::ring;
    }
    const auto name = collective_name(collective);
    const Cluster as = with_links(cluster, cluster.intra_link.for_collective(name),
                                  cluster.intra_fallback.for_collective(name), cluster.nic.for_collective(name));
    return cost_of(as, collective, devices, bytes, algorithm, concurrent_groups, explain, true);
  }
  if (has_protocols(cluster)) { // every link at the figures of the protocol these messages run
    const double m = message_bytes(collective, bytes, static_cast<int>(devices.size()));
    const Cluster at = with_links(cluster, cluster.intra_link.at(m), cluster.intra_fallback.at(m), cluster.nic.at(m));
    return cost_of(at, collective, devices, bytes, algorithm, concurrent_groups, explain, true);
  }
  const detail::Shape s = detail::shape_of(cluster, devices, concurrent_groups);

  struct Candidate {
    Algorithm algorithm;
    detail::Estimate estimate;
  };
  std::vector<Candidate> candidates;
  const auto ring = [&] {
    return detail::ring_estimate(cluster, collective, s, devices, bytes, concurrent_groups, explain);
  };
  const bool tree_applies = collective == Collective::all_reduce;
  const auto hierarchical = detail::hierarchical_estimate(cluster, collective, s, bytes, explain);
  std::string note;
  switch (algorithm) {
  case Algorithm::automatic:
    candidates.push_back({Algorithm::ring, ring()});
    if (tree_applies) {
      candidates.push_back({Algorithm::tree, detail::tree_estimate(s, bytes, explain)});
    }
    if (hierarchical) {
      candidates.push_back({Algorithm::hierarchical, *hierarchical});
    }
    break;
  case Algorithm::ring: candidates.push_back({Algorithm::ring, ring()}); break;
  case Algorithm::tree:
    if (tree_applies) {
      candidates.push_back({Algorithm::tree, detail::tree_estimate(s, bytes, explain)});
    } else {
      note = " (tree is for all-reduce only; ring used)";
      candidates.push_back({Algorithm::ring, ring()});
    }
    break;
  case Algorithm::hierarchical:
    if (hierarchical) {
      candidates.push_back({Algorithm::hierarchical, *hierarchical});
    } else {
      note = " (hierarchical needs an all-reduce, all-gather or reduce-scatter over k x m blocks: nodes holding the "
             "same number, at least 2, of the group's devices, or 4 or more devices inside one node; ring used)";
      candidates.push_back({Algorithm::ring, ring()});
    }
    break;
  }

  // Ring, listed first, keeps ties: a 2D ring on a switch with no latency equals the flat ring in
  // exact arithmetic and must not win by a rounding difference.
  const auto total = [](const Candidate& x) { return x.estimate.bandwidth_seconds + x.estimate.latency_seconds; };
  auto best = candidates.begin();
  for (auto it = candidates.begin() + 1; it != candidates.end(); ++it) {
    if (total(*it) < total(*best) * (1 - 1e-12)) {
      best = it;
    }
  }
  CollectiveCost cost;
  cost.algorithm = best->algorithm;
  cost.bandwidth_seconds = best->estimate.bandwidth_seconds;
  cost.latency_seconds = best->estimate.latency_seconds;
  cost.seconds = cost.bandwidth_seconds + cost.latency_seconds;
  cost.bottleneck = best->estimate.bottleneck;
  if (cost.seconds > 0) {
    cost.algbw = bytes / cost.seconds;
    cost.busbw = cost.algbw * bus_factor(collective, s.p);
  }
  if (!explain) {
    return cost;
  }
  std::string where = "inside one node";
  if (s.m >= 2) {
    where = s.k_min == s.k_max ? fmt::format("across {} nodes ({} per node)", s.m, s.k_min)
                               : fmt::format("across {} nodes ({} to {} per node)", s.m, s.k_min, s.k_max);
  }
  // All-to-all and send/recv are point-to-point exchanges whatever the algorithm label says.
  const bool direct = collective == Collective::all_to_all || collective == Collective::send_recv;
  cost.formula = fmt::format("{} {} of {} over {} devices {}: {} = {} (bottleneck: {}){}",
                             direct ? "direct" : algorithm_name(cost.algorithm), collective_name(collective),
                             detail::human_bytes(bytes), s.p, where, best->estimate.terms,
                             detail::human_time(cost.seconds), link_kind_name(cost.bottleneck), note);
  return cost;
}

} // namespace

CollectiveCost collective_cost(const Cluster& cluster, Collective collective, std::span<const int> devices,
                               double bytes, Algorithm algorithm, int concurrent_groups) {
  return cost_of(cluster, collective, devices, bytes, algorithm, concurrent_groups, true);
}

struct CollectiveMemo::Impl {
  struct Key {
    Collective collective;
    Algorithm algorithm;
    int concurrent_groups;
    double bytes;
    bool by_node = false;     // `devices` holds how many of the group each node holds (nodes_of)
    std::vector<int> devices; // else the group's devices, in order
    bool operator==(const Key&) const = default;
  };
  struct Hash {
    std::size_t operator()(const Key& k) const {
      std::size_t h = std::hash<double>{}(k.bytes);
      const auto mix = [&h](std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
      mix(static_cast<std::size_t>(k.collective));
      mix(static_cast<std::size_t>(k.algorithm));
      mix(static_cast<std::size_t>(k.concurrent_groups));
      mix(static_cast<std::size_t>(k.by_node));
      // A group by all its devices, two at a time: groups of one size that share their first, middle
      // and last devices are common (a move's groups, shifted by a device), and a hash of those
      // alone chained them into long runs of comparisons.
      mix(k.devices.size());
      std::uint64_t g = 0;
      const std::size_t pairs = k.devices.size() / 2;
      for (std::size_t i = 0; i < pairs; ++i) {
        const std::uint64_t two = static_cast<std::uint32_t>(k.devices[2 * i]) |
                                  static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.devices[2 * i + 1])) << 32;
        g = (g ^ two) * 0x9E3779B97F4A7C15ULL;
        g ^= g >> 29;
      }
      if (k.devices.size() % 2 != 0) {
        g = (g ^ static_cast<std::uint32_t>(k.devices.back())) * 0x9E3779B97F4A7C15ULL;
      }
      mix(static_cast<std::size_t>(g ^ (g >> 32)));
      return h;
    }
  };
  const Cluster* cluster;
  // On a switched cluster a collective's cost reads how many of its devices each node holds, never
  // which devices or which nodes (every link inside a node is the switch's, every one between nodes
  // a NIC; shape_of, the ring, tree, hierarchical and all-to-all estimates and the measured figures
  // all count devices per node): groups alike in that are one entry.
  bool by_node = false;
  std::unordered_map<Key, CollectiveCost, Hash> costs;
};

namespace {
thread_local CollectiveMemo* memo_in_use = nullptr;

// How many of `devices` each node holds, largest first, into `out`: a key for their collective's
// cost on a switched cluster (CollectiveMemo::Impl::by_node). False, and `out` unspecified, unless
// the devices ascend strictly inside the cluster (so that none is listed twice): any other list
// is remembered by its devices, and priced, with its checks, the first time it comes.
bool nodes_of(const Cluster& cluster, std::span<const int> devices, std::vector<int>& out) {
  out.clear();
  const int count = cluster.device_count();
  int last = -1, last_node = -1;
  for (const int d : devices) {
    if (d <= last || d >= count) {
      return false;
    }
    last = d;
    const int node = cluster.node_of(d);
    if (node != last_node) {
      out.push_back(0);
      last_node = node;
    }
    ++out.back();
  }
  std::sort(out.begin(), out.end(), std::greater<>());
  return true;
}
} // namespace

CollectiveMemo::CollectiveMemo(const Cluster& cluster) : m_impl(std::make_unique<Impl>()) {
  m_impl->cluster = &cluster;
  m_impl->by_node = cluster.intra_switched && cluster.devices_per_node > 0;
}
CollectiveMemo::~CollectiveMemo() = default;
std::size_t CollectiveMemo::size() const {
  return m_impl->costs.size();
}

CollectiveMemo::Use::Use(CollectiveMemo& memo) : m_previous(memo_in_use) {
  memo_in_use = &memo;
}
CollectiveMemo::Use::~Use() {
  memo_in_use = m_previous;
}

CollectiveCost collective_cost_unexplained(const Cluster& cluster, Collective collective, std::span<const int> devices,
                                           double bytes, Algorithm algorithm, int concurrent_groups) {
  if (memo_in_use == nullptr || memo_in_use->m_impl->cluster != &cluster) {
    return cost_of(cluster, collective, devices, bytes, algorithm, concurrent_groups, false);
  }
  auto& costs = memo_in_use->m_impl->costs;
  // The lookup reuses one key per thread: the search asks millions of times, mostly found.
  thread_local CollectiveMemo::Impl::Key key;
  key.collective = collective;
  key.algorithm = algorithm;
  key.concurrent_groups = concurrent_groups;
  key.bytes = bytes;
  key.by_node = memo_in_use->m_impl->by_node && nodes_of(cluster, devices, key.devices);
  if (!key.by_node) {
    key.devices.assign(devices.begin(), devices.end());
  }
  if (const auto it = costs.find(key); it != costs.end()) {
    return it->second;
  }
  auto cost = cost_of(cluster, collective, devices, bytes, algorithm, concurrent_groups, false);
  costs.emplace(key, cost);
  return cost;
}

} // namespace partita::cluster
