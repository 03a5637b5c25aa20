#include "search/builder.h"
#include "search/families.h"

#include "partita/cost/op_cost.h"

#include <algorithm>
#include <limits>
#include <set>

namespace partita::search::detail {

int floor_pow2(std::int64_t x) {
  int p = 1;
  while (static_cast<std::int64_t>(p) * 2 <= x && p < (1 << 30)) {
    p *= 2;
  }
  return p;
}

int largest_divisor_at_most(std::int64_t limit, int of) {
  for (int f = static_cast<int>(std::clamp<std::int64_t>(limit, 1, of)); f > 1; --f) {
    if (of % f == 0) {
      return f;
    }
  }
  return 1;
}

GroupChoice fastest_group(const Request& r, int max_group, const std::function<strategy::Strategy(int)>& make) {
  GroupChoice best;
  double best_time = std::numeric_limits<double>::infinity();
  // The group sizes' strategies share most of their ops' configurations: each priced once, as
  // numbers (the plan's own prediction, with its formulas, is evaluate()'s after the choice).
  strategy::Evaluator evaluate(*r.graph, *r.cluster);
  for (int g = 1; g <= max_group; g *= 2) {
    if (r.devices % g != 0) {
      continue;
    }
    auto st = make(g);
    const auto p = evaluate.totals(st, r.setup);
    best.table += fmt::format("{}g={}: {:.4g} ms", best.table.empty() ? "" : ", ", g, p.iteration_time * 1e3);
    if (p.iteration_time < best_time) {
      best_time = p.iteration_time;
      best.strategy = std::move(st);
      best.group = g;
    }
    if (r.progress) {
      r.progress(static_cast<double>(g) / max_group);
    }
  }
  return best;
}

bool is_weight(const graph::Graph& g, graph::TensorId t) {
  for (int depth = 0; depth < 16 && t != graph::no_tensor; ++depth) {
    const graph::Tensor& x = g.tensor(t);
    if (x.role == graph::TensorRole::parameter) {
      return true;
    }
    if (x.role != graph::TensorRole::activation || x.producer < 0) {
      return false;
    }
    const graph::Op& op = g.op(x.producer);
    const graph::OpDescriptor* d = op.domain.empty() ? graph::find_descriptor(op.type) : nullptr;
    if (d == nullptr || (d->op_class != graph::OpClass::shape && d->op_class != graph::OpClass::data_movement)) {
      return false;
    }
    graph::TensorId data = graph::no_tensor;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      if (op.inputs[i] != graph::no_tensor && graph::input_slot(op, i) == graph::InputSlot::data) {
        if (data != graph::no_tensor) {
          return false; // Concat of a weight and something else: not a view
        }
        data = op.inputs[i];
      }
    }
    t = data;
  }
  return false;
}

bool has_weight(const graph::Graph& g, graph::OpId id) {
  for (graph::TensorId t : g.op(id).inputs) {
    if (t != graph::no_tensor && is_weight(g, t)) {
      return true;
    }
  }
  return false;
}

bool is_weight_view(const graph::Graph& g, const graph::OpSemantics& s, graph::OpId id) {
  return (s.op_class == graph::OpClass::shape || s.op_class == graph::OpClass::data_movement) &&
         !g.op(id).outputs.empty() && g.op(id).outputs[0] != graph::no_tensor && is_weight(g, g.op(id).outputs[0]);
}

namespace {

// Iteration dims that index a parameter input of the op (or a view of one).
std::set<int> weight_dims(const graph::Graph& g, const graph::OpSemantics& s, graph::OpId id) {
  std::set<int> dims;
  const auto& op = g.op(id);
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    if (op.inputs[i] != graph::no_tensor && is_weight(g, op.inputs[i])) {
      for (int d : s.inputs[i].dims) {
        if (d >= 0) {
          dims.insert(d);
        }
      }
    }
  }
  return dims;
}

} // namespace

int feature_dim(const graph::Graph& g, const graph::OpSemantics& s, graph::OpId id) {
  const auto wd = weight_dims(g, s, id);
  std::set<int> out_dims;
  for (const auto& o : s.outputs) {
    for (int d : o.dims) {
      if (d >= 0) {
        out_dims.insert(d);
      }
    }
  }
  int best = -1;
  for (int d : wd) {
    const auto& dim = s.dims[static_cast<std::size_t>(d)];
    if (!dim.reduction && dim.splittable && out_dims.count(d) != 0 &&
        (best < 0 || dim.size > s.dims[static_cast<std::size_t>(best)].size)) {
      best = d;
    }
  }
  return best;
}

