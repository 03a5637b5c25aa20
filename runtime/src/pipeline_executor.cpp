#include "pipeline_executor.h"

#include "partita/graph/error.h"
#include "partita/graph/op_semantics.h"
#include "partita/sharding/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <set>

namespace partita::runtime {
namespace {

std::size_t output_slot(const graph::Op& op, graph::TensorId t) {
  return static_cast<std::size_t>(std::find(op.outputs.begin(), op.outputs.end(), t) - op.outputs.begin());
}

} // namespace

std::vector<std::vector<int>> stage_ranks(const graph::Graph& g, const strategy::Strategy& st, int ranks,
                                          const std::string& source) {
  if (!st.pipeline) {
    throw Error(fmt::format("{}: the strategy has no pipeline", source));
  }
  const auto& pipe = *st.pipeline;
  try {
    strategy::check_schedule(pipe);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: field 'pipeline.schedule': {}", source, e.what()));
  }
  if (pipe.stages > ranks) {
    throw Error(fmt::format("{}: field 'pipeline.stages': {} stages cannot run on {} ranks (each stage needs ranks of "
                            "its own)",
                            source, pipe.stages, ranks));
  }
  if (pipe.stage_of_op.size() != g.ops().size()) {
    throw Error(fmt::format("{}: field 'pipeline.stage_of_op': {} entries for {} ops", source, pipe.stage_of_op.size(),
                            g.ops().size()));
  }
  std::vector<std::set<int>> members(static_cast<std::size_t>(pipe.stages));
  std::map<int, int> stage_of_rank;
  for (std::size_t id = 0; id < g.ops().size(); ++id) {
    const int v = pipe.stage_of_op[id]; // a virtual stage: chunk v / stages of stage v % stages
    if (v < 0 || v >= pipe.virtual_stages()) {
      throw Error(fmt::format("{}: field 'pipeline.stage_of_op': op '{}' is in stage {}, not one of the {}", source,
                              g.op(static_cast<graph::OpId>(id)).name, v, pipe.virtual_stages()));
    }
    const int s = v % pipe.stages;
    for (const int d : st.ops[id].devices) {
      if (d < 0 || d >= ranks) {
        throw Error(fmt::format("{}: op '{}': device {} is not one of the {} ranks", source,
                                g.op(static_cast<graph::OpId>(id)).name, d, ranks));
      }
      const auto [it, inserted] = stage_of_rank.emplace(d, s);
      if (!inserted && it->second != s) {
        throw Error(fmt::format("{}: field 'pipeline.stage_of_op': rank {} runs ops of stages {} and {} (op '{}'); "
                                "stages need disjoint ranks",
                                source, d, it->second, s, g.op(static_cast<graph::OpId>(id)).name));
      }
      members[static_cast<std::size_t>(s)].insert(d);
    }
  }
  for (std::size_t s = 0; s < members.size(); ++s) {
    if (members[s].empty()) {
      throw Error(fmt::format("{}: field 'pipeline.stage_of_op': stage {} has no ops", source, s));
    }
  }
  for (const auto id : g.topological_order()) {
    for (const auto t : g.op(id).inputs) {
      if (t == graph::no_tensor || g.tensor(t).producer < 0) {
        continue;
      }
      const int from = pipe.stage_of_op[static_cast<std::size_t>(g.tensor(t).producer)];
      const int to = pipe.stage_of_op[static_cast<std::size_t>(id)];
      if (from > to) {
        throw Error(fmt::format("{}: field 'pipeline.stage_of_op': op '{}' (stage {}) reads '{}' from stage {}: "
                                "stages must follow the data flow",
                                source, g.op(id).name, to, g.tensor(t).name, from));
      }
    }
  }
  std::vector<std::vector<int>> out;
  for (const auto& m : members) {
    out.emplace_back(m.begin(), m.end());
  }
  return out;
}

PipelineExecutor::PipelineExecutor(const graph::Graph& full, const graph::Graph& micro, const strategy::Strategy& st,
                                   MPI_Comm world, Backend& backend, Recorder& recorder, const Training& training,
                                   const Executor::ConstantValues& constants)
    : m_full(full), m_micro(micro), m_strategy(st), m_world(world), m_recorder(recorder), m_local(st) {
  check_mpi(MPI_Comm_rank(world, &m_rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(world, &m_size), "MPI_Comm_size");
  const auto stages = stage_ranks(micro, st, m_size, "pipeline");
  const auto& pipe = *st.pipeline;
  m_stages = pipe.stages;
  m_micro_batches = pipe.micro_batches;
  const auto stage_of = [&](graph::OpId id) { return pipe.stage_of_op[static_cast<std::size_t>(id)]; };
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (std::find(stages[s].begin(), stages[s].end(), m_rank) != stages[s].end()) {
      m_stage = static_cast<int>(s);
    }
  }
  // Stage communicators: ranks keep their order, so a stage's local rank is its index in stages[s].
  check_mpi(MPI_Comm_split(world, m_stage >= 0 ? m_stage : MPI_UNDEFINED, m_rank, &m_stage_comm), "MPI_Comm_split");

  if (m_stage >= 0) {
    const auto& mine = stages[static_cast<std::size_t>(m_stage)];
    for (std::size_t id = 0; id < micro.ops().size(); ++id) {
      if (stage_of(static_cast<graph::OpId>(id)) % m_stages != m_stage) {
        continue;
      }
      for (int& d : m_local.ops[id].devices) {
        d = static_cast<int>(std::find(mine.begin(), mine.end(), d) - mine.begin());
      }
    }
    // Each chunk's Executor, in chunk order on every rank of the stage (they make communicators).
    for (int c = 0; c < pipe.chunks; ++c) {
      Chunk chunk;
      chunk.vstage = c * m_stages + m_stage;
      Scope scope;
      scope.ops.assign(micro.ops().size(), 0);
      scope.full = &full;
      scope.micro_batches = m_micro_batches;
      for (std::size_t id = 0; id < micro.ops().size(); ++id) {
        scope.ops[id] = stage_of(static_cast<graph::OpId>(id)) == chunk.vstage ? 1 : 0;
      }
      chunk.executor =
          std::make_unique<Executor>(micro, m_local, m_stage_comm, backend, recorder, training, constants, scope);
      chunk.executor->set_accumulate_weight_gradients(true);
      for (int j = 0; j < m_micro_batches; ++j) {
        chunk.sets.push_back(chunk.executor->activations());
        chunk.executor->swap_activations(chunk.sets.back());
        chunk.executor->set_micro_batch(j);
        chunk.executor->generate_inputs();
        chunk.executor->swap_activations(chunk.sets.back());
      }
      m_chunks.push_back(std::move(chunk));
    }
    m_schedule = strategy::pipeline_program(pipe, m_stage);
  }

  // Tensors crossing stages, from the producer's output layout to the consumer's input layout.
  std::vector<graph::OpSemantics> sem;
  for (std::size_t id = 0; id < micro.ops().size(); ++id) {
    sem.push_back(graph::describe(micro, static_cast<graph::OpId>(id)));
  }
  for (const auto id : micro.topological_order()) {
    const auto& op = micro.op(id);
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const auto t = op.inputs[i];
      if (t == graph::no_tensor || micro.tensor(t).producer < 0 || stage_of(micro.tensor(t).producer) == stage_of(id)) {
        continue;
      }
      Edge e;
      e.consumer = id;
      e.input = i;
      e.producer = micro.tensor(t).producer;
      e.output = output_slot(micro.op(e.producer), t);
      e.from_stage = stage_of(e.producer);
      e.to_stage = stage_of(id);
      e.gradient = needs_gradient(micro, id, i);
      e.once = strategy::sent_once(micro, st, id, i);
      const auto& pa = st.ops[static_cast<std::size_t>(e.producer)];
      const auto& ca = st.ops[static_cast<std::size_t>(id)];
      const Placement from{
          sharding::output_layout(micro, sem[static_cast<std::size_t>(e.producer)], pa.config, e.output), pa.config,
          pa.devices};
      const Placement to{sharding::input_layout(micro, sem[static_cast<std::size_t>(id)], ca.config, i), ca.config,
                         ca.devices};
      e.forward = plan_exchange(from, to, m_rank, m_size);
      if (e.gradient) {
        e.backward = plan_exchange(to, from, m_rank, m_size);
      }
      m_edges.push_back(std::move(e));
    }
  }
  m_kept.resize(m_edges.size());
  if (!m_edges.empty()) {
    int* upper = nullptr;
    int found = 0;
    MPI_Comm_get_attr(world, MPI_TAG_UB, static_cast<void*>(&upper), &found);
    if (found != 0 && upper != nullptr && tag(m_edges.size() - 1, m_micro_batches - 1, true) > *upper) {
      throw Error(fmt::format("pipeline: {} boundary tensors x {} micro-batches need more MPI tags than the {} this "
                              "MPI offers",
                              m_edges.size(), m_micro_batches, *upper));
    }
  }

