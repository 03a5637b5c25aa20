// Validation of a proto::Cluster into a Cluster: every rejection names the field by its path in
// the JSON file ("intra_node.pairs[3].b") and says what was expected. validate() and from_proto()
// run the same checks (convert() below): the GUI's cluster editor marks exactly what a file
// loader would reject.

#include "partita/cluster/cluster.h"
#include "partita/cluster/collectives.h"
#include "partita/graph/error.h"
#include "partita/proto/partita.pb.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

namespace partita::cluster {

namespace {

// What any device or link has, with room on both sides: 1 MFLOP/s to 1 ZFLOP/s, 1 kB/s to
// 100 PB/s, up to an exabyte and a thousand seconds. Past these, times overflow or vanish.
constexpr double min_flops = 1e6, max_flops = 1e21;
constexpr double min_rate = 1e3, max_rate = 1e17;
constexpr double max_bytes = 1e18, max_seconds = 1e3;

// The first failed check; caught by validate() and from_proto(), never escapes this file.
struct Invalid {
  FieldError error;
};

class Checker {
public:
  [[noreturn]] void fail(std::string_view field, std::string_view reason) const {
    throw Invalid{FieldError{std::string(field), std::string(reason)}};
  }

  double positive(double value, std::string_view field) const {
    if (!std::isfinite(value) || value <= 0) {
      fail(field, fmt::format("must be positive, got {}", value));
    }
    return value;
  }
  double non_negative(double value, std::string_view field) const {
    if (!std::isfinite(value) || value < 0) {
      fail(field, fmt::format("must be zero or positive, got {}", value));
    }
    return value;
  }
  // A figure so far outside what any device or link has that the times computed from it overflow
  // or vanish (a memory bandwidth of 1e-300 B/s made a plan's iteration "inf ms"): refused with the
  // range, since such a figure is usually one in another unit. `zero` also allows 0 (not given).
  double in_range(double value, std::string_view field, double lo, double hi, std::string_view unit,
                  bool zero = false) const {
    if (zero && value == 0) {
      return value;
    }
    if (!std::isfinite(value) || value < lo || value > hi) {
      fail(field, fmt::format("must be {}between {:g} and {:g} {} (no device or link is outside that; a figure in "
                              "another unit?), got {:g}",
                              zero ? "0 or " : "", lo, hi, unit, value));
    }
    return value;
  }
  int at_least(int value, int minimum, std::string_view field) const {
    if (value < minimum) {
      fail(field, fmt::format("must be at least {}, got {}", minimum, value));
    }
    return value;
  }
};

LinkKind link_kind(proto::LinkKind k, const Checker& check, const std::string& field) {
  switch (k) {
  case proto::SHARED_MEMORY: return LinkKind::shared_memory;
  case proto::NVLINK: return LinkKind::nvlink;
  case proto::NVSWITCH: return LinkKind::nvswitch;
  case proto::PCIE: return LinkKind::pcie;
  case proto::INFINIBAND: return LinkKind::infiniband;
  case proto::ETHERNET: return LinkKind::ethernet;
  default: break;
  }
  check.fail(field, "must be set to one of SHARED_MEMORY, NVLINK, NVSWITCH, PCIE, INFINIBAND, ETHERNET");
}

std::vector<LinkProtocol> protocols(const google::protobuf::RepeatedPtrField<proto::LinkProtocol>& list,
                                    const Checker& check, const std::string& field) {
  std::vector<LinkProtocol> out;
  for (int i = 0; i < list.size(); ++i) {
    const auto path = fmt::format("{}.protocols[{}]", field, i);
    const auto& q = list.Get(i);
    LinkProtocol proto_figures{
        check.in_range(check.positive(q.from_bytes(), path + ".from_bytes"), path + ".from_bytes", 0, max_bytes, "B"),
        check.in_range(check.positive(q.bandwidth(), path + ".bandwidth"), path + ".bandwidth", min_rate, max_rate,
                       "B/s"),
        check.in_range(check.non_negative(q.latency(), path + ".latency"), path + ".latency", 0, max_seconds, "s")};
    if (!out.empty() && proto_figures.from_bytes <= out.back().from_bytes) {
      check.fail(path + ".from_bytes", fmt::format("must be larger than the previous protocol's {}, got {}",
                                                   out.back().from_bytes, proto_figures.from_bytes));
    }
    out.push_back(proto_figures);
  }
  return out;
}

Link link(const proto::Link& p, const Checker& check, const std::string& field) {
  Link out;
  out.kind = link_kind(p.kind(), check, field + ".kind");
  out.bandwidth = check.in_range(check.positive(p.bandwidth(), field + ".bandwidth"), field + ".bandwidth", min_rate,
                                 max_rate, "B/s");
  out.latency =
      check.in_range(check.non_negative(p.latency(), field + ".latency"), field + ".latency", 0, max_seconds, "s");
  out.protocols = protocols(p.protocols(), check, field);
  for (int i = 0; i < p.collectives_size(); ++i) {
    const auto path = fmt::format("{}.collectives[{}]", field, i);
    const auto& c = p.collectives(i);
    const auto known = {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                        Collective::all_to_all, Collective::broadcast,  Collective::send_recv};
    if (std::none_of(known.begin(), known.end(), [&](Collective k) { return collective_name(k) == c.collective(); })) {
      check.fail(path + ".collective", fmt::format("'{}' is not a collective (all-reduce, all-gather, reduce-scatter, "
                                                   "all-to-all, broadcast, send/recv)",
                                                   c.collective()));
    }
    for (const auto& earlier : out.collectives) {
      if (earlier.collective == c.collective()) {
        check.fail(path + ".collective", fmt::format("'{}' is listed twice", c.collective()));
      }
    }
    out.collectives.push_back(
        {c.collective(),
         check.in_range(check.positive(c.bandwidth(), path + ".bandwidth"), path + ".bandwidth", min_rate, max_rate,
                        "B/s"),
         check.in_range(check.non_negative(c.latency(), path + ".latency"), path + ".latency", 0, max_seconds, "s"),
         protocols(c.protocols(), check, path)});
  }
  return out;
}

EfficiencyCurve curve(const google::protobuf::RepeatedPtrField<proto::EfficiencyPoint>& points, const Checker& check,
                      const std::string& field) {
  EfficiencyCurve out;
  for (int i = 0; i < points.size(); ++i) {
    const auto path = fmt::format("{}[{}]", field, i);
    const double work =
        check.in_range(check.positive(points[i].work(), path + ".work"), path + ".work", 0, 1e30, "(FLOP or B)");
    const double fraction = points[i].fraction();
    if (!std::isfinite(fraction) || fraction <= 0 || fraction > 1) {
      check.fail(path + ".fraction", fmt::format("must be in (0, 1], got {}", fraction));
    }
    check.in_range(fraction, path + ".fraction", 1e-9, 1, "(of the peak)");
    if (!out.points.empty() && work <= out.points.back().first) {
      check.fail(path + ".work", fmt::format("must be larger than the previous point's work {}, got {}",
                                             out.points.back().first, work));
    }
    out.points.emplace_back(work, fraction);
  }
  return out;
}

Device device(const proto::Device& p, const Checker& check, const std::string& prefix) {
  const auto f = [&](const char* name) { return prefix + "." + name; };
  Device d;
  d.name = p.name();
  const auto flops = [&](double v, const std::string& field, bool zero) {
    return check.in_range(zero ? check.non_negative(v, field) : check.positive(v, field), field, min_flops, max_flops,
                          "FLOP/s", zero);
  };
  d.peak_fp32 = flops(p.peak_fp32(), f("peak_fp32"), false);
  d.peak_tf32 = flops(p.peak_tf32(), f("peak_tf32"), true);
  d.peak_fp16 = flops(p.peak_fp16(), f("peak_fp16"), true);
  d.peak_bf16 = flops(p.peak_bf16(), f("peak_bf16"), true);
  d.peak_fp8 = flops(p.peak_fp8(), f("peak_fp8"), true);
  d.memory_bandwidth = check.in_range(check.positive(p.memory_bandwidth(), f("memory_bandwidth")),
                                      f("memory_bandwidth"), min_rate, max_rate, "B/s");
  d.memory_capacity = check.in_range(check.positive(p.memory_capacity(), f("memory_capacity")), f("memory_capacity"),
                                     1e3, max_bytes, "B");
  d.kernel_launch_overhead = check.in_range(check.non_negative(p.kernel_launch_overhead(), f("kernel_launch_overhead")),
                                            f("kernel_launch_overhead"), 0, 1, "s");
  d.compute_efficiency = curve(p.compute_efficiency(), check, f("compute_efficiency"));
  d.memory_efficiency = curve(p.memory_efficiency(), check, f("memory_efficiency"));
  for (int i = 0; i < p.kernel_classes_size(); ++i) {
    const auto path = fmt::format("{}.kernel_classes[{}]", prefix, i);
    const auto& entry = p.kernel_classes(i);
    const auto k = graph::parse_kernel_class(entry.kernel_class());
    if (!k) {
      std::vector<std::string_view> names;
      for (const auto c : graph::all_kernel_classes()) {
        names.push_back(graph::kernel_class_name(c));
      }
      check.fail(path + ".kernel_class",
                 fmt::format("'{}' is not one of {}", entry.kernel_class(), fmt::join(names, ", ")));
    }
    if (entry.memory_efficiency_size() == 0) {
      check.fail(path + ".memory_efficiency", "is empty");
    }
    if (!d.memory_efficiency_by_class.emplace(*k, curve(entry.memory_efficiency(), check, path + ".memory_efficiency"))
             .second) {
      check.fail(path + ".kernel_class", fmt::format("'{}' is given twice", entry.kernel_class()));
    }
    if (entry.fresh_read_size() > 0) {
      d.fresh_read_by_class[*k] = curve(entry.fresh_read(), check, path + ".fresh_read");
    }
  }
  for (int i = 0; i < p.compute_classes_size(); ++i) {
    const auto path = fmt::format("{}.compute_classes[{}]", prefix, i);
    const auto& entry = p.compute_classes(i);
    const auto k = graph::parse_compute_class(entry.compute_class());
    if (!k) {
      std::vector<std::string_view> names;
      for (const auto c : graph::all_compute_classes()) {
        names.push_back(graph::compute_class_name(c));
      }
      check.fail(path + ".compute_class",
                 fmt::format("'{}' is not one of {}", entry.compute_class(), fmt::join(names, ", ")));
    }
    if (entry.compute_efficiency_size() == 0) {
      check.fail(path + ".compute_efficiency", "is empty");
    }
    if (!d.compute_efficiency_by_class
             .emplace(*k, curve(entry.compute_efficiency(), check, path + ".compute_efficiency"))
             .second) {
      check.fail(path + ".compute_class", fmt::format("'{}' is given twice", entry.compute_class()));
    }
  }
  d.fresh_read = curve(p.fresh_read(), check, f("fresh_read"));
  d.matmul_operand_bandwidth =
      check.in_range(check.non_negative(p.matmul_operand_bandwidth(), f("matmul_operand_bandwidth")),
                     f("matmul_operand_bandwidth"), min_rate, max_rate, "B/s", true);
  for (int i = 0; i < p.timed_products_size(); ++i) {
    const auto path = fmt::format("{}.timed_products[{}]", prefix, i);
    const auto& e = p.timed_products(i);
    TimedProduct t{e.batch(), e.m(), e.n(), e.k()};
    for (const auto& [value, name] : {std::pair{e.batch(), "batch"}, {e.m(), "m"}, {e.n(), "n"}, {e.k(), "k"}}) {
      if (value < 1) {
        check.fail(path + "." + name, fmt::format("must be at least 1, got {}", value));
      }
    }
    // A time below a nanosecond or above a day is one in another unit (seconds are asked).
    const auto seconds = [&](double value, const char* name) {
      return check.in_range(value, path + "." + name, 1e-9, 86400, "s");
    };
    t.forward = seconds(e.forward(), "forward");
    t.data_gradient = seconds(e.data_gradient(), "data_gradient");
    t.weight_gradient = seconds(e.weight_gradient(), "weight_gradient");
    d.timed_products.push_back(t);
  }
  std::sort(d.timed_products.begin(), d.timed_products.end());
  for (std::size_t i = 1; i < d.timed_products.size(); ++i) {
    const auto& a = d.timed_products[i - 1];
    const auto& b = d.timed_products[i];
    if (std::tie(a.batch, a.m, a.n, a.k) == std::tie(b.batch, b.m, b.n, b.k)) {
      check.fail(prefix + ".timed_products",
                 fmt::format("the product {}x{}x{}x{} (batch x m x n x k) is timed twice", a.batch, a.m, a.n, a.k));
    }
  }
  return d;
}

void intra_node(const proto::NodeTopology& p, const Checker& check, Cluster& c) {
  c.intra_link = link(p.link(), check, "intra_node.link");
  c.intra_switched = p.switched();
  const int n = c.devices_per_node;
  if (c.intra_switched) {
    if (p.pairs_size() > 0) {
      check.fail("intra_node.pairs", "direct pairs describe a node that is not switched; set 'switched' to false "
                                     "or remove the pairs");
    }
    if (p.has_fallback()) {
      c.intra_fallback = link(p.fallback(), check, "intra_node.fallback");
    }
    return;
  }

  std::set<std::pair<int, int>> seen;
  for (int i = 0; i < p.pairs_size(); ++i) {
    const auto& pair = p.pairs(i);
    const auto path = fmt::format("intra_node.pairs[{}]", i);
    for (const auto& [value, end] : {std::pair{pair.a(), "a"}, std::pair{pair.b(), "b"}}) {
      if (value < 0 || value >= n) {
        check.fail(
            fmt::format("{}.{}", path, end),
            fmt::format("is {} but devices_per_node is {} (device indices within a node are 0..{})", value, n, n - 1));
      }
    }
    if (pair.a() == pair.b()) {
      check.fail(path + ".b", fmt::format("links device {} to itself", pair.a()));
    }
    if (!seen.emplace(std::min(pair.a(), pair.b()), std::max(pair.a(), pair.b())).second) {
      check.fail(path, fmt::format("devices {} and {} are listed twice; give one pair with its lane count", pair.a(),
                                   pair.b()));
    }
    c.intra_pairs.push_back(DirectLink{pair.a(), pair.b(), check.at_least(pair.lanes(), 1, path + ".lanes")});
  }

  if (p.has_fallback()) {
    c.intra_fallback = link(p.fallback(), check, "intra_node.fallback");
    return;
  }
  // Without a fallback every pair of the node must be wired directly.
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      if (!seen.contains({a, b})) {
        check.fail("intra_node.fallback",
                   fmt::format("devices {} and {} have no direct link in a node that is not switched, and no "
                               "fallback link is given",
                               a, b));
      }
    }
  }
}

