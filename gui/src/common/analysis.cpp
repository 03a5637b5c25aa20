#include "common/analysis.h"

#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/plan_file.h"
#include "partita/zoo/zoo.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace partita::gui {

namespace {

bool is_preset(const std::string& spec) {
  return spec.find('?') == std::string::npos && spec.find('/') == std::string::npos &&
         spec.find(".json") == std::string::npos;
}

std::string config_text(const strategy::OpAssignment& a, const graph::OpSemantics& s) {
  std::string text = sharding::to_string(a.config, s);
  if (a.copies() > 1) {
    text += fmt::format(" x{} copies", a.copies());
  }
  return text;
}

void check_cancel(const std::atomic<bool>* cancel) {
  if (cancel != nullptr && cancel->load()) {
    throw Cancelled();
  }
}

strategy::Schedule parse_schedule(const std::string& name) {
  if (name == "gpipe") {
    return strategy::Schedule::gpipe;
  }
  if (name == "1f1b") {
    return strategy::Schedule::one_f_one_b;
  }
  if (name == "interleaved") {
    return strategy::Schedule::interleaved;
  }
  throw Error(fmt::format("schedule '{}': expected gpipe, 1f1b or interleaved", name));
}

search::Request make_request(const graph::Graph& g, const cluster::Cluster& c, const AnalysisInput& input,
                             const cost::TrainingSetup& setup, const std::atomic<bool>* cancel) {
  search::Request r;
  r.graph = &g;
  r.cluster = &c;
  r.devices = input.devices;
  r.setup = setup;
  r.cancel = cancel;
  r.tensor_parallel = input.tensor_parallel;
  r.stages = input.stages;
  r.micro_batches = input.micro_batches;
  if (input.family == "megatron" || input.family == "3d") {
    r.pipeline_parallel = input.stages; // Megatron-LM's --pipeline-model-parallel-size
    r.stages = 0;
  }
  r.schedule = parse_schedule(input.schedule);
  // The form always holds a chunk count; it is the interleaved schedule's alone (the field is
  // disabled under the others).
  r.chunks = r.schedule == strategy::Schedule::interleaved ? input.chunks : 0;
  r.balance = input.balance;
  r.stage_layout = input.stage_layout;
  if (input.family == "3d") {
    // The form always shows a schedule and a setup: the 3-D search holds the interleaved schedule
    // (with its chunks) when chosen, refuses GPipe with the reason, and searches the rest; the ZeRO
    // stage, recomputation and sequence parallelism are searched (the CLI holds those typed; the
    // form cannot tell).
    r.held.schedule = r.schedule != strategy::Schedule::one_f_one_b;
  }
  return r;
}

proto::Cluster custom_proto(const AnalysisInput& input) {
  proto::Cluster p;
  io::parse_json(input.custom_cluster, "edited cluster", p);
  return p;
}

// The strategy's iteration under the event simulator, which becomes the prediction's iteration
// time (sim::simulate_prediction, as `partita plan` shows it), unless it has more than
// max_simulated_tasks tasks: then the terms added up, with a note.
void simulate_iteration(Analysis& a) {
  try {
    const auto notes = a.prediction.notes.size();
    auto s = sim::simulate_prediction(a.model.graph, a.cluster, a.strategy, a.prediction, {}, max_simulated_tasks);
    if (s) {
      a.simulation = SimulatedIteration{std::move(s->tasks), std::move(s->result)};
    } else if (a.prediction.notes.size() > notes) {
      a.simulation_note = fmt::format("Not simulated: {}.", a.prediction.notes.back());
    }
  } catch (const Error& e) {
    a.simulation_note = fmt::format("Not simulated: {}", e.what());
  }
}

std::string model_label(const AnalysisInput& input) {
  if (input.model.rfind("zoo:", 0) == 0) {
    return input.model;
  }
  std::string settings = input.dims;
  if (input.values.find_first_not_of(' ') != std::string::npos) {
    settings += (settings.empty() ? "" : ", ") + input.values;
  }
  return settings.empty() ? input.model : input.model + " (" + settings + ")";
}

} // namespace

const LayerResult* Analysis::layer_of(graph::OpId id) const {
  const auto it = std::find_if(layers.begin(), layers.end(), [id](const LayerResult& l) { return l.op == id; });
  return it == layers.end() ? nullptr : &*it;
}

