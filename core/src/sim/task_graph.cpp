#include "partita/sim/task_graph.h"

#include "cluster/ring_topology.h"

#include "sim/op_plan.h"

#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

namespace partita::sim {

std::string_view task_kind_name(TaskKind k) {
  switch (k) {
  case TaskKind::forward: return "forward";
  case TaskKind::backward: return "backward";
  case TaskKind::recompute: return "recompute";
  case TaskKind::collective: return "collective";
  case TaskKind::parameter_gather: return "parameter gather";
  case TaskKind::redistribution: return "redistribution";
  case TaskKind::send: return "send";
  case TaskKind::gradient_sync: return "gradient sync";
  case TaskKind::optimizer_step: return "optimizer step";
  }
  return "?";
}

namespace {

using detail::OpPlan;
using detail::Piece;
using detail::plan_op;

struct PendingBucket {
  int group = 0;
  Bucket bucket;
  double seconds = 0;
  std::vector<int> after;
};

class Builder {
public:
  Builder(const graph::Graph& g, const strategy::Strategy& st, const strategy::Prediction& p, int devices,
          const Options& options)
      : m_g(g), m_st(st), m_p(p), m_options(options) {
    m_out.devices = devices;
    m_out.stages = st.pipeline ? st.pipeline->stages : 1;
    m_out.micro_batches = st.pipeline ? st.pipeline->micro_batches : 1;
    m_out.overlap = options.overlap;
    m_out.overlap_gradients = options.overlap_gradients;
    // What a device holds all iteration long (zeros for a prediction without memory).
    m_out.resident_bytes.assign(static_cast<std::size_t>(std::max(devices, 0)), 0.0);
    for (std::size_t d = 0; d < p.memory.size() && d < m_out.resident_bytes.size(); ++d) {
      const auto& mem = p.memory[d];
      m_out.resident_bytes[d] = mem.parameters + mem.gradients + mem.optimizer_state + mem.workspace;
    }
  }

  TaskGraph build() {
    check();
    const auto n = m_g.ops().size();
    const int stages = m_out.stages, micro = m_out.micro_batches;
    m_order = m_g.topological_order();
    m_stage.assign(n, 0);
    if (m_st.pipeline) {
      m_stage = m_st.pipeline->stage_of_op;
    }
    m_group.resize(n);
    m_plan.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto id = static_cast<graph::OpId>(i);
      m_group[i] = group_of(m_st.ops[i].devices);
      m_plan.push_back(plan_op(m_g, id, m_p.ops[i], micro, m_st));
    }
    m_forward_done.assign(n * static_cast<std::size_t>(micro), {});
    m_backward_done.assign(n * static_cast<std::size_t>(micro), {});
    m_last_compute.assign(static_cast<std::size_t>(m_out.devices), -1);
    strategy::Pipeline pipe; // without a pipeline: one stage, one micro-batch
    pipe.schedule = strategy::Schedule::gpipe;
    if (m_st.pipeline) {
      pipe = *m_st.pipeline;
    }
    const int virtual_stages = pipe.virtual_stages();
    m_pending.resize(static_cast<std::size_t>(virtual_stages));
    m_closed.resize(static_cast<std::size_t>(virtual_stages));

