#pragma once

// One rank's share of a training iteration under a strategy: its shards of every op it runs
// (sharding::block_of on its grid position), forward in topological order with the partial-sum
// reductions and redistributions the layouts call for, backward in reverse with input-gradient
// reductions, then weight-gradient synchronization and the plan's optimizer step.
// The reduction groups are cost::device_groups, the ones the cost model prices.
//
// ZeRO over a weight's replica group (the replicas its gradient is summed over), as
// cost::op_cost prices it. Stages 1 and 2: the gradient is reduce-scattered instead of
// all-reduced, each replica steps its own slice of the weights with the optimizer state of that
// slice only, and the updated slices are all-gathered; both collectives are the "weight-gradient
// sync" term and phase. Stage 1 keeps the whole gradient buffer (the slice is reduced into its
// place); stage 2 frees it once its slice is reduced (allocated again for the next backward
// pass). Stage 3 keeps only the slice of the weights too: they are all-gathered before the op's
// forward pass and again before its backward pass (the "parameter all-gather (ZeRO-3)" term and
// phase) and freed after each; the step updates the slice and nothing is gathered after it (the
// cost model also prices an all-gather after the step in stage 3's "weight-gradient sync" term;
// ZeRO has no use for one). A weight read by several ops (tied) is not sharded: its readers add
// their whole gradients to each other, so it is all-reduced and stepped whole, as without ZeRO.

#include "backend.h"
#include "collectives.h"
#include "halo.h"
#include "micro_batch.h"
#include "op_kernels.h"
#include "optimizer.h"
#include "redistribution.h"
#include "shard.h"
#include "trace.h"

#include "partita/graph/op_semantics.h"
#include "partita/strategy/strategy.h"

#include <mpi.h>

#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace partita::runtime {

// What a rank holds after an iteration, for --verify.
// `weight`: the weights after the optimizer step.
enum class Held : std::uint8_t { output, input_gradient, weight_gradient, weight };
struct Snapshot {
  graph::OpId op = -1;
  Held kind = Held::output;
  int index = 0; // output or input index of the op
  Shard shard;
  // A ZeRO slice: shard.data holds the elements [offset, offset + size) of shard.block in
  // row-major order, not the whole block.
  std::int64_t offset = 0;
};

// What one Executor runs when it is a pipeline stage (pipeline_executor.h); the default runs
// every op of the whole batch.
struct Scope {
  std::vector<char> ops; // per op: nonzero when this executor runs it; empty: every op
  // The full-batch graph when `g` is one micro-batch of it (same ops): generated data and the loss
  // gradient are then the slices of the full tensors (micro_batch.h).
  const graph::Graph* full = nullptr;
  int micro_batches = 1;
};

// Whether input `input` of op `id` gets a gradient (f32 activations and parameters).
bool needs_gradient(const graph::Graph& g, graph::OpId id, std::size_t input);
// Parameters read by several ops (tied weights), with their readers (op, input index).
std::map<graph::TensorId, std::vector<std::pair<graph::OpId, std::size_t>>> tied_parameters(const graph::Graph& g);

class Executor {
public:
  // The values of float Constant ops by tensor name (integer constants come with the graph).
  using ConstantValues = std::map<std::string, std::vector<float>, std::less<>>;

  // Device d of the strategy is rank d of `comm` (for the ops in scope). Throws partita::Error
  // for what it cannot run (a Constant whose value is unknown). Collective over `comm` (creates
  // the sub-communicators).
  Executor(const graph::Graph& g, const strategy::Strategy& st, MPI_Comm comm, Backend& backend, Recorder& recorder,
           const Training& training, const ConstantValues& constants = {}, Scope scope = {});

  // An input whose producer is out of scope is the caller's to fill before forward(), and its
  // gradient the caller's to read after backward(); an output read out of scope gets no zeroed
  // gradient in backward(): the caller writes it first (the loss gradient is added on top).
  void forward();
  void backward();
  void synchronize_gradients();
  // The optimizer's step of every weight this rank holds (its ZeRO slice), then ZeRO-1/2's
  // all-gather.
  void step();

