#pragma once

// One training iteration as a graph of tasks: forward and backward kernels of every
// op on the devices the strategy places it on, its collectives, the redistributions between
// layouts (point-to-point sends between pipeline stages), gradient synchronization in buckets and
// the optimizer step; pipeline micro-batches in the order the schedule runs them. Every task's
// duration is a share of one of evaluate()'s per-op time terms: the simulator has no cost formula
// of its own.

#include "partita/cluster/cluster.h"
#include "partita/graph/graph.h"
#include "partita/strategy/strategy.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace partita::sim {

enum class TaskKind : std::uint8_t {
  forward,          // forward kernels
  backward,         // backward kernels
  recompute,        // the forward pass again, before the backward pass (activation recomputation)
  collective,       // an op's own collectives: partial-sum and input-gradient reduces, halos, statistics
  parameter_gather, // ZeRO-3's all-gather of a weight before use
  redistribution,   // moving a tensor between two layouts (transfer or local copies)
  send,             // a redistribution between pipeline stages: point-to-point
  gradient_sync,    // a bucket of weight-gradient synchronization
  optimizer_step,   // the update of an op's weight shards
};
std::string_view task_kind_name(TaskKind k);

// What a task occupies on each of its devices: a kernel runs on the compute stream, a transfer on
// the communication channel, and a bucket of gradient synchronization on a channel of its own (DDP
// and Megatron-LM all-reduce gradients on a communicator and stream of their own), so that a
// pipeline's sends do not queue behind the buckets; the two channels share the device's links.
enum class Stream : std::uint8_t { compute, communication, gradients };
constexpr int stream_count = 3;
std::string_view stream_name(Stream s);

enum class Pass : std::uint8_t { forward, backward, iteration };

struct Options {
  // On: communication runs on its own channel beside the compute stream, ops on disjoint devices
  // run side by side, and gradient buckets are synchronized as soon as the backward pass has
  // filled them (PyTorch DDP). Off: the additive model's assumption, one task at a time within
  // each pipeline stage (the whole iteration without a pipeline), gradients synchronized after
  // the backward pass.
  bool overlap = true;
  // With overlap off: gradient buckets still go as soon as the backward pass has filled them, on a
  // channel of their own beside the stage's one-thing-at-a-time (partita-run --overlap-gradients on
  // GPUs: NCCL sums the buckets on a stream of their own while every other op runs in turn).
  bool overlap_gradients = false;
  // Gradients are synchronized in buckets of at least this many bytes (DDP's bucket_cap_mb), in the
  // order the backward pass produces them.
  double bucket_bytes = 25e6;
  // On: transfers that run at once and leave the same node share its NICs (share_links()); the
  // build that takes a cluster attaches them. Off: every transfer runs at the rate it was priced at.
  bool contention = true;
};

struct Task {
  TaskKind kind = TaskKind::forward;
  Stream stream = Stream::compute;
  Pass pass = Pass::forward;
  std::string_view term; // the cost::term its duration is a share of
  int group = 0;         // index into TaskGraph::groups: the devices it occupies
  int stage = 0;         // pipeline stage (0 without a pipeline); a send belongs to its receiver's
  int micro_batch = -1;  // -1: once per iteration
  graph::OpId op = -1;   // -1 for a gradient bucket
  int input = -1;        // the input a redistribution moves, else -1
  int bucket = -1;       // index into TaskGraph::buckets for a gradient bucket, else -1
  double duration = 0;   // seconds
  // Activation bytes per device of its group: allocated when it starts (> 0; a forward kernel's
  // kept output) or freed when it ends (< 0; the backward kernel that consumed it).
  double memory = 0;
  std::vector<int> after; // tasks that must finish first, all with smaller indices
};

struct Bucket {
  std::vector<graph::OpId> ops; // in the order the backward pass finishes them
  double bytes = 0;             // gradient bytes per device
};

// A transfer's load on a link that transfers share: the fraction of the link's capacity it uses
// when it runs alone (its priced rate). Transfers on one link whose fractions add up to more than 1
// each slow down by that sum.
struct LinkLoad {
  int link = 0;     // index into TaskGraph::links
  double share = 0; // (0, 1]
};

struct TaskGraph {
  std::vector<Task> tasks;              // in the order the devices issue them
  std::vector<std::vector<int>> groups; // distinct device sets, ascending ids
  std::vector<Bucket> buckets;
  int devices = 0; // of the cluster: device ids are below it
  int stages = 1;
  int micro_batches = 1;
  bool overlap = true;            // Options::overlap it was built with
  bool overlap_gradients = false; // and Options::overlap_gradients
  // Per device: the bytes it holds all iteration (parameters, gradients, optimizer state and the
  // workspace of evaluate()'s memory terms); activations come and go with the tasks.
  std::vector<double> resident_bytes;
  // Links that transfers share ("node 3 NICs") and, per group, the loads its transfers put on
  // them; empty (or a group's entry empty): transfers share nothing but their devices' channels.
  std::vector<std::string> links;
  std::vector<std::vector<LinkLoad>> group_links;
};

// Throws partita::Error when the prediction or the strategy does not belong to the graph, a
// pipeline stage reads from a later stage, the options are out of range, or a time term has no
// place in an iteration.
TaskGraph build_task_graph(const graph::Graph& g, const strategy::Strategy& strategy,
                           const strategy::Prediction& prediction, int cluster_devices, const Options& options = {});

// The same on `cluster`'s devices, with the links its transfers share when options.contention is on.
TaskGraph build_task_graph(const graph::Graph& g, const strategy::Strategy& strategy,
                           const strategy::Prediction& prediction, const cluster::Cluster& cluster,
                           const Options& options = {});

// Attaches the links transfers share on `cluster` (its device count must be the graph's): a
// gradient bucket, a send or a redistribution whose devices span several nodes leaves each of them
// through that node's NICs, one NIC per device it has there at most (collectives.cpp's GPU-NIC
// affinity), so it loads the node's NICs by min(1, its devices there / NICs per node). An op's own
// collectives load none: their task spans every concurrent group of the op, which a layout keeps
// inside nodes where it can (tensor parallelism). Inside a node of direct links (a mesh, DGX-1), a
// transfer among devices that no ring of direct links joins goes through the host (the fallback
// link) and loads the node's host link by 1. Switch ports and direct lanes are per device: not
// shared.
void share_links(TaskGraph& tasks, const cluster::Cluster& cluster);
// Whether `task` is a transfer that loads its group's shared links (share_links).
bool shares_links(const Task& task);

// "fc1: forward compute, micro-batch 3", "gradient sync bucket 2 (5 ops, 25.2 MB)".
std::string task_name(const graph::Graph& g, const TaskGraph& tasks, int task);

} // namespace partita::sim
