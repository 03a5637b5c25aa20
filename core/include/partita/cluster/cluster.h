#pragma once

// A cluster: nodes x devices per node, the device's peaks, the links inside a node and the
// network between nodes. Read from partita.proto's Cluster (JSON files and the
// presets in resources/clusters/), validated with errors that name the field.

#include "partita/graph/kernel_class.h"

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace partita::proto {
class Cluster;
}

namespace partita::cluster {

enum class Precision : std::uint8_t { fp32, tf32, fp16, bf16, fp8 };
std::string_view precision_name(Precision p);

enum class LinkKind : std::uint8_t { shared_memory, nvlink, nvswitch, pcie, infiniband, ethernet };
std::string_view link_kind_name(LinkKind k);

// From `from_bytes` per message on, a link may run another protocol with figures of its own
// (MPI's eager-to-rendezvous switch, NCCL's LL/LL128/Simple): calibration finds the switches.
struct LinkProtocol {
  double from_bytes = 0;
  double bandwidth = 0; // bytes/s per direction
  double latency = 0;   // seconds

  auto operator<=>(const LinkProtocol&) const = default;
};

// Calibrated: one collective's own figures on a link (a shared-memory all-reduce also sums what it
// receives, so it moves bytes slower than a broadcast or a send does).
struct CollectiveFigures {
  std::string collective; // collective_name(): "all-reduce", "all-gather", ...
  double bandwidth = 0;
  double latency = 0;
  std::vector<LinkProtocol> protocols = {};

  auto operator<=>(const CollectiveFigures&) const = default;
};

struct Link {
  LinkKind kind = LinkKind::pcie;
  double bandwidth = 0;                     // bytes/s per direction, for messages below the first protocol's from_bytes
  double latency = 0;                       // seconds
  std::vector<LinkProtocol> protocols = {}; // ascending from_bytes; empty: one protocol at every size
  std::vector<CollectiveFigures> collectives = {}; // calibrated per collective; the figures above for the others

  // The link's figures for messages of `message_bytes` (protocols dropped).
  Link at(double message_bytes) const;
  // The link as `collective` sees it: its own figures when calibrated, else these (per-collective
  // figures dropped either way).
  Link for_collective(std::string_view collective) const;
};

// Fraction of peak against work size (FLOPs or bytes), linear in log(work) between points,
// constant beyond the ends; 1.0 when empty.
struct EfficiencyCurve {
  std::vector<std::pair<double, double>> points; // (work, fraction), work ascending
  double at(double work) const;
  // The most at() gives at any work (linear between points, constant beyond: the largest point).
  double most() const;
};

// A matrix product timed at one shape on one device (calibration for a model): Y[batch][m][n] =
// A[batch][m][k] B[batch][k][n], operands not transposed; its forward product and its backward
// pass's two products (dA = dY B^T, dB = A^T dY), in seconds.
struct TimedProduct {
  std::int64_t batch = 1, m = 1, n = 1, k = 1;
  double forward = 0, data_gradient = 0, weight_gradient = 0;

  auto operator<=>(const TimedProduct&) const = default;
};

struct Device {
  std::string name;
  double peak_fp32 = 0, peak_tf32 = 0, peak_fp16 = 0, peak_bf16 = 0, peak_fp8 = 0; // FLOP/s
  double memory_bandwidth = 0;                                                     // bytes/s
  double memory_capacity = 0;                                                      // bytes
  double kernel_launch_overhead = 0;                                               // seconds
  EfficiencyCurve compute_efficiency;
  EfficiencyCurve memory_efficiency;
  // Per kernel family (calibrated): its achieved bandwidth as a fraction of memory_bandwidth. A
  // family without an entry uses memory_efficiency (transpose: the copy curve first, as files
  // calibrated before it had a curve of its own timed transposes as copies).
  std::map<graph::KernelClass, EfficiencyCurve> memory_efficiency_by_class;
  // Per compute kernel family (calibrated: convolution): its achieved FLOP rate as a fraction of
  // the peak. A family without an entry uses compute_efficiency.
  std::map<graph::ComputeClass, EfficiencyCurve> compute_efficiency_by_class;
  // Calibrated: the time of a memory-bound kernel's read of an operand the kernel before it has
  // just written (in cache), as a fraction of a read from memory, against the kernel's bytes.
  // Empty: 1 (no saving), as in presets and files calibrated before it was measured.
  EfficiencyCurve fresh_read;
  // Calibrated: the same for a family timed apart (Erf after the Div that wrote its input); a
  // family without one reads at full cost (eltwise, and the families that fall back to its curve:
  // fresh_read).
  std::map<graph::KernelClass, EfficiencyCurve> fresh_read_by_class;
  // Calibrated: bytes/s at which a matrix product reads its operands from memory on top of its
  // arithmetic: time = compute + operand bytes / matmul_operand_bandwidth (cost::kernel_time). 0:
  // the roofline max(compute, memory), as in presets and files calibrated before it was measured.
  double matmul_operand_bandwidth = 0;
  // Calibrated for a model: products timed at the shapes its plans run them (TimedProduct), sorted
  // by shape, one per shape; the cost model prices a product of such a shape at these times, the
  // others on the curves. Empty: the curves alone.
  std::vector<TimedProduct> timed_products;