    // Merge the stages' programs into one issue order that respects the data: a (virtual) stage's
    // forward of micro-batch j after the one before's, its backward after the one after's. A
    // stage's chunk c is virtual stage c x stages + s.
    std::vector<std::vector<strategy::PipelineStep>> programs;
    programs.reserve(static_cast<std::size_t>(stages));
    for (int s = 0; s < stages; ++s) {
      programs.push_back(strategy::pipeline_program(pipe, s));
    }
    std::vector<std::size_t> next(static_cast<std::size_t>(stages), 0);
    std::vector<std::vector<bool>> forwarded(static_cast<std::size_t>(virtual_stages),
                                             std::vector<bool>(static_cast<std::size_t>(micro), false));
    auto backwarded = forwarded;
    std::size_t left = static_cast<std::size_t>(virtual_stages) * 2 * static_cast<std::size_t>(micro);
    while (left > 0) {
      bool progress = false;
      for (int s = 0; s < stages; ++s) {
        const auto su = static_cast<std::size_t>(s);
        auto& program = programs[su];
        while (next[su] < program.size()) {
          const auto u = program[next[su]];
          const auto j = static_cast<std::size_t>(u.micro_batch);
          const int v = u.chunk * stages + s;
          const auto vu = static_cast<std::size_t>(v);
          const bool ready =
              u.forward ? (v == 0 || forwarded[vu - 1][j]) : (v == virtual_stages - 1 || backwarded[vu + 1][j]);
          if (!ready) {
            break;
          }
          if (u.forward) {
            emit_forward(v, u.micro_batch);
            forwarded[vu][j] = true;
          } else {
            emit_backward(v, u.micro_batch);
            backwarded[vu][j] = true;
          }
          ++next[su];
          --left;
          progress = true;
          if (next[su] == program.size()) {
            for (int c = pipe.chunks; c-- > 0;) {
              emit_stage_end(c * stages + s);
            }
          }
        }
      }
      if (!progress) {
        throw Error("simulate: the pipeline schedule cannot make progress (a stage waits for itself)");
      }
    }
    return std::move(m_out);
  }

private:
  void check() const {
    const auto n = m_g.ops().size();
    if (m_out.devices < 1) {
      throw Error(fmt::format("simulate: the cluster has {} devices; it needs at least one", m_out.devices));
    }
    if (!(m_options.bucket_bytes > 0) || !std::isfinite(m_options.bucket_bytes)) {
      throw Error(fmt::format("simulate: option 'bucket_bytes' is {}; it must be a positive number of bytes",
                              m_options.bucket_bytes));
    }
    if (m_st.ops.size() != n) {
      throw Error(
          fmt::format("simulate: strategy '{}' assigns {} ops, the model has {}", m_st.family, m_st.ops.size(), n));
    }
    if (!m_p.memory.empty() && m_p.memory.size() != static_cast<std::size_t>(m_out.devices)) {
      throw Error(fmt::format("simulate: the prediction's memory covers {} devices, the cluster has {}",
                              m_p.memory.size(), m_out.devices));
    }
    if (m_p.ops.size() != n) {
      throw Error(fmt::format("simulate: the prediction has {} ops, the model has {}", m_p.ops.size(), n));
    }
    for (std::size_t i = 0; i < n; ++i) {
      const auto& devices = m_st.ops[i].devices;
      if (devices.empty()) {
        throw Error(fmt::format("simulate: strategy '{}', op '{}': no devices", m_st.family, m_g.ops()[i].name));
      }
      for (int d : devices) {
        if (d < 0 || d >= m_out.devices) {
          throw Error(fmt::format("simulate: strategy '{}', op '{}': device {} is not in the cluster of {} devices",
                                  m_st.family, m_g.ops()[i].name, d, m_out.devices));
        }
      }
    }
    if (!m_st.pipeline) {
      return;
    }
    const auto& pl = *m_st.pipeline;
    if (pl.stages < 1 || pl.micro_batches < 1) {
      throw Error(fmt::format("simulate: strategy '{}': the pipeline has {} stages and {} micro-batches; it needs at "
                              "least one of each",
                              m_st.family, pl.stages, pl.micro_batches));
    }
    if (pl.stage_of_op.size() != n) {
      throw Error(fmt::format("simulate: strategy '{}': the pipeline's stage_of_op has {} entries, the model {} ops",
                              m_st.family, pl.stage_of_op.size(), n));
    }
    for (std::size_t i = 0; i < n; ++i) {
      const int s = pl.stage_of_op[i];
      if (s < 0 || s >= pl.virtual_stages()) {
        throw Error(fmt::format("simulate: strategy '{}', op '{}': stage {} is not one of the pipeline's {}",
                                m_st.family, m_g.ops()[i].name, s, pl.virtual_stages()));
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      for (graph::TensorId t : m_g.ops()[i].inputs) {
        if (t == graph::no_tensor || m_g.tensor(t).producer < 0) {
          continue;
        }
        const auto producer = static_cast<std::size_t>(m_g.tensor(t).producer);
        if (pl.stage_of_op[producer] > pl.stage_of_op[i]) {
          throw Error(fmt::format("simulate: strategy '{}', op '{}' in stage {} reads '{}' from op '{}' in the later "
                                  "stage {}; stages must follow the data",
                                  m_st.family, m_g.ops()[i].name, pl.stage_of_op[i], m_g.tensor(t).name,
                                  m_g.ops()[producer].name, pl.stage_of_op[producer]));
        }
      }
    }
  }

  int group_of(std::vector<int> devices) {
    std::sort(devices.begin(), devices.end());
    devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
    const auto [it, added] = m_groups.try_emplace(devices, static_cast<int>(m_out.groups.size()));
    if (added) {
      m_out.groups.push_back(std::move(devices));
    }
    return it->second;
  }

  // The group of the devices of groups `a` and `b` together (looked up once per pair).
  int union_of(int a, int b) {
    const auto [it, added] = m_unions.try_emplace({a, b}, -1);
    if (added) {
      auto devices = m_out.groups[static_cast<std::size_t>(a)];
      const auto& other = m_out.groups[static_cast<std::size_t>(b)];
      devices.insert(devices.end(), other.begin(), other.end());
      it->second = group_of(std::move(devices));
    }
    return it->second;
  }

  std::size_t slot(graph::OpId id, int micro_batch) const {
    return static_cast<std::size_t>(micro_batch) * m_g.ops().size() + static_cast<std::size_t>(id);
  }

  // Appends a task after `after`; a kernel also after the kernel its devices ran before (streams
  // run in program order).
  int add(Task task, std::vector<int> after) {
    const int index = static_cast<int>(m_out.tasks.size());
    if (task.stream == Stream::compute) {
      int previous = -1; // the devices of a group mostly ran the same kernel last
      for (int d : m_out.groups[static_cast<std::size_t>(task.group)]) {
        auto& last = m_last_compute[static_cast<std::size_t>(d)];
        if (last >= 0 && last != previous) {
          after.push_back(last);
          previous = last;
        }
        last = index;
      }
    }
    std::sort(after.begin(), after.end());
    after.erase(std::unique(after.begin(), after.end()), after.end());
    task.after = std::move(after);
    m_out.tasks.push_back(std::move(task));
    return index;
  }

  // The pieces of one pass of op `id` as a chain of tasks after `after`; returns what the op's
  // pass is done after (`after` itself when the pass has no tasks).
  std::vector<int> emit_chain(graph::OpId id, int micro_batch, Pass pass, const std::vector<Piece>& pieces,
                              std::vector<int> after) {
    const auto i = static_cast<std::size_t>(id);
    for (const auto& piece : pieces) {
      if (piece.first_only && micro_batch > 0) {
        continue; // later micro-batches copy the first's (strategy::sent_once)
      }
      int group = m_group[i];
      if (piece.input >= 0 && piece.stream == Stream::communication) { // a transfer spans both sides
        const graph::OpId producer = m_g.tensor(m_g.op(id).inputs[static_cast<std::size_t>(piece.input)]).producer;
        if (producer >= 0 && m_group[static_cast<std::size_t>(producer)] != group) {
          group = union_of(group, m_group[static_cast<std::size_t>(producer)]);
        }
      }
      Task t;
      t.kind = piece.kind;
      t.stream = piece.stream;
      t.pass = pass;
      t.term = piece.term;
      t.group = group;
      t.stage = m_stage[i] % m_out.stages; // the stage whose devices run it (a chunk's too)
      t.micro_batch = micro_batch;
      t.op = id;
      t.input = piece.input;
      t.duration = piece.seconds;
      t.memory = piece.memory;
      after = {add(std::move(t), std::move(after))};
    }
    return after;
  }

  void emit_forward(int stage, int micro_batch) {
    for (graph::OpId id : m_order) {
      if (m_stage[static_cast<std::size_t>(id)] != stage) {
        continue;
      }
      std::vector<int> after;
      const auto& inputs = m_g.op(id).inputs;
      for (std::size_t k = 0; k < inputs.size(); ++k) {
        const graph::TensorId t = inputs[k];
        // A tensor sent once is there from the first micro-batch on: the later ones wait for
        // nothing of the producer's.
        if (micro_batch > 0 && strategy::sent_once(m_g, m_st, id, k)) {
          continue;
        }
        if (t != graph::no_tensor && m_g.tensor(t).producer >= 0) {
          const auto& done = m_forward_done[slot(m_g.tensor(t).producer, micro_batch)];
          after.insert(after.end(), done.begin(), done.end());
        }
      }
      m_forward_done[slot(id, micro_batch)] =
          emit_chain(id, micro_batch, Pass::forward, m_plan[static_cast<std::size_t>(id)].forward, std::move(after));
    }
  }

  void emit_backward(int stage, int micro_batch) {
    const bool last = micro_batch == m_out.micro_batches - 1;
    for (std::size_t k = m_order.size(); k-- > 0;) { // the backward pass: reverse topological order
      const graph::OpId id = m_order[k];
      const auto i = static_cast<std::size_t>(id);
      if (m_stage[i] != stage) {
        continue;
      }
      // After its own forward pass and after every reader has handed back its gradient.
      std::vector<int> after = m_forward_done[slot(id, micro_batch)];
      for (graph::TensorId t : m_g.op(id).outputs) {
        if (t == graph::no_tensor) {
          continue;
        }
        for (graph::OpId reader : m_g.tensor(t).consumers) {
          const auto& done = m_backward_done[slot(reader, micro_batch)];
          after.insert(after.end(), done.begin(), done.end());
        }
      }
      auto done = emit_chain(id, micro_batch, Pass::backward, m_plan[i].backward, std::move(after));
      m_backward_done[slot(id, micro_batch)] = done;
      if (last && m_plan[i].sync > 0) {
        add_to_bucket(stage, id, done);
      }
    }
  }

  // DDP: gradients join the bucket of their devices as the backward pass produces them; a full
  // bucket is synchronized at once with overlap (or gradient overlap), after the backward pass
  // without.
  void add_to_bucket(int stage, graph::OpId id, const std::vector<int>& done) {
    const auto i = static_cast<std::size_t>(id);
    auto& pending = m_pending[static_cast<std::size_t>(stage)];
    auto it =
        std::find_if(pending.begin(), pending.end(), [&](const PendingBucket& b) { return b.group == m_group[i]; });
    if (it == pending.end()) {
      pending.push_back({m_group[i], {}, 0, {}});
      it = std::prev(pending.end());
    }
    it->bucket.ops.push_back(id);
    it->bucket.bytes += m_plan[i].gradient_bytes;
    it->seconds += m_plan[i].sync;
    it->after.insert(it->after.end(), done.begin(), done.end());
    if (it->bucket.bytes >= m_options.bucket_bytes) {
      auto full = std::move(*it);
      pending.erase(it);
      if (m_options.overlap || m_options.overlap_gradients) {
        emit_bucket(stage, std::move(full));
      } else {
        m_closed[static_cast<std::size_t>(stage)].push_back(std::move(full));
      }
    }
  }

  void emit_bucket(int stage, PendingBucket b) {
    const int index = static_cast<int>(m_out.buckets.size());
    Task t;
    t.kind = TaskKind::gradient_sync;
    t.stream = Stream::gradients;
    t.pass = Pass::backward;
    t.term = cost::term::gradient_sync;
    t.group = b.group;
    t.stage = stage % m_out.stages;
    t.bucket = index;
    t.duration = b.seconds;
    const int task = add(std::move(t), std::move(b.after));
    for (graph::OpId id : b.bucket.ops) {
      m_synced[id] = task;
    }
    m_out.buckets.push_back(std::move(b.bucket));
  }

  // After a stage's last backward: the buckets left, then the optimizer step of each op.
  void emit_stage_end(int stage) {
    const auto s = static_cast<std::size_t>(stage);
    for (auto& b : m_closed[s]) {
      emit_bucket(stage, std::move(b));
    }
    for (auto& b : m_pending[s]) {
      emit_bucket(stage, std::move(b));
    }
    m_closed[s].clear();
    m_pending[s].clear();
    const int last = m_out.micro_batches - 1;
    for (std::size_t k = m_order.size(); k-- > 0;) { // the backward pass: reverse topological order
      const graph::OpId id = m_order[k];
      const auto i = static_cast<std::size_t>(id);
      if (m_stage[i] != stage || !(m_plan[i].step > 0)) {
        continue;
      }
      const auto synced = m_synced.find(id);
      std::vector<int> after =
          synced != m_synced.end() ? std::vector<int>{synced->second} : m_backward_done[slot(id, last)];
      Task t;
      t.kind = TaskKind::optimizer_step;
      t.stream = Stream::compute;
      t.pass = Pass::iteration;
      t.term = cost::term::optimizer_step;
      t.group = m_group[i];
      t.stage = stage % m_out.stages;
      t.op = id;
      t.duration = m_plan[i].step;
      add(std::move(t), std::move(after));
    }
  }

  const graph::Graph& m_g;
  const strategy::Strategy& m_st;
  const strategy::Prediction& m_p;
  Options m_options;
  TaskGraph m_out;
  std::vector<graph::OpId> m_order;
  std::vector<int> m_stage, m_group;
  std::vector<OpPlan> m_plan;
  std::map<std::vector<int>, int> m_groups;
  std::map<std::pair<int, int>, int> m_unions;
  std::vector<std::vector<int>> m_forward_done, m_backward_done; // per (micro-batch, op)
  std::vector<int> m_last_compute;                               // per device
  std::vector<std::vector<PendingBucket>> m_pending, m_closed;   // per stage
  std::map<graph::OpId, int> m_synced;                           // op -> its bucket's task
};

} // namespace

TaskGraph build_task_graph(const graph::Graph& g, const strategy::Strategy& strategy,
                           const strategy::Prediction& prediction, int cluster_devices, const Options& options) {
  return Builder(g, strategy, prediction, cluster_devices, options).build();
}

TaskGraph build_task_graph(const graph::Graph& g, const strategy::Strategy& strategy,
                           const strategy::Prediction& prediction, const cluster::Cluster& cluster,
                           const Options& options) {
  auto tasks = build_task_graph(g, strategy, prediction, cluster.device_count(), options);
  if (options.contention) {
    share_links(tasks, cluster);
  }
  return tasks;
}

void share_links(TaskGraph& tasks, const cluster::Cluster& cluster) {
  if (cluster.device_count() != tasks.devices) {
    throw Error(fmt::format("shared links: a task graph of {} devices on {}, which has {}", tasks.devices, cluster.name,
                            cluster.device_count()));
  }
  tasks.links.clear();
  tasks.group_links.assign(tasks.groups.size(), {});
  std::vector<bool> transfers(tasks.groups.size(), false);
  for (const auto& t : tasks.tasks) {
    if (shares_links(t)) {
      transfers[static_cast<std::size_t>(t.group)] = true;
    }
  }
  std::vector<int> nic_link(static_cast<std::size_t>(cluster.total_nodes()), -1);
  for (std::size_t gi = 0; gi < tasks.groups.size(); ++gi) {
    if (!transfers[gi]) {
      continue;
    }
    std::map<int, int> on_node; // node -> the group's devices there
    for (int d : tasks.groups[gi]) {
      ++on_node[cluster.node_of(d)];
    }
    if (on_node.size() < 2) {
      continue;
    }
    for (const auto& [node, devices] : on_node) {
      auto& link = nic_link[static_cast<std::size_t>(node)];
      if (link < 0) {
        link = static_cast<int>(tasks.links.size());
        tasks.links.push_back(fmt::format("node {} NICs", node));
      }
      const double share = std::min(1.0, static_cast<double>(devices) / cluster.nics_per_node);
      tasks.group_links[gi].push_back({link, share});
    }
  }
  // Inside a node of direct links (a mesh, DGX-1), devices that no ring of direct links joins
  // talk through the host (the fallback link, PCIe): transfers that need it at once share it.
  if (cluster.intra_switched || cluster.intra_fallback.bandwidth <= 0) {
    return;
  }
  std::vector<int> host_link(static_cast<std::size_t>(cluster.total_nodes()), -1);
  for (std::size_t gi = 0; gi < tasks.groups.size(); ++gi) {
    if (!transfers[gi]) {
      continue;
    }
    std::map<int, std::vector<int>> on_node;
    for (int d : tasks.groups[gi]) {
      on_node[cluster.node_of(d)].push_back(d);
    }
    for (const auto& [node, devices] : on_node) {
      if (devices.size() < 2) {
        continue;
      }
      const auto ring = cluster::detail::intra_node_ring(cluster, devices);
      if (ring.kind != cluster.intra_fallback.kind || ring.bandwidth != cluster.intra_fallback.bandwidth) {
        continue; // rings of direct links carry it
      }
      auto& link = host_link[static_cast<std::size_t>(node)];
      if (link < 0) {
        link = static_cast<int>(tasks.links.size());
        tasks.links.push_back(fmt::format("node {} host link", node));
      }
      tasks.group_links[gi].push_back({link, 1.0});
    }
  }
}

std::string_view stream_name(Stream s) {
  switch (s) {
  case Stream::compute: return "compute";
  case Stream::communication: return "communication";
  case Stream::gradients: return "gradient sync";
  }
  return "?";
}

bool shares_links(const Task& t) {
  return t.duration > 0 && (t.kind == TaskKind::gradient_sync || t.kind == TaskKind::send ||
                            (t.kind == TaskKind::redistribution && t.stream != Stream::compute));
}

std::string task_name(const graph::Graph& g, const TaskGraph& tasks, int task) {
  const auto& t = tasks.tasks.at(static_cast<std::size_t>(task));
  if (t.kind == TaskKind::gradient_sync) {
    const auto& b = tasks.buckets.at(static_cast<std::size_t>(t.bucket));
    return fmt::format("gradient sync bucket {} ({} op{}, {:.4g} MB)", t.bucket, b.ops.size(),
                       b.ops.size() == 1 ? "" : "s", b.bytes / 1e6);
  }
  const auto& op = g.op(t.op);
  std::string name = fmt::format("{}: {}", op.name, t.term);
  if (t.input >= 0) {
    name += fmt::format(" of '{}'", g.tensor(op.inputs[static_cast<std::size_t>(t.input)]).name);
  }
  const bool both_passes = t.term == cost::term::halo_exchange || t.term == cost::term::statistics_sync ||
                           t.term == cost::term::parameter_gather || t.input >= 0;
  if (both_passes) {
    name += t.pass == Pass::backward ? " (backward)" : " (forward)";
  }
  if (t.micro_batch >= 0 && tasks.micro_batches > 1) {
    name += fmt::format(", micro-batch {}", t.micro_batch);
  }
  return name;
}

} // namespace partita::sim
