// The per-layer search's speed: every zoo model (default parameters) at 8, 64, 256 and 1024
// devices of dgx-a100 nodes, one core; a search still running after --limit seconds (default 60)
// is cancelled and shown as "> limit". Prints the search time, its tables' memory and the process
// peak RSS. With --cancel-after MS every search is cancelled after MS milliseconds instead, and the
// time it took to stop is printed (the GUI's sliders cancel the search in flight). --threads N
// prices layout pairs on N threads (default 1: the figures are per core; 0 = every hardware thread).
// With --replan every search is run a second time in the same process and its time printed beside
// (the GUI's sliders re-plan in a process that has searched before: its memory is no longer fresh).
// Usage: partita_bench_auto [--limit S] [--devices 8,64] [--cancel-after MS] [--threads N] [--replan]
//        [MODEL...]

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/search/auto_search.h"
#include "partita/zoo/zoo.h"

#include <fmt/format.h>

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
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

constexpr const char* usage = "usage: partita_bench_auto [--limit SECONDS] [--devices 8,64,...] [--cancel-after MS] "
                              "[--threads N] [--replan] [--price-every-move] [--price-only-what-optima-use] "
                              "[MODEL...]";

// A positive number from argv, or a message naming the option.
double positive(const std::string& option, const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(v > 0)) {
    throw partita::Error(fmt::format("{}: expected a positive number, got '{}'\n{}", option, text, usage));
  }
  return v;
}

int run(int argc, char** argv);

} // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "partita_bench_auto: {}\n", e.what());
    return 1;
  }
}

