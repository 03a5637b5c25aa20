// BaPipe's stage partition on GPT-3 175B (zoo:gpt3, 2,991 ops), bf16, Adam, on DGX A100 nodes,
// 8-way tensor parallel inside a stage, one core: for a few stage counts the time to price the
// stages (tables: each stage's layout evaluated, the sends between stages) and to cut them (the
// dynamic programming), the bottleneck and evaluate()'s iteration time; then the whole family
// (every stage count the devices allow, each predicted). Best of --repeat runs.
// Usage: partita_bench_bapipe [--devices 1024] [--batch 1536] [--stages 8,16,32,64] [--repeat 3] [--no-family]

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/search/bapipe.h"
#include "partita/search/optimizer.h"
#include "partita/zoo/zoo.h"

#include <fmt/format.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

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
  using namespace partita;
  int devices = 1024, batch = 1536, repeat = 3;
  bool family = true;
  std::vector<int> counts{8, 16, 32, 64};
  for (int i = 1; i < argc; ++i) {
    const bool value = i + 1 < argc;
    if (std::strcmp(argv[i], "--devices") == 0 && value) {
      devices = std::max(8, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--batch") == 0 && value) {
      batch = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--repeat") == 0 && value) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--stages") == 0 && value) {
      counts.clear();
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) {
        counts.push_back(std::max(1, std::atoi(item.c_str())));
      }
    } else if (std::strcmp(argv[i], "--no-family") == 0) {
      family = false;
    } else {
      fmt::print(stderr, "usage: partita_bench_bapipe [--devices N] [--batch B] [--stages S,S,...] [--repeat R] "
                         "[--no-family]\n");
      return 2;
    }
  }
  try {
    const auto model = zoo::load(fmt::format("zoo:gpt3?size=175b&batch={}", batch));
    const auto cluster = cluster::load_cluster(fmt::format("dgx-a100?nodes={}", (devices + 7) / 8));
    search::Request r;
    r.graph = &model.graph;
    r.cluster = &cluster;
    r.devices = devices;
    r.tensor_parallel = 8;
    r.setup.precision = cluster::Precision::bf16;
    fmt::print("# GPT-3 175B ({} ops), batch {}, bf16, Adam, {} devices of dgx-a100, 8-way tensor parallel inside a "
               "stage, 1f1b; best of {} on one core\n",
               model.graph.ops().size(), batch, devices, repeat);
    fmt::print("# {:>6} {:>8} {:>9} {:>10} {:>12} {:>14} {:>14} {:>6}\n", "stages", "micro", "tables s", "partition s",
               "bottleneck ms", "iteration ms", "peak GiB", "fits");
    for (int stages : counts) {
      if (devices % stages != 0 || (devices / stages) % 8 != 0) {
        continue;
      }
      search::bapipe::Shape shape;
      shape.stages = stages;
      shape.tensor_parallel = 8;
      shape.micro_batches = batch / (devices / stages / 8);
      search::bapipe::Tables t;
      const double tables = best_of(repeat, [&] { t = search::bapipe::tables(r, shape); });
      search::bapipe::Partition part;
      const double cut = best_of(repeat, [&] { part = search::bapipe::partition(t.problem); });
      if (!part.feasible) {
        fmt::print("  {:>6} {:>8} {:>9.3f} {:>10.4f} {:>12} {:>14} {:>14} {:>6}\n", stages, shape.micro_batches, tables,
                   cut, "-", "-", "-", "no");
        continue;
      }
      const auto p = strategy::evaluate(model.graph, cluster, search::bapipe::to_strategy(r, shape, t, part), r.setup);
      fmt::print("  {:>6} {:>8} {:>9.3f} {:>10.4f} {:>12.2f} {:>14.1f} {:>14.2f} {:>6}\n", stages, shape.micro_batches,
                 tables, cut, part.bottleneck * 1e3, p.iteration_time * 1e3, p.peak_memory / (1 << 30),
                 p.fits ? "yes" : "no");
    }
    if (family) {
      strategy::Strategy st;
      const double whole = best_of(1, [&] { st = search::find_optimizer("bapipe").optimize(r); });
      fmt::print("# the family (every stage count, each predicted): {:.2f} s; chose {} stages x {} micro-batches\n",
                 whole, st.pipeline ? st.pipeline->stages : 1, st.pipeline ? st.pipeline->micro_batches : 1);
      fmt::print("# {}\n", st.explanation);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "partita_bench_bapipe: {}\n", e.what());
    return 1;
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  fmt::print("# peak RSS {:.0f} MiB\n", static_cast<double>(u.ru_maxrss) / 1024.0);
  return 0;
}