  // fp16's loss scaling (main.cpp's LossScaler): the loss gradient is multiplied by `scale`, a
  // power of two, from the next backward pass on, and so is every gradient.
  void set_loss_scale(float scale) { m_loss_scale = scale; }
  // Multiplies every gradient the optimizer reads (synchronized: its ZeRO slice) by `factor` (one
  // over the loss scale) and sets flag[0] = 1 (tensor memory) where any of them is not finite.
  void unscale_gradients(float factor, float* flag);

  // Micro-batches: which slice of the full batch the data inputs and the loss gradient are.
  void set_micro_batch(int index) { m_micro_batch = index; }
  // Regenerates the data inputs for the current micro-batch.
  void generate_inputs();
  // Weight gradients add up over backward() calls until zero_weight_gradients().
  void set_accumulate_weight_gradients(bool on) { m_accumulate = on; }
  // Weight gradients summed over their replicas during the backward pass, as PyTorch DDP does:
  // once an op's backward pass has written a weight's gradient, it joins the bucket of its replica
  // group, and a bucket of at least `bucket_bytes` is started without waiting (Backend::
  // all_reduce_sum_start); the rest start when the backward pass ends, and synchronize_gradients()
  // waits for them. 0 (the default): every gradient is summed in synchronize_gradients(). Weights
  // under ZeRO, tied weights and copies averaged over ZeRO's group are always summed there.
  void set_gradient_overlap(double bucket_bytes) { m_bucket_bytes = bucket_bytes; }
  // Whether the coming backward() is the last one adding to the weight gradients before they are
  // synchronized (a pipeline's last micro-batch of this stage; true by default): only then does it
  // start their sums.
  void set_final_backward(bool on) { m_final_backward = on; }
  // Gradient sums started during backward passes since the executor was made.
  int overlapped_sums() const { return m_overlapped_sums; }
  void zero_weight_gradients();
  // Fills every gradient buffer with NaN, so that --verify fails where a kernel or an exchange
  // reads a gradient before writing it (backward() zeroes only the gradients that are added
  // into; a fresh buffer's zeros would hide a kernel that adds where it should write).
  void poison_gradients();

  // Everything but the weights and their gradients (values and gradients of activations and
  // data): a pipeline keeps one set per micro-batch in flight and swaps them in and out.
  using Activations = std::vector<std::optional<Shard>>;
  Activations activations() const;
  void swap_activations(Activations& set);

  enum class Buffer : std::uint8_t { input_value, input_gradient, output_value, output_gradient };
  // This rank's block, nullptr when it holds none.
  Shard* buffer(graph::OpId op, Buffer which, std::size_t index);

  // Outputs, input gradients and weight gradients (their ZeRO slices once reduce-scattered), after
  // a backward pass.
  std::vector<Snapshot> snapshot() const;
  // The weights this rank steps (Held::weight; ZeRO-3: its slices), after step().
  std::vector<Snapshot> weight_snapshot() const;
  // The whole-tensor shards of a single-device run (the reference), by op and index, after a
  // backward pass. A borrowing view's output (or a gradient it gave back) is a copy, valid until
  // the next call for the same op, kind and index.
  const Shard* held(graph::OpId op, Held kind, int index) const;

  // Bytes of every buffer this rank holds: activations, weights (a ZeRO-3 slice), their gradients (a ZeRO-2 slice
  // between synchronization and the next backward pass) and the optimizer state.
  double held_bytes() const;

  int communicators() const { return m_comms.created(); }
  // Ops running a memory-bound stand-in, with the reason.
  const std::vector<std::pair<graph::OpId, std::string>>& stand_ins() const { return m_stand_ins; }

private:
  // Per-op times on the host's clock, or on an asynchronous backend's marks (executor.cpp).
  struct PendingTime {
    graph::OpId op = -1;
    Phase phase = Phase::forward;
    std::size_t start = 0, end = 0; // marks
    double bytes = 0;
    bool stand_in = false;
  };
  double clock_start();
  void clock_add(graph::OpId op, Phase phase, double start, double bytes = 0, bool stand_in = false);
  // Records what the marks timed (waiting for the device first); nothing on the CPU backend.
  void flush_times();
  std::vector<PendingTime> m_pending_times;

