// partita simulate MODEL --strategy F --devices N [--trace out.json]: one training iteration of a
// family's plan as an event simulation: its time, where each device spends it, the critical path.

#include "commands.h"
#include "model_options.h"
#include "table.h"
#include "validators.h"

#include "partita/graph/error.h"
#include "partita/search/optimizer.h"
#include "partita/sim/chrome_trace.h"
#include "partita/sim/simulate.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>

namespace partita::cli {

namespace {

struct SimulateOptions {
  ModelOptions model;
  SetupOptions setup;
  int devices = 8;
  std::string family = "auto";
  bool no_overlap = false;
  bool no_contention = false;
  double bucket_mb = 25;
  std::string trace;
  int path_limit = 30;
  bool json = false;
};

std::string ms(double seconds) {
  return fmt::format("{:.3f}", seconds * 1e3);
}

std::string percent(double part, double whole) {
  return fmt::format("{:.1f}%", whole > 0 ? 100 * part / whole : 0.0);
}

// The stage each device runs (the first it is seen in), -1 for none.
std::vector<int> device_stages(const sim::TaskGraph& tg) {
  std::vector<int> stage(static_cast<std::size_t>(tg.devices), -1);
  for (const auto& t : tg.tasks) {
    if (t.kind == sim::TaskKind::send) {
      continue;
    }
    for (int d : tg.groups[static_cast<std::size_t>(t.group)]) {
      if (stage[static_cast<std::size_t>(d)] < 0) {
        stage[static_cast<std::size_t>(d)] = t.stage;
      }
    }
  }
  return stage;
}

nlohmann::json to_json(const graph::Graph& g, const sim::Simulation& s, const SimulateOptions& o) {
  const auto& r = s.result;
  nlohmann::json devices = nlohmann::json::array();
  const auto stages = device_stages(s.tasks);
  for (std::size_t d = 0; d < r.devices.size(); ++d) {
    const auto& dev = r.devices[d];
    if (!dev.used) {
      continue;
    }
    devices.push_back({{"device", d},
                       {"stage", stages[d]},
                       {"busy_seconds", dev.busy},
                       {"communication_seconds", dev.communication},
                       {"exposed_communication_seconds", dev.exposed_communication},
                       {"idle_seconds", dev.idle},
                       {"peak_memory_bytes", dev.peak_memory},
                       {"peak_activation_bytes", dev.peak_activations},
                       {"peak_at_seconds", dev.peak_at}});
  }
  nlohmann::json path = nlohmann::json::array();
  for (int t : r.critical_path) {
    const auto& task = s.tasks.tasks[static_cast<std::size_t>(t)];
    path.push_back(
        {{"task", sim::task_name(g, s.tasks, t)},
         {"kind", std::string(sim::task_kind_name(task.kind))},
         {"start_seconds", r.schedule[static_cast<std::size_t>(t)].start},
         {"seconds", r.schedule[static_cast<std::size_t>(t)].finish - r.schedule[static_cast<std::size_t>(t)].start},
         {"priced_seconds", task.duration}});
  }
  return {{"model", o.model.model},
          {"family", o.family},
          {"overlap", !o.no_overlap},
          {"contention", !o.no_contention},
          {"shared_links", s.tasks.links},
          {"bucket_bytes", o.bucket_mb * 1e6},
          {"iteration_seconds", r.iteration_time},
          {"additive_iteration_seconds", s.prediction.iteration_time},
          {"tasks", s.tasks.tasks.size()},
          {"devices", std::move(devices)},
          {"critical_path", std::move(path)}};
}

void print(const graph::Graph& g, const cluster::Cluster& cl, const strategy::Strategy& st, const sim::Simulation& s,
           const SimulateOptions& o) {
  const auto& r = s.result;
  const auto& family = search::find_optimizer(st.family);
  std::cout << fmt::format("simulate {} on {} ({} of {} devices), {}: {}\n", o.model.model, cl.name, o.devices,
                           cl.device_count(), family.name(), family.title());
  std::string pipeline;
  if (st.pipeline) {
    pipeline = fmt::format(", {} stages x {} micro-batches ({}{})", st.pipeline->stages, st.pipeline->micro_batches,
                           strategy::schedule_name(st.pipeline->schedule),
                           st.pipeline->chunks > 1 ? fmt::format(", {} chunks per stage", st.pipeline->chunks) : "");
  }
  std::string links;
  if (o.no_contention) {
    links = "; transfers do not share links";
  } else if (!s.tasks.links.empty()) {
    links = fmt::format("; transfers at once share the NICs of {} node{}", s.tasks.links.size(),
                        s.tasks.links.size() == 1 ? "" : "s");
  }
  std::cout << fmt::format("{} tasks{}; overlap {}{}{}\n\n", s.tasks.tasks.size(), pipeline,
                           o.no_overlap ? "off" : "on",
                           o.no_overlap ? "" : fmt::format(", gradient buckets of {:g} MB", o.bucket_mb), links);

  Table t({{"device"},
           {"stage"},
           {"busy ms"},
           {"comm ms"},
           {"exposed comm ms"},
           {"idle ms"},
           {"busy"},
           {"peak MiB"},
           {"peak at ms"}});
  const auto stages = device_stages(s.tasks);
  for (std::size_t d = 0; d < r.devices.size(); ++d) {
    const auto& dev = r.devices[d];
    if (!dev.used) {
      continue;
    }
    t.add_row({std::to_string(d), stages[d] >= 0 ? std::to_string(stages[d]) : "-", ms(dev.busy), ms(dev.communication),
               ms(dev.exposed_communication), ms(dev.idle), percent(dev.busy, r.iteration_time), mib(dev.peak_memory),
               ms(dev.peak_at)});
  }
  std::cout << t.render();

  // The critical path: how much of it each kind of task is, then the tasks in order.
  std::map<std::string, double> by_kind;
  for (int task : r.critical_path) {
    const auto& k = s.tasks.tasks[static_cast<std::size_t>(task)];
    const auto& span = r.schedule[static_cast<std::size_t>(task)];
    by_kind[std::string(sim::task_kind_name(k.kind))] += span.finish - span.start;
  }
  std::vector<std::pair<std::string, double>> kinds(by_kind.begin(), by_kind.end());
  std::sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string split;
  for (const auto& [kind, seconds] : kinds) {
    split += fmt::format("{}{} {}", split.empty() ? "" : ", ", kind, percent(seconds, r.iteration_time));
  }
  std::cout << fmt::format("\ncritical path: {} tasks ({})\n", r.critical_path.size(), split);
  Table path({{"start ms"}, {"ms"}, {"task", Table::Align::left}});
  const auto shown = std::min<std::size_t>(r.critical_path.size(), static_cast<std::size_t>(o.path_limit));
  for (std::size_t i = 0; i < shown; ++i) {
    const int task = r.critical_path[i];
    const auto& span = r.schedule[static_cast<std::size_t>(task)];
    const double priced = s.tasks.tasks[static_cast<std::size_t>(task)].duration;
    const double took = span.finish - span.start;
    std::string name = sim::task_name(g, s.tasks, task);
    if (took > priced * (1 + 1e-9)) {
      name += fmt::format(" (priced {} ms; links shared)", ms(priced));
    }
    path.add_row({ms(span.start), ms(took), name});
  }
  std::cout << path.render();
  if (shown < r.critical_path.size()) {
    std::cout << fmt::format("... {} more (--path-limit)\n", r.critical_path.size() - shown);
  }
  const double additive = s.prediction.iteration_time;
  double change = additive > 0 ? 100 * (r.iteration_time / additive - 1) : 0.0;
  change = std::abs(change) < 0.05 ? 0.0 : change; // no "-0.0%" for rounding noise
  std::cout << fmt::format("\niteration {} ms simulated; the additive prediction is {} ms ({:+.1f}%)\n",
                           ms(r.iteration_time), ms(additive), change);
  std::cout << fmt::format("throughput {:.1f} samples/s at batch {}\n",
                           r.iteration_time > 0 ? s.prediction.batch / r.iteration_time : 0.0, s.prediction.batch);
  if (!o.trace.empty()) {
    std::cout << fmt::format("trace written to {} (open it in https://ui.perfetto.dev)\n", o.trace);
  }
}

} // namespace

void add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  auto* cmd = app.add_subcommand(
      "simulate", "Simulate one training iteration of a strategy: time, per-device breakdown, critical path, trace");
  o->model.add_to(*cmd);
  o->setup.add_to(*cmd);
  cmd->add_option("--devices", o->devices, "devices to use")
      ->check(whole(1, max_devices, "devices"))
      ->capture_default_str();
  o->setup.strategy_option =
      cmd->add_option("--strategy", o->family, "strategy family (see partita compare --help)")->capture_default_str();
  cmd->add_flag("--no-overlap", o->no_overlap,
                "run one task at a time per pipeline stage, as the additive prediction assumes");
  cmd->add_flag("--no-contention", o->no_contention,
                "run every transfer at its priced rate, even where transfers at once share a node's NICs");
  cmd->add_option("--bucket-mb", o->bucket_mb, "gradient synchronization bucket size in MB (PyTorch DDP's 25)")
      ->capture_default_str();
  cmd->add_option("--trace", o->trace, "write the timeline as Chrome trace JSON (Perfetto opens it)");
  cmd->add_option("--path-limit", o->path_limit, "critical-path tasks to list")
      ->check(whole(0, 1 << 30, "tasks"))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print JSON instead of tables");
  cmd->callback([o] {
    if (!(o->bucket_mb > 0) || !std::isfinite(o->bucket_mb)) {
      throw Error(fmt::format("--bucket-mb {}: a bucket must hold a positive number of MB", o->bucket_mb));
    }
    o->model.check_output(o->trace, "--trace");
    const auto model = o->model.load();
    const auto& g = model.graph;
    const auto cl = cluster_for(o->setup.cluster, o->devices);
    const auto planned = make_plan(g, cl, o->devices, o->setup, o->family, o->model, std::nullopt);
    sim::Simulation s;
    s.prediction = planned.prediction;
    s.tasks = sim::build_task_graph(
        g, planned.strategy, s.prediction, cl,
        {.overlap = !o->no_overlap, .bucket_bytes = o->bucket_mb * 1e6, .contention = !o->no_contention});
    s.result = sim::simulate(s.tasks);
    if (!o->trace.empty()) {
      sim::write_chrome_trace(o->trace, g, s.tasks, s.result);
    }
    if (o->json) {
      std::cout << to_json(g, s, *o).dump(2) << "\n";
      return;
    }
    print(g, cl, planned.strategy, s, *o);
  });
}

} // namespace partita::cli