  // Weights read in several stages: every reader's gradient is added to every other's.
  for (auto& [tensor, readers] : tied_parameters(micro)) {
    std::set<int> in;
    for (const auto& r : readers) {
      in.insert(stage_of(r.first));
    }
    if (in.size() < 2) {
      continue; // the stage's executor ties it
    }
    Tie tie;
    tie.readers = readers;
    std::vector<Placement> placements;
    for (const auto& [id, i] : readers) {
      const auto& a = st.ops[static_cast<std::size_t>(id)];
      placements.push_back(
          {sharding::input_layout(micro, sem[static_cast<std::size_t>(id)], a.config, i), a.config, a.devices});
    }
    tie.exchanges.assign(readers.size(), std::vector<Exchange>(readers.size()));
    for (std::size_t to = 0; to < readers.size(); ++to) {
      for (std::size_t from = 0; from < readers.size(); ++from) {
        if (from != to) {
          tie.exchanges[to][from] = plan_exchange(placements[from], placements[to], m_rank, m_size);
        }
      }
    }
    m_ties.push_back(std::move(tie));
  }
}

PipelineExecutor::~PipelineExecutor() {
  m_chunks.clear();
  if (m_stage_comm != MPI_COMM_NULL) {
    MPI_Comm_free(&m_stage_comm);
  }
}