  struct Input {
    std::optional<Shard> value; // the block this rank reads (none when `alias`)
    bool alias = false;         // reads its producer's output shard in place: the same block
    // Its gradient is written into the producer's output gradient (the only reader; no gradient).
    bool gradient_alias = false;
    std::optional<Shard> gradient; // its (reduced) gradient, when one is needed
    bool needs_gradient = false;
    bool parameter = false;
    Group reduce_group; // this rank's replica group for the gradient (size 1: none)
    // Sequence parallelism (strategy::input_gradient_reduce_scatters): the gradient's partial sums
    // are reduce-scattered over reduce_group, each member keeping the region of this rank's block
    // that the producer holds on it (in the group's order); empty: all-reduced.
    std::vector<sharding::Block> gradient_scatter;
    int copies = 1;
    // Activations: from the producer's output placement.
    graph::OpId producer = -1; // -1 also when the producer is out of scope
    std::size_t producer_output = 0;
    std::optional<Shard> scratch; // a weight gradient's share of one backward() when accumulating
    Exchange forward_exchange, backward_exchange;
    std::optional<Halo> halo; // a window op's input 0 under a spatial split: what its windows read
    // A weight's optimizer state: over its ZeRO slice when `zero`, else over the whole shard.
    OptimizerState optimizer;
    // A tied weight whose readers hold the same blocks on the same devices
    // (strategy::shared_parameters): one gradient, reduced once, one step. The first reader's
    // input lists the others (their gradients added into its own before its reduce); another's
    // names the first (no reduce, no optimizer state: it takes the first's stepped values).
    std::vector<std::pair<graph::OpId, std::size_t>> partners;
    std::optional<std::pair<graph::OpId, std::size_t>> owner;
    struct Zero {
      std::vector<std::int64_t> counts; // every replica's slice of the shard, in reduce_group order
      int part = 0;                     // this rank's
      std::int64_t offset = 0;          // where it starts in the shard
      Floats gradient; // ZeRO-2 and 3: the reduce-scattered slice of the gradient (ZeRO-1 keeps it in place)
      Floats weights;  // ZeRO-3: the slice of the weights (the whole shard only while a pass reads it)
    };
    std::optional<Zero> zero;
    std::size_t started = 0; // its sum over reduce_group, started in backward() (set_gradient_overlap)
    bool in_flight = false;  // started, and synchronize_gradients() has not waited for it yet
  };
  struct Output {
    std::optional<Shard> value, gradient;
    Group partial_group; // this rank's group for a split reduction dim (size 1: none)
    // Sequence parallelism (strategy::output_reduce_scatters): the partial sum is
    // reduce-scattered over partial_group, each member keeping the region of this rank's block its
    // one reader reads there (in the group's order); empty: all-reduced.
    std::vector<sharding::Block> scatter;
    bool external = false; // read by an op out of scope
    // Its only reader writes the whole gradient in place (Input::gradient_alias), or it is a graph
    // output that the loss gradient overwrites: backward() does not zero it first.
    bool gradient_overwritten = false;
  };
  struct OpState {
    bool active = false; // this rank is in the op's device list
    bool has_kernel = true;
    std::vector<Input> inputs;
    std::vector<Output> outputs;
    Group statistics_group; // this rank's group for split statistics dims (sync-BN; size 1: none)
    Floats saved;           // kept from forward to backward by the op's kernel
    // A view whose output takes its producer's output buffer in forward and gives it back in
    // backward (with its output gradient): its input's only reader, in place (see the constructor).
    bool borrows = false;
  };
  OpBuffers buffers(OpState& state);
  // A view whose output is its input's buffer as it is (is_buffer_view): forward and backward
  // hand the buffer over (swap) instead of copying it. The buffer given back is overwritten
  // before it is read again: the input by the next forward exchange, an output gradient (never one
  // read out of scope) by the zeroing at the start of backward().
  bool hands_buffer_over(graph::OpId id, const OpState& state) const;
  // The producer's output buffer a borrowing view swaps with its own.
  Shard& lent_value(OpState& state);
  // The producer's output gradient an input with gradient_alias writes into.
  Shard* producer_gradient(const Input& in);
  const Shard* state_gradient(const Input& in) const;

