#include "cluster/collective_model.h"

#include "cluster/ring_topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace partita::cluster::detail {

Rate slower(const Rate& x, const Rate& y) {
  Rate r = x.bandwidth <= y.bandwidth ? x : y;
  r.latency = std::max(x.latency, y.latency);
  return r;
}

Shape shape_of(const Cluster& c, std::span<const int> devices, int concurrent_groups) {
  Shape s;
  s.p = static_cast<int>(devices.size());
  // Nodes in ascending order, each with its devices ascending (device ids grow with their node).
  std::vector<int> sorted(devices.begin(), devices.end());
  std::sort(sorted.begin(), sorted.end());
  for (const int d : sorted) {
    const int node = c.node_of(d);
    if (s.by_node.empty() || s.by_node.back().first != node) {
      s.by_node.emplace_back(node, std::vector<int>{});
    }
    s.by_node.back().second.push_back(d);
  }
  s.m = static_cast<int>(s.by_node.size());
  s.k_min = std::numeric_limits<int>::max();
  for (const auto& [node, members] : s.by_node) {
    const int k = static_cast<int>(members.size());
    s.k_min = std::min(s.k_min, k);
    s.k_max = std::max(s.k_max, k);
    if (k >= 2) {
      const auto r = intra_node_ring(c, members);
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

Estimate ring_estimate(const Cluster& c, Collective coll, const Shape& s, std::span<const int> devices, double n,
                       int concurrent_groups, bool explain) {
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
    if (explain) {
      e.terms = fmt::format("n/B + a = {} / {} + {}", human_bytes(n), human_rate(r.bandwidth), human_time(r.latency));
    }
    return e;
  }
  if (coll == Collective::all_to_all) {
    const double per_peer = n / p;
    double intra_seconds = 0;
    double net_seconds = 0;
    double latency = s.m >= 2 ? c.nic.latency : 0;
    LinkKind intra_kind = c.intra_link.kind;
    for (const auto& [node, members] : s.by_node) {
      const double k = static_cast<double>(members.size());
      if (members.size() >= 2) {
        const auto part = intra_node_all_to_all(c, members, per_peer);
        if (part.seconds >= intra_seconds) {
          intra_seconds = part.seconds;
          intra_kind = part.kind;
        }
        latency = std::max(latency, part.latency);
      }
      if (s.m >= 2) {
        const double leaving = k * n * (p - k) / p;
        net_seconds = std::max(net_seconds, leaving / (c.nic.bandwidth * std::min(k, s.nic_share)));
      }
    }
    e.bandwidth_seconds = std::max(intra_seconds, net_seconds);
    e.latency_seconds = (p - 1) * latency;
    e.bottleneck = net_seconds >= intra_seconds && s.m >= 2 ? c.nic.kind : intra_kind;
    if (!explain) {
      return e;
    }
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
  if (!explain) {
    return e;
  }
  e.terms = fmt::format("{} = {:.4g} x {} / {} + {:g} x {}", shape_text, bw_factor, human_bytes(n),
                        human_rate(r.bandwidth), alpha_steps, human_time(r.latency));
  return e;
}

Estimate tree_estimate(const Shape& s, double n, bool explain) {
  const Rate r = flat_rate(s);
  const double depth = std::ceil(std::log2(static_cast<double>(s.p)));
  Estimate e;
  e.bandwidth_seconds = 2 * n / r.bandwidth;
  e.latency_seconds = 2 * depth * r.latency;
  e.bottleneck = r.kind;
  if (!explain) {
    return e;
  }
  e.terms = fmt::format("2 n/B + 2 ceil(log2 p) a = 2 x {} / {} + {:g} x {}", human_bytes(n), human_rate(r.bandwidth),
                        2 * depth, human_time(r.latency));
  return e;
}

} // namespace partita::cluster::detail