cluster::Cluster load_input_cluster(const AnalysisInput& input) {
  cluster::Cluster c;
  if (!input.custom_cluster.empty()) {
    const auto p = custom_proto(input);
    c = cluster::from_proto(p, fmt::format("edited cluster '{}'", p.name()));
  } else {
    std::string spec = input.cluster;
    if (is_preset(spec) && input.nodes > 1) {
      spec += fmt::format("?nodes={}", input.nodes);
    }
    c = cluster::load_cluster(spec);
  }
  if (input.devices < 1 || input.devices > c.device_count()) {
    throw Error(fmt::format("{} devices requested, cluster '{}' has {} ({} node{} of {}): add nodes", input.devices,
                            c.name, c.device_count(), c.nodes, c.nodes == 1 ? "" : "s", c.devices_per_node));
  }
  return c;
}

proto::Cluster input_cluster_proto(const AnalysisInput& input) {
  if (!input.custom_cluster.empty()) {
    return custom_proto(input);
  }
  AnalysisInput one = input;
  one.devices = 1;
  return cluster::to_proto(load_input_cluster(one));
}

int nodes_for(const AnalysisInput& input) {
  if (!input.custom_cluster.empty()) {
    return std::max(1, custom_proto(input).nodes());
  }
  const int nodes = std::max(1, input.nodes);
  if (!is_preset(input.cluster)) {
    return nodes;
  }
  const auto one = cluster::load_cluster(input.cluster);
  const int per_node = std::max(1, one.devices_per_node);
  return std::max(nodes, (input.devices + per_node - 1) / per_node);
}

void check_parallelism(const AnalysisInput& input) {
  (void)parse_schedule(input.schedule);
  const auto whole = [](const char* field, int value, int lo, int hi) {
    if (value < lo || value > hi) {
      throw Error(fmt::format("{} {}: expected a whole number from {} to {}", field, value, lo, hi));
    }
  };
  whole("tensor-parallel width", input.tensor_parallel, 0, 1 << 16);
  whole("pipeline stages", input.stages, 0, 1 << 16);
  whole("micro-batches", input.micro_batches, 0, 1 << 30);
  whole("chunks", input.chunks, 2, 1024);
  if (input.balance != "time" && input.balance != "layers" && input.balance != "speed" && input.balance != "even") {
    throw Error(fmt::format("cut '{}': expected time, layers, speed or even", input.balance));
  }
  if (!input.stage_layout.empty() && input.stage_layout != "auto" && input.stage_layout != "searched") {
    throw Error(fmt::format("stage layout '{}': expected auto, searched or none", input.stage_layout));
  }
}

proto::TrainingSetup input_setup_proto(const AnalysisInput& input) {
  proto::TrainingSetup p;
  p.set_precision(input.precision);
  p.set_optimizer(input.optimizer);
  p.set_zero_stage(input.zero_stage);
  p.set_recompute(input.recompute);
  p.set_sequence_parallel(input.sequence_parallel);
  p.set_fp32_gradients(input.fp32_gradients);
  return p;
}

cost::TrainingSetup input_setup(const AnalysisInput& input) {
  return strategy::setup_from_proto(input_setup_proto(input), "training set-up");
}

onnx_import::ImportOptions input_import_options(const AnalysisInput& input) {
  onnx_import::ImportOptions options;
  try {
    options = onnx_import::parse_dims(input.dims);
  } catch (const Error& e) {
    throw Error(fmt::format("parameters: {}", e.what()));
  }
  if (input.values.find_first_not_of(' ') == std::string::npos) {
    return options;
  }
  if (input.model.rfind("zoo:", 0) == 0) {
    throw Error("input values: a built-in model (zoo:) has no inputs to fix; they are for ONNX files");
  }
  try {
    onnx_import::parse_values(input.values, options);
  } catch (const Error& e) {
    throw Error(fmt::format("input values: {}", e.what()));
  }
  return options;
}

onnx_import::ImportResult load_input_model(const AnalysisInput& input) {
  return zoo::load(input.model, input_import_options(input));
}

