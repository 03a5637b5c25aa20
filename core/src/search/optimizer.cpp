#include "partita/search/optimizer.h"

#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"
#include "partita/search/auto_search.h"
#include "partita/search/bapipe.h"
#include "partita/search/three_d.h"
#include "search/families.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <unordered_map>

namespace partita::search {
namespace {

class Family final : public Optimizer {
public:
  using Fn = strategy::Strategy (*)(const Request&);
  Family(std::string_view name, std::string_view title, std::string_view description, Fn fn,
         std::vector<std::string_view> options = {})
      : m_name(name), m_title(title), m_description(description), m_fn(fn), m_options(std::move(options)) {}
  std::string_view name() const override { return m_name; }
  std::string_view title() const override { return m_title; }
  std::string_view description() const override { return m_description; }
  strategy::Strategy optimize(const Request& request) const override { return m_fn(request); }
  std::span<const std::string_view> options() const override { return m_options; }

private:
  std::string_view m_name, m_title, m_description;
  Fn m_fn;
  std::vector<std::string_view> m_options;
};

// What each family reads of a Request beyond the model, cluster, devices and setup, by option.
// The per-layer search's own (auto_search), also read where a family runs it on a stage's devices.
std::vector<std::string_view> search_options() {
  return {"--all-divisors", "--min-piece", "--search-limit", "--bounded-tables", "--search-threads"};
}
std::vector<std::string_view> with(std::vector<std::string_view> a, const std::vector<std::string_view>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

} // namespace

const std::vector<std::unique_ptr<Optimizer>>& optimizers() {
  static const auto all = [] {
    std::vector<std::unique_ptr<Optimizer>> v;
    v.push_back(std::make_unique<Family>(
        "auto", "automatic per-layer search",
        "the fastest configuration of every op for the whole graph at once, by exact dynamic programming (PaSE, "
        "Elango 2021), within the memory limit",
        [](const Request& r) { return auto_search(r).strategy; },
        with(search_options(), {"--memory-limit", "--simulation-budget"})));
    v.push_back(std::make_unique<Family>(
        "dp", "data parallel", "replicate weights, split the batch, all-reduce gradients", detail::data_parallel));
    v.push_back(std::make_unique<Family>("mp", "model parallel", "split every layer's output features over all devices",
                                         detail::model_parallel));
    v.push_back(std::make_unique<Family>(
        "owt", "one weird trick", "data parallel convolutions, model parallel fully-connected layers (Krizhevsky 2014)",
        detail::one_weird_trick));
    v.push_back(std::make_unique<Family>(
        "megatron", "Megatron tensor parallel",
        "column/row-parallel matrix products inside a node, data parallel across (Shoeybi et al. 2019)",
        detail::megatron,
        std::vector<std::string_view>{"--tp", "--pp", "--micro-batch-size", "--micro-batches", "--schedule", "--chunks",
                                      "--balance"}));
    v.push_back(std::make_unique<Family>(
        "hybrid", "hybrid DP+MP in groups",
        "model parallel inside groups, data parallel across, group size by predicted time (Pal et al. 2019)",
        detail::hybrid));
    v.push_back(std::make_unique<Family>("ghp", "group hybrid parallelism",
                                         "layer-wise model parallel inside groups, data parallel across, group size by "
                                         "predicted time (Joo & Youn 2021)",
                                         detail::group_hybrid));
    v.push_back(std::make_unique<Family>(
        "gholami", "Gholami Pr x Pc grid",
        "model or spatial-domain parallel along Pr, batch along Pc, grid by communication volume (Gholami et al. 2018)",
        detail::gholami));
    v.push_back(std::make_unique<Family>(
        "pipeline", "pipeline (GPipe / 1F1B)",
        "contiguous stages with data parallelism inside, micro-batches, bubble by schedule",
        [](const Request& r) { return detail::pipeline(r); },
        with(search_options(), {"--tp", "--stages", "--micro-batches", "--schedule", "--chunks", "--balance", "--cuts",
                                "--stage-layout", "--memory-limit", "--simulation-budget"})));
    v.push_back(std::make_unique<Family>(
        "bapipe", "balanced pipeline (BaPipe)",
        "contiguous stages cut by exact dynamic programming to balance compute, communication and memory, the stage "
        "count searched (Zhao et al. 2020)",
        bapipe::optimize,
        std::vector<std::string_view>{"--tp", "--stages", "--micro-batches", "--schedule", "--chunks", "--cuts",
                                      "--memory-limit", "--simulation-budget"}));
    v.push_back(std::make_unique<Family>(
        "3d", "3-D search (pipeline x tensor x data)",
        "pipeline stages, tensor-parallel width, data replicas, micro-batch, schedule, ZeRO stage, recomputation and "
        "sequence parallelism searched together on Megatron-LM's layout, the fastest plan that fits",
        [](const Request& r) { return three_d::optimize(r); },
        with(search_options(), {"--tp", "--pp", "--micro-batch-size", "--micro-batches", "--schedule", "--chunks",
                                "--memory-limit", "--simulation-budget"})));
    v.push_back(std::make_unique<Family>("given", "as given", "a strategy read from a plan file (--plan FILE)",
                                         detail::given, std::vector<std::string_view>{"--plan"}));
    return v;
  }();
  return all;
}

const Optimizer& find_optimizer(std::string_view name) {
  std::vector<std::string_view> names;
  for (const auto& o : optimizers()) {
    if (o->name() == name) {
      return *o;
    }
    names.push_back(o->name());
  }
  throw Error(fmt::format("unknown strategy family '{}' (known: {})", name, fmt::join(names, ", ")));
}

std::vector<std::string_view> families_reading(std::string_view option) {
  std::vector<std::string_view> out;
  for (const auto& o : optimizers()) {
    const auto options = o->options();
    if (std::find(options.begin(), options.end(), option) != options.end()) {
      out.push_back(o->name());
    }
  }
  return out;
}

std::shared_ptr<const ModelFacts> ModelFacts::of(const graph::Graph& g) {
  auto facts = std::make_shared<ModelFacts>();
  facts->semantics.reserve(g.ops().size());
  facts->cost_signatures.reserve(g.ops().size());
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    const auto id = static_cast<graph::OpId>(i);
    facts->semantics.push_back(graph::describe(g, id));
    facts->cost_signatures.push_back(cost::cost_signature(g, id, facts->semantics.back(), cost::Saved::kept));
  }
  std::unordered_map<std::string_view, int> ids;
  facts->signature_ids.reserve(g.ops().size());
  for (const auto& signature : facts->cost_signatures) {
    facts->signature_ids.push_back(ids.emplace(signature, static_cast<int>(ids.size())).first->second);
  }
  facts->order = g.topological_order();
  facts->repeated = detail::repeated_ops(g, facts->order);
  facts->batch_dims = detail::batch_dims(g, facts->semantics, facts->order);
  return facts;
}

} // namespace partita::search
