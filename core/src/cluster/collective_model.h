#pragma once

// The pieces of the collective cost model (collectives.cpp describes it): where a group sits,
// the link classes that bound it, and one estimate per algorithm.

#include "partita/cluster/collectives.h"

#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace partita::cluster::detail {

struct Rate {
  double bandwidth = std::numeric_limits<double>::infinity(); // bytes/s
  double latency = 0;                                         // seconds
  LinkKind kind = LinkKind::shared_memory;
};

// The bottleneck of two link classes: the lower bandwidth, the higher latency.
Rate slower(const Rate& x, const Rate& y);

// Where a group's devices are.
struct Shape {
  int p = 0;
  std::vector<std::pair<int, std::vector<int>>> by_node; // (node, its devices of the group), both ascending
  int m = 0;                                             // nodes spanned
  int k_min = 0, k_max = 0;                              // devices per node
  bool has_intra = false;                                // some node holds two or more
  Rate intra;                                            // ring rate of the slowest node's part
  Rate net_flat;                                         // the group's rate out of a node (m >= 2)
  double nic_share = 0;                                  // nics_per_node / concurrent_groups
};

Shape shape_of(const Cluster& c, std::span<const int> devices, int concurrent_groups);

// The class a flat ring (or tree) over the whole group is held to.
Rate flat_rate(const Shape& s);

// One algorithm's result before collective_cost fills in the shared fields.
struct Estimate {
  double bandwidth_seconds = 0;
  double latency_seconds = 0;
  LinkKind bottleneck = LinkKind::shared_memory;
  std::string terms; // "<formula> = <numbers>"; left empty when not explained
};

// Each estimate writes its `terms` only when `explain` is set: the numbers are the same either
// way, and the search prices millions of moves whose text no one reads.
// Ring (and, for all-to-all and send/recv, their point-to-point exchange).
Estimate ring_estimate(const Cluster& c, Collective coll, const Shape& s, std::span<const int> devices, double n,
                       int concurrent_groups, bool explain);
// Double binary tree all-reduce.
Estimate tree_estimate(const Shape& s, double n, bool explain);
// Two-level all-reduce, all-gather or reduce-scatter; nothing when the group has no two levels.
std::optional<Estimate> hierarchical_estimate(const Cluster& c, Collective coll, const Shape& s, double n,
                                              bool explain);

std::string human_bytes(double bytes);
std::string human_rate(double bytes_per_second);
std::string human_time(double seconds);

} // namespace partita::cluster::detail