std::shared_ptr<const Analysis> run_analysis(const AnalysisInput& input, const std::atomic<bool>* cancel,
                                             const ProgressFn& progress) {
  auto report = [&](double f) {
    if (progress) {
      progress(f);
    }
  };
  auto a = std::make_shared<Analysis>();
  a->input = input;
  a->model_label = model_label(input);
  a->setup = input_setup(input);
  check_parallelism(input);
  a->cluster = load_input_cluster(input);
  const auto& family = search::find_optimizer(input.family);
  a->family_title = family.title();
  report(0.02);
  a->model = load_input_model(input);
  check_cancel(cancel);
  report(0.2);
  const auto& g = a->model.graph;
  auto request = make_request(g, a->cluster, input, a->setup, cancel);
  request.progress = [&](double f) { report(0.2 + 0.6 * f); };
  if (input.family == "auto") {
    a->search = search::auto_search(request);
    a->strategy = a->search->strategy;
  } else if (input.family == "3d") {
    search::three_d::Result result;
    a->strategy = search::three_d::optimize(request, &result);
    a->three_d = std::move(result);
  } else {
    a->strategy = family.optimize(request);
  }
  check_cancel(cancel);
  report(0.8);
  a->prediction = strategy::evaluate(g, a->cluster, a->strategy, a->setup);
  if (a->search) {
    request.progress = {};
    a->families = search::compare_with_families(request, a->strategy);
    check_cancel(cancel);
  }
  simulate_iteration(*a);
  check_cancel(cancel);
  a->summary = graph::summarize(g);
  a->semantics.reserve(g.ops().size());
  for (graph::OpId id = 0; id < static_cast<graph::OpId>(g.ops().size()); ++id) {
    a->semantics.push_back(graph::describe(g, id));
  }
  const auto& p = a->prediction;
  for (const auto& row : a->summary.rows) {
    const auto i = static_cast<std::size_t>(row.op);
    const auto& pred = p.ops[i];
    LayerResult l;
    l.op = row.op;
    l.type = row.type;
    l.name = row.name;
    l.output_shape = graph::shape_string(row.output_shape);
    l.configuration = config_text(a->strategy.ops[i], a->semantics[i]);
    if (const auto& pipe = a->strategy.pipeline; pipe && i < pipe->stage_of_op.size() && pipe->stages > 0) {
      l.stage = pipe->stage_of_op[i] % pipe->stages;
      l.chunk = pipe->chunks > 1 ? pipe->stage_of_op[i] / pipe->stages : -1;
    }
    l.redistribution = pred.cost.redistribution_time();
    l.compute = pred.cost.compute_time();
    l.communication = std::max(0.0, pred.cost.communication_time() - l.redistribution);
    l.time = pred.time;
    l.memory = pred.cost.memory_total();
    l.share = p.additive_time > 0 ? pred.time / p.additive_time : 0; // of the terms added up
    if (a->search && i < a->search->ops.size() && a->search->ops[i].has_runner_up) {
      const auto& r = a->search->ops[i];
      l.runner_up = sharding::to_string(r.runner_up, a->semantics[i]);
      l.runner_up_delta = r.runner_up_delta;
    }
    if (a->families) {
      const auto& d = a->families->different;
      l.differs_from_family = std::find(d.begin(), d.end(), row.op) != d.end();
    }
    a->layers.push_back(std::move(l));
  }
  report(1.0);
  return a;
}

std::vector<const search::Optimizer*> offered_families() {
  std::vector<const search::Optimizer*> out;
  for (const auto& f : search::optimizers()) {
    if (f->name() != "given") {
      out.push_back(f.get());
    }
  }
  return out;
}

namespace {

// The input at `devices` devices: a preset grows by whole nodes, as for an evaluation.
cluster::Cluster cluster_at(const AnalysisInput& input, int devices) {
  AnalysisInput at = input;
  at.devices = devices;
  at.nodes = nodes_for(at);
  return load_input_cluster(at);
}

std::vector<search::SweepCell> sweep_input(const graph::Graph& g, const AnalysisInput& input,
                                           const std::vector<std::string>& families, const std::vector<int>& devices,
                                           const std::atomic<bool>* cancel, const ProgressFn& progress) {
  search::SweepRequest request;
  request.families = families;
  request.devices = devices;
  request.cluster_for = [&input](int n) { return cluster_at(input, n); };
  request.base.setup = input_setup(input);
  request.base.cancel = cancel;
  request.progress = progress;
  return search::sweep(g, request);
}

} // namespace

