#include "executor.h"

#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <utility>

namespace partita::runtime {
namespace {

constexpr float value_scale = 0.5F; // inputs, weights and the loss gradient: uniform in [-0.5, 0.5)

std::size_t output_index(const graph::Op& op, graph::TensorId t) {
  const auto it = std::find(op.outputs.begin(), op.outputs.end(), t);
  return static_cast<std::size_t>(it - op.outputs.begin());
}

// A Constant op's output block: a float Constant's value (read from the model), or the integer
// contents the graph carries.
void fill_constant(Shard& out, const graph::Tensor& t, const Executor::ConstantValues& constants,
                   const std::string& op_name) {
  Shard whole_tensor = make_host_shard(whole(t.shape));
  if (const auto it = constants.find(t.name); it != constants.end()) {
    if (it->second.size() != whole_tensor.data.size()) {
      throw Error(fmt::format("Constant '{}': {} values for a tensor of {} elements", op_name, it->second.size(),
                              whole_tensor.data.size()));
    }
    whole_tensor.data.assign(it->second.begin(), it->second.end());
  } else if (t.int_values && t.int_values->size() == whole_tensor.data.size()) {
    std::transform(t.int_values->begin(), t.int_values->end(), whole_tensor.data.begin(),
                   [](std::int64_t v) { return static_cast<float>(v); });
  } else {
    throw Error(fmt::format("Constant '{}': the value of '{}' is not known to partita-run", op_name, t.name));
  }
  copy_region(whole_tensor, out, out.block, false);
}

// Integer inputs (token ids, indices) without known contents are generated in [0, bound) where
// bound is the size of the axis a Gather reads with them (2 when none does).
std::int64_t integer_bound(const graph::Graph& g, graph::TensorId tid) {
  std::int64_t bound = 2;
  for (const auto c : g.tensor(tid).consumers) {
    const auto& op = g.op(c);
    if (op.type == "Gather" && op.inputs.size() > 1 && op.inputs[1] == tid) {
      const auto& data = g.tensor(op.inputs[0]).shape;
      auto axis = op.attr_int("axis", 0);
      axis = axis < 0 ? axis + static_cast<std::int64_t>(data.size()) : axis;
      bound = data[static_cast<std::size_t>(axis)];
    }
  }
  return bound;
}

std::int64_t elements(const sharding::Block& b) {
  std::int64_t n = 1;
  for (std::size_t d = 0; d < b.begin.size(); ++d) {
    n *= b.end[d] - b.begin[d];
  }
  return n;
}

bool same_block(const sharding::Block& a, const sharding::Block& b) {
  return a.begin == b.begin && a.end == b.end;
}

} // namespace

bool needs_gradient(const graph::Graph& g, graph::OpId id, std::size_t input) {
  const graph::Op& op = g.op(id);
  if (input >= op.inputs.size() || op.inputs[input] == graph::no_tensor) {
    return false;
  }
  const graph::Tensor& t = g.tensor(op.inputs[input]);
  const auto slot = graph::input_slot(op, input);
  if (slot == graph::InputSlot::index || slot == graph::InputSlot::state || t.dtype != graph::DType::f32) {
    return false;
  }
  // Data and values computed from data and constants alone (a causal mask) get none.
  return graph::gets_gradient(t) && (t.role == graph::TensorRole::parameter || t.producer >= 0);
}

std::map<graph::TensorId, std::vector<std::pair<graph::OpId, std::size_t>>> tied_parameters(const graph::Graph& g) {
  // The readers core's cost model prices (strategy::tied_weights), less any this runtime computes
  // no gradient for.
  std::map<graph::TensorId, std::vector<std::pair<graph::OpId, std::size_t>>> readers;
  for (auto& tie : strategy::tied_weights(g)) {
    std::erase_if(tie.readers, [&](const auto& r) { return !needs_gradient(g, r.first, r.second); });
    if (tie.readers.size() >= 2) {
      readers.emplace(tie.tensor, std::move(tie.readers));
    }
  }
  return readers;
}

bool Executor::in_scope(graph::OpId id) const {
  return m_scope.ops.empty() || m_scope.ops[static_cast<std::size_t>(id)] != 0;
}

void Executor::generate(Shard& s, graph::TensorId tid) const {
  const graph::Tensor& t = m_graph.tensor(tid);
  const std::string seed = fmt::format("{}:{}", graph::role_name(t.role), t.name);
  const BatchSlice whole_slice{-1, 0, t.shape};
  const BatchSlice& slice = m_slices.empty() ? whole_slice : m_slices[static_cast<std::size_t>(tid)];
  if (t.dtype == graph::DType::f32) {
    fill_slice(s, slice, m_micro_batch, seed, value_scale);
    return;
  }
  if (t.int_values && static_cast<std::int64_t>(t.int_values->size()) == t.elements()) {
    Shard whole_tensor = make_host_shard(whole(t.shape));
    std::transform(t.int_values->begin(), t.int_values->end(), whole_tensor.data.begin(),
                   [](std::int64_t v) { return static_cast<float>(v); });
    copy_region(whole_tensor, s, s.block, false);
    return;
  }
  const std::int64_t bound = integer_bound(m_graph, tid);
  fill_slice(s, slice, m_micro_batch, seed, 0.5F);
  HostView values(s.data, HostView::read_write);
  for (auto& v : values) { // [-0.5, 0.5) -> {0, ..., bound - 1}
    v = std::min(static_cast<float>(bound - 1), std::floor((v + 0.5F) * static_cast<float>(bound)));
  }
  values.commit();
}

Group Executor::my_group(const Partition& groups) const {
  for (const auto& g : groups) {
    if (std::find(g.begin(), g.end(), m_rank) != g.end()) {
      return g;
    }
  }
  return {};
}

Executor::Executor(const graph::Graph& g, const strategy::Strategy& st, MPI_Comm comm, Backend& backend,
                   Recorder& recorder, const Training& training, const ConstantValues& constants, Scope scope)
    : m_graph(g), m_strategy(st), m_comm(comm), m_backend(backend), m_recorder(recorder), m_training(training),
      m_comms(comm), m_scope(std::move(scope)) {
  if (m_training.zero_stage < 0 || m_training.zero_stage > 3) {
    throw Error(fmt::format("ZeRO stage {}: expected 0, 1, 2 or 3", m_training.zero_stage));
  }
  check_mpi(MPI_Comm_rank(comm, &m_rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &m_size), "MPI_Comm_size");
  if (st.ops.size() != g.ops().size()) {
    throw Error(fmt::format("the strategy has {} ops, the model {}", st.ops.size(), g.ops().size()));
  }
  if (!m_scope.ops.empty() && m_scope.ops.size() != g.ops().size()) {
    throw Error(fmt::format("the scope names {} ops, the model has {}", m_scope.ops.size(), g.ops().size()));
  }
  if (m_scope.full != nullptr) {
    // Tensors of the micro-batch graph and the full one, matched through the ops that read or write them.
    const graph::Graph& full = *m_scope.full;
    if (full.ops().size() != g.ops().size()) {
      throw Error(
          fmt::format("the micro-batch model has {} ops, the full-batch one {}", g.ops().size(), full.ops().size()));
    }
    m_slices.resize(g.tensors().size());
    const auto match = [&](graph::TensorId t, graph::TensorId f) {
      if (t != graph::no_tensor && f != graph::no_tensor) {
        m_slices[static_cast<std::size_t>(t)] =
            batch_slice(g.tensor(t).shape, full.tensor(f).shape, m_scope.micro_batches, g.tensor(t).name);
      }
    };
    for (std::size_t id = 0; id < g.ops().size(); ++id) {
      const auto& a = g.op(static_cast<graph::OpId>(id));
      const auto& b = full.op(static_cast<graph::OpId>(id));
      if (a.name != b.name || a.inputs.size() != b.inputs.size() || a.outputs.size() != b.outputs.size()) {
        throw Error(fmt::format("op {} ('{}'): the micro-batch model and the full-batch one differ", id, a.name));
      }
      for (std::size_t i = 0; i < a.inputs.size(); ++i) {
        match(a.inputs[i], b.inputs[i]);
      }
      for (std::size_t j = 0; j < a.outputs.size(); ++j) {
        match(a.outputs[j], b.outputs[j]);
      }
    }
  }
  m_order = g.topological_order();
  // Weights read by several ops, in scope or not (a pipeline ties them across stages).
  const auto all_tied = tied_parameters(g);
  std::vector<graph::OpSemantics> sem;
  sem.reserve(g.ops().size());
  for (std::size_t id = 0; id < g.ops().size(); ++id) {
    sem.push_back(graph::describe(g, static_cast<graph::OpId>(id)));
  }
  m_ops.resize(g.ops().size());
  for (const auto id : m_order) {
    const graph::Op& op = g.op(id);
    const auto& a = st.ops[static_cast<std::size_t>(id)];
    const auto& s = sem[static_cast<std::size_t>(id)];
    OpState& state = m_ops[static_cast<std::size_t>(id)];
    if (!in_scope(id)) {
      continue; // another stage's op: not active, no exchanges, no groups
    }
    const int k = a.config.devices();
    const auto me = std::find(a.devices.begin(), a.devices.end(), m_rank);
    state.active = me != a.devices.end();
    const int position = state.active ? static_cast<int>(me - a.devices.begin()) % k : 0;
    const auto reason = missing_kernel(g, id);
    state.has_kernel = reason.empty();
    if (!state.has_kernel) {
      m_stand_ins.emplace_back(id, reason);
    }

    if (const auto axes = cost::statistics_axes(s, a.config); !axes.empty()) {
      const auto groups = cost::device_groups(a.config, a.devices, axes, false);
      m_comms.add(groups);
      state.statistics_group = my_group(groups);
    }

    state.outputs.resize(op.outputs.size());
    for (std::size_t j = 0; j < op.outputs.size(); ++j) {
      if (op.outputs[j] == graph::no_tensor) {
        continue;
      }
      const auto layout = sharding::output_layout(g, s, a.config, j);
      if (!layout.partial_axes.empty()) {
        const auto groups = cost::device_groups(a.config, a.devices, layout.partial_axes, false);
        m_comms.add(groups);
        state.outputs[j].partial_group = my_group(groups);
        const auto& readers = g.tensor(op.outputs[j]).consumers;
        if (state.outputs[j].partial_group.size() > 1 && readers.size() == 1 && in_scope(readers[0]) &&
            strategy::output_reduce_scatters(g, sem, st.ops, id, j, m_training.sequence_parallel)) {
          const auto& ra = st.ops[static_cast<std::size_t>(readers[0])];
          const auto& reader_inputs = g.op(readers[0]).inputs;
          const auto input = static_cast<std::size_t>(
              std::find(reader_inputs.begin(), reader_inputs.end(), op.outputs[j]) - reader_inputs.begin());
          const auto read = sharding::input_layout(g, sem[static_cast<std::size_t>(readers[0])], ra.config, input);
          for (const int d : state.outputs[j].partial_group) {
            const auto at = std::find(ra.devices.begin(), ra.devices.end(), d) - ra.devices.begin();
            state.outputs[j].scatter.push_back(
                sharding::block_of(read, ra.config, static_cast<int>(at) % ra.config.devices()));
          }
        }
      }
      for (const auto c : g.tensor(op.outputs[j]).consumers) {
        state.outputs[j].external = state.outputs[j].external || !in_scope(c);
      }
      if (state.active) {
        const auto block = sharding::block_of(layout, a.config, position);
        state.outputs[j].value = make_shard(block);
        state.outputs[j].gradient = make_shard(block);
        if (op.type == "Constant") {
          fill_constant(*state.outputs[j].value, g.tensor(op.outputs[j]), constants, op.name);
        }
      }
    }

    state.inputs.resize(op.inputs.size());
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const graph::TensorId tid = op.inputs[i];
      if (tid == graph::no_tensor) {
        continue;
      }
      const graph::Tensor& t = g.tensor(tid);
      Input& in = state.inputs[i];
      const auto layout = sharding::input_layout(g, s, a.config, i);
      in.needs_gradient = needs_gradient(g, id, i);
      in.parameter = t.role == graph::TensorRole::parameter;
      in.copies = a.copies();
      if (in.needs_gradient) {
        // Copies of the grid compute the same gradient: only a ZeRO-sharded weight, whose state
        // is sharded over its copies too, reduces over them (as the cost model prices it).
        const bool sharded_state = in.parameter && m_training.zero_stage >= 1;
        const auto groups = cost::device_groups(a.config, a.devices, layout.replica_axes, sharded_state);
        m_comms.add(groups);
        in.reduce_group = my_group(groups);
        if (!in.parameter && in.reduce_group.size() > 1 && t.producer >= 0 && in_scope(t.producer) &&
            strategy::input_gradient_reduce_scatters(g, sem, st.ops, id, i, m_training.sequence_parallel)) {
          const auto& pa = st.ops[static_cast<std::size_t>(t.producer)];
          const auto held = sharding::output_layout(g, sem[static_cast<std::size_t>(t.producer)], pa.config,
                                                    output_index(g.op(t.producer), tid));
          for (const int d : in.reduce_group) {
            const auto at = std::find(pa.devices.begin(), pa.devices.end(), d) - pa.devices.begin();
            in.gradient_scatter.push_back(
                sharding::block_of(held, pa.config, static_cast<int>(at) % pa.config.devices()));
          }
        }
      }
      if (t.producer >= 0 && in_scope(t.producer)) {
        in.producer = t.producer;
        const auto& pa = st.ops[static_cast<std::size_t>(t.producer)];
        in.producer_output = output_index(g.op(t.producer), tid);
        const Placement from{
            sharding::output_layout(g, sem[static_cast<std::size_t>(t.producer)], pa.config, in.producer_output),
            pa.config, pa.devices};
        const Placement to{layout, a.config, a.devices};
        in.forward_exchange = plan_exchange(from, to, m_rank, m_size);
        if (in.needs_gradient) {
          in.backward_exchange = plan_exchange(to, from, m_rank, m_size);
        }
      }
      if (!state.active) {
        continue;
      }
      in.value = make_shard(sharding::block_of(layout, a.config, position));
      if (i == 0 && !op.outputs.empty() && op.outputs[0] != graph::no_tensor) {
        in.halo = plan_halo(g, id, layout, sharding::output_layout(g, s, a.config, 0), a.config, a.devices, m_rank);
      }
      if (t.producer < 0) {
        // Weights, data inputs and buffers: generated, identical on every rank for every block.
        generate(*in.value, tid);
      }
      if (in.needs_gradient) {
        in.gradient = make_shard(in.value->block);
      }
      if (in.parameter && in.gradient) {
        const auto n = in.value->elements();
        const auto parts = static_cast<int>(in.reduce_group.size());
        if (m_training.zero_stage >= 1 && parts > 1 && all_tied.count(tid) == 0) {
          Input::Zero z;
          z.counts = slice_counts(n, parts);
          z.part = static_cast<int>(std::find(in.reduce_group.begin(), in.reduce_group.end(), m_rank) -
                                    in.reduce_group.begin());
          for (int r = 0; r < z.part; ++r) {
            z.offset += z.counts[static_cast<std::size_t>(r)];
          }
          if (m_training.zero_stage >= 3) {
            // Only the slice stays; the whole shard is gathered for each pass that reads it.
            const auto count = static_cast<std::size_t>(z.counts[static_cast<std::size_t>(z.part)]);
            z.weights = uninitialized_floats(count);
            copy_floats(in.value->data, static_cast<std::size_t>(z.offset), z.weights, 0, count);
            Floats().swap(in.value->data);
          }
          in.zero = std::move(z);
        }
        // ZeRO keeps the state of the slice only.
        in.optimizer = make_optimizer_state(m_training.optimizer,
                                            in.zero ? in.zero->counts[static_cast<std::size_t>(in.zero->part)] : n);
      }
    }
  }

