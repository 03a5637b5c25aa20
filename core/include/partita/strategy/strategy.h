#pragma once

// A strategy: a configuration and a device list per op, optionally a pipeline,
// and evaluate(): its predicted time and memory, per op and per device, as named terms (3.6).

#include "partita/cluster/cluster.h"
#include "partita/cost/op_cost.h"
#include "partita/graph/graph.h"
#include "partita/sharding/config.h"
#include "partita/sharding/redistribution.h"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace partita::strategy {

// An op's configuration on its devices. `devices` holds copies x config.devices() cluster device
// ids: copy c occupies devices[c*k .. c*k+k) in grid order (k = config.devices()). Copies are
// replicas of the whole grid: they hold the same blocks and compute the same thing, like any
// replica axis, so tensors they read get partial gradients that are reduced across them.
struct OpAssignment {
  sharding::Config config;
  std::vector<int> devices;

  int copies() const;
  std::vector<int> copy(int c) const; // the devices of copy c
};

// GPipe; 1F1B (PipeDream-Flush); interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's virtual
// pipeline): every device holds `chunks` non-contiguous model chunks, which divides the bubble
// by the chunk count at the price of chunks x the sends between stages.
enum class Schedule : std::uint8_t { gpipe, one_f_one_b, interleaved };
std::string_view schedule_name(Schedule s);

struct Pipeline {
  int stages = 1; // device groups, one per stage
  int micro_batches = 1;
  Schedule schedule = Schedule::one_f_one_b;
  // Model chunks per stage (interleaved only; 1 otherwise). The ops are cut into stages x chunks
  // contiguous virtual stages; virtual stage v runs on the devices of stage v % stages, so the
  // stage s holds chunks s, s + stages, s + 2 stages, ...
  int chunks = 1;
  std::vector<int> stage_of_op; // per op: its virtual stage, 0 .. stages x chunks - 1

  int virtual_stages() const { return stages * chunks; }
};

// One step of a stage's program: the forward or backward pass of one micro-batch through one of
// its chunks (chunk 0 for schedules without chunks).
struct PipelineStep {
  bool forward = true;
  int micro_batch = 0;
  int chunk = 0;
  friend bool operator==(const PipelineStep&, const PipelineStep&) = default;
};
// The order stage `stage` runs its steps in (the simulator's and partita-run's, one definition).
// GPipe: every forward, then every backward. 1F1B: min(stages - stage - 1, micro-batches)
// forwards to fill the pipe, then a forward and a backward in turn, then the backwards left: at
// most stages - stage micro-batches in flight. Interleaved (Megatron-LM's
// forward_backward_pipelining_with_interleaving): forwards go through chunks 0..V-1 in groups of
// `stages` micro-batches, backwards through chunks V-1..0 the same way; (stages - stage - 1) x 2 +
// (V - 1) x stages forwards fill the pipe, then one of each in turn. Needs micro-batches a multiple
// of stages (as Megatron-LM does); throws partita::Error otherwise.
std::vector<PipelineStep> pipeline_program(const Pipeline& pipeline, int stage);

// Throws partita::Error when the schedule cannot run the pipeline (no stage or micro-batch, chunks
// without the interleaved schedule or one chunk with it, micro-batches that the interleaved
// schedule cannot group by the stages).
void check_schedule(const Pipeline& pipeline);

// The chunk-forwards stage `stage` holds at its peak under the pipeline's schedule, in units of
// one micro-batch through all its chunks (GPipe: every micro-batch; 1F1B: stages - stage;
// interleaved: Megatron-LM's warm-up forwards + 1, over V: stages + (stages - 1) / V on stage 0,
// as Korthikanti et al. 2022 count it), at most the micro-batches.
double micro_batches_in_flight(const Pipeline& pipeline, int stage);

struct Strategy {
  std::string family;            // "dp", "mp", "owt", "megatron", "hybrid", ...
  std::string explanation;       // why this strategy: the family's reasoning, in sentences
  int devices = 1;               // devices the strategy may use
  std::vector<OpAssignment> ops; // one per graph op, indexed by OpId
  std::optional<Pipeline> pipeline;
  // The training setup the family chose with the layout (the 3-D search picks the ZeRO stage,
  // recomputation and sequence parallelism): evaluate() and to_plan() use it in place of the one
  // they are given. Empty for the families that take the setup as the user gave it.
  std::optional<cost::TrainingSetup> setup;
};

struct OpPrediction {
  cost::OpCost cost; // includes the redistribution of its inputs as a time term
  double time = 0;   // cost.time_total()
  // Per time term: the input whose redistribution it is, -1 for the op's own terms.
  std::vector<int> term_input = {};
};

