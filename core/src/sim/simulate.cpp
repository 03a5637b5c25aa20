#include "partita/sim/simulate.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <queue>
#include <tuple>
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
  if (!tg.group_links.empty() && tg.group_links.size() != tg.groups.size()) {
    throw Error(fmt::format("simulate: shared-link loads for {} device groups; the task graph has {}",
                            tg.group_links.size(), tg.groups.size()));
  }
  for (std::size_t g = 0; g < tg.group_links.size(); ++g) {
    for (const auto& l : tg.group_links[g]) {
      if (l.link < 0 || static_cast<std::size_t>(l.link) >= tg.links.size()) {
        throw Error(fmt::format("simulate: device group {} loads link {}, which does not exist", g, l.link));
      }
      if (!(l.share > 0 && l.share <= 1)) {
        throw Error(fmt::format("simulate: device group {} loads link '{}' by {}; a share must be in (0, 1]", g,
                                tg.links[static_cast<std::size_t>(l.link)], l.share));
      }
    }
  }
  for (std::size_t i = 0; i < tg.tasks.size(); ++i) {
    const auto& t = tg.tasks[i];
    if (t.group < 0 || static_cast<std::size_t>(t.group) >= tg.groups.size()) {
      throw Error(fmt::format("simulate: task {}: device group {} does not exist", i, t.group));
    }
    if (static_cast<int>(t.stream) >= stream_count) {
      throw Error(fmt::format("simulate: task {}: stream {} is not one of the {}", i, static_cast<int>(t.stream),
                              stream_count));
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

// Sorted spans made disjoint: overlapping ones joined.
void merge(std::vector<Span>& spans) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    if (kept > 0 && spans[i].start < spans[kept - 1].finish) {
      spans[kept - 1].finish = std::max(spans[kept - 1].finish, spans[i].finish);
    } else {
      spans[kept++] = spans[i];
    }
  }
  spans.resize(kept);
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
  // Each stream and channel runs one task at a time: a class's compute spans are disjoint; its
  // two communication channels' are merged below.
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
    merge(communication[c]);
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
  // Resources: per device its compute stream (3d) and communication channels (3d + 1, 3d + 2); without
  // overlap, per stage one more that every task of the stage holds (one thing at a time). Each
  // runs the tasks that hold it in the order they became ready (a CUDA stream's order): a task
  // joins the queue of each of its resources when it is ready and starts when the tasks ahead of
  // it on all of them have ended.
  const std::size_t serial = stream_count * devices;
  const std::size_t resources = serial + static_cast<std::size_t>(tg.stages);
  const auto resources_of = [&](std::size_t i, std::vector<std::size_t>& out) {
    out.clear();
    const auto& t = tg.tasks[i];
    const auto channel = static_cast<std::size_t>(t.stream);
    for (int d : tg.groups[static_cast<std::size_t>(t.group)]) {
      out.push_back(stream_count * static_cast<std::size_t>(d) + channel);
    }
    if (!tg.overlap && !(tg.overlap_gradients && t.kind == TaskKind::gradient_sync)) {
      out.push_back(serial + static_cast<std::size_t>(t.stage));
    }
  };

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

  // A transfer that loads a shared link is fluid: `remaining` seconds of work at its priced rate,
  // done at `rate` (1 alone; 1 / load when the transfers on one of its links load it by more
  // than 1) since `since`. Every other task ends `duration` after it starts.
  const auto links_of = [&](std::size_t i) -> const std::vector<LinkLoad>* {
    const auto& t = tg.tasks[i];
    if (!shares_links(t) || static_cast<std::size_t>(t.group) >= tg.group_links.size()) {
      return nullptr;
    }
    const auto& loads = tg.group_links[static_cast<std::size_t>(t.group)];
    return loads.empty() ? nullptr : &loads;
  };
  std::vector<double> remaining(n, 0.0), rate(n, 1.0), since(n, 0.0);
  std::vector<unsigned> version(n, 0);
  // Fluid transfers running on each link, with the share of the link each loads it by.
  std::vector<std::vector<std::pair<int, double>>> on_link(tg.links.size());
  std::vector<double> load(tg.links.size(), 0.0);
  std::vector<bool> dirty(tg.links.size(), false);
  std::vector<std::size_t> dirty_links;
  std::vector<unsigned> seen(n, 0);
  unsigned stamp = 0;

  Result r;
  r.schedule.resize(n);
  std::vector<std::size_t> waiting(n);
  std::vector<double> ready(n, 0.0);
  std::vector<int> binding(n, -1); // the task whose end this one's start waited for
  // A resource's queue as links: last_in[h] is the task that joined it last; a task waits for the
  // distinct unfinished tasks ahead of it (blocked), each of which lists it among its successors.
  std::vector<int> last_in(resources, -1);
  std::vector<bool> finished(n, false);
  std::vector<std::size_t> blocked(n, 0);
  std::vector<int> successors_first(n, -1), successor_next, successor_task;
  successor_next.reserve(n);
  successor_task.reserve(n);
  // Events: (time, task, version); a fluid transfer's end moves when its rate changes, and only
  // the event of its latest version counts.
  using Event = std::tuple<double, int, unsigned>;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  std::vector<int> became_ready, startable;
  std::vector<std::size_t> held;
  double now = 0;

  const auto issue = [&](int index) {
    const auto i = static_cast<std::size_t>(index);
    ready[i] = now;
    resources_of(i, held);
    blocked[i] = 0;
    int ahead = -1;
    for (auto h : held) {
      const int p = last_in[h];
      last_in[h] = index;
      if (p < 0 || p == ahead || finished[static_cast<std::size_t>(p)]) {
        continue;
      }
      ahead = p; // the same task is usually ahead on every resource: linked once per run of them
      successor_task.push_back(index);
      successor_next.push_back(successors_first[static_cast<std::size_t>(p)]);
      successors_first[static_cast<std::size_t>(p)] = static_cast<int>(successor_task.size()) - 1;
      ++blocked[i];
    }
    if (blocked[i] == 0) {
      startable.push_back(index);
    }
  };
  const auto start = [&](int index) {
    const auto i = static_cast<std::size_t>(index);
    r.schedule[i].start = now;
    if (const auto* loads = links_of(i)) {
      remaining[i] = tg.tasks[i].duration;
      rate[i] = 0; // set by the rate update below, which also schedules its end
      since[i] = now;
      for (const auto& l : *loads) {
        on_link[static_cast<std::size_t>(l.link)].emplace_back(index, l.share);
        if (!dirty[static_cast<std::size_t>(l.link)]) {
          dirty[static_cast<std::size_t>(l.link)] = true;
          dirty_links.push_back(static_cast<std::size_t>(l.link));
        }
      }
    } else {
      events.emplace(now + tg.tasks[i].duration, index, version[i]);
    }
  };
  const auto update_rates = [&] {
    for (auto l : dirty_links) {
      double sum = 0;
      for (const auto& [t, share] : on_link[l]) {
        sum += share;
      }
      load[l] = sum;
    }
    ++stamp;
    for (auto l : dirty_links) {
      for (const auto& [t, share] : on_link[l]) {
        const auto i = static_cast<std::size_t>(t);
        if (seen[i] == stamp) {
          continue;
        }
        seen[i] = stamp;
        double slowest = 1;
        for (const auto& ll : *links_of(i)) {
          slowest = std::max(slowest, load[static_cast<std::size_t>(ll.link)]);
        }
        const double next = 1 / slowest;
        if (next == rate[i]) {
          continue;
        }
        remaining[i] = std::max(0.0, remaining[i] - rate[i] * (now - since[i]));
        since[i] = now;
        rate[i] = next;
        events.emplace(now + remaining[i] / next, t, ++version[i]);
      }
      dirty[l] = false;
    }
    dirty_links.clear();
  };

  for (std::size_t i = 0; i < n; ++i) {
    waiting[i] = tg.tasks[i].after.size();
    if (waiting[i] == 0) {
      issue(static_cast<int>(i));
    }
  }
  for (;;) {
    for (int index : startable) {
      start(index);
    }
    startable.clear();
    update_rates();
    if (events.empty()) {
      break;
    }
    // Every task that ends at the next instant, then those it makes ready, in task order.
    now = std::get<0>(events.top());
    became_ready.clear();
    while (!events.empty() && std::get<0>(events.top()) == now) {
      const auto [at, index, v] = events.top();
      events.pop();
      const auto i = static_cast<std::size_t>(index);
      if (v != version[i]) {
        continue;
      }
      r.schedule[i].finish = now;
      if (const auto* loads = links_of(i)) {
        for (const auto& l : *loads) {
          auto& running = on_link[static_cast<std::size_t>(l.link)];
          running.erase(
              std::find_if(running.begin(), running.end(), [task = index](const auto& e) { return e.first == task; }));
          if (!dirty[static_cast<std::size_t>(l.link)]) {
            dirty[static_cast<std::size_t>(l.link)] = true;
            dirty_links.push_back(static_cast<std::size_t>(l.link));
          }
        }
      }
      finished[i] = true;
      for (int e = successors_first[i]; e >= 0; e = successor_next[static_cast<std::size_t>(e)]) {
        const auto next = static_cast<std::size_t>(successor_task[static_cast<std::size_t>(e)]);
        if (--blocked[next] == 0) {
          if (ready[next] < now) { // it was ready and waited for this resource
            binding[next] = index;
          }
          startable.push_back(static_cast<int>(next));
        }
      }
      for (std::size_t k = first[i]; k < first[i + 1]; ++k) {
        const auto d = static_cast<std::size_t>(dependents[k]);
        if (--waiting[d] == 0) {
          binding[d] = index; // the last of the tasks it comes after
          became_ready.push_back(dependents[k]);
        }
      }
    }
    std::sort(became_ready.begin(), became_ready.end());
    for (int index : became_ready) {
      issue(index);
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

std::optional<Simulation> simulate_prediction(const graph::Graph& g, const cluster::Cluster& cluster,
                                              const strategy::Strategy& strategy, strategy::Prediction& prediction,
                                              const Options& options, std::size_t max_tasks) {
  const auto micro = static_cast<std::size_t>(strategy.pipeline ? strategy.pipeline->micro_batches : 1);
  const auto too_many = [&](std::size_t tasks) {
    prediction.notes.push_back(fmt::format("the iteration time adds up its terms: its simulation has about {} tasks, "
                                           "more than the {} a prediction simulates (`partita simulate` runs it)",
                                           tasks, max_tasks));
    return std::nullopt;
  };
  // Each op runs at least once per micro-batch: larger iterations are not even built.
  if (g.ops().size() * micro > max_tasks) {
    return too_many(g.ops().size() * micro);
  }
  Simulation s;
  s.tasks = build_task_graph(g, strategy, prediction, cluster, options);
  if (s.tasks.tasks.size() > max_tasks) {
    return too_many(s.tasks.tasks.size());
  }
  s.result = simulate(s.tasks);
  prediction.additive_time = prediction.iteration_time;
  prediction.iteration_time = s.result.iteration_time;
  prediction.simulated = true;
  prediction.samples_per_second = s.result.iteration_time > 0 ? prediction.batch / s.result.iteration_time : 0.0;
  double kernels = 0;
  for (int t : s.result.critical_path) {
    const auto& task = s.tasks.tasks[static_cast<std::size_t>(t)];
    const auto& span = s.result.schedule[static_cast<std::size_t>(t)];
    const bool kernel = task.kind == TaskKind::forward || task.kind == TaskKind::backward ||
                        task.kind == TaskKind::recompute || task.kind == TaskKind::optimizer_step;
    kernels += kernel ? span.finish - span.start : 0.0;
  }
  prediction.compute_time = kernels;
  prediction.communication_time = std::max(0.0, s.result.iteration_time - kernels);
  s.prediction = prediction;
  return s;
}

Simulation simulate(const graph::Graph& g, const cluster::Cluster& cluster, const strategy::Strategy& strategy,
                    const cost::TrainingSetup& setup, const Options& options) {
  Simulation s;
  s.prediction = strategy::evaluate(g, cluster, strategy, setup);
  s.tasks = build_task_graph(g, strategy, s.prediction, cluster, options);
  s.result = simulate(s.tasks);
  return s;
}

} // namespace partita::sim