  // Weights read by several ops: exchanges between every pair of readers' layouts. A weight
  // some of whose readers are out of scope is the caller's (a pipeline ties it across stages).
  auto readers = tied_parameters(g);
  std::erase_if(readers, [&](const auto& entry) {
    return std::any_of(entry.second.begin(), entry.second.end(), [&](const auto& r) { return !in_scope(r.first); });
  });
  // A reader holding the first reader's blocks on the same devices shares its gradient and step
  // (as the cost model counts the weight once there): out of the exchanges.
  const auto shared = strategy::shared_parameters(g, sem, st.ops);
  for (auto& [tensor, list] : readers) {
    const auto [first, first_input] = list.front();
    std::erase_if(list, [&, first = first, first_input = first_input](const std::pair<graph::OpId, std::size_t>& r) {
      const auto& mine = shared[static_cast<std::size_t>(r.first)];
      if (r.first == first || std::find(mine.begin(), mine.end(), r.second) == mine.end()) {
        return false;
      }
      auto& owner_state = m_ops[static_cast<std::size_t>(first)];
      auto& partner_state = m_ops[static_cast<std::size_t>(r.first)];
      if (owner_state.active && partner_state.active) {
        auto& partner = partner_state.inputs[r.second];
        owner_state.inputs[first_input].partners.push_back(r);
        partner.owner = std::make_pair(first, first_input);
        partner.optimizer = {};
      }
      return true;
    });
  }
  std::erase_if(readers, [](const auto& entry) { return entry.second.size() < 2; });
  for (auto& [tensor, list] : readers) {
    Tie tie;
    tie.readers = list;
    std::vector<Placement> placements;
    for (const auto& [id, i] : list) {
      const auto& a = st.ops[static_cast<std::size_t>(id)];
      placements.push_back(
          {sharding::input_layout(g, sem[static_cast<std::size_t>(id)], a.config, i), a.config, a.devices});
    }
    tie.exchanges.resize(list.size(), std::vector<Exchange>(list.size()));
    for (std::size_t to = 0; to < list.size(); ++to) {
      for (std::size_t from = 0; from < list.size(); ++from) {
        if (from != to) {
          tie.exchanges[to][from] = plan_exchange(placements[from], placements[to], m_rank, m_size);
        }
      }
    }
    m_ties.push_back(std::move(tie));
  }
  // An input whose block on this rank is exactly its producer's output block, with nothing moving
  // on any rank, reads that output in place (as frameworks pass a tensor to its next op): no copy
  // forward. Its gradient goes back through the exchange, added into the producer's, unless it is
  // the tensor's only reader (below).
  const auto in_place = [&](const Input& in) {
    if (!in.value || in.halo || in.parameter || in.producer < 0 || in.forward_exchange.remote ||
        in.forward_exchange.local.size() != 1) {
      return false;
    }
    const auto& src = m_ops[static_cast<std::size_t>(in.producer)].outputs[in.producer_output].value;
    return src && same_block(src->block, in.value->block) &&
           same_block(in.forward_exchange.local.front(), in.value->block);
  };
  // Its only reader, on the same devices, with nothing to reduce, writes the gradient straight
  // into the producer's output gradient (no buffer, no add).
  const auto only_reader = [&](const Input& in) {
    const auto tensor = g.op(in.producer).outputs[in.producer_output];
    const auto& readers = g.tensor(tensor).consumers;
    const auto& out = m_ops[static_cast<std::size_t>(in.producer)].outputs[in.producer_output];
    return readers.size() == 1 &&
           std::count(g.op(readers[0]).inputs.begin(), g.op(readers[0]).inputs.end(), tensor) == 1 &&
           !g.is_graph_output(tensor) && !out.external && in.reduce_group.size() <= 1;
  };
  const auto gradient_in_place = [&](const Input& in) {
    const auto& out = m_ops[static_cast<std::size_t>(in.producer)].outputs[in.producer_output];
    return in.gradient && out.gradient && same_block(out.gradient->block, in.gradient->block);
  };
  // A view (is_buffer_view) that is its input's only reader borrows the producer's output buffer
  // for its own (a swap in forward, given back in backward, before the producer's backward reads
  // it), and hands its output gradient to the producer the same way: nothing is copied either way.
  // Another view hands its own input buffer over (the forward exchange copies into it).
  std::vector<bool> hands_over_at(m_ops.size());
  for (std::size_t id = 0; id < m_ops.size(); ++id) {
    hands_over_at[id] = hands_buffer_over(static_cast<graph::OpId>(id), m_ops[id]);
  }
  // A producer that hands its input buffer over swaps its output gradient away in its backward.
  const auto swapped_away = [&](const Input& in) {
    const auto p = static_cast<std::size_t>(in.producer);
    return hands_over_at[p] && !m_ops[p].borrows;
  };
  for (const auto id : m_order) { // producers first
    auto& state = m_ops[static_cast<std::size_t>(id)];
    if (hands_over_at[static_cast<std::size_t>(id)]) {
      const Input& in = state.inputs[0];
      const bool gradients = in.gradient.has_value();
      state.borrows = in_place(in) && only_reader(in) && state.outputs[0].gradient.has_value() == gradients &&
                      (!gradients || (gradient_in_place(in) && !swapped_away(in)));
    }
  }
  for (std::size_t id = 0; id < m_ops.size(); ++id) {
    auto& state = m_ops[id];
    for (std::size_t i = 0; i < state.inputs.size(); ++i) {
      auto& in = state.inputs[i];
      if ((hands_over_at[id] && i == 0 && !state.borrows) || !in_place(in)) {
        continue;
      }
      in.alias = true;
      in.value.reset();
      auto& out = m_ops[static_cast<std::size_t>(in.producer)].outputs[in.producer_output];
      if (only_reader(in) && gradient_in_place(in) && !swapped_away(in)) {
        in.gradient_alias = true;
        in.gradient.reset();
        out.gradient_overwritten = true; // the reader's kernel (or a borrowing view's swap) writes all of it
      }
    }
  }
}

