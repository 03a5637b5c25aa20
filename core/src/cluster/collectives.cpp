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
//   hierarchical (all nodes holding the same k >= 2 devices of the group): the k "same local
//   rank" sub-groups cross the network at once, each at B_s = nic.bandwidth * min(1,
//   nics_per_node / (k concurrent_groups)) (together B_net again):
//     all-reduce = reduce-scatter in the node + all-reduce of the n/k shard across m nodes +
//                  all-gather in the node = 2(k-1)/k n/B_in + 2(m-1)/m (n/k)/B_s
//                  + 2(k-1) a_in + 2(m-1) a_net;
//     all-gather, reduce-scatter = (k-1)/k n/B_in + (m-1)/m (n/k)/B_s + (k-1) a_in + (m-1) a_net.
// Automatic takes the fastest applicable algorithm; an algorithm that does not apply (tree for
// anything but all-reduce, hierarchical inside one node) falls back to ring, and says so.

#include "partita/cluster/collectives.h"

#include "cluster/ring_topology.h"
#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
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

namespace {

struct Rate {
  double bandwidth = std::numeric_limits<double>::infinity();
  double latency = 0;
  LinkKind kind = LinkKind::shared_memory;
};

// The bottleneck of two link classes: the lower bandwidth, the higher latency.
Rate slower(const Rate& x, const Rate& y) {
  Rate r = x.bandwidth <= y.bandwidth ? x : y;
  r.latency = std::max(x.latency, y.latency);
  return r;
}

// What collective_cost knows about the group's placement.
struct Shape {
  int p = 0;
  std::map<int, std::vector<int>> by_node; // node -> its devices of the group, ascending
  int m = 0;                               // nodes spanned
  int k_min = 0, k_max = 0;                // devices per node
  bool has_intra = false;                  // some node holds two or more
  Rate intra;                              // slowest node's part
  Rate net_flat;                           // B_net for the whole group (m >= 2)
  double nic_share = 0;                    // nics_per_node / concurrent_groups
};

Shape shape_of(const Cluster& c, std::span<const int> devices, int concurrent_groups) {
  Shape s;
  s.p = static_cast<int>(devices.size());
  for (const int d : devices) {
    s.by_node[c.node_of(d)].push_back(d);
  }
  s.m = static_cast<int>(s.by_node.size());
  s.k_min = std::numeric_limits<int>::max();
  for (auto& [node, members] : s.by_node) {
    std::sort(members.begin(), members.end());
    const int k = static_cast<int>(members.size());
    s.k_min = std::min(s.k_min, k);
    s.k_max = std::max(s.k_max, k);
    if (k >= 2) {
      const auto r = detail::intra_node_ring(c, members);
      const Rate part{r.bandwidth, r.latency, r.kind};
      s.intra = s.has_intra ? slower(s.intra, part) : part;
      s.has_intra = true;
    }
  }
  s.nic_share = static_cast<double>(c.nics_per_node) / concurrent_groups;
  if (s.m >= 2) {
    s.net_flat = Rate{c.nic.bandwidth * std::min<double>(s.k_min, s.nic_share), c.nic.latency, c.nic.kind};
  }
  return s;
}

// The class a flat ring (or tree) over the whole group is held to.
Rate flat_rate(const Shape& s) {
  if (s.m >= 2) {
    return s.has_intra ? slower(s.intra, s.net_flat) : s.net_flat;
  }
  return s.intra;
}

std::string human_bytes(double bytes) {
  const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return fmt::format("{:.4g} {}", bytes, units[unit]);
}

std::string human_rate(double bytes_per_second) {
  return fmt::format("{:.4g} GB/s", bytes_per_second / 1e9);
}

std::string human_time(double seconds) {
  if (seconds == 0) {
    return "0 s";
  }
  if (seconds < 1e-3) {
    return fmt::format("{:.4g} us", seconds * 1e6);
  }
  if (seconds < 1) {
    return fmt::format("{:.4g} ms", seconds * 1e3);
  }
  return fmt::format("{:.4g} s", seconds);
}

// One algorithm's result before the shared fields are filled in.
struct Estimate {
  double bandwidth_seconds = 0;
  double latency_seconds = 0;
  LinkKind bottleneck = LinkKind::shared_memory;
  std::string terms; // "<formula> = <numbers>"
};

Estimate ring_estimate(const Cluster& c, Collective coll, const Shape& s, std::span<const int> devices, double n,
                       int concurrent_groups) {
  const double p = s.p;
  Estimate e;
  if (coll == Collective::send_recv) {
    Rate r;
    if (s.m == 1) {
      const Link link = c.link_between(devices[0], devices[1]);
      r = Rate{link.bandwidth, link.latency, link.kind};
    } else {
      r = Rate{c.nic.bandwidth * std::min(1.0, s.nic_share), c.nic.latency, c.nic.kind};
    }
    e.bandwidth_seconds = n / r.bandwidth;
    e.latency_seconds = r.latency;
    e.bottleneck = r.kind;
    e.terms = fmt::format("n/B + a = {} / {} + {}", human_bytes(n), human_rate(r.bandwidth), human_time(r.latency));
    return e;
  }
  if (coll == Collective::all_to_all) {
    const double per_peer = n / p;
    double intra_seconds = 0;
    double net_seconds = 0;
    double latency = s.m >= 2 ? c.nic.latency : 0;
    for (const auto& [node, members] : s.by_node) {
      const double k = static_cast<double>(members.size());
      if (members.size() >= 2) {
        const auto part = detail::intra_node_all_to_all(c, members, per_peer);
        intra_seconds = std::max(intra_seconds, part.seconds);
        latency = std::max(latency, part.latency);
      }
      if (s.m >= 2) {
        const double leaving = k * n * (p - k) / p;
        net_seconds = std::max(net_seconds, leaving / (c.nic.bandwidth * std::min(k, s.nic_share)));
      }
    }
    e.bandwidth_seconds = std::max(intra_seconds, net_seconds);
    e.latency_seconds = (p - 1) * latency;
    e.bottleneck = net_seconds >= intra_seconds && s.m >= 2 ? c.nic.kind : s.intra.kind;
    e.terms =
        fmt::format("every device sends n/p = {} to each of {} peers: {} of transfer + (p-1) a = {} x {}",
                    human_bytes(per_peer), s.p - 1, human_time(e.bandwidth_seconds), s.p - 1, human_time(latency));
    if (s.m >= 2) {
      e.terms +=
          fmt::format(" (between nodes {} NICs per node shared by {} groups)", c.nics_per_node, concurrent_groups);
    }
    return e;
  }

  const Rate r = flat_rate(s);
  double bw_factor = 0;
  double alpha_steps = 0;
  const char* shape_text = "";
  switch (coll) {
  case Collective::all_reduce:
    bw_factor = 2 * (p - 1) / p;
    alpha_steps = 2 * (p - 1);
    shape_text = "2(p-1)/p n/B + 2(p-1) a";
    break;
  case Collective::all_gather:
  case Collective::reduce_scatter:
    bw_factor = (p - 1) / p;
    alpha_steps = p - 1;
    shape_text = "(p-1)/p n/B + (p-1) a";
    break;
  case Collective::broadcast:
    bw_factor = 1;
    alpha_steps = p - 1;
    shape_text = "n/B + (p-1) a";
    break;
  default: break;
  }
  e.bandwidth_seconds = bw_factor * n / r.bandwidth;
  e.latency_seconds = alpha_steps * r.latency;
  e.bottleneck = r.kind;
  e.terms = fmt::format("{} = {:.4g} x {} / {} + {:g} x {}", shape_text, bw_factor, human_bytes(n),
                        human_rate(r.bandwidth), alpha_steps, human_time(r.latency));
  return e;
}

Estimate tree_estimate(const Shape& s, double n) {
  const Rate r = flat_rate(s);
  const double depth = std::ceil(std::log2(static_cast<double>(s.p)));
  Estimate e;
  e.bandwidth_seconds = 2 * n / r.bandwidth;
  e.latency_seconds = 2 * depth * r.latency;
  e.bottleneck = r.kind;
  e.terms = fmt::format("2 n/B + 2 ceil(log2 p) a = 2 x {} / {} + {:g} x {}", human_bytes(n), human_rate(r.bandwidth),
                        2 * depth, human_time(r.latency));
  return e;
}

bool hierarchical_applies(Collective coll, const Shape& s) {
  const bool two_level =
      coll == Collective::all_reduce || coll == Collective::all_gather || coll == Collective::reduce_scatter;
  return two_level && s.m >= 2 && s.k_min == s.k_max && s.k_min >= 2;
}

Estimate hierarchical_estimate(const Cluster& c, Collective coll, const Shape& s, double n) {
  const double k = s.k_min;
  const double m = s.m;
  const double shard_bandwidth = c.nic.bandwidth * std::min(1.0, s.nic_share / k);
  const double twice = coll == Collective::all_reduce ? 2.0 : 1.0;
  const double intra_seconds = twice * (k - 1) / k * n / s.intra.bandwidth;
  const double net_seconds = twice * (m - 1) / m * (n / k) / shard_bandwidth;
  Estimate e;
  e.bandwidth_seconds = intra_seconds + net_seconds;
  e.latency_seconds = twice * ((k - 1) * s.intra.latency + (m - 1) * c.nic.latency);
  e.bottleneck = net_seconds >= intra_seconds ? c.nic.kind : s.intra.kind;
  const char* steps = coll == Collective::all_reduce   ? "reduce-scatter in each node, all-reduce of the 1/k shard "
                                                         "across nodes, all-gather in each node"
                      : coll == Collective::all_gather ? "all-gather of the 1/k shard across nodes, then in each node"
                                                       : "reduce-scatter in each node, then of the 1/k shard across "
                                                         "nodes";
  const char* two = coll == Collective::all_reduce ? "2" : "";
  e.terms = fmt::format("{} (k = {} per node, m = {} nodes): {}(k-1)/k n/B_in + {}(m-1)/m (n/k)/B_net + {}(k-1) a_in + "
                        "{}(m-1) a_net with n = {}, B_in = {}, n/k = {}, B_net = {} per shard, latency {} + {}",
                        steps, s.k_min, s.m, two, two, two, two, human_bytes(n), human_rate(s.intra.bandwidth),
                        human_bytes(n / k), human_rate(shard_bandwidth), human_time(twice * (k - 1) * s.intra.latency),
                        human_time(twice * (m - 1) * c.nic.latency));
  return e;
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

CollectiveCost collective_cost(const Cluster& cluster, Collective collective, std::span<const int> devices,
                               double bytes, Algorithm algorithm, int concurrent_groups) {
  if (devices.size() == 1 && collective != Collective::send_recv) {
    check_group(cluster, Collective::broadcast, devices, bytes, concurrent_groups);
    CollectiveCost none;
    none.algorithm = algorithm == Algorithm::automatic ? Algorithm::ring : algorithm;
    none.formula = fmt::format("{} on a single device moves nothing: 0 s", collective_name(collective));
    return none;
  }
  check_group(cluster, collective, devices, bytes, concurrent_groups);
  const Shape s = shape_of(cluster, devices, concurrent_groups);

  struct Candidate {
    Algorithm algorithm;
    Estimate estimate;
  };
  std::vector<Candidate> candidates;
  const bool tree_applies = collective == Collective::all_reduce;
  const bool hier_applies = hierarchical_applies(collective, s);
  std::string note;
  const auto add_ring = [&] {
    candidates.push_back({Algorithm::ring, ring_estimate(cluster, collective, s, devices, bytes, concurrent_groups)});
  };
  switch (algorithm) {
  case Algorithm::automatic:
    add_ring();
    if (tree_applies) {
      candidates.push_back({Algorithm::tree, tree_estimate(s, bytes)});
    }
    if (hier_applies) {
      candidates.push_back({Algorithm::hierarchical, hierarchical_estimate(cluster, collective, s, bytes)});
    }
    break;
  case Algorithm::ring: add_ring(); break;
  case Algorithm::tree:
    if (tree_applies) {
      candidates.push_back({Algorithm::tree, tree_estimate(s, bytes)});
    } else {
      note = fmt::format(" (tree is for all-reduce only; ring used)");
      add_ring();
    }
    break;
  case Algorithm::hierarchical:
    if (hier_applies) {
      candidates.push_back({Algorithm::hierarchical, hierarchical_estimate(cluster, collective, s, bytes)});
    } else {
      note = " (hierarchical needs an all-reduce, all-gather or reduce-scatter over nodes holding the same number, "
             "at least 2, of the group's devices; ring used)";
      add_ring();
    }
    break;
  }

  const auto best = std::min_element(candidates.begin(), candidates.end(), [](const Candidate& x, const Candidate& y) {
    return x.estimate.bandwidth_seconds + x.estimate.latency_seconds <
           y.estimate.bandwidth_seconds + y.estimate.latency_seconds;
  });
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
  const std::string where =
      s.m == 1 ? "inside one node" : fmt::format("across {} nodes ({} to {} per node)", s.m, s.k_min, s.k_max);
  cost.formula =
      fmt::format("{} {} of {} over {} devices {}: {} = {} (bottleneck: {}){}", algorithm_name(cost.algorithm),
                  collective_name(collective), human_bytes(bytes), s.p, where, best->estimate.terms,
                  human_time(cost.seconds), link_kind_name(cost.bottleneck), note);
  return cost;
}

} // namespace partita::cluster
