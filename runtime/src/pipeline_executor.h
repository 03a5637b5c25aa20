#pragma once

// A pipeline plan (strategy::Pipeline: stages on disjoint ranks, micro-batches, GPipe, 1F1B or
// interleaved 1F1B) executed for real. Each rank finds its stage and runs that stage's ops with an
// Executor over the stage's communicator, on the model built at the micro-batch size, one per
// model chunk the stage holds (interleaved: V chunks, virtual stages c x stages + stage); one set
// of activations per micro-batch is swapped in and out of each, and the steps run in core's
// strategy::pipeline_program order. Tensors crossing a stage boundary move point to
// point (MPI_Isend/Irecv), shaped by the producer's and consumer's layouts (plan_exchange), and
// their gradients come back the same way. Micro-batches run in the schedule's order, weight
// gradients add up over them, then each stage synchronizes its gradients and steps with the plan's
// optimizer (ZeRO over the replicas inside a stage, as Executor does it); weights
// tied across stages have their gradients summed over all readers first.

#include "executor.h"
#include "pipeline_schedule.h"

#include <mpi.h>

#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace partita::runtime {

// The ranks of every stage (sorted), checked: each stage has ops, stages do not share ranks,
// every rank is one of `ranks`, and no op reads a tensor of a later stage. Errors name `source`.
std::vector<std::vector<int>> stage_ranks(const graph::Graph& g, const strategy::Strategy& st, int ranks,
                                          const std::string& source);

class PipelineExecutor {
public:
  // `micro` is the model at the micro-batch size (the same graph as `full` with one micro-batch)
  // and `st` the plan's strategy (devices are ranks of `world`). Collective over `world`.
  PipelineExecutor(const graph::Graph& full, const graph::Graph& micro, const strategy::Strategy& st, MPI_Comm world,
                   Backend& backend, Recorder& recorder, const Training& training,
                   const Executor::ConstantValues& constants);
  ~PipelineExecutor();
  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  // Every micro-batch's forward and backward in the schedule's order; the weight gradients are
  // then their sums over the micro-batches.
  void forward_backward();
  // Gradient sync inside each stage, then weights tied across stages. Collective over `world`.
  void synchronize_gradients();
  // The stage's optimizer step (Executor::step: the same optimizer and ZeRO code).
  void step();
  // Executor::set_loss_scale and unscale_gradients for the stage.
  void set_loss_scale(float scale) {
    for (auto& c : m_chunks) {
      c.executor->set_loss_scale(scale);
    }
  }
  void unscale_gradients(float factor, float* flag) {
    for (auto& c : m_chunks) {
      c.executor->unscale_gradients(factor, flag);
    }
  }
  // Executor::set_gradient_overlap for the stage: the sums start during each chunk's backward
  // pass of its last micro-batch.
  void set_gradient_overlap(double bucket_bytes) {
    for (auto& c : m_chunks) {
      c.executor->set_gradient_overlap(bucket_bytes);
    }
  }
  int overlapped_sums() const {
    int n = 0;
    for (const auto& c : m_chunks) {
      n += c.executor->overlapped_sums();
    }
    return n;
  }

  // What this rank holds, in coordinates of the full-batch model: outputs and input gradients of
  // every micro-batch placed at its slice (summed over micro-batches for unbatched tensors), and
  // the accumulated weight gradients.
  std::vector<Snapshot> snapshot();
  // The stage's weights after step().
  std::vector<Snapshot> weight_snapshot() const;

  // Executor::poison_gradients on every micro-batch's activations and the stage's weights.
  void poison_gradients();

  int stage() const { return m_stage; }
  int communicators() const {
    int n = 0;
    for (const auto& c : m_chunks) {
      n += c.executor->communicators();
    }
    return n;
  }
  // Bytes of every shard this rank holds: the stage's weights and gradients and every micro-batch's
  // activations.
  double held_bytes() const;
  const std::vector<std::pair<graph::OpId, std::string>>& stand_ins() const;

private:
  // A tensor read by an op of a later stage: (consumer op, input) <- (producer op, output).
  struct Edge {
    graph::OpId consumer = -1, producer = -1;
    std::size_t input = 0, output = 0;
    int from_stage = 0, to_stage = 0; // virtual stages (chunk x stages + stage)
    bool gradient = false;
    // strategy::sent_once: the same in every micro-batch, so it crosses with micro-batch 0 and the
    // later micro-batches copy what came then (kept).
    bool once = false;
    Exchange forward, backward; // world ranks
  };
  // A weight read by ops of several stages.
  struct Tie {
    std::vector<std::pair<graph::OpId, std::size_t>> readers;
    std::vector<std::vector<Exchange>> exchanges; // [to][from]
  };

  // One model chunk of this rank's stage: virtual stage `vstage`, its ops' Executor and one set of
  // activations per micro-batch.
  struct Chunk {
    int vstage = 0;
    std::unique_ptr<Executor> executor;
    std::vector<Executor::Activations> sets;
  };
  void run_forward(int micro_batch, int chunk);
  void run_backward(int micro_batch, int chunk);
  // The chunk holding op `id` on this rank, or nullptr.
  Executor* executor_of(graph::OpId id) const;
  // The local pieces of `ex` from the buffer (`which`, `slot` of op `op`) of this rank's chunk of
  // virtual stage `from_vstage` at `micro_batch` into `target`.
  void copy_local(const Exchange& ex, int from_vstage, int micro_batch, graph::OpId op, Executor::Buffer which,
                  std::size_t slot, Shard* target, bool accumulate);
  int tag(std::size_t edge, int micro_batch, bool backward) const;

  const graph::Graph& m_full;
  const graph::Graph& m_micro;
  const strategy::Strategy& m_strategy;
  MPI_Comm m_world;
  int m_rank = 0, m_size = 1;
  int m_stage = -1, m_stages = 1, m_micro_batches = 1;
  Recorder& m_recorder;
  MPI_Comm m_stage_comm = MPI_COMM_NULL;
  strategy::Strategy m_local;                                           // the stage's ops on ranks of m_stage_comm
  std::vector<Chunk> m_chunks;                                          // empty on a rank of no stage
  mutable std::vector<std::pair<graph::OpId, std::string>> m_stand_ins; // every chunk's (stand_ins())
  // Input gradients a chunk's backward pass left for an earlier chunk of this rank, by (edge,
  // micro-batch), until that chunk's backward pass adds them.
  std::map<std::pair<std::size_t, int>, Shard> m_local_gradients;
  std::vector<Edge> m_edges;
  std::vector<std::optional<Shard>> m_kept; // per edge sent once: its value as micro-batch 0 received it
  std::vector<Tie> m_ties;
  std::vector<PipelineStep> m_schedule;
  PendingSends m_pending;
};

} // namespace partita::runtime