void Executor::sum_tied_gradients() {
  for (auto& tie : m_ties) {
    const auto gradient = [&](std::size_t r) -> std::optional<Shard>& {
      const auto [op, i] = tie.readers[r];
      return m_ops[static_cast<std::size_t>(op)].inputs[i].gradient;
    };
    // In place: every other reader's gradient is added into the first reader's (run_exchange
    // accumulates), then the sum is copied back over the others'. No buffer the size of the weight
    // is allocated or copied first (copies of each reader's gradient, taken to sum into, left a
    // gap of 140 to 200 ms an iteration before GPT-2's tied 154 MB embedding, on the CPU and an H100).
    // Every rank runs both phases in order, so what the second sends is the whole sum.
    const double t0 = clock_start();
    double bytes = 0;
    const auto move = [&](std::size_t to, std::size_t from, bool accumulate) {
      const auto& ex = tie.exchanges[to][from];
      auto& src = gradient(from);
      auto& dst = gradient(to);
      run_exchange(ex, src ? &*src : nullptr, dst ? &*dst : nullptr, accumulate, m_comm, &m_backend);
      bytes += ex.bytes_in;
    };
    for (std::size_t from = 1; from < tie.readers.size(); ++from) {
      move(0, from, true);
    }
    for (std::size_t to = 1; to < tie.readers.size(); ++to) {
      move(to, 0, false);
    }
    m_backend.synchronize();
    clock_add(tie.readers.front().first, Phase::gradient_sync, t0, bytes);
  }
}