int PipelineExecutor::tag(std::size_t edge, int micro_batch, bool backward) const {
  return ((static_cast<int>(edge) * m_micro_batches + micro_batch) * 2) + (backward ? 1 : 0);
}

const std::vector<std::pair<graph::OpId, std::string>>& PipelineExecutor::stand_ins() const {
  static const std::vector<std::pair<graph::OpId, std::string>> none;
  if (m_chunks.empty()) {
    return none;
  }
  if (m_chunks.size() == 1) {
    return m_chunks.front().executor->stand_ins();
  }
  m_stand_ins.clear();
  for (const auto& c : m_chunks) {
    const auto& list = c.executor->stand_ins();
    m_stand_ins.insert(m_stand_ins.end(), list.begin(), list.end());
  }
  return m_stand_ins;
}

Executor* PipelineExecutor::executor_of(graph::OpId id) const {
  const int v = m_strategy.pipeline->stage_of_op[static_cast<std::size_t>(id)];
  for (const auto& c : m_chunks) {
    if (c.vstage == v) {
      return c.executor.get();
    }
  }
  return nullptr;
}

void PipelineExecutor::run_forward(int micro_batch, int chunk) {
  auto& c = m_chunks[static_cast<std::size_t>(chunk)];
  Executor& ex = *c.executor;
  auto& set = c.sets[static_cast<std::size_t>(micro_batch)];
  ex.swap_activations(set);
  for (std::size_t e = 0; e < m_edges.size(); ++e) {
    const auto& edge = m_edges[e];
    if (edge.to_stage == c.vstage && edge.once && micro_batch > 0) {
      if (edge.forward.receives.empty() && edge.forward.local.empty()) {
        continue; // this rank holds none of it
      }
      // Sent once: what micro-batch 0 received, copied.
      if (!m_kept[e]) {
        throw Error(fmt::format("pipeline: rank {}: micro-batch {} of '{}' needs '{}' as micro-batch 0 received it, "
                                "which it did not keep",
                                m_rank, micro_batch, m_micro.op(edge.consumer).name,
                                m_micro.tensor(m_micro.op(edge.consumer).inputs[edge.input]).name));
      }
      Shard* target = ex.buffer(edge.consumer, Executor::Buffer::input_value, edge.input);
      const Shard& kept = *m_kept[e];
      if (target->block.begin == kept.block.begin && target->block.end == kept.block.end &&
          target->data.size() == kept.data.size()) {
        copy_floats(kept.data, 0, target->data, 0, kept.data.size());
      } else {
        *target = Shard{kept.block, copy_of(kept.data)};
      }
      continue;
    }
    if (edge.to_stage == c.vstage && !edge.forward.receives.empty()) {
      const double t0 = MPI_Wtime();
      receive_pieces(edge.forward, ex.buffer(edge.consumer, Executor::Buffer::input_value, edge.input), false,
                     tag(e, micro_batch, false), m_world);
      m_recorder.add(m_rank, edge.consumer, Phase::pipeline_receive, t0, MPI_Wtime(), edge.forward.bytes_in);
    }
  }
  // From an earlier chunk of this same rank (interleaved: a residual that skips the chunks in
  // between), copied from that chunk's activations of this micro-batch.
  for (std::size_t e = 0; e < m_edges.size(); ++e) {
    const auto& edge = m_edges[e];
    if (edge.to_stage == c.vstage && !edge.forward.local.empty() && !(edge.once && micro_batch > 0)) {
      copy_local(edge.forward, edge.from_stage, micro_batch, edge.producer, Executor::Buffer::output_value, edge.output,
                 ex.buffer(edge.consumer, Executor::Buffer::input_value, edge.input), false);
    }
  }
  for (std::size_t e = 0; e < m_edges.size(); ++e) {
    const auto& edge = m_edges[e];
    if (edge.to_stage == c.vstage && edge.once && micro_batch == 0) {
      const Shard* got = ex.buffer(edge.consumer, Executor::Buffer::input_value, edge.input);
      if (got != nullptr) {
        m_kept[e] = Shard{got->block, copy_of(got->data)};
      }
    }
  }
  ex.set_micro_batch(micro_batch);
  ex.forward();
  for (std::size_t e = 0; e < m_edges.size(); ++e) {
    const auto& edge = m_edges[e];
    if (edge.from_stage == c.vstage && !edge.forward.sends.empty() && !(edge.once && micro_batch > 0)) {
      const double t0 = MPI_Wtime();
      post_sends(edge.forward, ex.buffer(edge.producer, Executor::Buffer::output_value, edge.output),
                 tag(e, micro_batch, false), m_world, m_pending);
      m_recorder.add(m_rank, edge.producer, Phase::pipeline_send, t0, MPI_Wtime());
    }
  }
  ex.swap_activations(set);
}

