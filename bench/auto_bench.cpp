// The per-layer search's speed: every zoo model (default parameters) at 8, 64, 256 and 1024
// devices of dgx-a100 nodes, one core; a search still running after --limit seconds (default 60)
// is cancelled and shown as "> limit". Prints the search time, its tables' memory and the process
// peak RSS. Usage: partita_bench_auto [--limit S] [--devices 8,64] [MODEL...]

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/search/auto_search.h"
#include "partita/zoo/zoo.h"

#include <fmt/format.h>

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

} // namespace

int main(int argc, char** argv) {
  using namespace partita;
  double limit = 60;
  std::vector<int> device_counts{8, 64, 256, 1024};
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--limit" && i + 1 < argc) {
      limit = std::stod(argv[++i]);
    } else if (a == "--devices" && i + 1 < argc) {
      device_counts.clear();
      std::stringstream ss(argv[++i]);
      for (std::string item; std::getline(ss, item, ',');) {
        device_counts.push_back(std::stoi(item));
      }
    } else {
      models.push_back(a);
    }
  }
  if (models.empty()) {
    for (const auto& m : zoo::models()) {
      models.push_back("zoo:" + m.name);
    }
  }
  fmt::print("{:<18} {:>7} {:>5} {:>8} {:>10} {:>6} {:>10} {:>10} {:>9}\n", "model", "devices", "ops", "distinct",
             "configs", "width", "search s", "tables MiB", "RSS MiB");
  for (const auto& spec : models) {
    const auto model = zoo::load(spec);
    for (int devices : device_counts) {
      const auto cluster = cluster::load_cluster(fmt::format("dgx-a100?nodes={}", (devices + 7) / 8));
      search::Request r;
      r.graph = &model.graph;
      r.cluster = &cluster;
      r.devices = devices;
      std::atomic<bool> cancel{false};
      r.cancel = &cancel;
      std::mutex m;
      std::condition_variable cv;
      bool done = false;
      std::thread watchdog([&] {
        std::unique_lock lock(m);
        if (!cv.wait_for(lock, std::chrono::duration<double>(limit), [&] { return done; })) {
          cancel = true;
        }
      });
      const auto t0 = std::chrono::steady_clock::now();
      std::string outcome;
      search::AutoResult result;
      try {
        result = search::auto_search(r);
      } catch (const Cancelled&) {
        outcome = fmt::format("> {:.0f}", limit);
      } catch (const Error& e) {
        outcome = std::string("error: ") + e.what();
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      {
        std::lock_guard lock(m);
        done = true;
      }
      cv.notify_all();
      watchdog.join();
      if (!outcome.empty()) {
        fmt::print("{:<18} {:>7} {:>5} {:>8} {:>10} {:>6} {:>10}\n", spec.substr(4), devices, model.graph.ops().size(),
                   "-", "-", "-", outcome.substr(0, 120));
        continue;
      }
      const auto& s = result.stats;
      fmt::print("{:<18} {:>7} {:>5} {:>8} {:>10.0f} {:>6} {:>10.3f} {:>10.1f} {:>9.0f}\n", spec.substr(4), devices,
                 s.ops, s.distinct_ops, s.configurations, s.dp.width, seconds,
                 (s.table_bytes + s.dp.peak_bytes) / (1024.0 * 1024), peak_rss_mib());
      std::fflush(stdout);
    }
  }
}
