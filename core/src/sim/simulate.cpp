#include "partita/sim/simulate.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <queue>
#include <utility>

namespace partita::sim {
namespace {

void check(const TaskGraph& tg) {
  if (tg.devices < 1 || tg.stages < 1 || tg.micro_batches < 1) {
    throw Error(fmt::format("simulate: a task graph of {} devices, {} stages and {} micro-batches; each must be >= 1",
                            tg.devices, tg.stages, tg.micro_batches));
  }
  for (const auto& group : tg.groups) {
    for (int d : group) {
      if (d < 0 || d >= tg.devices) {
        throw Error(fmt::format("simulate: device {} of a task group is not among the {} devices", d, tg.devices));
      }
    }
  }
  for (std::size_t i = 0; i < tg.tasks.size(); ++i) {
    const auto& t = tg.tasks[i];
    if (t.group < 0 || static_cast<std::size_t>(t.group) >= tg.groups.size()) {
      throw Error(fmt::format("simulate: task {}: device group {} does not exist", i, t.group));
    }
    if (t.stage < 0 || t.stage >= tg.stages) {
      throw Error(fmt::format("simulate: task {}: stage {} is not one of {}", i, t.stage, tg.stages));
    }
    if (!std::isfinite(t.duration) || t.duration < 0) {
      throw Error(fmt::format("simulate: task {}: duration {} s; it must be finite and >= 0", i, t.duration));
    }
    for (int a : t.after) {
      if (a < 0 || static_cast<std::size_t>(a) >= i) {
        throw Error(fmt::format("simulate: task {} comes after task {}; a task comes after earlier tasks only", i, a));
      }
    }
  }
}

// The length of the union of sorted, disjoint spans `a` that `b` (sorted, disjoint) does not cover.
double uncovered(const std::vector<Span>& a, const std::vector<Span>& b) {
  double total = 0;
  std::size_t j = 0;
  for (const auto& s : a) {
    double covered = 0;
    while (j < b.size() && b[j].finish <= s.start) {
      ++j;
    }
    for (std::size_t k = j; k < b.size() && b[k].start < s.finish; ++k) {
      covered += std::min(s.finish, b[k].finish) - std::max(s.start, b[k].start);
    }
    total += (s.finish - s.start) - covered;
  }
  return total;
}

double length(const std::vector<Span>& spans) {
  double total = 0;
  for (const auto& s : spans) {
    total += s.finish - s.start;
  }
  return total;
}

// Busy, communication, exposed and idle time per device. Devices that take part in the same task
// groups run the same spans (a stage's data x tensor grid does): each such class is measured once.
void account_devices(const TaskGraph& tg, Result& r) {
  const auto devices = static_cast<std::size_t>(tg.devices);
  std::vector<bool> group_used(tg.groups.size(), false);
  for (const auto& t : tg.tasks) {
    group_used[static_cast<std::size_t>(t.group)] = true;
  }
  std::vector<std::vector<int>> groups_of(devices);
  for (std::size_t g = 0; g < tg.groups.size(); ++g) {
    if (!group_used[g]) {
      continue;
    }
    for (int d : tg.groups[g]) {
      groups_of[static_cast<std::size_t>(d)].push_back(static_cast<int>(g));
    }
  }
  std::map<std::vector<int>, int> classes;
  std::vector<int> class_of(devices, -1);
  for (std::size_t d = 0; d < devices; ++d) {
    if (!groups_of[d].empty()) {
      class_of[d] = classes.try_emplace(groups_of[d], static_cast<int>(classes.size())).first->second;
    }
  }
  std::vector<std::vector<int>> classes_of_group(tg.groups.size());
  for (std::size_t g = 0; g < tg.groups.size(); ++g) {
    if (!group_used[g]) {
      continue;
    }
    for (int d : tg.groups[g]) {
      classes_of_group[g].push_back(class_of[static_cast<std::size_t>(d)]);
    }
    auto& c = classes_of_group[g];
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
  }
  // Each stream and channel runs one task at a time: a class's spans are disjoint.
  std::vector<std::vector<Span>> compute(classes.size()), communication(classes.size());
  for (std::size_t i = 0; i < tg.tasks.size(); ++i) {
    const auto& t = tg.tasks[i];
    if (!(t.duration > 0)) {
      continue;
    }
    auto& lanes = t.stream == Stream::compute ? compute : communication;
    for (int c : classes_of_group[static_cast<std::size_t>(t.group)]) {
      lanes[static_cast<std::size_t>(c)].push_back(r.schedule[i]);
    }
  }
  const auto by_start = [](const Span& a, const Span& b) { return a.start < b.start; };
  std::vector<std::vector<std::pair<double, double>>> memory(classes.size()); // (time, change)
  for (std::size_t i = 0; i < tg.tasks.size(); ++i) {
    const auto& t = tg.tasks[i];
    if (t.memory == 0) {
      continue;
    }
    const double at = t.memory > 0 ? r.schedule[i].start : r.schedule[i].finish;
    for (int c : classes_of_group[static_cast<std::size_t>(t.group)]) {
      memory[static_cast<std::size_t>(c)].emplace_back(at, t.memory);
    }
  }
  std::vector<DeviceTime> per_class(classes.size());
  for (std::size_t c = 0; c < classes.size(); ++c) {
    std::sort(compute[c].begin(), compute[c].end(), by_start);
    std::sort(communication[c].begin(), communication[c].end(), by_start);
    auto& out = per_class[c];
    out.used = true;
    out.busy = length(compute[c]);
    out.communication = length(communication[c]);
    out.exposed_communication = uncovered(communication[c], compute[c]);
    out.idle = std::max(0.0, r.iteration_time - out.busy - out.exposed_communication);
    // Frees before allocations at the same instant: the kernel that frees has ended.
    auto& changes = memory[c];
    std::sort(changes.begin(), changes.end());
    double alive = 0;
    for (const auto& [at, change] : changes) {
      alive += change;
      if (alive > out.peak_activations) {
        out.peak_activations = alive;
        out.peak_at = at;
      }
    }
  }
  r.devices.assign(devices, DeviceTime{});
  for (std::size_t d = 0; d < devices; ++d) {
    if (class_of[d] >= 0) {
      r.devices[d] = per_class[static_cast<std::size_t>(class_of[d])];
      const double resident = d < tg.resident_bytes.size() ? tg.resident_bytes[d] : 0.0;
      r.devices[d].peak_memory = resident + r.devices[d].peak_activations;
    }
  }
}

} // namespace

Result simulate(const TaskGraph& tg) {
  check(tg);
  const auto n = tg.tasks.size();
  const auto devices = static_cast<std::size_t>(tg.devices);
  // Resources: per device its compute stream (2d) and communication channel (2d + 1); without
  // overlap, per stage one more that every task of the stage holds (one thing at a time).
  const std::size_t serial = 2 * devices;
  std::vector<double> free(serial + static_cast<std::size_t>(tg.stages), 0.0);
  std::vector<int> holder(free.size(), -1);

  std::vector<std::size_t> first(n + 1, 0); // dependents of task i: dependents[first[i] .. first[i+1])
  for (const auto& t : tg.tasks) {
    for (int a : t.after) {
      ++first[static_cast<std::size_t>(a) + 1];
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    first[i + 1] += first[i];
  }
  std::vector<int> dependents(first[n]);
  {
    auto fill = first;
    for (std::size_t i = 0; i < n; ++i) {
      for (int a : tg.tasks[i].after) {
        dependents[fill[static_cast<std::size_t>(a)]++] = static_cast<int>(i);
      }
    }
  }

  Result r;
  r.schedule.resize(n);
  std::vector<std::size_t> waiting(n);
  std::vector<double> ready(n, 0.0);
  std::vector<int> binding(n, -1); // the task whose end this one's start waited for
  using Entry = std::pair<double, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  for (std::size_t i = 0; i < n; ++i) {
    waiting[i] = tg.tasks[i].after.size();
    if (waiting[i] == 0) {
      queue.emplace(0.0, static_cast<int>(i));
    }
  }
  std::vector<std::size_t> held;
  while (!queue.empty()) {
    const auto [at, index] = queue.top();
    queue.pop();
    const auto i = static_cast<std::size_t>(index);
    const auto& t = tg.tasks[i];
    held.clear();
    const std::size_t channel = t.stream == Stream::compute ? 0 : 1;
    for (int d : tg.groups[static_cast<std::size_t>(t.group)]) {
      held.push_back(2 * static_cast<std::size_t>(d) + channel);
    }
    if (!tg.overlap) {
      held.push_back(serial + static_cast<std::size_t>(t.stage));
    }
    double start = at;
    int by = binding[i];
    for (auto h : held) {
      if (free[h] > start) {
        start = free[h];
        by = holder[h];
      }
    }
    const double finish = start + t.duration;
    for (auto h : held) {
      free[h] = finish;
      holder[h] = index;
    }
    binding[i] = by;
    r.schedule[i] = {start, finish};
    for (std::size_t k = first[i]; k < first[i + 1]; ++k) {
      const auto d = static_cast<std::size_t>(dependents[k]);
      if (binding[d] < 0 || finish > ready[d]) { // the latest of the tasks it comes after
        ready[d] = finish;
        binding[d] = index;
      }
      if (--waiting[d] == 0) {
        queue.emplace(ready[d], dependents[k]);
      }
    }
  }

  int last = -1;
  for (std::size_t i = 0; i < n; ++i) {
    if (last < 0 || r.schedule[i].finish > r.schedule[static_cast<std::size_t>(last)].finish) {
      last = static_cast<int>(i);
    }
  }
  r.iteration_time = last >= 0 ? r.schedule[static_cast<std::size_t>(last)].finish : 0.0;
  for (int t = last; t >= 0; t = binding[static_cast<std::size_t>(t)]) {
    r.critical_path.push_back(t);
  }
  std::reverse(r.critical_path.begin(), r.critical_path.end());

  account_devices(tg, r);
  return r;
}

std::vector<std::pair<double, double>> memory_timeline(const TaskGraph& tg, const Result& r, int device) {
  if (device < 0 || device >= tg.devices || r.schedule.size() != tg.tasks.size()) {
    throw Error(
        fmt::format("memory timeline: device {} of {} (or a result of another task graph)", device, tg.devices));
  }
  std::vector<bool> in_group(tg.groups.size(), false);
  for (std::size_t g = 0; g < tg.groups.size(); ++g) {
    in_group[g] = std::binary_search(tg.groups[g].begin(), tg.groups[g].end(), device);
  }
  std::vector<std::pair<double, double>> changes;
  for (std::size_t i = 0; i < tg.tasks.size(); ++i) {
    const auto& t = tg.tasks[i];
    if (t.memory != 0 && in_group[static_cast<std::size_t>(t.group)]) {
      changes.emplace_back(t.memory > 0 ? r.schedule[i].start : r.schedule[i].finish, t.memory);
    }
  }
  std::sort(changes.begin(), changes.end());
  const auto d = static_cast<std::size_t>(device);
  std::vector<std::pair<double, double>> steps{{0.0, d < tg.resident_bytes.size() ? tg.resident_bytes[d] : 0.0}};
  for (const auto& [at, change] : changes) {
    if (at > steps.back().first) {
      steps.emplace_back(at, steps.back().second);
    }
    steps.back().second += change;
  }
  return steps;
}

Simulation simulate(const graph::Graph& g, const cluster::Cluster& cluster, const strategy::Strategy& strategy,
                    const cost::TrainingSetup& setup, const Options& options) {
  Simulation s;
  s.prediction = strategy::evaluate(g, cluster, strategy, setup);
  s.tasks = build_task_graph(g, strategy, s.prediction, cluster.device_count(), options);
  s.result = simulate(s.tasks);
  return s;
}

} // namespace partita::sim