void PipelineExecutor::run_backward(int micro_batch, int chunk) {
  auto& c = m_chunks[static_cast<std::size_t>(chunk)];
  Executor& ex = *c.executor;
  auto& set = c.sets[static_cast<std::size_t>(micro_batch)];
  ex.swap_activations(set);
  // Outputs read by later stages: their gradient is the sum of what every reader sends back.
  for (const auto& edge : m_edges) {
    if (edge.from_stage == c.vstage) {
      if (Shard* g = ex.buffer(edge.producer, Executor::Buffer::output_gradient, edge.output)) {
        fill_floats(g->data, 0.F);
      }
    }
  }
  for (std::size_t e = 0; e < m_edges.size(); ++e) {
    const auto& edge = m_edges[e];
    if (edge.from_stage == c.vstage && edge.gradient && !edge.backward.receives.empty()) {
      const double t0 = MPI_Wtime();
      receive_pieces(edge.backward, ex.buffer(edge.producer, Executor::Buffer::output_gradient, edge.output), true,
                     tag(e, micro_batch, true), m_world);
      m_recorder.add(m_rank, edge.producer, Phase::pipeline_receive, t0, MPI_Wtime(), edge.backward.bytes_in);
    }
  }
  // Gradients from a later chunk of this rank, kept when that chunk's backward pass ran.
  for (std::size_t e = 0; e < m_edges.size(); ++e) {
    const auto& edge = m_edges[e];
    if (edge.from_stage == c.vstage && edge.gradient && !edge.backward.local.empty()) {
      const auto it = m_local_gradients.find({e, micro_batch});
      if (it == m_local_gradients.end()) {
        throw Error(fmt::format("pipeline: the gradient of '{}' for micro-batch {} is not there before its "
                                "producer's backward pass",
                                m_micro.op(edge.producer).name, micro_batch));
      }
      Exchange local;
      local.local = edge.backward.local;
      run_exchange(local, &it->second, ex.buffer(edge.producer, Executor::Buffer::output_gradient, edge.output), true,
                   m_world);
      m_local_gradients.erase(it);
    }
  }
  ex.set_micro_batch(micro_batch);
  int last = -1; // the chunk's last backward pass: its weight gradients are complete after it
  for (const auto& s : m_schedule) {
    if (!s.forward && s.chunk == chunk) {
      last = s.micro_batch;
    }
  }
  ex.set_final_backward(micro_batch == last);
  ex.backward();
  for (std::size_t e = 0; e < m_edges.size(); ++e) { // for an earlier chunk of this rank: kept
    const auto& edge = m_edges[e];
    if (edge.to_stage == c.vstage && edge.gradient && !edge.backward.local.empty()) {
      const Shard& g = *ex.buffer(edge.consumer, Executor::Buffer::input_gradient, edge.input);
      m_local_gradients[{e, micro_batch}] = Shard{g.block, copy_of(g.data)};
    }
  }
  for (std::size_t e = 0; e < m_edges.size(); ++e) {
    const auto& edge = m_edges[e];
    if (edge.to_stage == c.vstage && edge.gradient && !edge.backward.sends.empty()) {
      const double t0 = MPI_Wtime();
      post_sends(edge.backward, ex.buffer(edge.consumer, Executor::Buffer::input_gradient, edge.input),
                 tag(e, micro_batch, true), m_world, m_pending);
      m_recorder.add(m_rank, edge.consumer, Phase::pipeline_send, t0, MPI_Wtime());
    }
  }
  ex.swap_activations(set);
}