int weight_reduction_dim(const graph::Graph& g, const graph::OpSemantics& s, graph::OpId id) {
  int best = -1;
  for (int d : weight_dims(g, s, id)) {
    const auto& dim = s.dims[static_cast<std::size_t>(d)];
    if (dim.reduction && dim.splittable && (best < 0 || dim.size > s.dims[static_cast<std::size_t>(best)].size)) {
      best = d;
    }
  }
  return best;
}

Builder::Builder(const Request& request, std::string family) : m_request(request), m_family(std::move(family)) {
  if (request.graph == nullptr || request.cluster == nullptr) {
    throw Error("search: a model and a cluster are required");
  }
  if (request.devices < 1 || request.devices > request.cluster->device_count()) {
    throw Error(fmt::format("{}: {} devices requested, the cluster '{}' has {}", m_family, request.devices,
                            request.cluster->name, request.cluster->device_count()));
  }
  const auto& g = *request.graph;
  if (request.facts && request.facts->semantics.size() == g.ops().size()) {
    m_facts = request.facts;
  } else {
    auto facts = std::make_shared<ModelFacts>();
    for (std::size_t i = 0; i < g.ops().size(); ++i) {
      facts->semantics.push_back(graph::describe(g, static_cast<graph::OpId>(i)));
    }
    m_facts = std::move(facts);
  }
  const bool derived = m_facts->order.size() == g.ops().size() && m_facts->batch_dims.size() == g.ops().size();
  m_order = derived ? m_facts->order : g.topological_order();
  m_ops.resize(g.ops().size());
  m_assigned.assign(g.ops().size(), false);
  m_pool.resize(static_cast<std::size_t>(request.devices));
  for (int d = 0; d < request.devices; ++d) {
    m_pool[static_cast<std::size_t>(d)] = d;
  }
  m_batch_dim = derived ? m_facts->batch_dims : batch_dims(g, m_facts->semantics, m_order);
}

std::vector<int> batch_dims(const graph::Graph& g, const std::vector<graph::OpSemantics>& semantics,
                            const std::vector<graph::OpId>& order) {
  // The batch: dim 0 of every graph input, carried through the ops' tensor maps.
  std::vector<std::set<int>> batch_dims_of_tensor(g.tensors().size());
  for (graph::TensorId t : g.graph_inputs) {
    if (!g.tensor(t).shape.empty()) {
      batch_dims_of_tensor[static_cast<std::size_t>(t)].insert(0);
    }
  }
  std::vector<int> out(g.ops().size(), -1);
  for (graph::OpId id : order) {
    const auto& op = g.op(id);
    const auto& s = semantics[static_cast<std::size_t>(id)];
    std::set<int> batch;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      if (op.inputs[i] == graph::no_tensor) {
        continue;
      }
      for (int j : batch_dims_of_tensor[static_cast<std::size_t>(op.inputs[i])]) {
        const int d =
            j < static_cast<int>(s.inputs[i].dims.size()) ? s.inputs[i].dims[static_cast<std::size_t>(j)] : -1;
        if (d >= 0 && s.dims[static_cast<std::size_t>(d)].splittable &&
            !s.dims[static_cast<std::size_t>(d)].reduction) {
          batch.insert(d);
        }
      }
    }
    if (!batch.empty()) {
      out[static_cast<std::size_t>(id)] = *batch.begin();
    }
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
      if (op.outputs[o] == graph::no_tensor) {
        continue;
      }
      const auto& dims = s.outputs[o].dims;
      for (std::size_t j = 0; j < dims.size(); ++j) {
        if (dims[j] >= 0 && batch.count(dims[j]) != 0) {
          batch_dims_of_tensor[static_cast<std::size_t>(op.outputs[o])].insert(static_cast<int>(j));
        }
      }
    }
  }
  return out;
}

sharding::Config Builder::split(graph::OpId id, std::initializer_list<std::pair<int, int>> dim_factors) const {
  const auto& s = semantics(id);
  sharding::Config c{std::vector<int>(s.dims.size(), 1)};
  int used = 1;
  for (auto [dim, factor] : dim_factors) {
    if (dim < 0 || factor <= 1) {
      continue;
    }
    const auto& d = s.dims[static_cast<std::size_t>(dim)];
    if (!d.splittable) {
      continue;
    }
    // The largest factor up to the one asked (and the dim's size) that divides the devices left,
    // so that the grid's copies cover every device: 24 devices split a batch 24 ways, not 16 with
    // 8 idle. On a power-of-two device count this is the largest power of two.
    const int f = largest_divisor_at_most(std::min<std::int64_t>(factor, d.size), devices() / used);
    c.splits[static_cast<std::size_t>(dim)] *= f;
    used *= f;
  }
  return c;
}

