#include "cluster/ring_topology.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

namespace partita::cluster::detail {

namespace {

// Beyond this many devices the search over ring orders (s-1)!/2 is too slow; the ring then simply
// visits the devices in id order.
constexpr int max_searched_ring = 8;

using Matrix = std::vector<std::vector<int>>;

// Lanes of the direct link between two devices of a node that is not switched (0: none).
int direct_lanes(const Cluster& c, int a, int b) {
  const int la = a % c.devices_per_node;
  const int lb = b % c.devices_per_node;
  for (const auto& pair : c.intra_pairs) {
    if ((pair.a == la && pair.b == lb) || (pair.a == lb && pair.b == la)) {
      return pair.lanes;
    }
  }
  return 0;
}

// The Hamiltonian cycle (device 0 first) whose smallest entry of `weight` is largest; returns that
// smallest entry (0 if no cycle has all entries positive) and the order.
int best_cycle(const Matrix& weight, std::vector<int>& order) {
  const int s = static_cast<int>(weight.size());
  std::vector<int> perm(s - 1);
  std::iota(perm.begin(), perm.end(), 1);
  int best = 0;
  do {
    // A cycle and its reverse are the same ring: keep one of the two orders.
    if (s > 3 && perm.front() > perm.back()) {
      continue;
    }
    int bottleneck = weight[0][perm[0]];
    for (int i = 0; i + 1 < s - 1 && bottleneck > best; ++i) {
      bottleneck = std::min(bottleneck, weight[perm[i]][perm[i + 1]]);
    }
    bottleneck = std::min(bottleneck, weight[perm.back()][0]);
    if (bottleneck > best) {
      best = bottleneck;
      order.assign(1, 0);
      order.insert(order.end(), perm.begin(), perm.end());
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

RingRate id_order_ring(const Cluster& c, std::span<const int> devices) {
  RingRate rate{std::numeric_limits<double>::infinity(), 0, c.intra_link.kind};
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const Link hop = c.link_between(devices[i], devices[(i + 1) % devices.size()]);
    if (hop.bandwidth < rate.bandwidth) {
      rate.bandwidth = hop.bandwidth;
      rate.kind = hop.kind;
    }
    rate.latency = std::max(rate.latency, hop.latency);
  }
  return rate;
}

RingRate mesh_ring(const Cluster& c, std::span<const int> devices) {
  const int s = static_cast<int>(devices.size());
  Matrix lanes(s, std::vector<int>(s, 0));
  for (int i = 0; i < s; ++i) {
    for (int j = 0; j < s; ++j) {
      if (i == j) {
        continue;
      }
      lanes[i][j] = direct_lanes(c, devices[i], devices[j]);
    }
  }

  // Lay rings over direct lanes greedily, widest first (NCCL's channel search does likewise).
  // Each lane carries its bandwidth in both directions, so every ring also runs reversed.
  Matrix remaining = lanes;
  int ring_lanes = 0;
  std::vector<int> order;
  while (const int width = best_cycle(remaining, order)) {
    for (int i = 0; i < s; ++i) {
      remaining[order[i]][order[(i + 1) % s]] -= width;
      remaining[order[(i + 1) % s]][order[i]] -= width;
    }
    ring_lanes += width;
  }
  if (ring_lanes > 0) {
    return RingRate{2.0 * ring_lanes * c.intra_link.bandwidth, c.intra_link.latency, c.intra_link.kind};
  }

  // No ring on direct links alone: every order has a hop over the fallback (PCIe through the
  // host), which then bounds the ring whatever the order, so the id order serves. Reversed rings
  // would share the host path: one direction only.
  return id_order_ring(c, devices);
}

} // namespace

RingRate intra_node_ring(const Cluster& c, std::span<const int> devices) {
  if (devices.size() == 2) {
    const Link link = c.link_between(devices[0], devices[1]);
    return RingRate{link.bandwidth, link.latency, link.kind};
  }
  if (c.intra_switched) {
    return RingRate{c.intra_link.bandwidth, c.intra_link.latency, c.intra_link.kind};
  }
  if (static_cast<int>(devices.size()) > max_searched_ring) {
    return id_order_ring(c, devices);
  }

  // Searches repeat for the same groups (every layer of a model asks again): remember them.
  std::vector<double> key{c.intra_link.bandwidth, c.intra_link.latency, c.intra_fallback.bandwidth,
                          c.intra_fallback.latency, static_cast<double>(c.devices_per_node)};
  for (const int d : devices) {
    key.push_back(d % c.devices_per_node);
  }
  for (const auto& pair : c.intra_pairs) {
    key.insert(key.end(), {static_cast<double>(pair.a), static_cast<double>(pair.b), static_cast<double>(pair.lanes)});
  }
  thread_local std::map<std::vector<double>, RingRate> cache;
  if (const auto found = cache.find(key); found != cache.end()) {
    return found->second;
  }
  const RingRate rate = mesh_ring(c, devices);
  if (cache.size() > 4096) {
    cache.clear();
  }
  cache.emplace(std::move(key), rate);
  return rate;
}

AllToAll intra_node_all_to_all(const Cluster& c, std::span<const int> devices, double bytes_per_peer) {
  const double peers = static_cast<double>(devices.size()) - 1;
  if (c.intra_switched) {
    return AllToAll{peers * bytes_per_peer / c.intra_link.bandwidth, c.intra_link.latency, c.intra_link.kind};
  }
  AllToAll out;
  for (const int a : devices) {
    int through_fallback = 0;
    for (const int b : devices) {
      if (a == b) {
        continue;
      }
      if (const int lanes = direct_lanes(c, a, b); lanes > 0) {
        if (const double t = bytes_per_peer / (lanes * c.intra_link.bandwidth); t > out.seconds) {
          out.seconds = t;
          out.kind = c.intra_link.kind;
        }
        out.latency = std::max(out.latency, c.intra_link.latency);
      } else {
        ++through_fallback;
      }
    }
    if (through_fallback > 0) {
      if (const double t = through_fallback * bytes_per_peer / c.intra_fallback.bandwidth; t > out.seconds) {
        out.seconds = t;
        out.kind = c.intra_fallback.kind;
      }
      out.latency = std::max(out.latency, c.intra_fallback.latency);
    }
  }
  return out;
}

} // namespace partita::cluster::detail