  // The product of that shape as timed, or null.
  const TimedProduct* timed_product(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k) const;
  double memory_efficiency_for(graph::KernelClass k, double bytes) const;
  // The curve memory_efficiency_for reads for family k.
  const EfficiencyCurve& memory_curve(graph::KernelClass k) const;
  // The cost of a kernel of family k reading bytes the kernel before has just written, as a
  // fraction of a read from memory: the family's own curve (or its fallback's), fresh_read for
  // eltwise kernels and those on their curve (accumulate), else 1.
  double fresh_read_for(graph::KernelClass k, double bytes) const;
  double compute_efficiency_for(graph::ComputeClass c, double flops) const;
  // Whether family `c` has a curve of its own (else compute_efficiency stands in for it).
  bool has_compute_curve(graph::ComputeClass c) const { return compute_efficiency_by_class.contains(c); }
  // Peak for a precision; falls back to the nearest wider supported type (tf32 -> fp32, ...).
  double peak(Precision p) const;
};

struct DirectLink {
  int a = 0, b = 0; // device indices within a node
  int lanes = 1;
};

// Nodes of another device kind than the cluster's first (a heterogeneous cluster).
struct NodeGroup {
  int nodes = 1;
  Device device;
};

struct Cluster {
  std::string name;
  std::string description;
  int nodes = 1; // of `device`; node_groups' nodes follow them
  int devices_per_node = 1;
  Device device;
  std::vector<NodeGroup> node_groups;
  Link intra_link;                     // one lane / switch port
  bool intra_switched = true;          // all pairs at intra_link bandwidth
  std::vector<DirectLink> intra_pairs; // when not switched
  Link intra_fallback;                 // pairs without a direct link
  Link nic;                            // one NIC
  int nics_per_node = 1;

  int total_nodes() const;
  int device_count() const { return total_nodes() * devices_per_node; }
  int node_of(int device) const { return device / devices_per_node; }
  bool heterogeneous() const { return !node_groups.empty(); }
  // The kind of device `d` is.
  const Device& device_of(int d) const;
  // The device a set of devices runs at: their one kind, or where they are of several kinds the
  // kind index (0: `device`, i + 1: node_groups[i]) of each, distinct, in ascending order.
  std::vector<int> kinds_of(std::span<const int> devices) const;
  const Device& kind(int k) const { return k == 0 ? device : node_groups[static_cast<std::size_t>(k - 1)].device; }
  // Nodes first .. first + count - 1 as a cluster of their own (its node 0 is node `first`), each
  // of its kind, the links as they are: where a search that plans devices 0 .. n-1 plans devices
  // elsewhere in the cluster (a pipeline stage on nodes of another kind). Throws partita::Error
  // for nodes the cluster does not have.
  Cluster nodes_from(int first, int count) const;
  // The least memory of any of `devices` (all of the cluster's when empty).
  double smallest_memory(std::span<const int> devices = {}) const;
  // The link two distinct devices talk over: a direct link (bandwidth x lanes), the switch, the
  // fallback, or (different nodes) one NIC.
  Link link_between(int a, int b) const;
};

// A field of a proto::Cluster that does not validate: its path in the JSON file
// ("intra_node.link.bandwidth", "intra_node.pairs[3].b") and why.
struct FieldError {
  std::string field;
  std::string reason;

  bool operator==(const FieldError&) const = default;
};

// The first field that does not validate, or nothing: the very checks from_proto() makes.
std::optional<FieldError> validate(const proto::Cluster& p);
// Validates and converts; errors are "<source>: field '<path>': <reason>".
Cluster from_proto(const proto::Cluster& p, std::string_view source);
proto::Cluster to_proto(const Cluster& c);

// "dgx-a100", "dgx-a100?nodes=64", or a path to a JSON file. Throws partita::Error naming an
// unknown preset (listing the known ones), a bad parameter, the file or the field.
Cluster load_cluster(std::string_view spec);
std::vector<std::string> preset_names(); // dgx1, dgx-a100, dgx-h100, pcie-8gpu, localhost-cpu

} // namespace partita::cluster
