#include "partita/search/pase.h"

#include "model_builder.h"
#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace partita::search::pase {

namespace {

using GraphFn = void (*)(detail::ModelBuilder&, std::int64_t);

struct Known {
  const char* name;
  GraphFn build;
};

constexpr Known kGraphs[] = {
    {"alexnet", detail::alexnet}, {"resnet101", detail::resnet101},     {"inception3", detail::inception3},
    {"rnnlm", detail::rnnlm},     {"transformer", detail::transformer},
};

std::string split_text(const Layer& l, const std::vector<int>& cfg) {
  std::string s;
  for (std::size_t i = 0; i < cfg.size(); ++i) {
    if (!s.empty()) {
      s += ' ';
    }
    s += fmt::format("{}={}", i < l.dims.size() ? l.dims.substr(i, 1) : std::to_string(i), cfg[i]);
  }
  return s;
}

} // namespace

double comm_ratio(const Options& options) {
  // Peak GFLOP/s over Gwords/s, a word being 8 bytes.
  return (options.flops * 1000.0) / (options.bw / 8.0);
}

const std::vector<std::string>& graph_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& g : kGraphs) {
      n.emplace_back(g.name);
    }
    return n;
  }();
  return names;
}

Model build(std::string_view graph, const Options& options) {
  const auto it = std::find_if(std::begin(kGraphs), std::end(kGraphs), [&](const Known& k) { return graph == k.name; });
  if (it == std::end(kGraphs)) {
    throw Error(fmt::format("pase: unknown graph '{}' (known: {})", graph, fmt::join(graph_names(), ", ")));
  }
  if (options.procs < 1 || options.batch < 1 || !(options.flops > 0) || !(options.bw > 0)) {
    throw Error(fmt::format("pase: procs, batch, flops and bw must be positive (got {}, {}, {}, {})", options.procs,
                            options.batch, options.flops, options.bw));
  }
  detail::ModelBuilder b(it->name, options);
  it->build(b, options.batch);
  return b.finish();
}

Result search(std::string_view graph, const Options& options) {
  const Model model = build(graph, options);
  const dp::Solution solution = dp::solve(model.problem, options.solver);
  Result r;
  r.graph = model.graph;
  r.procs = options.procs;
  r.total_cost = solution.cost;
  r.stats = solution.stats;
  r.vertices = static_cast<int>(model.layers.size());
  r.edges = static_cast<int>(model.problem.edges.size());
  for (std::size_t v = 0; v < model.layers.size(); ++v) {
    const Layer& l = model.layers[v];
    const auto c = static_cast<std::size_t>(solution.choice.at(v));
    r.configs += static_cast<std::int64_t>(l.configs.size());
    r.max_configs = std::max<std::int64_t>(r.max_configs, static_cast<std::int64_t>(l.configs.size()));
    r.layers.push_back({l.name, l.op, split_text(l, l.configs.at(c)), l.costs.at(c)});
  }
  return r;
}

bool is_spec(std::string_view model) {
  if (model.starts_with("zoo:")) {
    model.remove_prefix(4);
  }
  return model == "pase" || model.starts_with("pase?");
}

std::string parse_spec(std::string_view model, Options& options) {
  const std::string spec(model);
  if (!is_spec(model)) {
    throw Error(fmt::format("'{}' is not one of PaSE's graphs: name them zoo:pase?graph=NAME (NAME one of {})", spec,
                            fmt::join(graph_names(), ", ")));
  }
  const auto question = model.find('?');
  std::string_view query = question == std::string_view::npos ? std::string_view{} : model.substr(question + 1);
  std::string graph;
  bool batch_given = false;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (item.empty()) {
      continue;
    }
    const auto eq = item.find('=');
    const std::string key(item.substr(0, eq));
    const std::string value(eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1));
    if (eq == std::string_view::npos) {
      throw Error(fmt::format("{}: expected key=value, got '{}'", spec, key));
    }
    if (key == "graph") {
      if (!graph.empty()) {
        throw Error(fmt::format("{}: parameter 'graph' given twice", spec));
      }
      if (std::find(graph_names().begin(), graph_names().end(), value) == graph_names().end()) {
        throw Error(fmt::format("{}: unknown graph '{}' (known: {})", spec, value, fmt::join(graph_names(), ", ")));
      }
      graph = value;
    } else if (key == "batch") {
      if (batch_given) {
        throw Error(fmt::format("{}: parameter 'batch' given twice", spec));
      }
      int batch = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), batch);
      if (ec != std::errc() || end != value.data() + value.size() || batch < 1) {
        throw Error(fmt::format("{}: batch must be a positive integer, got '{}'", spec, value));
      }
      options.batch = batch;
      batch_given = true;
    } else {
      throw Error(fmt::format("{}: no parameter '{}' (parameters: graph, batch)", spec, key));
    }
  }
  if (graph.empty()) {
    throw Error(fmt::format("{}: which graph? give graph=NAME (NAME one of {})", spec, fmt::join(graph_names(), ", ")));
  }
  return graph;
}

std::string format_cost(double cost) {
  return fmt::format("{:.2f}", cost);
}

} // namespace partita::search::pase
