#pragma once

// The balanced pipeline partition (BaPipe, Zhao et al. 2020): the ops, in a topological order, cut
// into contiguous stages so that the slowest stage (per micro-batch) is as fast as it can be, with
// every stage within its device memory, the activations its schedule holds in flight included.
// Exact for a given stage count, micro-batch count and schedule: dynamic programming over cut
// points on the prices below. The family `bapipe` searches the stage count around it and ranks the
// candidates by evaluate()'s iteration time, the number `partita plan` prints.

#include "partita/cluster/cluster.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/strategy.h"

#include <atomic>
#include <functional>
#include <string>
#include <vector>

namespace partita::search::bapipe {

// A tensor read across a cut: produced by the op at position `from`, read by the op at `to`
// (positions in the order, from < to), `tensor` numbering the distinct tensors.
struct Edge {
  int from = 0, to = 0;
  int tensor = 0;
};

// What one stage position costs, per op in the order (full batch: a micro-batch takes 1/m of the
// time), and per edge. Seconds and bytes per device.
struct StagePrices {
  std::vector<double> compute;          // per op: forward, backward and recompute kernels
  std::vector<double> communication;    // per op: its collectives inside the stage (not gradient sync)
  std::vector<double> sync;             // per op: gradient sync and optimizer step, once per iteration
  std::vector<double> resident;         // per op: parameters, gradients and optimizer state
  std::vector<double> activations;      // per op: held for the backward pass, whole batch
  std::vector<double> workspace;        // per op: transient backward buffers, whole batch
  std::vector<double> inner;            // per edge: the move when producer and reader share the stage
  std::vector<double> receive_copies;   // per edge: the reader's copy of a tensor sent from the stage before
  std::vector<double> receive_transfer; // per edge: the point-to-point send itself (once per tensor and stage)
  double in_flight = 1;                 // fraction of the batch's activations the schedule holds at once
  double memory_limit = 0;              // bytes per device
  std::string device;                   // the device's name, for explanations
};

// A tied weight's first reader and another, as positions in the order.
struct Tie {
  int first = 0, other = 0;
};

struct Problem {
  int ops = 0;
  int micro_batches = 1;
  std::vector<Edge> edges;
  std::vector<StagePrices> stages; // one per stage, first to last
  // Tied weights (strategy::tied_gradient_terms): each stage's prices hold the sum of a tie's
  // gradients with both readers on that stage; `tie_extra` says what it adds, once per iteration on
  // the first reader's stage, when the other sits on another stage (a sum between the stages).
  std::vector<Tie> ties;
  std::function<double(std::size_t tie, int first_stage, int other_stage)> tie_extra;
};

struct StageCost {
  double time = 0;    // per micro-batch: (compute + communication + moves) / m
  double compute = 0; // of time
  double receive = 0; // of time: the sends into the stage
  double sync = 0;    // once per iteration
  double memory = 0;  // bytes per device
};

// Stage `s` holding the ops at positions [first, last): its time and memory, priced directly (the
// definition the dynamic programming is exact for).
StageCost stage_cost(const Problem& p, int s, int first, int last);

struct Partition {
  bool feasible = false;   // some partition fits every stage's memory
  std::vector<int> starts; // the position each stage starts at (starts[0] = 0)
  double bottleneck = 0;   // the slowest stage's time per micro-batch
  std::vector<StageCost> stages;
  // Iteration time as evaluate() adds it: (m + stages - 1) x bottleneck + the largest sync (tied
  // weights summed between stages included).
  double iteration_time = 0;
};

// The partition minimizing the bottleneck among those where every stage fits its memory limit
// (feasible = false when none does). Throws partita::Error when there are more stages than ops,
// partita::Cancelled when `cancel` is set.
Partition partition(const Problem& p, const std::atomic<bool>* cancel = nullptr);

// How a pipeline is shaped: its stage count, micro-batches and schedule, and the tensor-parallel
// width inside a stage (1: data parallel over the stage's devices).
struct Shape {
  int stages = 1;
  int micro_batches = 1;
  strategy::Schedule schedule = strategy::Schedule::one_f_one_b;
  int tensor_parallel = 1;
};

// The prices of partitioning r.graph into shape.stages stages of r.devices / stages devices each,
// stage s on devices [s k, (s+1) k), from the one cost model (evaluate() of each stage's layout).
// `stage_devices`, when not empty, gives each stage its own device (speed and memory) in place of
// the cluster's: what a cluster of mixed nodes will feed in. The memory limit is r.memory_limit
// when set, else each stage's device memory.
struct Tables {
  Problem problem;
  // Whether some partition fits every stage's memory (memory does not depend on the sends between
  // stages): when none does, the sends are left unpriced (zero).
  bool fits = true;
  std::vector<graph::OpId> order;                       // position -> op
  std::vector<std::vector<strategy::OpAssignment>> ops; // per stage: every op's layout on its devices
};
Tables tables(const Request& r, const Shape& shape, const std::vector<cluster::Device>& stage_devices = {});

// The pipeline strategy a partition stands for (each op on its stage's devices, as priced).
strategy::Strategy to_strategy(const Request& r, const Shape& shape, const Tables& t, const Partition& part);

// Refuses, with the reason, a pipeline shape that cannot work: stages that do not divide the
// devices or outnumber the ops, micro-batches that do not divide the batch or leave a data-parallel
// replica of a stage without a sample.
void check_shape(const Request& r, const Shape& shape);

// The family: stage counts (every divisor of the devices up to the op count, or --stages) and, per
// count, the largest micro-batch count that the batch allows (or --micro-batches); the schedule is
// r.schedule. Throws partita::Error when an option cannot work or nothing fits.
strategy::Strategy optimize(const Request& r);

} // namespace partita::search::bapipe
