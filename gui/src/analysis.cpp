#include "analysis.h"

#include "partita/graph/error.h"
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

search::Request make_request(const graph::Graph& g, const cluster::Cluster& c, const AnalysisInput& input,
                             const cost::TrainingSetup& setup, const std::atomic<bool>* cancel) {
  search::Request r;
  r.graph = &g;
  r.cluster = &c;
  r.devices = input.devices;
  r.setup = setup;
  r.cancel = cancel;
  return r;
}

std::string model_label(const AnalysisInput& input) {
  return input.dims.empty() || input.model.rfind("zoo:", 0) == 0 ? input.model : input.model + " (" + input.dims + ")";
}

} // namespace

const LayerResult* Analysis::layer_of(graph::OpId id) const {
  const auto it = std::find_if(layers.begin(), layers.end(), [id](const LayerResult& l) { return l.op == id; });
  return it == layers.end() ? nullptr : &*it;
}

cluster::Cluster load_input_cluster(const AnalysisInput& input) {
  std::string spec = input.cluster;
  if (is_preset(spec) && input.nodes > 1) {
    spec += fmt::format("?nodes={}", input.nodes);
  }
  auto c = cluster::load_cluster(spec);
  if (input.devices < 1 || input.devices > c.device_count()) {
    throw Error(fmt::format("{} devices requested, cluster '{}' has {} ({} node{} of {}): add nodes", input.devices,
                            c.name, c.device_count(), c.nodes, c.nodes == 1 ? "" : "s", c.devices_per_node));
  }
  return c;
}

int nodes_for(const AnalysisInput& input) {
  const int nodes = std::max(1, input.nodes);
  if (!is_preset(input.cluster)) {
    return nodes;
  }
  const auto one = cluster::load_cluster(input.cluster);
  const int per_node = std::max(1, one.devices_per_node);
  return std::max(nodes, (input.devices + per_node - 1) / per_node);
}

cost::TrainingSetup input_setup(const AnalysisInput& input) {
  proto::TrainingSetup p;
  p.set_precision(input.precision);
  p.set_optimizer(input.optimizer);
  p.set_zero_stage(input.zero_stage);
  p.set_recompute(input.recompute);
  return strategy::setup_from_proto(p, "training set-up");
}

onnx_import::ImportResult load_input_model(const AnalysisInput& input) {
  return zoo::load(input.model, onnx_import::parse_dims(input.dims));
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
  a->strategy = family.optimize(request);
  check_cancel(cancel);
  report(0.8);
  a->prediction = strategy::evaluate(g, a->cluster, a->strategy, a->setup);
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
    l.redistribution = pred.cost.get(cost::term::redistribution);
    l.compute = pred.cost.compute_time();
    l.communication = std::max(0.0, pred.cost.communication_time() - l.redistribution);
    l.time = pred.time;
    l.memory = pred.cost.memory_total();
    l.share = p.iteration_time > 0 ? pred.time / p.iteration_time : 0;
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

std::shared_ptr<const Comparison> run_comparison(const AnalysisInput& input, const std::atomic<bool>* cancel,
                                                 const ProgressFn& progress) {
  auto c = std::make_shared<Comparison>();
  c->input = input;
  c->model_label = model_label(input);
  const auto setup = input_setup(input);
  const auto cl = load_input_cluster(input);
  const auto model = load_input_model(input);
  const auto& g = model.graph;
  const auto families = offered_families();
  for (std::size_t i = 0; i < families.size(); ++i) {
    check_cancel(cancel);
    const auto& f = *families[i];
    FamilyResult r{std::string(f.name()), std::string(f.title()), {}, {}};
    auto request = make_request(g, cl, input, setup, cancel);
    const double n = static_cast<double>(families.size());
    request.progress = [&](double x) {
      if (progress) {
        progress((static_cast<double>(i) + x) / n);
      }
    };
    try {
      r.prediction = strategy::evaluate(g, cl, f.optimize(request), setup);
    } catch (const Cancelled&) {
      throw;
    } catch (const Error& e) {
      r.error = e.what();
    }
    c->families.push_back(std::move(r));
  }
  if (progress) {
    progress(1.0);
  }
  return c;
}

} // namespace partita::gui