std::shared_ptr<const Comparison> run_comparison(const AnalysisInput& input, const std::atomic<bool>* cancel,
                                                 const ProgressFn& progress) {
  auto c = std::make_shared<Comparison>();
  c->input = input;
  c->model_label = model_label(input);
  (void)input_setup(input);
  (void)load_input_cluster(input); // too few devices is an error here, not a row per family
  const auto model = load_input_model(input);
  check_cancel(cancel);
  std::vector<std::string> names;
  for (const auto* f : offered_families()) {
    names.emplace_back(f->name());
  }
  auto cells = sweep_input(model.graph, input, names, {input.devices}, cancel, progress);
  for (auto& cell : cells) {
    const auto& f = search::find_optimizer(cell.family);
    c->families.push_back(
        FamilyResult{cell.family, std::string(f.title()), std::move(cell.prediction), std::move(cell.error)});
  }
  return c;
}

const search::SweepCell* Sweep::cell(const std::string& family, int n) const {
  const auto it = std::find_if(cells.begin(), cells.end(),
                               [&](const search::SweepCell& c) { return c.family == family && c.devices == n; });
  return it == cells.end() ? nullptr : &*it;
}

std::vector<int> default_sweep_devices(int max) {
  std::vector<int> out;
  for (int n = 1; n <= max; n *= 2) {
    out.push_back(n);
    if (n > (1 << 29)) {
      break;
    }
  }
  if (max >= 1 && out.back() != max) {
    out.push_back(max);
  }
  return out;
}

std::vector<int> parse_device_list(const std::string& text) {
  std::vector<int> out;
  std::string item;
  auto flush = [&] {
    if (item.empty()) {
      return;
    }
    int value = 0;
    const char* end = item.data() + item.size();
    if (std::from_chars(item.data(), end, value).ptr != end || value < 1) {
      throw Error(fmt::format("device count '{}': expected a whole number of at least 1", item));
    }
    out.push_back(value);
    item.clear();
  };
  for (char ch : text) {
    if (ch == ',' || ch == ' ' || ch == ';') {
      flush();
    } else {
      item += ch;
    }
  }
  flush();
  if (out.empty()) {
    throw Error("device counts: none given (e.g. 1,2,4,8)");
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::shared_ptr<const Sweep> run_sweep(const AnalysisInput& input, const std::vector<std::string>& families,
                                       const std::vector<int>& devices, const std::atomic<bool>* cancel,
                                       const ProgressFn& progress) {
  if (families.empty()) {
    throw Error("scaling sweep: no strategy family selected");
  }
  if (devices.empty()) {
    throw Error("scaling sweep: no device counts");
  }
  auto s = std::make_shared<Sweep>();
  s->input = input;
  s->model_label = model_label(input);
  s->families = families;
  s->devices = devices;
  std::sort(s->devices.begin(), s->devices.end());
  for (const auto& f : families) {
    s->titles.emplace_back(search::find_optimizer(f).title());
  }
  s->cluster_name = cluster_at(input, s->devices.back()).name; // a too-small cluster fails before any work
  const auto model = load_input_model(input);
  check_cancel(cancel);
  s->cells = sweep_input(model.graph, input, families, s->devices, cancel, progress);
  return s;
}

AnalysisInput second_input(const AnalysisInput& first, const SideBySideChoice& choice) {
  AnalysisInput b = first;
  b.family = choice.family;
  if (!choice.custom_cluster.empty()) {
    b.cluster = choice.cluster;
    b.custom_cluster = choice.custom_cluster;
    b.nodes = choice.nodes;
  } else if (!choice.cluster.empty()) {
    b.cluster = choice.cluster;
    b.custom_cluster.clear();
    b.nodes = choice.nodes;
  }
  if (choice.devices > 0) {
    b.devices = choice.devices;
  }
  b.nodes = nodes_for(b);
  return b;
}

std::shared_ptr<const SideBySide> run_side_by_side(const AnalysisInput& first, const SideBySideChoice& choice,
                                                   const std::atomic<bool>* cancel, const ProgressFn& progress) {
  auto half = [&](double offset) {
    return [&progress, offset](double f) {
      if (progress) {
        progress(offset + 0.5 * f);
      }
    };
  };
  auto out = std::make_shared<SideBySide>();
  out->a = run_analysis(first, cancel, half(0.0));
  out->b = run_analysis(second_input(first, choice), cancel, half(0.5));
  return out;
}

} // namespace partita::gui
