// BaPipe's prices: each stage's layout priced by evaluate() on that stage's devices (its ops'
// kernels, their collectives, the moves inside the stage, its memory), and the sends between
// stages by input_redistribution() with the producer laid out on the stage before.

#include "partita/search/bapipe.h"

#include "search/families.h"

#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <numeric>

namespace partita::search::bapipe {

namespace {

// Two stages whose devices sit alike in their nodes (same offsets, same node pattern) and that
// use the same device price alike: their tables are computed once.
std::vector<int> stage_key(const cluster::Cluster& c, int first, int count, int device_index) {
  std::vector<int> key{device_index};
  const int base = c.node_of(first) * c.devices_per_node;
  for (int d = first; d < first + count; ++d) {
    key.push_back(d - base);
  }
  return key;
}

struct Local {
  std::vector<strategy::OpAssignment> ops;
  strategy::Prediction prediction;
  // Per op: what a tied weight's later reader adds when it holds a copy of its own (a cut parts it
  // from the first reader): evaluate() priced the whole graph on one stage's devices, where the two
  // share the weight's state (strategy::shared_parameters). Gradient sync and step; ZeRO-3's
  // gathers; parameters, gradients and optimizer state. The stage tables count it always, so a
  // plan that puts both readers on one stage is priced a little high, never too low.
  std::vector<double> copy_sync, copy_communication, copy_resident;
};

} // namespace

void check_shape(const Request& r, const Shape& shape) {
  const int n = static_cast<int>(r.graph->ops().size());
  if (shape.stages < 1 || r.devices % shape.stages != 0) {
    throw Error(fmt::format("bapipe: {} stages do not divide {} devices", shape.stages, r.devices));
  }
  if (shape.stages > n) {
    throw Error(fmt::format("bapipe: {} stages for {} ops: every stage needs at least one op", shape.stages, n));
  }
  const int per_stage = r.devices / shape.stages;
  if (shape.tensor_parallel < 1 || per_stage % shape.tensor_parallel != 0) {
    throw Error(fmt::format("bapipe: {}-way tensor parallelism does not divide the {} devices of a stage",
                            shape.tensor_parallel, per_stage));
  }
  const int batch = strategy::batch_size(*r.graph);
  if (shape.micro_batches < 1 || batch % shape.micro_batches != 0) {
    throw Error(fmt::format("bapipe: {} micro-batches do not divide the batch of {}", shape.micro_batches, batch));
  }
  const int replicas = per_stage / shape.tensor_parallel;
  const int size = batch / shape.micro_batches;
  if (size % replicas != 0) {
    throw Error(fmt::format("bapipe: a micro-batch of {} sample{} ({} / {} micro-batches) does not split over the {} "
                            "data-parallel replicas of a stage ({} devices, {}-way tensor parallel)",
                            size, size == 1 ? "" : "s", batch, shape.micro_batches, replicas, per_stage,
                            shape.tensor_parallel));
  }
}

Tables tables(const Request& r, const Shape& shape, const std::vector<cluster::Device>& stage_devices) {
  check_shape(r, shape);
  if (!stage_devices.empty() && static_cast<int>(stage_devices.size()) != shape.stages) {
    throw Error(fmt::format("bapipe: {} stage devices given for {} stages", stage_devices.size(), shape.stages));
  }
  const auto& g = *r.graph;
  detail::Builder base(r, "bapipe");
  Tables out;
  out.order = base.order();
  const int n = static_cast<int>(out.order.size());
  const int stages = shape.stages;
  const int per_stage = r.devices / stages;
  std::vector<int> position(g.ops().size(), -1);
  for (int i = 0; i < n; ++i) {
    position[static_cast<std::size_t>(out.order[static_cast<std::size_t>(i)])] = i;
  }
  std::vector<graph::OpSemantics> sem;
  sem.reserve(g.ops().size());
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    sem.push_back(base.semantics(static_cast<graph::OpId>(i)));
  }