Cluster convert(const proto::Cluster& p) {
  const Checker check{};
  Cluster c;
  c.name = p.name();
  c.description = p.description();
  c.nodes = check.at_least(p.nodes(), 1, "nodes");
  c.devices_per_node = check.at_least(p.devices_per_node(), 1, "devices_per_node");
  if (static_cast<long long>(c.nodes) * c.devices_per_node > (1 << 24)) {
    check.fail("nodes", fmt::format("{} nodes x {} devices is more devices than Partita models (16777216)", c.nodes,
                                    c.devices_per_node));
  }

  if (!p.has_device()) {
    check.fail("device", "is missing");
  }
  c.device = device(p.device(), check, "device");
  long long devices = static_cast<long long>(c.nodes) * c.devices_per_node;
  for (int i = 0; i < p.node_groups_size(); ++i) {
    const auto path = fmt::format("node_groups[{}]", i);
    const auto& group = p.node_groups(i);
    NodeGroup g;
    g.nodes = check.at_least(group.nodes(), 1, path + ".nodes");
    if (!group.has_device()) {
      check.fail(path + ".device", "is missing");
    }
    g.device = device(group.device(), check, path + ".device");
    devices += static_cast<long long>(g.nodes) * c.devices_per_node;
    if (devices > (1 << 24)) {
      check.fail(path + ".nodes", "makes more devices than Partita models (16777216)");
    }
    c.node_groups.push_back(std::move(g));
  }

  // Links inside a node matter only with several devices per node, the network only with several
  // nodes; either is still checked when given, so that a preset can grow with ?nodes=.
  if (p.has_intra_node()) {
    intra_node(p.intra_node(), check, c);
  } else if (c.devices_per_node > 1) {
    check.fail("intra_node", fmt::format("is missing, but there are {} devices per node", c.devices_per_node));
  } else {
    c.intra_link = Link{LinkKind::shared_memory, 0, 0};
  }

  if (p.has_inter_node()) {
    c.nic = link(p.inter_node().nic(), check, "inter_node.nic");
    c.nics_per_node = check.at_least(p.inter_node().nics_per_node(), 1, "inter_node.nics_per_node");
  } else if (c.total_nodes() > 1) {
    check.fail("inter_node", fmt::format("is missing, but there are {} nodes", c.total_nodes()));
  } else {
    c.nic = Link{LinkKind::ethernet, 0, 0};
  }
  return c;
}

} // namespace

std::optional<FieldError> validate(const proto::Cluster& p) {
  try {
    (void)convert(p);
  } catch (const Invalid& e) {
    return e.error;
  }
  return std::nullopt;
}

Cluster from_proto(const proto::Cluster& p, std::string_view source) {
  try {
    return convert(p);
  } catch (const Invalid& e) {
    throw Error(fmt::format("{}: field '{}': {}", source, e.error.field, e.error.reason));
  }
}

} // namespace partita::cluster