OpBuffers Executor::buffers(OpState& state) {
  OpBuffers b;
  for (const auto& in : state.inputs) {
    b.inputs.push_back(in.halo    ? &in.halo->value
                       : in.alias ? &*m_ops[static_cast<std::size_t>(in.producer)].outputs[in.producer_output].value
                       : in.value ? &*in.value
                                  : nullptr);
  }
  for (auto& out : state.outputs) {
    b.outputs.push_back(out.value ? &*out.value : nullptr);
  }
  b.saved = &state.saved;
  if (state.statistics_group.size() > 1) {
    MPI_Comm comm = m_comms.get(state.statistics_group);
    b.sum_statistics = [this, comm](float* values, std::int64_t count) {
      m_backend.all_reduce_sum(comm, values, count);
      m_backend.synchronize();
    };
  }
  return b;
}

void Executor::reduce(const Group& group, Shard& shard) {
  m_backend.all_reduce_sum(m_comms.get(group), shard.data.data(), shard.elements());
  m_backend.synchronize();
}

void Executor::reduce_scatter(const Group& group, Shard& shard, const std::vector<sharding::Block>& regions) {
  const auto me = static_cast<std::size_t>(std::find(group.begin(), group.end(), m_rank) - group.begin());
  std::vector<std::int64_t> counts;
  for (const auto& r : regions) {
    counts.push_back(r.elements());
  }
  // Regions that lie one after another in the shard's memory (a split of its leading dims) are
  // summed in place: this rank's sum lands in its own region, nothing packed (the cost model
  // makes the same test, sharding::tiles_in_order, to price the packing below or not).
  if (sharding::tiles_in_order(shard.block, regions)) {
    std::int64_t at = 0;
    for (std::size_t k = 0; k < me; ++k) {
      at += counts[k];
    }
    m_backend.reduce_scatter_sum(m_comms.get(group), shard.data.data(), counts, shard.data.data() + at);
    m_backend.synchronize();
    return;
  }
  // Otherwise packed member by member (the group's order), summed, and this rank's region written
  // back, in buffers kept from one call to the next: fresh ones are mapped and faulted in page by
  // page each time (BERT's 4 MB input gradients under mp took 4.0 ms to sum here, where the
  // calibration's all-reduce of 4 MB takes 0.72 ms and its MPI_Reduce_scatter 1.37 ms).
  if (m_scatter_packed.size() < static_cast<std::size_t>(shard.elements())) {
    m_scatter_packed = uninitialized_floats(static_cast<std::size_t>(shard.elements()));
  }
  if (m_scatter_mine.size() < static_cast<std::size_t>(counts.at(me))) {
    m_scatter_mine = uninitialized_floats(static_cast<std::size_t>(counts.at(me)));
  }
  Floats& packed = m_scatter_packed;
  Floats& mine = m_scatter_mine;
  std::int64_t at = 0;
  for (std::size_t k = 0; k < regions.size(); ++k) {
    std::int64_t from = 0, to = 0;
    const StridedCopy c = region_copy(shard.block, regions[k], regions[k], from, to);
    m_backend.copy(c, shard.data.data() + from, packed.data() + at + to, false);
    at += counts[k];
  }
  m_backend.reduce_scatter_sum(m_comms.get(group), packed.data(), counts, mine.data());
  std::int64_t from = 0, to = 0;
  const StridedCopy back = region_copy(regions[me], shard.block, regions[me], from, to);
  m_backend.copy(back, mine.data() + from, shard.data.data() + to, false);
  m_backend.synchronize();
}

bool Executor::hands_buffer_over(graph::OpId id, const OpState& state) const {
  if (state.inputs.empty() || state.outputs.size() != 1) {
    return false;
  }
  const Input& in = state.inputs[0];
  const Output& out = state.outputs[0];
  return in.value && !in.halo && !in.parameter && out.value && !out.external && out.partial_group.size() <= 1 &&
         is_buffer_view(m_graph, id, *in.value, *out.value);
}

// Per-op times. The CPU backend's calls return done, so the host's clock around a step is its
// time. An asynchronous backend (CUDA) only queues its kernels: waiting for the device after every
// op, only to read the clock, cost each op a launch and a round trip that a training step does not
// pay (about 10 us, the time of a small kernel), so there a step is timed by marks in the
// backend's queue, resolved when the pass ends (flush_times, which waits for the device).
double Executor::clock_start() {
  return m_backend.kernels_on_host() ? MPI_Wtime() : static_cast<double>(m_backend.mark());
}

void Executor::clock_add(graph::OpId op, Phase phase, double start, double bytes, bool stand_in) {
  if (m_backend.kernels_on_host()) {
    m_recorder.add(m_rank, op, phase, start, MPI_Wtime(), bytes, stand_in);
    return;
  }
  m_pending_times.push_back({op, phase, static_cast<std::size_t>(start), m_backend.mark(), bytes, stand_in});
}

void Executor::flush_times() {
  if (m_backend.kernels_on_host()) {
    return;
  }
  const std::vector<double> at = m_backend.mark_times();
  for (const auto& p : m_pending_times) {
    m_recorder.add(m_rank, p.op, p.phase, at.at(p.start), at.at(p.end), p.bytes, p.stand_in);
  }
  m_pending_times.clear();
}

void Executor::forward() {
  const MatrixPrecisionScope precision(m_backend, m_training.matrix);
  for (const auto id : m_order) {
    OpState& state = m_ops[static_cast<std::size_t>(id)];
    for (auto& in : state.inputs) {
      if (in.producer < 0 || in.alias) {
        continue;
      }
      const auto& src = m_ops[static_cast<std::size_t>(in.producer)].outputs[in.producer_output].value;
      const double t0 = clock_start();
      run_exchange(in.forward_exchange, src ? &*src : nullptr, in.value ? &*in.value : nullptr, false, m_comm,
                   &m_backend);
      if (in.value) {
        clock_add(id, Phase::forward_redistribution, t0, in.forward_exchange.bytes_in);
      }
    }
    if (!state.active) {
      continue;
    }
    for (auto& in : state.inputs) {
      if (in.halo) {
        m_backend.synchronize(); // the host sends what the kernels wrote
        const double h0 = clock_start();
        exchange_halo(*in.halo, *in.value, m_comm);
        clock_add(id, Phase::forward_redistribution, h0, in.halo->bytes_in);
      }
    }
    gather_parameters(id, state);
    const OpBuffers op_buffers = buffers(state);
    const double t0 = clock_start();
    try {
      if (state.borrows) {
        std::swap(lent_value(state).data, state.outputs[0].value->data);
      } else if (hands_buffer_over(id, state)) {
        std::swap(state.inputs[0].value->data, state.outputs[0].value->data);
      } else {
        run_forward(m_backend, m_graph, id, op_buffers);
      }
    } catch (const std::exception& e) {
      throw Error(fmt::format("op '{}' ({}) forward: {}", m_graph.op(id).name, m_graph.op(id).type, e.what()));
    }
    clock_add(id, Phase::forward, t0, 0, !state.has_kernel);
    release_parameters(state);
    for (auto& out : state.outputs) {
      if (out.partial_group.size() > 1) {
        const double r0 = clock_start();
        if (out.scatter.empty()) {
          reduce(out.partial_group, *out.value);
        } else {
          reduce_scatter(out.partial_group, *out.value, out.scatter);
        }
        clock_add(id, Phase::forward_reduce, r0, static_cast<double>(out.value->elements()) * 4);
      }
    }
  }
  flush_times();
}