void PipelineExecutor::copy_local(const Exchange& ex, int from_vstage, int micro_batch, graph::OpId op,
                                  Executor::Buffer which, std::size_t slot, Shard* target, bool accumulate) {
  auto from = std::find_if(m_chunks.begin(), m_chunks.end(), [&](const Chunk& k) { return k.vstage == from_vstage; });
  if (from == m_chunks.end()) {
    throw Error(fmt::format("pipeline: rank {} copies from stage {}, which it does not run", m_rank, from_vstage));
  }
  // That chunk's activations of the micro-batch swapped in while they are read (a swap moves the
  // shards between the executor and the set), and out again.
  auto& set = from->sets[static_cast<std::size_t>(micro_batch)];
  from->executor->swap_activations(set);
  Exchange local;
  local.local = ex.local;
  try {
    run_exchange(local, from->executor->buffer(op, which, slot), target, accumulate, m_world);
  } catch (...) {
    from->executor->swap_activations(set);
    throw;
  }
  from->executor->swap_activations(set);
}

void PipelineExecutor::poison_gradients() {
  for (auto& c : m_chunks) {
    c.executor->poison_gradients();
    for (auto& set : c.sets) {
      c.executor->swap_activations(set);
      c.executor->poison_gradients();
      c.executor->swap_activations(set);
    }
  }
}

void PipelineExecutor::forward_backward() {
  if (m_chunks.empty()) {
    return;
  }
  for (auto& c : m_chunks) {
    c.executor->zero_weight_gradients();
  }
  for (const auto& s : m_schedule) {
    if (s.forward) {
      run_forward(s.micro_batch, s.chunk);
    } else {
      run_backward(s.micro_batch, s.chunk);
    }
  }
  m_pending.wait_all();
}

