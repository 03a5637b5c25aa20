// The event simulator's speed (issue 20: one iteration of GPT-3 175B on 1024 devices, 8-way
// tensor x 16-way pipeline x 8-way data, 64 micro-batches, in under 1 s on one core): the time to
// build the task graph from evaluate()'s terms and to simulate it, with overlap on and off, and
// the figures of the iteration it gives (evaluate(), which the terms come from, timed once beside).
// Smaller cases first, for scale.
//   build/ci/bench/partita_bench_sim [--repeat N] [--case NAME]

#include "partita/cluster/cluster.h"
#include "partita/search/optimizer.h"
#include "partita/sim/simulate.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace partita;

struct Case {
  const char* name;
  const char* model;
  int devices, tensor, stages, micro;
};

// Batch 4096 for GPT-3: the pipeline family caps micro-batches at the batch per stage's devices
// (64 here), so 64 micro-batches need it.
constexpr Case kCases[] = {
    {"gpt2-small-8", "zoo:gpt2?batch=64", 8, 2, 2, 8},
    {"gpt3-13b-128", "zoo:gpt2?layers=40&hidden=5120&heads=40&seq=2048&batch=1024&vocab=50257&positions=2048", 128, 8,
     4, 32},
    {"gpt3-175b-1024", "zoo:gpt2?layers=96&hidden=12288&heads=96&seq=2048&batch=4096&vocab=50257&positions=2048", 1024,
     8, 16, 64},
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <class F> double best_of(int repeat, F&& f) {
  double best = 1e300;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

} // namespace

int main(int argc, char** argv) {
  int repeat = 3;
  std::string only;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0) {
      repeat = std::max(1, std::atoi(argv[i + 1]));
    } else if (std::strcmp(argv[i], "--case") == 0) {
      only = argv[i + 1];
    }
  }
  fmt::print("# one training iteration, bf16, Adam, on DGX A100 nodes; times are the best of {} runs on one core\n",
             repeat);
  fmt::print("# {:<15} {:>6} {:>12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>11} {:>11} {:>9}\n", "case", "devices",
             "d x t x p, m", "evaluate s", "tasks", "build s", "sim s", "sim off s", "iter ms", "additive ms",
             "bubble");
  for (const auto& c : kCases) {
    if (!only.empty() && only != c.name) {
      continue;
    }
    const auto model = zoo::load(c.model);
    const auto cluster = cluster::load_cluster(fmt::format("dgx-a100?nodes={}", (c.devices + 7) / 8));
    search::Request r;
    r.graph = &model.graph;
    r.cluster = &cluster;
    r.devices = c.devices;
    r.tensor_parallel = c.tensor;
    r.stages = c.stages;
    r.micro_batches = c.micro;
    r.setup.precision = cluster::Precision::bf16;
    const auto st = search::find_optimizer("pipeline").optimize(r);
    strategy::Prediction p;
    const double evaluate = best_of(1, [&] { p = strategy::evaluate(model.graph, cluster, st, r.setup); });
    sim::TaskGraph tasks;
    const double build = best_of(repeat, [&] { tasks = sim::build_task_graph(model.graph, st, p, cluster); });
    sim::Result result;
    const double simulate = best_of(repeat, [&] { result = sim::simulate(tasks); });
    const auto off_tasks = sim::build_task_graph(model.graph, st, p, cluster, {.overlap = false});
    const auto free_links = sim::simulate(sim::build_task_graph(model.graph, st, p, cluster, {.contention = false}));
    sim::Result off;
    const double simulate_off = best_of(repeat, [&] { off = sim::simulate(off_tasks); });
    // Device 0's idle share of the iteration: the bubble and its waits for the other stages.
    const double bubble = result.iteration_time > 0 ? result.devices[0].idle / result.iteration_time : 0.0;
    const int stages = st.pipeline ? st.pipeline->stages : 1;
    const int micro = st.pipeline ? st.pipeline->micro_batches : 1;
    fmt::print("  {:<15} {:>6} {:>12} {:>10.3f} {:>9} {:>9.3f} {:>9.3f} {:>9.3f} {:>11.1f} {:>11.1f} {:>8.1f}%\n",
               c.name, c.devices, fmt::format("{}x{}x{}, {}", c.devices / (c.tensor * stages), c.tensor, stages, micro),
               evaluate, tasks.tasks.size(), build, simulate, simulate_off, result.iteration_time * 1e3,
               p.iteration_time * 1e3, 100 * bubble);
    fmt::print("    without overlap {:.1f} ms; without shared NICs {:.1f} ms ({} nodes' NICs shared); critical path {} "
               "tasks; closed-form bubble (p-1)/(m+p-1) {:.1f}%\n",
               off.iteration_time * 1e3, free_links.iteration_time * 1e3, tasks.links.size(),
               result.critical_path.size(), 100.0 * (stages - 1) / (micro + stages - 1));
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  fmt::print("# peak RSS {:.0f} MiB\n", static_cast<double>(u.ru_maxrss) / 1024.0);
  return 0;
}