void Builder::assign(graph::OpId id, const sharding::Config& config) {
  assign_on(id, config, m_pool);
}

void Builder::assign_on(graph::OpId id, const sharding::Config& config, std::span<const int> devices) {
  auto& a = m_ops[static_cast<std::size_t>(id)];
  a.config = config;
  const auto k = static_cast<std::size_t>(config.devices());
  const std::size_t usable = devices.size() / k * k; // whole copies only
  if (usable == 0) {
    throw Error(
        fmt::format("{}: op '{}' needs {} devices, {} available", m_family, graph().op(id).name, k, devices.size()));
  }
  a.devices.assign(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(usable));
  m_assigned[static_cast<std::size_t>(id)] = true;
}

std::optional<sharding::TensorLayout> Builder::arriving_layout(graph::OpId id, std::size_t input) const {
  const auto& g = graph();
  const graph::TensorId t = g.op(id).inputs[input];
  if (t == graph::no_tensor || g.tensor(t).producer < 0 || !assigned(g.tensor(t).producer)) {
    return std::nullopt;
  }
  const graph::OpId prod = g.tensor(t).producer;
  const auto& prod_op = g.op(prod);
  std::size_t out = 0;
  while (out < prod_op.outputs.size() && prod_op.outputs[out] != t) {
    ++out;
  }
  return sharding::output_layout(g, semantics(prod), m_ops[static_cast<std::size_t>(prod)].config, out);
}

std::optional<sharding::Config> Builder::carried_config(graph::OpId id, std::size_t input) const {
  const auto arriving = arriving_layout(id, input);
  if (!arriving) {
    return std::nullopt;
  }
  const auto& from = *arriving;
  const auto& s = semantics(id);
  sharding::Config c{std::vector<int>(s.dims.size(), 1)};
  int used = 1;
  for (std::size_t j = 0; j < from.parts.size() && j < s.inputs[input].dims.size(); ++j) {
    const int d = s.inputs[input].dims[j];
    const int parts = from.parts[j];
    if (d < 0 || parts <= 1 || !s.dims[static_cast<std::size_t>(d)].splittable ||
        c.splits[static_cast<std::size_t>(d)] > 1 || parts > s.dims[static_cast<std::size_t>(d)].size ||
        used * parts > devices()) {
      continue;
    }
    c.splits[static_cast<std::size_t>(d)] = parts;
    used *= parts;
  }
  return c;
}

std::size_t Builder::KeyHash::operator()(const std::vector<int>& key) const noexcept {
  std::uint64_t h = 0x9E3779B97F4A7C15ULL;
  for (const int v : key) {
    h = (h ^ static_cast<std::uint32_t>(v)) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 31;
  }
  return static_cast<std::size_t>(h);
}

int Builder::device_list(const std::vector<int>& devices) const {
  return m_device_lists.emplace(devices, static_cast<int>(m_device_lists.size())).first->second;
}

double Builder::op_time(graph::OpId id) const {
  const auto& a = m_ops[static_cast<std::size_t>(id)];
  const auto config_into = [](std::vector<int>& key, const sharding::Config& c) {
    key.push_back(static_cast<int>(c.splits.size()));
    key.insert(key.end(), c.splits.begin(), c.splits.end());
  };
  auto& key = m_key;
  key.assign({0, signature_id(id), device_list(a.devices)});
  config_into(key, a.config);
  // Each part stored once computed (a cost that throws leaves nothing behind).
  double t = 0;
  if (const auto known = m_times.find(key); known != m_times.end()) {
    t = known->second;
  } else {
    t = cost::op_cost(graph(), id, semantics(id), a.config, a.devices, cluster(), m_request.setup, cost::Saved::kept,
                      {}, 1, false)
            .time_total();
    m_times.emplace(key, t);
  }
  const auto& op = graph().op(id);
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    const graph::TensorId x = op.inputs[i];
    if (x == graph::no_tensor || graph().tensor(x).producer < 0) {
      continue;
    }
    const graph::OpId prod = graph().tensor(x).producer;
    const auto& pa = m_ops[static_cast<std::size_t>(prod)];
    const auto& outputs = graph().op(prod).outputs;
    key.assign({1, signature_id(id), signature_id(prod), static_cast<int>(i),
                static_cast<int>(std::find(outputs.begin(), outputs.end(), x) - outputs.begin()),
                static_cast<int>(std::count(op.inputs.begin(), op.inputs.end(), x)), device_list(a.devices),
                device_list(pa.devices)});
    config_into(key, a.config);
    config_into(key, pa.config);
    if (const auto known = m_times.find(key); known != m_times.end()) {
      t += known->second;
      continue;
    }
    double moved = 0;
    for (const auto& term : strategy::input_redistribution(graph(), m_facts->semantics, m_ops, cluster(),
                                                           m_request.setup, id, i, 1, false)) {
      moved += term.value;
    }
    m_times.emplace(key, moved);
    t += moved;
  }
  return t;
}

