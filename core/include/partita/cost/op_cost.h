#pragma once

// Time and memory of one op under a configuration on its devices, every number
// carried as named terms with the formula behind it, so that a front end can show why.

#include "partita/cluster/cluster.h"
#include "partita/cluster/collectives.h"
#include "partita/cost/setup.h"
#include "partita/graph/op_semantics.h"
#include "partita/sharding/config.h"

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace partita::cost {

// Term names, shared by every front end.
namespace term {
inline constexpr std::string_view forward_compute = "forward compute";
inline constexpr std::string_view backward_compute = "backward compute";
inline constexpr std::string_view recompute = "recompute";
inline constexpr std::string_view forward_reduce = "forward partial-sum reduce";
inline constexpr std::string_view backward_reduce = "input-gradient reduce";
inline constexpr std::string_view gradient_sync = "weight-gradient sync";
inline constexpr std::string_view parameter_gather = "parameter all-gather (ZeRO-3)";
inline constexpr std::string_view optimizer_step = "optimizer step";
inline constexpr std::string_view halo_exchange = "halo exchange";
inline constexpr std::string_view statistics_sync = "statistics all-reduce (sync-BN)";
inline constexpr std::string_view redistribution = "redistribution";
// The memory traffic beside a redistribution's transfer: packing, unpacking, local copies and adds.
inline constexpr std::string_view redistribution_copies = "redistribution copies";
inline constexpr std::string_view parameters = "parameters";
inline constexpr std::string_view gradients = "gradients";
inline constexpr std::string_view optimizer_state = "optimizer state";
inline constexpr std::string_view activations = "activations";
inline constexpr std::string_view workspace = "workspace";
} // namespace term

struct Term {
  std::string name;
  double value = 0; // seconds or bytes
  std::string formula;
  // Of a time term that runs in both passes (halo exchange, sync-BN statistics, ZeRO-3 gathers,
  // redistributions): the seconds it spends in the backward pass; the rest is forward. Terms of one
  // pass leave it 0 (the event simulator places them by name).
  double backward = 0;
  // A forward_reduce term: the output it reduces; a backward_reduce term: the input whose
  // gradient it reduces (-1 otherwise).
  int slot = -1;
};

enum class TimeKind : std::uint8_t { compute, communication };

// What the backward pass does with an op's output (strategy::saved_outputs decides it from the
// graph and the recomputation policy): nothing (no backward reads it: an Add's output, a
// Transpose's), keep it in memory from the forward pass, or compute it again before the backward.
enum class Saved : std::uint8_t { none, kept, recomputed };

struct OpCost {
  std::vector<Term> time;   // seconds, for one training iteration, on the op's slowest device
  std::vector<Term> memory; // bytes per device

  double time_total() const;
  double memory_total() const;
  double compute_time() const;             // forward + backward + recompute
  double communication_time() const;       // the rest
  double redistribution_time() const;      // redistribution and redistribution copies
  double get(std::string_view name) const; // 0 when absent
};

bool is_compute_term(std::string_view name);
bool is_redistribution_term(std::string_view name);

// The op `id` under `config`, placed on `devices`: copies x config.devices() distinct cluster
// device ids, copy c in devices[c*k .. c*k+k) in grid order. Copies are replicas of the grid
// (same blocks, same work): they compute the same gradients, so they reduce nothing among
// themselves. `saved`: whether its output is held for the backward pass (an activations term),
// recomputed before it (a recompute term), or needed by no backward. `shared_parameters`: input
// slots of weights that another op holds on the same devices in the same blocks (a tied weight's
// later reader, strategy::tied_weights): one buffer, one gradient, one step, all counted on that
// op, so none of their memory, gradient synchronization, gathers or optimizer step here.
// `micro_batches`: the iteration's micro-batches (a pipeline's, or gradient accumulation's). ZeRO-1
// accumulates whole gradients and synchronizes once; ZeRO-2 keeps only its gradient shard, so it
// reduce-scatters every micro-batch's gradients, and ZeRO-3 also gathers the parameters for every
// micro-batch's forward and backward pass (as DeepSpeed does with gradient accumulation).
// `explain`: write each term's formula (what a front end shows); without it the terms carry their
// numbers only, the same numbers, and no text is formatted (the searches' pricing).
OpCost op_cost(const graph::Graph& g, graph::OpId id, const graph::OpSemantics& s, const sharding::Config& config,
               std::span<const int> devices, const cluster::Cluster& cluster, const TrainingSetup& setup,
               Saved saved = Saved::kept, std::span<const std::size_t> shared_parameters = {}, int micro_batches = 1,
               bool explain = true);

// Everything op_cost reads about op `id` besides its configuration, devices, cluster and setup,
// as text: two ops with equal signatures cost the same under every configuration (the search
// prices repeated blocks once).
std::string cost_signature(const graph::Graph& g, graph::OpId id, const graph::OpSemantics& s, Saved saved);

// Groups of devices along `axes` of the grid; with `across_copies`, each group also spans the
// same grid position in every copy (the gradient-reduction groups of replicated tensors).
std::vector<std::vector<int>> device_groups(const sharding::Config& config, std::span<const int> devices,
                                            std::span<const int> axes, bool across_copies);

// Bytes of a shard of `t` as stored: float values at the training precision, integers as they are.
double stored_bytes(const graph::Tensor& t, double shard_bytes, const TrainingSetup& setup);

// What collective_on_groups prices of a set of groups run at once: the first group of each
// signature (what a collective's cost reads of a group on the cluster: how many of its devices sit
// on each node, and on a direct-link node which ones), groups of one device left out, and how many
// of the groups have a member on the first group's node (they share its NICs).
struct GroupShapes {
  std::vector<std::vector<int>> distinct;
  int sharing = 1;
};
GroupShapes group_shapes(const cluster::Cluster& c, const std::vector<std::vector<int>>& groups);

// group_shapes(c, device_groups(config, devices, axes, across_copies)), kept per thread for the
// layouts met last (a search prices the same few again and again). The reference holds until the
// next call on the same thread.
const GroupShapes& device_group_shapes(const cluster::Cluster& c, const sharding::Config& config,
                                       std::span<const int> devices, std::span<const int> axes, bool across_copies);

// The slowest group's time for one collective run by every group at once (`bytes` per device);
// `explain` as op_cost's.
cluster::CollectiveCost collective_on_groups(const cluster::Cluster& c, cluster::Collective kind,
                                             const std::vector<std::vector<int>>& groups, double bytes,
                                             bool explain = true);
cluster::CollectiveCost collective_on_groups(const cluster::Cluster& c, cluster::Collective kind,
                                             const GroupShapes& shapes, double bytes, bool explain = true);

// The split iteration dims that per-channel statistics are taken over (IterDim::statistics): the
// op all-reduces its statistics over the device groups along them (device_groups, without copies).
std::vector<int> statistics_axes(const graph::OpSemantics& s, const sharding::Config& config);

// Compute time of `flops` FLOPs touching `bytes` bytes on one device: roofline with the compute
// efficiency curve of the compute family and the memory efficiency curve of the memory-bound
// kernel family, plus one launch. `fresh_bytes` of the bytes are reads of operands the kernel
// before has just written: an element-wise kernel takes the device's fresh_read fraction of a
// read from memory for them. A matrix product that reads `operand_bytes` of its operands from
// memory (those no kernel has just written) on a device with a calibrated matmul_operand_bandwidth
// takes compute + operand_bytes / that bandwidth instead of the roofline. FLOPs that do not run on
// the matrix units (`matrix_units` false: an element-wise op's, a softmax's) run at the peak: the
// compute curve is fitted on whole GEMM calls, whose per-call cost at small sizes the memory
// curve already carries for such a kernel (a ReLU of 4 MB priced at 29 us on an H100, where the
// GEMM curve's small-size efficiency met its 0.5 MFLOP; it ran in 13 us). `kernels`: the FLOPs
// run as that many equal kernels (a matrix product's backward pass: a product per input that
// takes a gradient, each the forward's size), each at its own size on the efficiency curve and
// each with its launch.
double kernel_time(double flops, double bytes, const cluster::Device& device, cluster::Precision precision,
                   graph::KernelClass kernel = graph::KernelClass::eltwise,
                   graph::ComputeClass compute = graph::ComputeClass::matmul, double fresh_bytes = 0,
                   std::optional<double> operand_bytes = std::nullopt, bool matrix_units = true, int kernels = 1);

// Whether kernel_time prices an op of this class and compute family as a matrix product that
// reads its operands on top of its arithmetic on `device` (a calibrated matmul_operand_bandwidth).
bool packs_operands(graph::OpClass op_class, graph::ComputeClass family, const cluster::Device& device);

// The matrix product an op runs on one device under `config`, as the runtime calls it
// (Y[batch][m][n] = A[batch][m][k] B[batch][k][n]; a matrix B folds A's leading dims into m, as
// cluster::TimedProduct keys it), for a two-operand product whose operands are not transposed (a
// MatMul, an einsum of that form); nullopt for the other ops (Gemm with its bias or a transposed
// operand, convolutions, recurrences, anything else).
std::optional<cluster::TimedProduct> product_shape(const graph::Graph& g, const graph::Op& op,
                                                   const graph::OpSemantics& s, const sharding::Config& config);

} // namespace partita::cost