struct DeviceMemory {
  double parameters = 0, gradients = 0, optimizer_state = 0, activations = 0;
  double workspace = 0; // the largest transient backward buffers of any op on the device
  double total() const { return parameters + gradients + optimizer_state + activations + workspace; }
};

struct Prediction {
  std::vector<OpPrediction> ops;     // per op
  std::vector<cost::Term> iteration; // compute, communication, redistribution, pipeline bubble
  double iteration_time = 0;         // seconds: the terms added up, or the simulated iteration (simulated)
  double additive_time = 0;          // seconds: the terms added up, no overlap (evaluate()'s iteration_time)
  bool simulated = false;            // iteration_time is the event simulator's (sim::simulate_prediction)
  double compute_time = 0;           // of iteration_time: kernels on the critical path
  double communication_time = 0;     // of iteration_time: the rest (collectives, moves, bubble)
  double samples_per_second = 0;
  int batch = 0;                    // samples per iteration
  std::vector<DeviceMemory> memory; // per device of the cluster (unused devices: zeros)
  double peak_memory = 0;           // bytes on the fullest device
  double memory_capacity = 0;
  bool fits = false;
  int devices_used = 0;
  // What the user should know to read the figures (a quantized model costed as if trained at the
  // set-up's precision); the CLI and the GUI print them under the totals.
  std::vector<std::string> notes;
};

// The notes of a prediction of model `g` under `setup` (Prediction::notes).
std::vector<std::string> prediction_notes(const graph::Graph& g, const cost::TrainingSetup& setup);

// The alternative to choose among predictions of the same model and batch (families, device
// counts): the shortest iteration among those that fit the device memory, the first on a tie;
// nullptr entries (alternatives that could not be evaluated) are skipped; none when nothing fits.
// `partita compare` and the GUI's Compare tab mark it.
std::optional<std::size_t> fastest_that_fits(const std::vector<const Prediction*>& alternatives);

// Throws partita::Error when the strategy does not match the graph (op count, device ids,
// configuration sizes). The strategy's own setup, when it has one, is used in place of `setup`.
Prediction evaluate(const graph::Graph& g, const cluster::Cluster& cluster, const Strategy& strategy,
                    const cost::TrainingSetup& setup);

// Predictions of many strategies of one model on one cluster, for searches: the model's semantics
// computed once, and each class of equal ops (the same cost signature, layout, devices and setup;
// for a move, the producer's too) priced once and remembered across the strategies it predicts.
// Its iteration times and memory are evaluate()'s up to the order of floating-point sums; the
// terms' formulas may name another op of the class (numbers only). The model and cluster must
// outlive it.
class Evaluator {
public:
  Evaluator(const graph::Graph& g, const cluster::Cluster& cluster);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;
  Prediction operator()(const Strategy& strategy, const cost::TrainingSetup& setup);
  // The same without Prediction::ops (left empty): the iteration, its terms and memory per
  // device, for searches that rank strategies by them. `prepared`: prepare()'s id for this
  // strategy, or -1.
  Prediction totals(const Strategy& strategy, const cost::TrainingSetup& setup, int prepared = -1);
  // A strategy's layout prepared for predictions under several setups and micro-batch counts (a
  // search's candidates of one shape): what depends on its ops alone is derived once, not at every
  // prediction. Valid while the strategy's ops (configurations, devices) stay as they were.
  int prepare(const Strategy& strategy);

private:
  struct Memo;
  std::unique_ptr<Memo> m_memo;
};

// The redistribution an input of op `id` needs (forward, and its gradient backward), from its
// producer's output layout to this op's input layout: a `redistribution` term for the transfer and
// a `redistribution copies` term for the memory traffic beside it (or alone: a gradient added
// into the producer's when the tensor has several readers); empty when nothing moves or the input
// has no producer. `ops` holds at least the assignments of `id` and of the producer. With
// `micro_batches` the tensor moves once per micro-batch, a micro-batch's share each time; with
// `once` (sent_once()) whole with the first and copied for the others.
// `explain` as cost::op_cost's: without it the terms carry numbers only.
std::vector<cost::Term> input_redistribution(const graph::Graph& g, const std::vector<graph::OpSemantics>& sem,
                                             const std::vector<OpAssignment>& ops, const cluster::Cluster& cluster,
                                             const cost::TrainingSetup& setup, graph::OpId id, std::size_t input,
                                             int micro_batches = 1, bool explain = true, bool once = false);

