// Two-level collectives: the group cut into m blocks of k devices; one level runs inside each
// block, the other among the devices holding the same position in every block (k such
// sub-groups at once, each carrying a 1/k shard).
//
// Across nodes the blocks are the nodes' parts of the group, and the second level crosses the
// network: each of the k shard rings gets nic.bandwidth * min(1, nics_per_node / (k x
// concurrent_groups)). Inside one node the blocks are runs of consecutive devices; on a switch
// the bandwidth term equals the flat ring's ((k-1)/k + (m-1)/(mk) = (p-1)/p) with k+m-2 instead
// of p-1 latency steps, the 2D-ring trade that makes a node never slower than the same group
// spread over nodes. Every factorisation p = k x m (k, m >= 2) is tried; the fastest counts.

#include "cluster/collective_model.h"
#include "cluster/ring_topology.h"

#include <fmt/format.h>

#include <algorithm>

namespace partita::cluster::detail {

namespace {

struct TwoLevel {
  int k = 0;   // devices per block
  int m = 0;   // blocks
  Rate inner;  // the slowest block's ring
  Rate across; // the slowest shard ring
  bool across_nodes = false;
};

std::string where(const TwoLevel& o) {
  return o.across_nodes ? fmt::format("k = {} devices in each of m = {} nodes", o.k, o.m)
                        : fmt::format("m = {} blocks of k = {} devices inside the node", o.m, o.k);
}

Rate ring_of(const Cluster& c, const std::vector<int>& devices) {
  const RingRate r = intra_node_ring(c, devices);
  return Rate{r.bandwidth, r.latency, r.kind};
}

std::vector<TwoLevel> options(const Cluster& c, const Shape& s) {
  std::vector<TwoLevel> out;
  if (s.m >= 2) {
    if (s.k_min == s.k_max && s.k_min >= 2) {
      const double shard_nics = std::min(1.0, s.nic_share / s.k_min);
      out.push_back(
          TwoLevel{s.k_min, s.m, s.intra, Rate{c.nic.bandwidth * shard_nics, c.nic.latency, c.nic.kind}, true});
    }
    return out;
  }
  const std::vector<int>& devices = s.by_node.begin()->second;
  for (int k = 2; k <= s.p / 2; ++k) {
    if (s.p % k != 0) {
      continue;
    }
    const int m = s.p / k;
    TwoLevel option{k, m, {}, {}, false};
    for (int b = 0; b < m; ++b) {
      const Rate r = ring_of(c, std::vector<int>(devices.begin() + b * k, devices.begin() + (b + 1) * k));
      option.inner = b == 0 ? r : slower(option.inner, r);
    }
    for (int i = 0; i < k; ++i) {
      std::vector<int> shard;
      for (int b = 0; b < m; ++b) {
        shard.push_back(devices[b * k + i]);
      }
      const Rate r = ring_of(c, shard);
      option.across = i == 0 ? r : slower(option.across, r);
    }
    out.push_back(std::move(option));
  }
  return out;
}

Estimate estimate(Collective coll, const TwoLevel& o, double n, bool explain) {
  const double k = o.k;
  const double m = o.m;
  const double twice = coll == Collective::all_reduce ? 2.0 : 1.0;
  const double inner_seconds = twice * (k - 1) / k * n / o.inner.bandwidth;
  const double across_seconds = twice * (m - 1) / m * (n / k) / o.across.bandwidth;
  Estimate e;
  e.bandwidth_seconds = inner_seconds + across_seconds;
  e.latency_seconds = twice * ((k - 1) * o.inner.latency + (m - 1) * o.across.latency);
  e.bottleneck = across_seconds >= inner_seconds ? o.across.kind : o.inner.kind;
  if (!explain) {
    return e;
  }
  const char* steps = coll == Collective::all_reduce   ? "reduce-scatter in each block, all-reduce of the 1/k shard "
                                                         "across blocks, all-gather in each block"
                      : coll == Collective::all_gather ? "all-gather of the 1/k shard across blocks, then in each block"
                                                       : "reduce-scatter in each block, then of the 1/k shard across "
                                                         "blocks";
  const char* two = coll == Collective::all_reduce ? "2" : "";
  e.terms = fmt::format("{} ({}): {}(k-1)/k n/B_in + {}(m-1)/m (n/k)/B_across + {}(k-1) a_in + {}(m-1) a_across with "
                        "n = {}, B_in = {}, B_across = {} per shard, a_in = {}, a_across = {}",
                        steps, where(o), two, two, two, two, human_bytes(n), human_rate(o.inner.bandwidth),
                        human_rate(o.across.bandwidth), human_time(o.inner.latency), human_time(o.across.latency));
  return e;
}

} // namespace

std::optional<Estimate> hierarchical_estimate(const Cluster& c, Collective coll, const Shape& s, double n,
                                              bool explain) {
  if (coll != Collective::all_reduce && coll != Collective::all_gather && coll != Collective::reduce_scatter) {
    return std::nullopt;
  }
  std::optional<Estimate> best;
  for (const auto& option : options(c, s)) {
    Estimate e = estimate(coll, option, n, explain);
    if (!best || e.bandwidth_seconds + e.latency_seconds < best->bandwidth_seconds + best->latency_seconds) {
      best = std::move(e);
    }
  }
  return best;
}

} // namespace partita::cluster::detail