  // The reads between ops, and which (op, input slot) each is.
  std::vector<std::function<double(int, int)>> tie_costs;
  Problem& p = out.problem;
  p.ops = n;
  p.micro_batches = shape.micro_batches;
  std::vector<std::pair<graph::OpId, std::size_t>> slot;
  std::map<graph::TensorId, int> tensor_index;
  std::map<std::pair<graph::OpId, std::size_t>, std::size_t> edge_of;
  for (int i = 0; i < n; ++i) {
    const graph::OpId id = out.order[static_cast<std::size_t>(i)];
    const auto& op = g.op(id);
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      const graph::TensorId t = op.inputs[j];
      if (t == graph::no_tensor || g.tensor(t).producer < 0) {
        continue;
      }
      const auto index = tensor_index.emplace(t, static_cast<int>(tensor_index.size())).first->second;
      edge_of[{id, j}] = p.edges.size();
      p.edges.push_back({position[static_cast<std::size_t>(g.tensor(t).producer)], i, index});
      slot.emplace_back(id, j);
    }
  }

  // On a cluster of mixed nodes (and no devices given) each stage runs on the devices it lands on:
  // the cost model prices every op at its devices' kind (the slowest where they mix).
  const bool mixed_nodes = stage_devices.empty() && r.cluster->heterogeneous();
  auto devices_of = [&](int s) {
    std::vector<int> d(static_cast<std::size_t>(per_stage));
    std::iota(d.begin(), d.end(), s * per_stage);
    return d;
  };
  auto device_of = [&](int s) -> const cluster::Device& {
    if (mixed_nodes) {
      return r.cluster->device_of(s * per_stage);
    }
    return stage_devices.empty() ? r.cluster->device : stage_devices[static_cast<std::size_t>(s)];
  };
  auto cluster_of = [&](int s) {
    cluster::Cluster c = *r.cluster;
    if (!stage_devices.empty()) {
      c.device = device_of(s);
    }
    return c;
  };
  // Stages given devices of their own are priced each on its own (-1: the cluster's device); on
  // mixed nodes stages of one kind share their prices, a stage that mixes kinds has its own.
  auto device_index = [&](int s) {
    if (mixed_nodes) {
      const auto kinds = r.cluster->kinds_of(devices_of(s));
      return kinds.size() == 1 ? 1000000 + kinds.front() : 2000000 + s;
    }
    return stage_devices.empty() ? -1 : s;
  };
  auto memory_of = [&](int s) {
    return mixed_nodes ? r.cluster->smallest_memory(devices_of(s)) : device_of(s).memory_capacity;
  };

  // Each stage's layout of every op, priced by evaluate() as if the whole graph ran there.
  std::map<std::vector<int>, Local> locals;
  std::vector<const Local*> local_of(static_cast<std::size_t>(stages));
  std::vector<std::vector<int>> key_of(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    base.check_cancel();
    key_of[static_cast<std::size_t>(s)] = stage_key(*r.cluster, s * per_stage, per_stage, device_index(s));
    auto [it, inserted] = locals.try_emplace(key_of[static_cast<std::size_t>(s)]);
    if (inserted) {
      detail::Builder b(r, "bapipe");
      std::vector<int> devices(static_cast<std::size_t>(per_stage));
      std::iota(devices.begin(), devices.end(), s * per_stage);
      b.set_pool(std::move(devices));
      detail::MegatronTally tally;
      for (graph::OpId id : out.order) {
        if (shape.tensor_parallel > 1) {
          detail::megatron_op(b, id, shape.tensor_parallel, tally);
        } else {
          b.assign(id, b.split(id, {{b.batch_dim(id), per_stage}}));
        }
      }
      auto st = b.finish("");
      // The stage's kernels and moves run once per micro-batch: a pipeline of this one stage.
      strategy::Pipeline one;
      one.stages = 1;
      one.micro_batches = shape.micro_batches;
      one.schedule = strategy::Schedule::one_f_one_b;
      one.stage_of_op.assign(g.ops().size(), 0);
      st.pipeline = std::move(one);
      it->second.prediction = strategy::evaluate(g, cluster_of(s), st, r.setup);
      auto& local = it->second;
      for (auto* v : {&local.copy_sync, &local.copy_communication, &local.copy_resident}) {
        v->assign(g.ops().size(), 0.0);
      }
      const auto shared = strategy::shared_parameters(g, sem, st.ops);
      const auto saved = strategy::saved_outputs(g, out.order, sem, r.setup.recompute);
      const auto stage_cluster = cluster_of(s);
      for (std::size_t i = 0; i < shared.size(); ++i) {
        if (shared[i].empty()) {
          continue;
        }
        const auto& a = st.ops[i];
        const auto id = static_cast<graph::OpId>(i);
        const auto full = cost::op_cost(g, id, sem[i], a.config, a.devices, stage_cluster, r.setup, saved[i], {},
                                        shape.micro_batches, false);
        const auto& own = local.prediction.ops[i].cost;
        const auto delta = [&](std::string_view name) { return full.get(name) - own.get(name); };
        local.copy_sync[i] = delta(cost::term::gradient_sync) + delta(cost::term::optimizer_step);
        local.copy_communication[i] = delta(cost::term::parameter_gather);
        local.copy_resident[i] =
            delta(cost::term::parameters) + delta(cost::term::gradients) + delta(cost::term::optimizer_state);
      }
      it->second.ops = std::move(st.ops);
    }
    local_of[static_cast<std::size_t>(s)] = &it->second;
  }

  // Every stage's layouts on its own devices (a stage priced by another's tables sits alike in
  // its node: the same offsets, shifted).
  out.ops.reserve(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    auto ops = local_of[static_cast<std::size_t>(s)]->ops;
    for (auto& a : ops) {
      for (int& d : a.devices) {
        d = s * per_stage + d % per_stage;
      }
    }
    out.ops.push_back(std::move(ops));
  }

  // Tied weights: priced per pair of stages when a cut parts their readers.
  for (const auto& tie : strategy::tied_weights(g)) {
    const graph::OpId first = tie.readers.front().first;
    const std::size_t first_input = tie.readers.front().second;
    for (std::size_t k = 1; k < tie.readers.size(); ++k) {
      const graph::OpId other = tie.readers[k].first;
      const std::size_t other_input = tie.readers[k].second;
      if (other == first) {
        continue;
      }
      p.ties.push_back({position[static_cast<std::size_t>(first)], position[static_cast<std::size_t>(other)]});
      // What the two readers' layouts on stages sf and so cost to sum, from their assignments there.
      std::vector<std::pair<strategy::OpAssignment, strategy::OpAssignment>> at(static_cast<std::size_t>(stages));
      for (int s = 0; s < stages; ++s) {
        at[static_cast<std::size_t>(s)] = {out.ops[static_cast<std::size_t>(s)][static_cast<std::size_t>(first)],
                                           out.ops[static_cast<std::size_t>(s)][static_cast<std::size_t>(other)]};
      }
      const auto first_sem = sem[static_cast<std::size_t>(first)];
      const auto other_sem = sem[static_cast<std::size_t>(other)];
      const auto context = strategy::move_context(g, first, first_input, r.setup);
      const cluster::Cluster cluster = *r.cluster;
      const auto setup = r.setup;
      auto cost = [&g, at, first_sem, other_sem, context, cluster, setup, first_input, other_input](int sf, int so) {
        const auto& a = at[static_cast<std::size_t>(sf)].first;
        const auto& b = at[static_cast<std::size_t>(so)].second;
        const auto geometry = strategy::move_geometry(sharding::input_layout(g, other_sem, b.config, other_input), b,
                                                      sharding::input_layout(g, first_sem, a.config, first_input), a);
        double sum = 0;
        for (const auto& term : strategy::tied_gradient_terms(geometry, context, cluster, setup, false)) {
          sum += term.value;
        }
        return sum;
      };
      tie_costs.push_back(cost);
    }
  }
  if (!p.ties.empty()) {
    p.tie_extra = [costs = tie_costs](std::size_t t, int sf, int so) { return costs[t](sf, so) - costs[t](sf, sf); };
  }

  const auto edges = p.edges.size();
  for (int s = 0; s < stages; ++s) {
    base.check_cancel();
    const Local& local = *local_of[static_cast<std::size_t>(s)];
    StagePrices sp;
    sp.device = device_of(s).name;
    if (mixed_nodes) { // a stage across kinds names them all (the first is device_of's)
      const auto kinds = r.cluster->kinds_of(devices_of(s));
      for (std::size_t k = 1; k < kinds.size(); ++k) {
        sp.device += " + " + r.cluster->kind(kinds[k]).name;
      }
    }
    sp.memory_limit = r.memory_limit > 0 ? r.memory_limit : memory_of(s);
    sp.in_flight = shape.schedule == strategy::Schedule::one_f_one_b
                       ? static_cast<double>(std::min(stages - s, shape.micro_batches)) / shape.micro_batches
                       : 1.0;
    for (auto* v : {&sp.compute, &sp.communication, &sp.sync, &sp.resident, &sp.activations, &sp.workspace}) {
      v->assign(static_cast<std::size_t>(n), 0.0);
    }
    sp.inner.assign(edges, 0.0);
    for (int i = 0; i < n; ++i) {
      const graph::OpId id = out.order[static_cast<std::size_t>(i)];
      const auto& pred = local.prediction.ops[static_cast<std::size_t>(id)];
      const auto k = static_cast<std::size_t>(i);
      for (std::size_t ti = 0; ti < pred.cost.time.size(); ++ti) {
        const auto& term = pred.cost.time[ti];
        const int input = ti < pred.term_input.size() ? pred.term_input[ti] : -1;
        if (input >= 0) {
          if (auto e = edge_of.find({id, static_cast<std::size_t>(input)}); e != edge_of.end()) {
            sp.inner[e->second] += term.value;
            continue;
          }
        }
        if (term.name == cost::term::gradient_sync || term.name == cost::term::optimizer_step) {
          sp.sync[k] += term.value;
        } else if (cost::is_compute_term(term.name)) {
          sp.compute[k] += term.value;
        } else {
          sp.communication[k] += term.value;
        }
      }
      sp.resident[k] = pred.cost.get(cost::term::parameters) + pred.cost.get(cost::term::gradients) +
                       pred.cost.get(cost::term::optimizer_state) + local.copy_resident[static_cast<std::size_t>(id)];
      sp.sync[k] += local.copy_sync[static_cast<std::size_t>(id)];
      sp.communication[k] += local.copy_communication[static_cast<std::size_t>(id)];
      sp.activations[k] = pred.cost.get(cost::term::activations);
      sp.workspace[k] = pred.cost.get(cost::term::workspace);
    }
    p.stages.push_back(std::move(sp));
  }

  // No partition fits (memory does not depend on the sends): leave them unpriced.
  for (auto& sp : p.stages) {
    sp.receive_copies.assign(edges, 0.0);
    sp.receive_transfer.assign(edges, 0.0);
  }
  out.fits = partition(p, r.cancel).feasible;
  if (!out.fits) {
    return out;
  }

  // The sends into each stage: every read with its producer laid out on the stage before. Two
  // neighbouring stages sitting alike in their nodes send alike, and so do reads alike in what
  // input_redistribution() reads (the blocks of a transformer): each is priced once.
  const auto keep = strategy::saved_outputs(g, out.order, sem, r.setup.recompute);
  std::vector<std::string> signature(g.ops().size());
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    signature[i] = cost::cost_signature(g, static_cast<graph::OpId>(i), sem[i], keep[i]);
  }
  auto tensor_signature = [&](graph::OpId consumer, graph::TensorId t) {
    const auto& x = g.tensor(t);
    const auto& inputs = g.op(consumer).inputs;
    return fmt::format("{}|{}|{}|{}|{}|{}|{}", fmt::join(x.shape, ","), static_cast<int>(x.dtype),
                       graph::gets_gradient(x), g.is_graph_output(t), x.consumers.size(),
                       std::count(inputs.begin(), inputs.end(), t), x.fixed);
  };
  std::map<std::vector<int>, std::pair<std::vector<double>, std::vector<double>>> receives;
  for (int s = 1; s < stages; ++s) {
    auto key = stage_key(*r.cluster, (s - 1) * per_stage, 2 * per_stage, device_index(s - 1));
    key.push_back(device_index(s));
    auto [it, inserted] = receives.try_emplace(std::move(key));
    if (inserted) {
      auto& [copies, transfer] = it->second;
      copies.assign(edges, 0.0);
      transfer.assign(edges, 0.0);
      const auto& before = out.ops[static_cast<std::size_t>(s) - 1];
      auto mixed = out.ops[static_cast<std::size_t>(s)];
      const auto cl = cluster_of(s);
      std::map<std::string, std::pair<double, double>> priced;
      for (std::size_t e = 0; e < edges; ++e) {
        base.check_cancel();
        const auto [id, j] = slot[e];
        const graph::TensorId t = g.op(id).inputs[j];
        const auto producer = static_cast<std::size_t>(g.tensor(t).producer);
        const auto& outs = g.op(g.tensor(t).producer).outputs;
        const auto& from = before[producer];
        const auto& to = mixed[static_cast<std::size_t>(id)];
        auto memo = fmt::format(
            "{}#{}#{}#{}#{}#{}#{}#{}#{}", signature[producer], std::find(outs.begin(), outs.end(), t) - outs.begin(),
            signature[static_cast<std::size_t>(id)], j, tensor_signature(id, t), fmt::join(from.config.splits, ","),
            fmt::join(from.devices, ","), fmt::join(to.config.splits, ","), fmt::join(to.devices, ","));
        auto [m, unseen] = priced.try_emplace(std::move(memo), 0.0, 0.0);
        if (unseen) {
          const auto kept = mixed[producer];
          mixed[producer] = from;
          for (const auto& term :
               strategy::input_redistribution(g, sem, mixed, cl, r.setup, id, j, shape.micro_batches, false,
                                              g.tensor(t).fixed)) { // across stages: sent_once()
            (term.name == cost::term::redistribution ? m->second.second : m->second.first) += term.value;
          }
          mixed[producer] = kept;
        }
        copies[e] = m->second.first;
        transfer[e] = m->second.second;
      }
    }
    p.stages[static_cast<std::size_t>(s)].receive_copies = it->second.first;
    p.stages[static_cast<std::size_t>(s)].receive_transfer = it->second.second;
  }
  return out;
}

strategy::Strategy to_strategy(const Request& r, const Shape& shape, const Tables& t, const Partition& part) {
  strategy::Strategy st;
  st.family = "bapipe";
  st.devices = r.devices;
  st.ops.resize(r.graph->ops().size());
  strategy::Pipeline pipe;
  pipe.stages = shape.stages;
  pipe.micro_batches = shape.micro_batches;
  pipe.schedule = shape.schedule;
  pipe.stage_of_op.assign(r.graph->ops().size(), 0);
  int stage = 0;
  for (int i = 0; i < static_cast<int>(t.order.size()); ++i) {
    while (stage + 1 < shape.stages && i >= part.starts[static_cast<std::size_t>(stage) + 1]) {
      ++stage;
    }
    const auto id = static_cast<std::size_t>(t.order[static_cast<std::size_t>(i)]);
    pipe.stage_of_op[id] = stage;
    st.ops[id] = t.ops[static_cast<std::size_t>(stage)][id];
  }
  st.pipeline = std::move(pipe);
  return st;
}

} // namespace partita::search::bapipe