// Whether op `consumer`'s input `input` crosses between pipeline stages once per iteration rather
// than once per micro-batch: a fixed tensor (graph::Tensor::fixed, the same in every micro-batch)
// made in another (virtual) stage. It goes whole with the first micro-batch, and each later
// micro-batch copies it from the first's buffer: partita-run runs it so, evaluate() and the
// simulator price it so. (Sent every micro-batch, such a tensor, say a causal mask or a scale
// that every layer reads from the first stage, ties every stage to the first one's progress.)
bool sent_once(const graph::Graph& g, const Strategy& st, graph::OpId consumer, std::size_t input);

// input_redistribution in its two halves, for callers that price one pair of layouts for many
// tensors and configurations (the per-layer search): the geometry, which follows from the two
// layouts and their devices alone, and what it costs for one tensor.
struct MoveGeometry {
  bool same_blocks = false;                   // the same blocks on the same devices: nothing moves
  double consumer_shard_bytes = 0;            // what one consumer device holds, in the graph's element type
  sharding::Redistribution forward, backward; // empty when same_blocks
  // The groups are keep_priced_groups' (each priced, none sitting on its nodes as another does):
  // pricing takes them as they are instead of comparing their node shapes again.
  bool priced_groups_only = false;
};
MoveGeometry move_geometry(const sharding::TensorLayout& from, const OpAssignment& producer,
                           const sharding::TensorLayout& to, const OpAssignment& consumer);
MoveGeometry move_geometry(const sharding::TensorLayout& from, const sharding::Config& from_config,
                           std::span<const int> from_devices, const sharding::TensorLayout& to,
                           const sharding::Config& to_config, std::span<const int> to_devices);

// Drops the groups move_terms would not price (single devices, and groups that sit on their nodes
// as an earlier one does, which cost the same): the same terms from a smaller geometry, for callers
// that keep many.
void keep_priced_groups(const cluster::Cluster& cluster, MoveGeometry& geometry);
// move_geometry with keep_priced_groups' groups alone, the same geometry, found without listing
// the groups that only repeat others on other nodes where it can (sharding::redistribute's
// node_bits): what the per-layer search prices, millions of times.
MoveGeometry priced_move_geometry(const sharding::TensorLayout& from, const sharding::Config& from_config,
                                  std::span<const int> from_devices, const sharding::TensorLayout& to,
                                  const sharding::Config& to_config, std::span<const int> to_devices,
                                  const cluster::Cluster& cluster);
// The same into `out`, reusing its buffers.
void priced_move_geometry(const sharding::TensorLayout& from, const sharding::Config& from_config,
                          std::span<const int> from_devices, const sharding::TensorLayout& to,
                          const sharding::Config& to_config, std::span<const int> to_devices,
                          const cluster::Cluster& cluster, MoveGeometry& out);

// What the cost of a move reads of its tensor besides the layouts.
struct MoveContext {
  double scale = 1;             // bytes at the training precision per byte of the graph's element type
  bool gradient = false;        // a gradient goes back
  bool several_readers = false; // several ops read it (or one reads it twice)
  bool graph_output = false;    // its loss gradient is there before the reader's
  std::string tensor, producer; // names, for the text
  // Moved once per micro-batch, a micro-batch's share each time (a gradient summed over the
  // iteration, a tied weight's, moves once: 1).
  int micro_batches = 1;
  // sent_once(): moved whole with the first micro-batch only, then copied from it for each other.
  bool once = false;
};
MoveContext move_context(const graph::Graph& g, graph::OpId consumer, std::size_t input,
                         const cost::TrainingSetup& setup, int micro_batches = 1);
// Whether move_seconds gives two contexts the same price for every geometry (they differ at most in
// their names, which only the text reads).
bool priced_alike(const MoveContext& a, const MoveContext& b);

// The terms of input_redistribution for a geometry; with `explain` false their formulas are left
// empty (the same values, none of the text).
std::vector<cost::Term> move_terms(const MoveGeometry& geometry, const MoveContext& context,
                                   const cluster::Cluster& cluster, const cost::TrainingSetup& setup, bool explain);
// The sum of move_terms' values, for a geometry whose byte counts are per unit of the tensor,
// x `units` (the per-layer search's tables: no terms, no text).
double move_seconds(const MoveGeometry& geometry, double units, const MoveContext& context,
                    const cluster::Cluster& cluster, const cost::TrainingSetup& setup);

// What move_seconds_lower_bound reads of a cluster: the least latency any message between two
// devices meets (every link's, protocol's and collective's own figures), and on a cluster of
// switched nodes the most bandwidth any estimate gives one device's traffic (0 elsewhere: no
// bound on the bandwidth term is claimed on a mesh, whose rings add up direct lanes).
struct MoveBoundRates {
  double least_latency = 0, most_bandwidth = 0;
  // The best points of the element-wise and the accumulating kernels' memory curves.
  double eltwise_most = 1, accumulate_most = 1;
};
MoveBoundRates move_bound_rates(const cluster::Cluster& cluster);