void Executor::backward() {
  const MatrixPrecisionScope precision(m_backend, m_training.matrix);
  restore_weight_gradients();
  if (m_loss_scale != m_seed_scale) { // powers of two: the cached loss gradients scale exactly
    for (auto& [key, seed] : m_loss_gradients) {
      m_backend.scale(seed.elements(), m_loss_scale / m_seed_scale, seed.data.data(), seed.data.data());
    }
    m_seed_scale = m_loss_scale;
  }
  // Output gradients: the loss gradient on graph outputs, zero where consumers add theirs. A
  // gradient that its only reader's kernel writes in place is left as it is (zeroing every
  // activation's gradient took 5 ms of a 90 ms GPT-2 iteration).
  // Each op's share (its outputs' gradients zeroed or seeded) is recorded with its backward pass,
  // where the cost model prices it.
  for (std::size_t id = 0; id < m_ops.size(); ++id) {
    const auto& op = m_graph.op(static_cast<graph::OpId>(id));
    const double t0 = clock_start();
    bool reset = false;
    for (std::size_t j = 0; j < m_ops[id].outputs.size(); ++j) {
      auto& out = m_ops[id].outputs[j];
      auto& grad = out.gradient;
      if (!grad) {
        continue;
      }
      const bool graph_output = m_graph.is_graph_output(op.outputs[j]);
      if (!out.external && !graph_output && !out.gradient_overwritten) {
        m_backend.fill(grad->elements(), 0.F, grad->data.data());
        reset = true;
      }
      const auto& t = m_graph.tensor(op.outputs[j]);
      if (graph_output) {
        // The loss is the sum of every output element times a fixed random weight: its gradient
        // is that weight, and over micro-batches the gradients add up to the full batch's.
        // The same every iteration: generated once per output and micro-batch, then copied (a hash
        // per element of a language model's logits took 7% of a GPT-2 iteration).
        auto [cached, fresh] = m_loss_gradients.try_emplace({op.outputs[j], m_micro_batch});
        if (fresh) {
          const BatchSlice whole_slice{-1, 0, t.shape};
          const BatchSlice& slice = m_slices.empty() ? whole_slice : m_slices[static_cast<std::size_t>(op.outputs[j])];
          cached->second = make_shard(grad->block);
          fill_slice(cached->second, slice, m_micro_batch, "loss-gradient:" + t.name, value_scale);
          if (m_seed_scale != 1) {
            m_backend.scale(cached->second.elements(), m_seed_scale, cached->second.data.data(),
                            cached->second.data.data());
          }
        }
        const Shard& seed = cached->second;
        // Added to what the caller wrote first when it writes a part (external), else copied.
        m_backend.copy(contiguous_copy(seed.elements()), seed.data.data(), grad->data.data(), out.external);
        reset = true;
      }
    }
    if (reset && m_ops[id].active) {
      clock_add(static_cast<graph::OpId>(id), Phase::backward, t0);
    }
  }
  for (auto it = m_order.rbegin(); it != m_order.rend(); ++it) {
    const auto id = *it;
    OpState& state = m_ops[static_cast<std::size_t>(id)];
    if (state.active) {
      gather_parameters(id, state);
      const OpBuffers op_buffers = buffers(state);
      std::vector<const Shard*> d_out;
      std::vector<Shard*> d_in;
      for (auto& in : state.inputs) {
        if (m_accumulate && in.parameter && in.gradient) {
          if (!in.scratch) {
            in.scratch = make_shard(in.gradient->block);
          }
          d_in.push_back(&*in.scratch);
        } else {
          d_in.push_back(in.gradient && in.halo ? &in.halo->gradient
                         : in.gradient_alias    ? producer_gradient(in)
                         : in.gradient          ? &*in.gradient
                                                : nullptr);
        }
      }
      for (auto& out : state.outputs) {
        d_out.push_back(out.gradient ? &*out.gradient : nullptr);
      }
      const double t0 = clock_start();
      try {
        const bool handed = hands_buffer_over(id, state) && state.inputs[0].gradient && state.outputs[0].gradient &&
                            d_in[0] == &*state.inputs[0].gradient;
        const bool wanted = std::any_of(d_in.begin(), d_in.end(), [](const Shard* d) { return d != nullptr; });
        if (state.borrows) { // given back before the producer's backward reads them
          std::swap(lent_value(state).data, state.outputs[0].value->data);
          if (state.outputs[0].gradient) {
            std::swap(producer_gradient(state.inputs[0])->data, state.outputs[0].gradient->data);
          }
        } else if (handed) {
          std::swap(state.inputs[0].gradient->data, state.outputs[0].gradient->data);
        } else if (wanted) { // an op computed from data and constants alone has nothing to do
          run_backward(m_backend, m_graph, id, op_buffers, d_out, d_in);
        }
      } catch (const std::exception& e) {
        throw Error(fmt::format("op '{}' ({}) backward: {}", m_graph.op(id).name, m_graph.op(id).type, e.what()));
      }
      for (auto& in : state.inputs) {
        if (m_accumulate && in.parameter && in.gradient) {
          m_backend.copy(contiguous_copy(in.gradient->elements()), in.scratch->data.data(), in.gradient->data.data(),
                         true);
        }
      }
      clock_add(id, Phase::backward, t0, 0, !state.has_kernel);
      release_parameters(state);
      if (m_bucket_bytes > 0 && m_final_backward) {
        bucket_gradients(id, state);
      }
      for (auto& in : state.inputs) {
        if (in.gradient && in.halo) {
          m_backend.synchronize(); // the host sends what the kernels wrote
          const double h0 = clock_start();
          return_halo_gradient(*in.halo, *in.gradient, m_comm);
          clock_add(id, Phase::backward_redistribution, h0, in.halo->bytes_in);
        }
      }
      // Activations read whole along a replica axis: their partial gradients are summed now.
      for (auto& in : state.inputs) {
        if (in.gradient && !in.parameter && in.reduce_group.size() > 1) {
          const double r0 = clock_start();
          if (in.gradient_scatter.empty() || in.gradient_alias) {
            reduce(in.reduce_group, *in.gradient);
          } else {
            reduce_scatter(in.reduce_group, *in.gradient, in.gradient_scatter);
          }
          clock_add(id, Phase::backward_reduce, r0, static_cast<double>(in.gradient->elements()) * 4);
        }
      }
    }
    for (auto& in : state.inputs) {
      if (in.producer < 0 || !in.needs_gradient || in.gradient_alias) {
        continue;
      }
      auto& dst = m_ops[static_cast<std::size_t>(in.producer)].outputs[in.producer_output].gradient;
      const double t0 = clock_start();
      run_exchange(in.backward_exchange, in.gradient ? &*in.gradient : nullptr, dst ? &*dst : nullptr, true, m_comm,
                   &m_backend);
      if (dst || in.gradient) { // the consumer's: the cost model prices an input's move both ways on its reader
        clock_add(id, Phase::backward_redistribution, t0, in.backward_exchange.bytes_in);
      }
    }
    if (m_in_flight) {
      const double p0 = clock_start();
      m_backend.all_reduce_progress();
      clock_add(id, Phase::gradient_sync, p0);
    }
  }
  if (m_bucket_bytes > 0 && m_final_backward) { // the buckets not full yet, as DDP's last
    for (auto& [group, bucket] : m_buckets) {
      start_bucket(group);
    }
  }
  flush_times();
}