void PipelineExecutor::synchronize_gradients() {
  for (auto& c : m_chunks) {
    c.executor->synchronize_gradients();
  }
  for (auto& tie : m_ties) {
    const auto gradient = [&](std::size_t r) -> Shard* {
      const auto [op, i] = tie.readers[r];
      Executor* ex = executor_of(op);
      return ex != nullptr ? ex->buffer(op, Executor::Buffer::input_gradient, i) : nullptr;
    };
    std::vector<std::optional<Shard>> sums(tie.readers.size());
    for (std::size_t r = 0; r < tie.readers.size(); ++r) {
      if (const Shard* g = gradient(r)) {
        sums[r] = Shard{g->block, copy_of(g->data)};
      }
    }
    const double t0 = MPI_Wtime();
    double bytes = 0;
    for (std::size_t to = 0; to < tie.readers.size(); ++to) {
      for (std::size_t from = 0; from < tie.readers.size(); ++from) {
        if (from != to) {
          run_exchange(tie.exchanges[to][from], gradient(from), sums[to] ? &*sums[to] : nullptr, true, m_world);
          bytes += tie.exchanges[to][from].bytes_in;
        }
      }
    }
    for (std::size_t r = 0; r < tie.readers.size(); ++r) {
      if (Shard* g = gradient(r)) {
        *g = std::move(*sums[r]);
      }
    }
    m_recorder.add(m_rank, tie.readers.front().first, Phase::gradient_sync, t0, MPI_Wtime(), bytes);
  }
}

void PipelineExecutor::step() {
  for (auto& c : m_chunks) {
    c.executor->step();
  }
}

std::vector<Snapshot> PipelineExecutor::weight_snapshot() const {
  std::vector<Snapshot> out;
  for (const auto& c : m_chunks) {
    auto snaps = c.executor->weight_snapshot();
    std::move(snaps.begin(), snaps.end(), std::back_inserter(out));
  }
  return out;
}

std::vector<Snapshot> PipelineExecutor::snapshot() {
  std::vector<Snapshot> out;
  std::map<std::pair<graph::OpId, int>, Snapshot> summed; // input gradients of unbatched tensors
  for (auto& c : m_chunks) {
    for (int j = 0; j < m_micro_batches; ++j) {
      auto& set = c.sets[static_cast<std::size_t>(j)];
      c.executor->swap_activations(set);
      auto snaps = c.executor->snapshot();
      c.executor->swap_activations(set);
      for (auto& s : snaps) {
        if (s.kind == Held::weight_gradient) {
          if (j == 0) {
            out.push_back(std::move(s));
          }
          continue;
        }
        const auto& mop = m_micro.op(s.op);
        const auto& fop = m_full.op(s.op);
        const auto index = static_cast<std::size_t>(s.index);
        const auto mt = s.kind == Held::output ? mop.outputs[index] : mop.inputs[index];
        const auto ft = s.kind == Held::output ? fop.outputs[index] : fop.inputs[index];
        const auto slice =
            batch_slice(m_micro.tensor(mt).shape, m_full.tensor(ft).shape, m_micro_batches, m_micro.tensor(mt).name);
        if (slice.dim >= 0) {
          s.shard.block = to_full(s.shard.block, slice, j);
          out.push_back(std::move(s));
        } else if (s.kind == Held::output) {
          if (j == 0) {
            out.push_back(std::move(s));
          }
        } else {
          const auto key = std::make_pair(s.op, s.index);
          if (const auto it = summed.find(key); it != summed.end()) {
            std::transform(it->second.shard.data.begin(), it->second.shard.data.end(), s.shard.data.begin(),
                           it->second.shard.data.begin(), std::plus<>()); // snapshots are in host memory
          } else {
            summed.emplace(key, std::move(s));
          }
        }
      }
    }
  }
  for (auto& [key, s] : summed) {
    out.push_back(std::move(s));
  }
  return out;
}

double PipelineExecutor::held_bytes() const {
  double bytes = 0;
  for (const auto& c : m_chunks) {
    bytes += c.executor->held_bytes();
    for (const auto& set : c.sets) {
      for (const auto& shard : set) {
        if (shard) {
          bytes += static_cast<double>(shard->data.size() * sizeof(float));
        }
      }
    }
  }
  return bytes;
}

} // namespace partita::runtime