// A lower bound on move_seconds of every geometry whose blocks are not the same (same_blocks
// false) between a consumer layout whose largest block is `consumer_block_bytes` and a producer
// layout whose largest is `producer_block_bytes`, device 0's two blocks sharing `shared_bytes`
// (whole-tensor bytes in the graph's element type), from those sizes alone: the per-layer search's
// tables hold it until a solution uses the move, then its price. `rates`: move_bound_rates(cluster).
double move_seconds_lower_bound(double consumer_block_bytes, double producer_block_bytes, double shared_bytes,
                                const MoveContext& context, const MoveBoundRates& rates,
                                const cluster::Cluster& cluster, const cost::TrainingSetup& setup);

// A weight read by several ops (a tied embedding and LM head): each reader computes its part of the
// gradient in its own layout, and partita-run adds every other reader's into the first reader's
// and copies the sum back over the others' (an exchange between the two layouts each way).
struct TiedWeight {
  graph::TensorId tensor = graph::no_tensor;
  std::vector<std::pair<graph::OpId, std::size_t>> readers; // (op, input), topological order
};
// Floating-point parameters read, gradient and all, by more than one (op, input).
std::vector<TiedWeight> tied_weights(const graph::Graph& g);

// Per op, the input slots of tied weights whose state the op shares with the weight's first
// reader: it holds the same blocks on the same devices, so one buffer, gradient and optimizer step
// serve both and are counted on the first (cost::op_cost's shared_parameters). A reader elsewhere
// (another pipeline stage, another split) holds a copy of its own, counted on it.
std::vector<std::vector<std::size_t>> shared_parameters(const graph::Graph& g,
                                                        const std::vector<graph::OpSemantics>& sem,
                                                        const std::vector<OpAssignment>& ops);
// The same, with the model's tied weights already found (tied_weights(g)).
std::vector<std::vector<std::size_t>> shared_parameters(const graph::Graph& g,
                                                        const std::vector<graph::OpSemantics>& sem,
                                                        const std::vector<OpAssignment>& ops,
                                                        const std::vector<TiedWeight>& ties);

// Sequence parallelism's reduce-scatters (Korthikanti et al. 2022), which evaluate prices and
// partita-run runs: under `sequence_parallel` (TrainingSetup's) only, false otherwise (such sums
// are then all-reduced, the producer taking its slice of the whole), whether op `id`'s
// partial-sum output `output` has one reader that keeps, on each device of every partial-sum
// group, a distinct slice (1/|group|) of the device's block, so that a reduce-scatter leaves each
// device what it reads.
bool output_reduce_scatters(const graph::Graph& g, const std::vector<graph::OpSemantics>& sem,
                            const std::vector<OpAssignment>& ops, graph::OpId id, std::size_t output,
                            bool sequence_parallel);
// Whether op `id`'s input `input`, read whole by the devices of each replica group, has one
// reader (this op) and a producer that keeps such a slice on each of them: its gradient's partial
// sums are reduce-scattered.
bool input_gradient_reduce_scatters(const graph::Graph& g, const std::vector<graph::OpSemantics>& sem,
                                    const std::vector<OpAssignment>& ops, graph::OpId id, std::size_t input,
                                    bool sequence_parallel);

// The gradient sum of a tied weight between its first reader and another (`geometry` from the
// other's input layout to the first's, `context` the first reader's input): the other's gradient
// sent and added into the first's, then the sum sent back over the other's; a `gradient sync`
// term, once per iteration. The same blocks on the same devices still add and copy the shard.
std::vector<cost::Term> tied_gradient_terms(const MoveGeometry& geometry, const MoveContext& context,
                                            const cluster::Cluster& cluster, const cost::TrainingSetup& setup,
                                            bool explain);

// What the backward pass does with each op's output (per op; `order` is the graph's topological
// order), the activation memory of training (saved_tensors.cpp): an output is held when some
// op's backward reads it (a product's operands, a softmax's output, a normalization's input; not
// an Add's, a Transpose's or a scaling by a constant's), element-wise chains fused as frameworks
// fuse them (a chain's backward recomputes its intermediates from the chain's inputs). Under
// selective recomputation (Korthikanti et al. 2022) the attention core (a product of two
// activations and the element-wise and softmax ops after it) is recomputed; under full
// recomputation only the tensors that cut the graph (a layer's input) are held.
std::vector<cost::Saved> saved_outputs(const graph::Graph& g, const std::vector<graph::OpId>& order,
                                       const std::vector<graph::OpSemantics>& sem, cost::Recompute policy);

// The batch size of a graph: the first dimension of its first data input (1 if none).
int batch_size(const graph::Graph& g);

} // namespace partita::strategy