bool Executor::overlappable(const Input& in) const {
  return in.parameter && in.gradient && !in.owner && in.partners.empty() && !in.zero && in.reduce_group.size() > 1 &&
         (in.copies == 1 || m_training.zero_stage == 0);
}

void Executor::bucket_gradients(graph::OpId id, OpState& state) {
  for (std::size_t i = 0; i < state.inputs.size(); ++i) {
    const Input& in = state.inputs[i];
    if (!overlappable(in)) {
      continue;
    }
    auto& bucket = m_buckets[in.reduce_group];
    bucket.inputs.emplace_back(id, i);
    bucket.bytes += static_cast<double>(in.gradient->elements()) * 4;
    if (bucket.bytes >= m_bucket_bytes) {
      start_bucket(in.reduce_group);
    }
  }
}

// Every member of a replica group holds the same blocks and runs the same backward pass, so the
// members fill and start a group's buckets alike, in the same order (MPI's rule for collectives on
// one communicator).
void Executor::start_bucket(const Group& group) {
  auto& bucket = m_buckets[group];
  if (bucket.inputs.empty()) {
    return;
  }
  const MPI_Comm comm = m_comms.get(group);
  for (const auto& [op, i] : bucket.inputs) {
    Input& in = m_ops[static_cast<std::size_t>(op)].inputs[i];
    const double t0 = clock_start();
    in.started = m_backend.all_reduce_sum_start(comm, in.gradient->data.data(), in.gradient->elements());
    in.in_flight = true;
    clock_add(op, Phase::gradient_sync, t0);
    ++m_overlapped_sums;
  }
  m_in_flight = true;
  bucket = {};
}

void Executor::synchronize_gradients() {
  // A whole gradient over its replica group: summed, and averaged over copies where ZeRO's group
  // spans them (a tied weight, which this runtime does not shard: copies compute the same gradient).
  const auto reduce_whole = [&](Input& in) {
    reduce(in.reduce_group, *in.gradient);
    if (in.copies > 1 && m_training.zero_stage >= 1) {
      m_backend.scale(in.gradient->elements(), 1.F / static_cast<float>(in.copies), in.gradient->data.data(),
                      in.gradient->data.data());
    }
  };
  for (const auto id : m_order) {
    for (auto& in : m_ops[static_cast<std::size_t>(id)].inputs) {
      if (in.in_flight) { // started during the backward pass
        const double t0 = clock_start();
        m_backend.all_reduce_wait(in.started);
        m_backend.synchronize();
        clock_add(id, Phase::gradient_sync, t0, static_cast<double>(in.gradient->elements()) * 4);
        in.in_flight = false;
        continue;
      }
      if (!in.gradient || !in.parameter || in.owner) {
        continue;
      }
      // One tied weight's gradients summed where they lie: a reader's that is partial over the same
      // replicas before the one reduce, one already whole (its replicas are copies, whose weight
      // view's gradient came reduced) after it.
      const auto add_partners = [&](bool partial) {
        for (const auto& [op, i] : in.partners) {
          auto& partner = m_ops[static_cast<std::size_t>(op)].inputs[i];
          const bool alike =
              partner.reduce_group.size() > 1 && partner.reduce_group == in.reduce_group && partner.copies == in.copies;
          if (alike != partial) {
            continue;
          }
          const double t0 = clock_start();
          if (!partial && partner.reduce_group.size() > 1) { // reduced otherwise: on its own first
            reduce_whole(partner);
          }
          m_backend.copy(contiguous_copy(in.gradient->elements()), partner.gradient->data.data(),
                         in.gradient->data.data(), true);
          m_backend.synchronize();
          clock_add(id, Phase::gradient_sync, t0, 0);
        }
      };
      // Then every reader holds the sum, as where the readers' layouts differ (sum_tied_gradients).
      const auto copy_back = [&] {
        if (in.partners.empty()) {
          return;
        }
        const double t0 = clock_start();
        for (const auto& [op, i] : in.partners) {
          auto& partner = *m_ops[static_cast<std::size_t>(op)].inputs[i].gradient;
          m_backend.copy(contiguous_copy(in.gradient->elements()), in.gradient->data.data(), partner.data.data(),
                         false);
        }
        m_backend.synchronize();
        clock_add(id, Phase::gradient_sync, t0, 0);
      };
      add_partners(true);
      if (in.reduce_group.size() <= 1) {
        add_partners(false);
        copy_back();
        continue;
      }
      const double t0 = clock_start();
      const auto bytes = static_cast<double>(in.gradient->elements()) * 4;
      if (in.zero) {
        auto& z = *in.zero;
        z.gradient = uninitialized_floats(static_cast<std::size_t>(z.counts[static_cast<std::size_t>(z.part)]));
        m_backend.reduce_scatter_sum(m_comms.get(in.reduce_group), in.gradient->data.data(), z.counts,
                                     z.gradient.data());
        if (in.copies > 1) {
          m_backend.scale(static_cast<std::int64_t>(z.gradient.size()), 1.F / static_cast<float>(in.copies),
                          z.gradient.data(), z.gradient.data());
        }
        if (m_training.zero_stage >= 2) {
          Floats().swap(in.gradient->data); // the whole gradient is gone until the next backward pass
        } else {
          // ZeRO-1 keeps the whole gradient (as the cost model prices it): the slice goes back in place.
          m_backend.copy(contiguous_copy(static_cast<std::int64_t>(z.gradient.size())), z.gradient.data(),
                         in.gradient->data.data() + z.offset, false);
          m_backend.synchronize(); // before the slice is freed
          Floats().swap(z.gradient);
        }
      } else {
        reduce_whole(in);
      }
      m_backend.synchronize();
      clock_add(id, Phase::gradient_sync, t0, bytes);
      add_partners(false);
      copy_back();
    }
  }
  m_in_flight = false;
  sum_tied_gradients();
  flush_times();
}

void Executor::unscale_gradients(float factor, float* flag) {
  for (const auto id : m_order) {
    const double t0 = clock_start();
    bool any = false;
    for (auto& in : m_ops[static_cast<std::size_t>(id)].inputs) {
      if (!in.gradient || !in.parameter) {
        continue;
      }
      const auto gradient = stepped_gradient(in);
      const auto n = static_cast<std::int64_t>(gradient.size());
      m_backend.scale(n, factor, gradient.data(), gradient.data());
      m_backend.flag_nonfinite(n, gradient.data(), flag);
      any = true;
    }
    if (any) {
      clock_add(id, Phase::optimizer, t0);
    }
  }
  flush_times();
}

const float* Executor::zero_gradient(const Input& in) const {
  return m_training.zero_stage >= 2 ? in.zero->gradient.data() : in.gradient->data.data() + in.zero->offset;
}