void Builder::follow(graph::OpId id) {
  std::vector<sharding::Config> candidates;
  const auto& op = graph().op(id);
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    if (auto c = carried_config(id, i)) {
      candidates.push_back(*c);
    }
  }
  candidates.push_back(split(id, {{batch_dim(id), devices()}}));
  candidates.push_back(sharding::Config{std::vector<int>(semantics(id).dims.size(), 1)});
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  double best_time = std::numeric_limits<double>::infinity();
  sharding::Config best = candidates.front();
  for (const auto& c : candidates) {
    assign(id, c);
    const double t = op_time(id);
    // Prefer more parallelism on ties (more split devices, fewer redundant copies).
    if (t < best_time * (1 - 1e-9) || (t <= best_time * (1 + 1e-9) && c.devices() > best.devices())) {
      best_time = t;
      best = c;
    }
  }
  assign(id, best);
}

void Builder::check_cancel() const {
  if (m_request.cancel != nullptr && m_request.cancel->load()) {
    throw Cancelled();
  }
}

void Builder::progress(double f) const {
  if (m_request.progress) {
    m_request.progress(f);
  }
}

strategy::Strategy Builder::finish(std::string explanation) {
  for (graph::OpId id : m_order) {
    if (!assigned(id)) {
      follow(id);
    }
  }
  strategy::Strategy st;
  st.family = m_family;
  // A batch smaller than the devices cannot be split over them all, whatever the family intends:
  // say so rather than describe splits that did not happen.
  const int batch = strategy::batch_size(graph());
  const bool copies = std::any_of(m_ops.begin(), m_ops.end(), [](const auto& a) { return a.copies() > 1; });
  if (batch < m_request.devices && copies) {
    explanation += batch == 1
                       ? fmt::format(" But the batch is 1, so no op can split it: every split of the batch "
                                     "above is replaced by copies on all {} devices that compute the same "
                                     "thing.",
                                     m_request.devices)
                       : fmt::format(" But the batch ({}) is smaller than the {} devices, so no op splits its "
                                     "batch more than {} ways; the other devices hold copies that compute the "
                                     "same thing.",
                                     batch, m_request.devices, largest_divisor_at_most(batch, m_request.devices));
  }
  st.explanation = std::move(explanation);
  st.devices = m_request.devices;
  st.ops = std::move(m_ops);
  progress(1.0);
  return st;
}

const std::vector<bool>& Builder::repeated() const {
  if (m_facts->repeated.size() == m_order.size()) {
    return m_facts->repeated;
  }
  if (!m_repeated) {
    m_repeated = repeated_ops(graph(), m_order);
  }
  return *m_repeated;
}

int Builder::signature_id(graph::OpId id) const {
  if (m_facts->signature_ids.size() == m_facts->semantics.size()) {
    return m_facts->signature_ids[static_cast<std::size_t>(id)];
  }
  return m_signature_ids.emplace(cost_signature(id), static_cast<int>(m_signature_ids.size())).first->second;
}

const std::string& Builder::cost_signature(graph::OpId id) const {
  const auto i = static_cast<std::size_t>(id);
  if (m_facts->cost_signatures.size() == m_facts->semantics.size()) {
    return m_facts->cost_signatures[i];
  }
  if (m_cost_signatures.empty()) {
    m_cost_signatures.resize(m_facts->semantics.size());
  }
  if (m_cost_signatures[i].empty()) {
    m_cost_signatures[i] = cost::cost_signature(graph(), id, semantics(id), cost::Saved::kept);
  }
  return m_cost_signatures[i];
}

} // namespace partita::search::detail
