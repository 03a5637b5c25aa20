#include "partita/sim/chrome_trace.h"

#include "partita/graph/error.h"
#include "partita/io/json_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace partita::sim {

std::string chrome_trace(const graph::Graph& g, const TaskGraph& tasks, const Result& result) {
  if (result.schedule.size() != tasks.tasks.size()) {
    throw Error(fmt::format("chrome trace: the schedule has {} tasks, the task graph {}", result.schedule.size(),
                            tasks.tasks.size()));
  }
  std::vector<bool> critical(tasks.tasks.size(), false);
  for (int t : result.critical_path) {
    critical[static_cast<std::size_t>(t)] = true;
  }
  std::vector<int> stage_of(static_cast<std::size_t>(tasks.devices), -1);
  for (const auto& t : tasks.tasks) {
    for (int d : tasks.groups[static_cast<std::size_t>(t.group)]) {
      if (stage_of[static_cast<std::size_t>(d)] < 0 && t.kind != TaskKind::send) {
        stage_of[static_cast<std::size_t>(d)] = t.stage;
      }
    }
  }
  auto events = nlohmann::json::array();
  for (int d = 0; d < tasks.devices; ++d) {
    const int stage = stage_of[static_cast<std::size_t>(d)];
    if (static_cast<std::size_t>(d) >= result.devices.size() || !result.devices[static_cast<std::size_t>(d)].used) {
      continue;
    }
    const std::string name =
        tasks.stages > 1 && stage >= 0 ? fmt::format("device {} (stage {})", d, stage) : fmt::format("device {}", d);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", d}, {"args", {{"name", name}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", d}, {"args", {{"sort_index", d}}}});
    for (int s = 0; s < stream_count; ++s) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", d},
                        {"tid", s},
                        {"args", {{"name", std::string(stream_name(static_cast<Stream>(s)))}}}});
    }
  }
  for (std::size_t i = 0; i < tasks.tasks.size(); ++i) {
    const auto& t = tasks.tasks[i];
    if (!(t.duration > 0)) {
      continue;
    }
    const auto& span = result.schedule[i];
    nlohmann::json args = {{"term", std::string(t.term)},
                           {"devices", tasks.groups[static_cast<std::size_t>(t.group)].size()},
                           {"stage", t.stage},
                           {"critical path", critical[i]}};
    if (t.micro_batch >= 0) {
      args["micro-batch"] = t.micro_batch;
    }
    const std::string name = task_name(g, tasks, static_cast<int>(i));
    for (int d : tasks.groups[static_cast<std::size_t>(t.group)]) {
      events.push_back({{"ph", "X"},
                        {"name", name},
                        {"cat", std::string(task_kind_name(t.kind))},
                        {"pid", d},
                        {"tid", static_cast<int>(t.stream)},
                        {"ts", span.start * 1e6},
                        {"dur", (span.finish - span.start) * 1e6},
                        {"args", args}});
    }
  }
  // Memory per device as a counter track: what it holds, in GiB, as the tasks allocate and free.
  for (int d = 0; d < tasks.devices; ++d) {
    if (static_cast<std::size_t>(d) >= result.devices.size() || !result.devices[static_cast<std::size_t>(d)].used) {
      continue;
    }
    for (const auto& [at, bytes] : memory_timeline(tasks, result, d)) {
      events.push_back({{"ph", "C"},
                        {"name", "memory"},
                        {"pid", d},
                        {"ts", at * 1e6},
                        {"args", {{"GiB", bytes / (1024.0 * 1024 * 1024)}}}});
    }
  }
  nlohmann::json trace = {{"traceEvents", std::move(events)},
                          {"displayTimeUnit", "ms"},
                          {"otherData", {{"iteration_seconds", result.iteration_time}}}};
  return trace.dump();
}

void write_chrome_trace(const std::filesystem::path& path, const graph::Graph& g, const TaskGraph& tasks,
                        const Result& result) {
  io::write_file_atomically(path, chrome_trace(g, tasks, result));
}

} // namespace partita::sim