std::span<float> Executor::stepped_gradient(Input& in) {
  if (!in.zero) {
    return {in.gradient->data.data(), static_cast<std::size_t>(in.gradient->elements())};
  }
  float* slice = m_training.zero_stage >= 2 ? in.zero->gradient.data() : in.gradient->data.data() + in.zero->offset;
  return {slice, static_cast<std::size_t>(in.zero->counts[static_cast<std::size_t>(in.zero->part)])};
}

void Executor::restore_weight_gradients() {
  for (auto& state : m_ops) {
    for (auto& in : state.inputs) {
      const auto n = in.gradient ? static_cast<std::size_t>(elements(in.gradient->block)) : 0;
      if (in.parameter && in.gradient && in.gradient->data.size() != n) {
        in.gradient->data = uninitialized_floats(n);
        m_backend.fill(static_cast<std::int64_t>(n), 0.F, in.gradient->data.data());
      }
    }
  }
}

void Executor::step() {
  ++m_steps;
  for (const auto id : m_order) {
    const double t0 = clock_start();
    bool any = false;
    for (auto& in : m_ops[static_cast<std::size_t>(id)].inputs) {
      if (!in.gradient || !in.parameter) {
        continue;
      }
      if (in.owner) { // a tied weight held with its first reader: the values that reader stepped
        const auto& first = m_ops[static_cast<std::size_t>(in.owner->first)].inputs[in.owner->second].value;
        m_backend.copy(contiguous_copy(in.value->elements()), first->data.data(), in.value->data.data(), false);
        any = true;
        continue;
      }
      // A ZeRO replica steps its slice: its reduced gradient, its weights, its state.
      const auto gradient = stepped_gradient(in);
      float* weights = !in.zero                     ? in.value->data.data()
                       : m_training.zero_stage >= 3 ? in.zero->weights.data()
                                                    : in.value->data.data() + in.zero->offset;
      optimizer_step(m_backend, m_training.optimizer, m_steps, static_cast<std::int64_t>(gradient.size()),
                     gradient.data(), weights, in.optimizer);
      any = true;
    }
    if (any) {
      clock_add(id, Phase::optimizer, t0);
    }
    // ZeRO 1 and 2: every replica's updated slice to every replica (the second half of the sync
    // term). ZeRO-3 keeps the slices apart until the next pass gathers them.
    for (auto& in : m_ops[static_cast<std::size_t>(id)].inputs) {
      if (!in.gradient || !in.parameter || !in.zero || m_training.zero_stage >= 3) {
        continue;
      }
      const double g0 = clock_start();
      m_backend.all_gather(m_comms.get(in.reduce_group), in.zero->counts, in.value->data.data());
      m_backend.synchronize();
      clock_add(id, Phase::gradient_sync, g0, static_cast<double>(in.value->elements()) * 4);
    }
  }
  flush_times();
}

void Executor::gather_parameters(graph::OpId id, OpState& state) {
  if (m_training.zero_stage < 3) {
    return;
  }
  for (auto& in : state.inputs) {
    if (!in.zero || !in.value) {
      continue;
    }
    const double t0 = clock_start();
    const auto& z = *in.zero;
    // Every slice is written: this rank's copied here, the others by the all-gather.
    in.value->data = uninitialized_floats(static_cast<std::size_t>(elements(in.value->block)));
    m_backend.copy(contiguous_copy(static_cast<std::int64_t>(z.weights.size())), z.weights.data(),
                   in.value->data.data() + z.offset, false);
    m_backend.all_gather(m_comms.get(in.reduce_group), z.counts, in.value->data.data());
    m_backend.synchronize();
    clock_add(id, Phase::parameter_gather, t0, static_cast<double>(in.value->elements()) * 4);
  }
}

void Executor::release_parameters(OpState& state) {
  for (auto& in : state.inputs) {
    if (in.zero && in.value && m_training.zero_stage >= 3) {
      Floats().swap(in.value->data);
    }
  }
}

double Executor::held_bytes() const {
  double elements = 0;
  const auto count = [&](const std::optional<Shard>& s) {
    if (s) {
      elements += static_cast<double>(s->data.size());
    }
  };
  for (const auto& state : m_ops) {
    for (const auto& in : state.inputs) {
      count(in.value);
      count(in.gradient);
      elements += static_cast<double>(in.optimizer.first.size() + in.optimizer.second.size());
      if (in.zero) {
        elements += static_cast<double>(in.zero->gradient.size() + in.zero->weights.size());
      }
    }
    for (const auto& out : state.outputs) {
      count(out.value);
      count(out.gradient);
    }
  }
  return elements * static_cast<double>(sizeof(float));
}

void Executor::generate_inputs() {
  for (const auto id : m_order) {
    auto& state = m_ops[static_cast<std::size_t>(id)];
    const auto& op = m_graph.op(id);
    for (std::size_t i = 0; i < state.inputs.size(); ++i) {
      auto& in = state.inputs[i];
      if (in.value && !in.parameter && m_graph.tensor(op.inputs[i]).producer < 0) {
        generate(*in.value, op.inputs[i]);
      }
    }
  }
}

void Executor::zero_weight_gradients() {
  restore_weight_gradients();
  for (auto& state : m_ops) {
    for (auto& in : state.inputs) {
      if (in.parameter && in.gradient) {
        m_backend.fill(in.gradient->elements(), 0.F, in.gradient->data.data());
      }
    }
  }
}

void Executor::poison_gradients() {
  const auto poison = [](std::optional<Shard>& s) {
    if (s) {
      fill_floats(s->data, std::numeric_limits<float>::quiet_NaN());
    }
  };
  for (auto& state : m_ops) {
    for (auto& in : state.inputs) {
      poison(in.gradient);
      if (in.halo) {
        fill_floats(in.halo->gradient.data, std::numeric_limits<float>::quiet_NaN());
      }
    }
    for (auto& out : state.outputs) {
      poison(out.gradient);
    }
  }
}

Executor::Activations Executor::activations() const {
  Activations set;
  // Copies made where the buffers live (a Shard's copy constructor would read device memory on the host).
  const auto copy = [](const std::optional<Shard>& s) -> std::optional<Shard> {
    if (!s) {
      return std::nullopt;
    }
    return Shard{s->block, copy_of(s->data)};
  };
  for (const auto& state : m_ops) {
    for (const auto& in : state.inputs) {
      if (!in.parameter) {
        set.push_back(copy(in.value));
        set.push_back(copy(in.gradient));
      }
    }
    for (const auto& out : state.outputs) {
      set.push_back(copy(out.value));
      set.push_back(copy(out.gradient));
    }
    // What the op's kernel kept from its forward pass for its backward pass (an LSTM's states,
    // BatchNorm's statistics) belongs to the micro-batch too.
    Shard saved;
    saved.data = copy_of(state.saved);
    set.emplace_back(std::move(saved));
  }
  return set;
}

void Executor::swap_activations(Activations& set) {
  std::size_t k = 0;
  const auto swap = [&](std::optional<Shard>& slot) {
    if (k >= set.size()) {
      throw Error("swap_activations: a set of another executor");
    }
    std::swap(slot, set[k++]);
  };
  for (auto& state : m_ops) {
    for (auto& in : state.inputs) {
      if (!in.parameter) {
        swap(in.value);
        swap(in.gradient);
      }
    }
    for (auto& out : state.outputs) {
      swap(out.value);
      swap(out.gradient);
    }
    if (k >= set.size()) {
      throw Error("swap_activations: a set of another executor");
    }
    auto& saved = set[k++];
    if (!saved) {
      saved.emplace();
    }
    std::swap(state.saved, saved->data);
  }
  if (k != set.size()) {
    throw Error("swap_activations: a set of another executor");
  }
}

