#include "partita/cluster/cluster.h"

#include "partita/graph/error.h"
#include "partita/proto/partita.pb.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

namespace partita::cluster {

std::string_view precision_name(Precision p) {
  switch (p) {
  case Precision::fp32: return "fp32";
  case Precision::tf32: return "tf32";
  case Precision::fp16: return "fp16";
  case Precision::bf16: return "bf16";
  case Precision::fp8: return "fp8";
  }
  return "unknown";
}

std::string_view link_kind_name(LinkKind k) {
  switch (k) {
  case LinkKind::shared_memory: return "shared memory";
  case LinkKind::nvlink: return "NVLink";
  case LinkKind::nvswitch: return "NVSwitch";
  case LinkKind::pcie: return "PCIe";
  case LinkKind::infiniband: return "InfiniBand";
  case LinkKind::ethernet: return "Ethernet";
  }
  return "unknown";
}

double EfficiencyCurve::at(double work) const {
  if (points.empty()) {
    return 1.0;
  }
  if (work <= points.front().first) {
    return points.front().second;
  }
  if (work >= points.back().first) {
    return points.back().second;
  }
  // First point with work above the query; the one before it is at or below.
  const auto upper = std::upper_bound(points.begin(), points.end(), work,
                                      [](double w, const std::pair<double, double>& p) { return w < p.first; });
  const auto lower = upper - 1;
  const double t = (std::log(work) - std::log(lower->first)) / (std::log(upper->first) - std::log(lower->first));
  return lower->second + t * (upper->second - lower->second);
}

double EfficiencyCurve::most() const {
  if (points.empty()) {
    return 1.0;
  }
  double most = points.front().second;
  for (const auto& p : points) {
    most = std::max(most, p.second);
  }
  return most;
}

Link Link::at(double message_bytes) const {
  Link out{kind, bandwidth, latency};
  for (const auto& p : protocols) {
    if (message_bytes >= p.from_bytes) {
      out.bandwidth = p.bandwidth;
      out.latency = p.latency;
    }
  }
  return out;
}

Link Link::for_collective(std::string_view collective) const {
  Link out{kind, bandwidth, latency, protocols};
  for (const auto& c : collectives) {
    if (c.collective == collective) {
      out.bandwidth = c.bandwidth;
      out.latency = c.latency;
      out.protocols = c.protocols;
    }
  }
  return out;
}

const EfficiencyCurve& Device::memory_curve(graph::KernelClass k) const {
  auto it = memory_efficiency_by_class.find(k);
  if (it == memory_efficiency_by_class.end()) {
    it = memory_efficiency_by_class.find(graph::kernel_class_fallback(k));
  }
  return it != memory_efficiency_by_class.end() ? it->second : memory_efficiency;
}

double Device::memory_efficiency_for(graph::KernelClass k, double bytes) const {
  return memory_curve(k).at(bytes);
}

double Device::fresh_read_for(graph::KernelClass k, double bytes) const {
  auto it = fresh_read_by_class.find(k);
  if (it == fresh_read_by_class.end()) {
    it = fresh_read_by_class.find(graph::kernel_class_fallback(k));
  }
  if (it != fresh_read_by_class.end()) {
    return it->second.at(bytes);
  }
  return graph::kernel_class_fallback(k) == graph::KernelClass::eltwise ? fresh_read.at(bytes) : 1.0;
}

const TimedProduct* Device::timed_product(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k) const {
  const TimedProduct key{batch, m, n, k};
  const auto shape = [](const TimedProduct& p) { return std::tie(p.batch, p.m, p.n, p.k); };
  const auto it = std::lower_bound(timed_products.begin(), timed_products.end(), key,
                                   [&](const TimedProduct& a, const TimedProduct& b) { return shape(a) < shape(b); });
  return it != timed_products.end() && shape(*it) == shape(key) ? &*it : nullptr;
}

double Device::compute_efficiency_for(graph::ComputeClass c, double flops) const {
  const auto it = compute_efficiency_by_class.find(c);
  return it != compute_efficiency_by_class.end() ? it->second.at(flops) : compute_efficiency.at(flops);
}

double Device::peak(Precision p) const {
  // Each precision runs on the nearest wider unit the device has: a GPU without tensor cores
  // computes tf32 and bf16 in fp32, fp8 in fp16.
  switch (p) {
  case Precision::fp32: return peak_fp32;
  case Precision::tf32: return peak_tf32 > 0 ? peak_tf32 : peak_fp32;
  case Precision::fp16: return peak_fp16 > 0 ? peak_fp16 : peak_fp32;
  case Precision::bf16: return peak_bf16 > 0 ? peak_bf16 : peak_fp32;
  case Precision::fp8:
    if (peak_fp8 > 0) {
      return peak_fp8;
    }
    if (peak_fp16 > 0) {
      return peak_fp16;
    }
    return peak_bf16 > 0 ? peak_bf16 : peak_fp32;
  }
  return peak_fp32;
}

int Cluster::total_nodes() const {
  int n = nodes;
  for (const auto& g : node_groups) {
    n += g.nodes;
  }
  return n;
}

namespace {

int kind_index(const Cluster& c, int d) {
  int node = c.node_of(d);
  if (node < c.nodes) {
    return 0;
  }
  node -= c.nodes;
  for (std::size_t i = 0; i < c.node_groups.size(); ++i) {
    if (node < c.node_groups[i].nodes) {
      return static_cast<int>(i) + 1;
    }
    node -= c.node_groups[i].nodes;
  }
  throw Error(fmt::format("cluster '{}': device {} is outside 0..{}", c.name, d, c.device_count() - 1));
}

} // namespace

const Device& Cluster::device_of(int d) const {
  if (node_groups.empty()) {
    return device;
  }
  return kind(kind_index(*this, d));
}

std::vector<int> Cluster::kinds_of(std::span<const int> devices) const {
  std::vector<int> kinds;
  if (node_groups.empty()) {
    return {0};
  }
  for (const int d : devices) {
    kinds.push_back(kind_index(*this, d));
  }
  std::sort(kinds.begin(), kinds.end());
  kinds.erase(std::unique(kinds.begin(), kinds.end()), kinds.end());
  if (kinds.empty()) {
    kinds.push_back(0);
  }
  return kinds;
}

Cluster Cluster::nodes_from(int first, int count) const {
  if (first < 0 || count < 1 || first + count > total_nodes()) {
    throw Error(fmt::format("cluster '{}': nodes {} to {} asked of its {} nodes", name, first, first + count - 1,
                            total_nodes()));
  }
  Cluster out = *this;
  out.node_groups.clear();
  out.nodes = 0;
  // The runs of nodes of one kind, in order (the cluster's device first, then its node groups),
  // cut to the nodes asked.
  int start = 0;
  for (int k = 0; k <= static_cast<int>(node_groups.size()); ++k) {
    const int run = k == 0 ? nodes : node_groups[static_cast<std::size_t>(k - 1)].nodes;
    const int taken = std::min(start + run, first + count) - std::max(start, first);
    start += run;
    if (taken <= 0) {
      continue;
    }
    if (out.nodes == 0) {
      out.nodes = taken;
      out.device = kind(k);
    } else {
      out.node_groups.push_back({taken, kind(k)});
    }
  }
  return out;
}

double Cluster::smallest_memory(std::span<const int> devices) const {
  double least = device.memory_capacity;
  if (devices.empty()) {
    for (const auto& g : node_groups) {
      least = std::min(least, g.device.memory_capacity);
    }
    return least;
  }
  least = std::numeric_limits<double>::infinity();
  for (const int k : kinds_of(devices)) {
    least = std::min(least, kind(k).memory_capacity);
  }
  return least;
}

Link Cluster::link_between(int a, int b) const {
  const int count = device_count();
  if (a < 0 || a >= count || b < 0 || b >= count) {
    throw Error(
        fmt::format("cluster '{}': device {} is outside 0..{}", name, (a < 0 || a >= count) ? a : b, count - 1));
  }
  if (a == b) {
    throw Error(fmt::format("cluster '{}': device {} has no link to itself", name, a));
  }
  if (node_of(a) != node_of(b)) {
    return nic;
  }
  if (intra_switched) {
    return intra_link;
  }
  const int la = a % devices_per_node;
  const int lb = b % devices_per_node;
  for (const auto& pair : intra_pairs) {
    if ((pair.a == la && pair.b == lb) || (pair.a == lb && pair.b == la)) {
      Link lanes = intra_link;
      const auto widen = [&](double& bandwidth, std::vector<LinkProtocol>& protocols) {
        bandwidth *= pair.lanes;
        for (auto& p : protocols) {
          p.bandwidth *= pair.lanes;
        }
      };
      widen(lanes.bandwidth, lanes.protocols);
      for (auto& c : lanes.collectives) {
        widen(c.bandwidth, c.protocols);
      }
      return lanes;
    }
  }
  return intra_fallback;
}

namespace {

proto::LinkKind to_proto_kind(LinkKind k) {
  switch (k) {
  case LinkKind::shared_memory: return proto::SHARED_MEMORY;
  case LinkKind::nvlink: return proto::NVLINK;
  case LinkKind::nvswitch: return proto::NVSWITCH;
  case LinkKind::pcie: return proto::PCIE;
  case LinkKind::infiniband: return proto::INFINIBAND;
  case LinkKind::ethernet: return proto::ETHERNET;
  }
  return proto::LINK_KIND_UNSPECIFIED;
}

void to_proto_protocols(const std::vector<LinkProtocol>& protocols,
                        google::protobuf::RepeatedPtrField<proto::LinkProtocol>& out) {
  for (const auto& p : protocols) {
    auto& q = *out.Add();
    q.set_from_bytes(p.from_bytes);
    q.set_bandwidth(p.bandwidth);
    q.set_latency(p.latency);
  }
}

void to_proto_link(const Link& link, proto::Link& out) {
  out.set_kind(to_proto_kind(link.kind));
  out.set_bandwidth(link.bandwidth);
  out.set_latency(link.latency);
  to_proto_protocols(link.protocols, *out.mutable_protocols());
  for (const auto& c : link.collectives) {
    auto& q = *out.add_collectives();
    q.set_collective(c.collective);
    q.set_bandwidth(c.bandwidth);
    q.set_latency(c.latency);
    to_proto_protocols(c.protocols, *q.mutable_protocols());
  }
}

void to_proto_curve(const EfficiencyCurve& curve, google::protobuf::RepeatedPtrField<proto::EfficiencyPoint>& out) {
  for (const auto& [work, fraction] : curve.points) {
    auto* point = out.Add();
    point->set_work(work);
    point->set_fraction(fraction);
  }
}

void to_proto_device(const Device& device, proto::Device& d) {
  d.set_name(device.name);
  d.set_peak_fp32(device.peak_fp32);
  d.set_peak_tf32(device.peak_tf32);
  d.set_peak_fp16(device.peak_fp16);
  d.set_peak_bf16(device.peak_bf16);
  d.set_peak_fp8(device.peak_fp8);
  d.set_memory_bandwidth(device.memory_bandwidth);
  d.set_memory_capacity(device.memory_capacity);
  d.set_kernel_launch_overhead(device.kernel_launch_overhead);
  to_proto_curve(device.compute_efficiency, *d.mutable_compute_efficiency());
  to_proto_curve(device.memory_efficiency, *d.mutable_memory_efficiency());
  for (const auto& [k, curve] : device.memory_efficiency_by_class) {
    auto& entry = *d.add_kernel_classes();
    entry.set_kernel_class(std::string(graph::kernel_class_name(k)));
    to_proto_curve(curve, *entry.mutable_memory_efficiency());
    if (const auto fresh = device.fresh_read_by_class.find(k); fresh != device.fresh_read_by_class.end()) {
      to_proto_curve(fresh->second, *entry.mutable_fresh_read());
    }
  }
  for (const auto& [k, curve] : device.compute_efficiency_by_class) {
    auto& entry = *d.add_compute_classes();
    entry.set_compute_class(std::string(graph::compute_class_name(k)));
    to_proto_curve(curve, *entry.mutable_compute_efficiency());
  }
  to_proto_curve(device.fresh_read, *d.mutable_fresh_read());
  d.set_matmul_operand_bandwidth(device.matmul_operand_bandwidth);
  for (const auto& t : device.timed_products) {
    auto& entry = *d.add_timed_products();
    entry.set_batch(static_cast<std::int32_t>(t.batch));
    entry.set_m(static_cast<std::int32_t>(t.m));
    entry.set_n(static_cast<std::int32_t>(t.n));
    entry.set_k(static_cast<std::int32_t>(t.k));
    entry.set_forward(t.forward);
    entry.set_data_gradient(t.data_gradient);
    entry.set_weight_gradient(t.weight_gradient);
  }
}

} // namespace

proto::Cluster to_proto(const Cluster& c) {
  proto::Cluster p;
  p.set_name(c.name);
  p.set_description(c.description);
  p.set_nodes(c.nodes);
  p.set_devices_per_node(c.devices_per_node);

  to_proto_device(c.device, *p.mutable_device());
  for (const auto& group : c.node_groups) {
    auto& out = *p.add_node_groups();
    out.set_nodes(group.nodes);
    to_proto_device(group.device, *out.mutable_device());
  }

  // A part that was absent (one device per node, one node) stays absent, so that the file
  // validates again when read back.
  if (c.devices_per_node > 1 || c.intra_link.bandwidth > 0) {
    auto& intra = *p.mutable_intra_node();
    to_proto_link(c.intra_link, *intra.mutable_link());
    intra.set_switched(c.intra_switched);
    for (const auto& pair : c.intra_pairs) {
      auto* out = intra.add_pairs();
      out->set_a(pair.a);
      out->set_b(pair.b);
      out->set_lanes(pair.lanes);
    }
    if (c.intra_fallback.bandwidth > 0) {
      to_proto_link(c.intra_fallback, *intra.mutable_fallback());
    }
  }
  if (c.total_nodes() > 1 || c.nic.bandwidth > 0) {
    auto& inter = *p.mutable_inter_node();
    to_proto_link(c.nic, *inter.mutable_nic());
    inter.set_nics_per_node(c.nics_per_node);
  }
  return p;
}

} // namespace partita::cluster