  // A weight read by several ops (a tied embedding): each reader holds it in its own layout and
  // computes its own gradient; after synchronization every reader adds the others' gradients,
  // moved into its layout, so that all copies take the same step.
  struct Tie {
    std::vector<std::pair<graph::OpId, std::size_t>> readers; // (op, input index)
    std::vector<std::vector<Exchange>> exchanges;             // [to][from], from != to
  };

  Group my_group(const Partition& groups) const;
  // ZeRO-2 frees a weight's whole gradient after its reduce-scatter: allocated (zeroed) again here.
  void restore_weight_gradients();
  // A ZeRO weight's reduced gradient slice (after synchronize_gradients()).
  const float* zero_gradient(const Input& in) const;
  // The gradient the optimizer steps a weight with: its ZeRO slice of the synchronized gradient,
  // or the whole of it (step() and unscale_gradients()).
  std::span<float> stepped_gradient(Input& in);
  // ZeRO-3: the op's sharded weights all-gathered into whole shards for one pass, then freed.
  void gather_parameters(graph::OpId id, OpState& state);
  void release_parameters(OpState& state);
  // Sums `shard` in place over this rank's `group` through the backend (MPI or NCCL), then waits.
  void reduce(const Group& group, Shard& shard);
  // Sums `shard` over `group` leaving each member its region only (`regions`, in the group's
  // order, partitioning the shard's block): this rank's region of the shard holds the sum after.
  void reduce_scatter(const Group& group, Shard& shard, const std::vector<sharding::Block>& regions);
  void sum_tied_gradients();
  // set_gradient_overlap(): whether a weight's gradient can be summed during backward(), and the
  // buckets of those waiting to be (by replica group, in the order the backward pass wrote them).
  bool overlappable(const Input& in) const;
  void bucket_gradients(graph::OpId id, OpState& state);
  void start_bucket(const Group& group);
  struct Bucket {
    std::vector<std::pair<graph::OpId, std::size_t>> inputs;
    double bytes = 0;
  };
  std::map<Group, Bucket> m_buckets;
  double m_bucket_bytes = 0;
  Floats m_scatter_packed, m_scatter_mine; // reduce_scatter's buffers, kept between calls
  bool m_final_backward = true;
  bool m_in_flight = false; // some sum was started and not waited for
  int m_overlapped_sums = 0;
  bool in_scope(graph::OpId id) const;
  // Fills a generated (producer-less) input's block for the current micro-batch.
  void generate(Shard& s, graph::TensorId t) const;

  const graph::Graph& m_graph;
  const strategy::Strategy& m_strategy;
  MPI_Comm m_comm;
  int m_rank = 0, m_size = 1;
  Backend& m_backend;
  Recorder& m_recorder;
  Training m_training;
  int m_steps = 0; // optimizer steps taken
  Communicators m_comms;
  std::vector<graph::OpId> m_order;
  std::vector<OpState> m_ops;
  std::vector<std::pair<graph::OpId, std::string>> m_stand_ins;
  std::vector<Tie> m_ties;
  Scope m_scope;
  std::vector<BatchSlice> m_slices; // per tensor, with a full-batch graph in scope
  int m_micro_batch = 0;
  // The loss gradient of each graph output, per micro-batch: fixed, so generated once.
  std::map<std::pair<graph::TensorId, int>, Shard> m_loss_gradients;
  float m_loss_scale = 1; // what the loss gradient is multiplied by
  float m_seed_scale = 1; // what m_loss_gradients are multiplied by now
  // held()'s copies of what borrowing views gave back to their producers (outputs, gradients).
  mutable std::map<std::tuple<graph::OpId, Held, int>, Shard> m_settled;
  bool m_accumulate = false;
};

} // namespace partita::runtime
