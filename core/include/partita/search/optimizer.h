#pragma once

// Every strategy family is an Optimizer with the same interface: given a model,
// a cluster and a device count, it returns a Strategy and says why in its explanation.

#include "partita/cluster/cluster.h"
#include "partita/cost/setup.h"
#include "partita/graph/graph.h"
#include "partita/graph/op_semantics.h"
#include "partita/strategy/strategy.h"

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace partita::search {

// What every family derives from a model the same way: each op's semantics (graph::describe), cost
// signature (cost::cost_signature, output kept) and whether it sits in a repeated block (a layer). A search that plans
// many strategies of one model derives them once and hands them to each plan (Request::facts).
struct ModelFacts {
  std::vector<graph::OpSemantics> semantics;
  std::vector<std::string> cost_signatures;
  std::vector<int> signature_ids; // per op: equal for equal cost signatures
  std::vector<graph::OpId> order; // graph::topological_order()
  std::vector<bool> repeated;     // per position of order: in a repeated block
  std::vector<int> batch_dims;    // per op: the iteration dim that carries the batch, or -1

  static std::shared_ptr<const ModelFacts> of(const graph::Graph& g);
};

struct Request {
  const graph::Graph* graph = nullptr;
  const cluster::Cluster* cluster = nullptr;
  int devices = 1; // use devices 0 .. devices-1 of the cluster
  cost::TrainingSetup setup;
  int tensor_parallel = 0; // Megatron's tensor-parallel degree; 0 = devices per node
  // Pipeline: stages (0 = 4 when they divide the devices, else 2), micro-batches (0 = 4 x stages, at most the
  // batch per replica), schedule, and how to cut: "time" (balanced by forward+backward time),
  // "even" (by op count) or explicit cut points (indices into the topological order where a new
  // stage starts).
  int stages = 0;
  int micro_batches = 0;
  // Megatron-LM's own terms for its layout (`megatron`): pipeline stages of contiguous layers
  // (--pipeline-model-parallel-size; 0 or 1: none) and the samples of one micro-batch on one
  // data-parallel replica (--micro-batch-size; 0: the replica's whole batch at once). Either, or a
  // micro-batch count (micro_batches), makes the plan a 1F1B pipeline (with one stage: gradient
  // accumulation over the micro-batches).
  int pipeline_parallel = 0;
  int micro_batch_size = 0;
  strategy::Schedule schedule = strategy::Schedule::one_f_one_b;
  // Model chunks per stage under the interleaved schedule (Megatron-LM's virtual pipeline; 0: 2).
  int chunks = 0;
  std::string balance = "time";
  std::vector<int> cuts;
  // Pipeline: how each stage lays out its ops: "" (data parallel, or Megatron's tensor layout with
  // tensor_parallel), "searched" (the per-layer search on one stage's devices, every stage of a kind
  // alike), or "auto" (the searched layout or Megatron-LM's, whichever simulates fastest).
  std::string stage_layout;
  // Pipeline with stage_layout "searched": the layouts an earlier search found for the same stage
  // devices, micro-batch count and setup, used as found instead of searching again (the 3-D search
  // prices several schedules and cuts on them): one per kind of stage, in the order of the first
  // stage of each kind (one on a cluster of one kind), each one configuration per op.
  std::vector<std::vector<sharding::Config>> stage_layouts;
  // "auto": price every op as run in this many micro-batches, each on its share of the batch (the
  // layout of a pipeline stage; 1: the whole batch at once).
  int search_micro_batches = 1;
  // "auto" with search_micro_batches > 1 (a pipeline stage's layout): per op, the dim of its
  // iteration space that indexes the batch (-1: none; empty: none known). A split of it must leave
  // every data-parallel replica whole micro-batches (it divides batch / search_micro_batches), so
  // that the pipeline can run the layout found in that many.
  std::vector<int> batch_dims;
  // "auto": split factors all divisors of the device count (else powers of two), the smallest
  // piece a split may leave of a dim (elements), and the memory per device the result must fit in
  // bytes (0: the cluster's device memory).
  bool all_divisors = false;
  std::int64_t min_piece = 1;
  double memory_limit = 0;
  // "auto": the most pairs of distinct layouts x devices its edge tables may price (each pair of
  // a tensor's placements is priced once per table, walking every device): a search past it is
  // refused at once, naming its size, rather than run for hours. A unit takes 3-15 ns on one core
  // of the development machine (partita_bench_auto's "work" column), so the default waits up to
  // a minute or two.
  double max_search_work = 8e9;
  // "auto": where the dependent sets are too wide for the exact dynamic program (a DenseNet block's
  // concatenations read every earlier layer), the bounded search's tables hold at most this many
  // entries (dp::solve_bounded); larger ones give a tighter bound, in more time. 0: refuse such
  // graphs, naming the table the exact search would need.
  double bounded_table_entries = 1e4;
  // "auto": threads that price its layout pairs (0: one per hardware thread). The result does not
  // depend on it.
  int threads = 0;
  // "auto": price every move between two layouts before the first solve, instead of the moves its
  // optima use (the tables holding a lower bound on every other until one is used). The same
  // optimum either way; for tests and measurements that compare the two.
  bool price_every_move = false;
  // "auto": never price the moves left at once (by default the search does once solving again
  // has taken as long as that would, measured on the clock), nor more of a round's tables than
  // the neighbourhoods of the entries whose bounds its optimum used (by default, as many more as
  // the last solve's time prices): solve again until the optimum uses priced moves alone, however
  // many rounds that takes. The same plan either way; what is priced then does not depend on the
  // machine's speed (for tests that count it).
  bool price_only_what_optima_use = false;
  // "3d": the setup's choices the user typed, held as typed instead of searched (the shape's are
  // held by the fields above when set: tensor_parallel, pipeline_parallel, micro_batch_size, and
  // chunks with the interleaved schedule).
  struct Held {
    bool zero = false, recompute = false, sequence_parallel = false, schedule = false;
  } held;
  // "3d", "bapipe": the final ranking runs candidates through the event simulator (sim::simulate_prediction,
  // the figure `partita plan` prints) while this budget lasts, in tasks simulated plus the NICs each
  // transfer shares (0: ranked by the terms added up); every candidate instead when
  // simulate_every_candidate (tests and benchmarks). "auto": any budget but 0 simulates its few final
  // candidates (AutoResult::ranking), and compare_with_families the families' plans.
  std::size_t simulation_budget = 1'000'000;
  bool simulate_every_candidate = false;
  // "given": the plan file to read (partita.proto Plan as JSON).
  std::string plan_file;
  // The model's facts, when the caller derived them (of *graph); empty: each family derives them.
  std::shared_ptr<const ModelFacts> facts;
  std::function<void(double)> progress;      // fraction done, may be empty
  const std::atomic<bool>* cancel = nullptr; // set to stop early: optimize() throws partita::Cancelled
};

class Optimizer {
public:
  virtual ~Optimizer() = default;
  virtual std::string_view name() const = 0;        // "dp"
  virtual std::string_view title() const = 0;       // "data parallel"
  virtual std::string_view description() const = 0; // one sentence
  // Throws partita::Error when the family cannot apply (e.g. more devices than the cluster has).
  virtual strategy::Strategy optimize(const Request& request) const = 0;
  // The command-line options of the Request settings it reads beyond the model, cluster, device
  // count and training setup ("--tp", "--stages", ...), so that a front end can refuse an option
  // that the families it runs would not read instead of letting what the user typed pass unread.
  virtual std::span<const std::string_view> options() const = 0;
};

// Every family, in a stable order.
const std::vector<std::unique_ptr<Optimizer>>& optimizers();
// Throws partita::Error naming the unknown family and listing the known ones.
const Optimizer& find_optimizer(std::string_view name);
// The families whose options() hold `option`, in optimizers()' order.
std::vector<std::string_view> families_reading(std::string_view option);

} // namespace partita::search