namespace {

int run(int argc, char** argv) {
  using namespace partita;
  double limit = 60;
  double cancel_after_ms = 0; // > 0: cancel every search then, and print how long it took to stop
  std::vector<int> device_counts{8, 64, 256, 1024};
  int threads = 1;
  bool price_every_move = false;
  bool price_only_what_optima_use = false;
  bool replan = false;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      fmt::print("{}\n", usage);
      return 0;
    }
    if (a == "--price-only-what-optima-use") { // lazily to the end: the moves priced do not depend on the clock
      price_only_what_optima_use = true;
      continue;
    }
    if (a == "--replan") { // every search again at once: a re-plan's time beside the first search's
      replan = true;
      continue;
    }
    if (a == "--price-every-move") { // the tables priced whole before the first solve, as before lazy pricing
      price_every_move = true;
      continue;
    }
    if ((a == "--limit" || a == "--devices" || a == "--cancel-after" || a == "--threads") && i + 1 >= argc) {
      throw Error(fmt::format("{} needs a value\n{}", a, usage));
    }
    if (a == "--limit") {
      limit = positive(a, argv[++i]);
    } else if (a == "--threads") {
      const std::string text = argv[++i];
      const double t = text == "0" ? 0 : positive(a, text);
      if (t != static_cast<int>(t) || t > 1024) {
        throw Error(fmt::format("--threads: '{}' is not a whole number from 0 to 1024", text));
      }
      threads = static_cast<int>(t);
    } else if (a == "--cancel-after") {
      cancel_after_ms = positive(a, argv[++i]);
    } else if (a == "--devices") {
      device_counts.clear();
      std::stringstream ss(argv[++i]);
      for (std::string item; std::getline(ss, item, ',');) {
        const double d = positive(a, item);
        if (d != static_cast<int>(d)) {
          throw Error(fmt::format("--devices: '{}' is not a whole number", item));
        }
        device_counts.push_back(static_cast<int>(d));
      }
    } else if (a.starts_with("-")) {
      throw Error(fmt::format("unknown option '{}'\n{}", a, usage));
    } else {
      models.push_back(a);
    }
  }
  if (models.empty()) {
    for (const auto& m : zoo::models()) {
      models.push_back("zoo:" + m.name);
    }
  }
  fmt::print("{:<18} {:>7} {:>5} {:>8} {:>10} {:>9} {:>6} {:>10}{} {:>10} {:>9}  {}\n", "model", "devices", "ops",
             "distinct", "configs", "work", "width", "search s", replan ? fmt::format(" {:>10}", "re-plan s") : "",
             "tables MiB", "RSS MiB", "exact or gap");
  for (const auto& spec : models) {
    const auto model = zoo::load(spec);
    // A zoo model by its spec, a file by its name.
    const auto name = spec.starts_with("zoo:") ? spec.substr(4) : std::filesystem::path(spec).stem().string();
    for (int devices : device_counts) {
      const auto cluster = cluster::load_cluster(fmt::format("dgx-a100?nodes={}", (devices + 7) / 8));
      search::Request r;
      r.graph = &model.graph;
      r.cluster = &cluster;
      r.devices = devices;
      r.max_search_work = 0; // measured, not refused: --limit cancels what runs too long
      r.threads = threads;
      r.price_every_move = price_every_move;
      r.price_only_what_optima_use = price_only_what_optima_use;
      // One search under the watchdog: its seconds, and what stopped it (empty when it ended).
      const auto timed_search = [&](search::AutoResult& result) {
        std::atomic<bool> cancel{false};
        r.cancel = &cancel;
        std::mutex m;
        std::condition_variable cv;
        bool done = false;
        const double wait = cancel_after_ms > 0 ? cancel_after_ms / 1e3 : limit;
        std::chrono::steady_clock::time_point cancelled_at;
        std::thread watchdog([&] {
          std::unique_lock lock(m);
          if (!cv.wait_for(lock, std::chrono::duration<double>(wait), [&] { return done; })) {
            cancelled_at = std::chrono::steady_clock::now();
            cancel = true;
          }
        });
        const auto t0 = std::chrono::steady_clock::now();
        std::string outcome;
        try {
          result = search::auto_search(r);
        } catch (const Cancelled&) {
          const auto stopped = std::chrono::steady_clock::now();
          std::lock_guard lock(m);
          outcome = cancel_after_ms > 0
                        ? fmt::format("cancelled at {:.0f} ms, stopped {:.1f} ms later", cancel_after_ms,
                                      std::chrono::duration<double, std::milli>(stopped - cancelled_at).count())
                        : fmt::format("> {:.0f}", limit);
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
        r.cancel = nullptr;
        return std::pair{seconds, outcome};
      };
      search::AutoResult result;
      const auto [seconds, outcome] = timed_search(result);
      std::string again; // the re-plan's seconds, or what stopped it
      if (replan && outcome.empty()) {
        search::AutoResult second;
        const auto [replan_seconds, replan_outcome] = timed_search(second);
        again = replan_outcome.empty() ? fmt::format("{:.3f}", replan_seconds) : replan_outcome.substr(0, 20);
      }
      if (!outcome.empty()) {
        fmt::print("{:<18} {:>7} {:>5} {:>8} {:>10} {:>9} {:>6} {:>10}\n", name, devices, model.graph.ops().size(), "-",
                   "-", "-", "-", outcome.substr(0, 120));
        continue;
      }
      const auto& s = result.stats;
      fmt::print("{:<18} {:>7} {:>5} {:>8} {:>10.0f} {:>9.3g} {:>6} {:>10.3f}{} {:>10.1f} {:>9.0f}  {}\n", name,
                 devices, s.ops, s.distinct_ops, s.configurations, s.search_work, s.dp.width, seconds,
                 replan ? fmt::format(" {:>10}", again) : "", (s.table_bytes + s.dp.peak_bytes) / (1024.0 * 1024),
                 peak_rss_mib(),
                 result.exact ? fmt::format("exact; priced {:.0f} of {:.0f} moves in {} rounds{}", s.moves_priced,
                                            s.moves, s.pricing_rounds,
                                            s.bound_misses > 0 ? fmt::format(" ({} BELOW THEIR BOUND)", s.bound_misses)
                                                               : std::string())
                              : fmt::format("bounded, within {:.2f}% (exactly: a table of {:.2g})",
                                            100 * (result.objective / result.lower_bound - 1), s.dp.too_wide_table));
      std::fflush(stdout);
    }
  }
  return 0;
}

} // namespace