Shard* Executor::buffer(graph::OpId op, Buffer which, std::size_t index) {
  auto& state = m_ops.at(static_cast<std::size_t>(op));
  std::optional<Shard>* slot = nullptr;
  switch (which) {
  case Buffer::input_value: slot = index < state.inputs.size() ? &state.inputs[index].value : nullptr; break;
  case Buffer::input_gradient: slot = index < state.inputs.size() ? &state.inputs[index].gradient : nullptr; break;
  case Buffer::output_value: slot = index < state.outputs.size() ? &state.outputs[index].value : nullptr; break;
  case Buffer::output_gradient: slot = index < state.outputs.size() ? &state.outputs[index].gradient : nullptr; break;
  }
  return slot != nullptr && *slot ? &**slot : nullptr;
}

std::vector<Snapshot> Executor::snapshot() const {
  m_backend.synchronize(); // the host reads what the kernels wrote
  std::vector<Snapshot> out;
  // A reduce-scattered sum holds only this rank's region (Output::scatter, Input::gradient_scatter).
  const auto region_held = [&](const Group& group, const std::vector<sharding::Block>& regions, const Shard& shard) {
    const auto me = static_cast<std::size_t>(std::find(group.begin(), group.end(), m_rank) - group.begin());
    Shard part = make_host_shard(regions.at(me));
    copy_region(shard, part, regions[me], false);
    return part;
  };
  for (std::size_t id = 0; id < m_ops.size(); ++id) {
    const auto& state = m_ops[id];
    if (!state.active) {
      continue;
    }
    for (std::size_t j = 0; j < state.outputs.size(); ++j) {
      const auto& o = state.outputs[j];
      if (o.value && !o.scatter.empty()) {
        out.push_back({static_cast<graph::OpId>(id), Held::output, static_cast<int>(j),
                       region_held(o.partial_group, o.scatter, *o.value)});
      } else if (o.value) {
        out.push_back({static_cast<graph::OpId>(id), Held::output, static_cast<int>(j),
                       host_copy_of(*held(static_cast<graph::OpId>(id), Held::output, static_cast<int>(j)))});
      }
    }
    for (std::size_t i = 0; i < state.inputs.size(); ++i) {
      const auto& in = state.inputs[i];
      if (in.zero && in.parameter && in.gradient && in.reduce_group.size() > 1) {
        // Reduce-scattered: only this rank's slice holds the synchronized gradient.
        const auto n = static_cast<std::ptrdiff_t>(in.zero->counts[static_cast<std::size_t>(in.zero->part)]);
        Shard slice = make_host_shard({});
        slice.block = in.gradient->block;
        slice.data.resize(static_cast<std::size_t>(n));
        to_host(m_training.zero_stage >= 2 ? in.zero->gradient : in.gradient->data,
                m_training.zero_stage >= 2 ? 0 : static_cast<std::size_t>(in.zero->offset), slice.data);
        out.push_back({static_cast<graph::OpId>(id), Held::weight_gradient, static_cast<int>(i), std::move(slice),
                       in.zero->offset});
      } else if (in.gradient && !in.gradient_scatter.empty() && !in.gradient_alias) {
        out.push_back({static_cast<graph::OpId>(id), Held::input_gradient, static_cast<int>(i),
                       region_held(in.reduce_group, in.gradient_scatter, *in.gradient)});
      } else if (in.gradient) {
        out.push_back({static_cast<graph::OpId>(id), in.parameter ? Held::weight_gradient : Held::input_gradient,
                       static_cast<int>(i), host_copy_of(*in.gradient)});
      } else if (in.gradient_alias && state_gradient(in) != nullptr) {
        out.push_back({static_cast<graph::OpId>(id), Held::input_gradient, static_cast<int>(i),
                       host_copy_of(*held(static_cast<graph::OpId>(id), Held::input_gradient, static_cast<int>(i)))});
      }
    }
  }
  return out;
}

std::vector<Snapshot> Executor::weight_snapshot() const {
  m_backend.synchronize(); // the host reads what the kernels wrote
  std::vector<Snapshot> out;
  for (std::size_t id = 0; id < m_ops.size(); ++id) {
    const auto& state = m_ops[id];
    for (std::size_t i = 0; state.active && i < state.inputs.size(); ++i) {
      const auto& in = state.inputs[i];
      if (in.parameter && in.gradient && in.value && in.zero && m_training.zero_stage >= 3) {
        Shard slice = make_host_shard({});
        slice.block = in.value->block;
        slice.data.resize(in.zero->weights.size());
        to_host(in.zero->weights, 0, slice.data);
        out.push_back(
            {static_cast<graph::OpId>(id), Held::weight, static_cast<int>(i), std::move(slice), in.zero->offset});
      } else if (in.parameter && in.gradient && in.value) {
        out.push_back({static_cast<graph::OpId>(id), Held::weight, static_cast<int>(i), host_copy_of(*in.value)});
      }
    }
  }
  return out;
}

const Shard* Executor::held(graph::OpId op, Held kind, int index) const {
  const auto& state = m_ops.at(static_cast<std::size_t>(op));
  const auto i = static_cast<std::size_t>(index);
  // After backward a borrowing view's output and its gradient are back in its producer's buffers
  // (up a chain of borrowing views): the same elements in the same order (is_buffer_view), copied
  // under the view's block.
  const auto settled = [&](graph::OpId at, std::size_t j, bool gradient) -> const Shard* {
    const Shard* own = gradient ? &*m_ops[static_cast<std::size_t>(at)].outputs[j].gradient
                                : &*m_ops[static_cast<std::size_t>(at)].outputs[j].value;
    if (!m_ops[static_cast<std::size_t>(at)].borrows) {
      return own;
    }
    while (m_ops[static_cast<std::size_t>(at)].borrows) {
      const Input& in = m_ops[static_cast<std::size_t>(at)].inputs[0];
      at = in.producer;
      j = in.producer_output;
    }
    const auto& out = m_ops[static_cast<std::size_t>(at)].outputs[j];
    Shard& copy = m_settled[{op, kind, index}];
    copy.block = own->block;
    copy.data = copy_of(gradient ? out.gradient->data : out.value->data);
    return &copy;
  };
  if (kind == Held::input_gradient && state.inputs.at(i).gradient_alias) {
    const Input& in = state.inputs.at(i);
    return state_gradient(in) != nullptr ? settled(in.producer, in.producer_output, true) : nullptr;
  }
  if (kind == Held::output && state.outputs.at(i).value) {
    return settled(op, i, false);
  }
  const auto& slot = kind == Held::output   ? state.outputs.at(i).value
                     : kind == Held::weight ? state.inputs.at(i).value
                                            : state.inputs.at(i).gradient;
  return slot ? &*slot : nullptr;
}

Shard& Executor::lent_value(OpState& state) {
  const Input& in = state.inputs[0];
  return m_ops[static_cast<std::size_t>(in.producer)].outputs[in.producer_output].value.value();
}

Shard* Executor::producer_gradient(const Input& in) {
  return const_cast<Shard*>(std::as_const(*this).state_gradient(in)); // NOLINT(cppcoreguidelines-pro-type-const-cast)
}

const Shard* Executor::state_gradient(const Input& in) const {
  const auto& slot = m_ops[static_cast<std::size_t>(in.producer)].outputs[in.producer_output].gradient;
  return slot ? &*slot : nullptr;
}

} // namespace partita::runtime
