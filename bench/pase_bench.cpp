// PaSE's own benchmark (Elango, IPDPS 2021): each graph at 4 to 64 devices, our optimum against
// the "Total cost" its reference implementation printed (scheduler.py, batch 128, --flops 10
// --bw 16, run on a 2-core machine), with our build and solve times and each case's peak RSS
// (getrusage; every case runs in a process of its own, so that the peak is the case's).
//   build/ci/bench/partita_bench_pase [--json] [--graph NAME]

#include "partita/graph/error.h"
#include "partita/search/pase.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

namespace {

namespace pase = partita::search::pase;

struct Case {
  const char* graph;
  int procs;
  double reference; // 0: the reference did not finish
};

constexpr Case kCases[] = {
    {"alexnet", 4, 148215719552.0},
    {"alexnet", 8, 97098296512.0},
    {"alexnet", 16, 70320712672.0},
    {"alexnet", 32, 53136349552.0},
    {"alexnet", 64, 41120456048.0},
    {"rnnlm", 4, 13247562153984.0},
    {"rnnlm", 8, 7462723813376.0},
    {"rnnlm", 16, 4322906226688.0},
    {"rnnlm", 32, 2625038401536.0},
    {"rnnlm", 64, 1566423818240.0},
    {"resnet101", 4, 1718742247936.0},
    {"resnet101", 8, 1425262849920.0},
    {"resnet101", 16, 1244493633088.0},
    {"resnet101", 32, 1086268826784.0},
    {"resnet101", 64, 0},
    {"inception3", 4, 986757044608.0},
    {"inception3", 8, 782140602432.0},
    {"inception3", 16, 673045949344.0},
    {"inception3", 32, 602425599824.0},
    {"inception3", 64, 553203648656.0},
    {"transformer", 4, 3943828242432.0},
    {"transformer", 8, 2340308361216.0},
    {"transformer", 16, 1496646348800.0},
    {"transformer", 32, 0},
    {"transformer", 64, 0},
};

// The reference's search times, as reported per graph over P = 4..64 (where it finished).
const char* reference_time(const std::string& graph) {
  if (graph == "alexnet" || graph == "rnnlm") {
    return "0.05-0.5";
  }
  if (graph == "resnet101") {
    return "11-383";
  }
  if (graph == "inception3") {
    return "8-168";
  }
  return "9.5-284";
}

struct Outcome {
  double cost = 0;
  double build_s = 0;
  double solve_s = 0;
  double peak_mib = 0;
  int vertices = 0;
  int edges = 0;
  long long configs = 0;
  int width = 0;
  double largest_table = 0;
  char error[256] = {};
};

Outcome run(const Case& c) {
  Outcome out;
  try {
    pase::Options o;
    o.procs = c.procs;
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    const auto model = pase::build(c.graph, o);
    const auto t1 = clock::now();
    const auto solution = partita::search::dp::solve(model.problem, o.solver);
    const auto t2 = clock::now();
    out.cost = solution.cost;
    out.build_s = std::chrono::duration<double>(t1 - t0).count();
    out.solve_s = std::chrono::duration<double>(t2 - t1).count();
    out.vertices = static_cast<int>(model.layers.size());
    out.edges = static_cast<int>(model.problem.edges.size());
    for (const auto& l : model.layers) {
      out.configs += static_cast<long long>(l.configs.size());
    }
    out.width = solution.stats.width;
    out.largest_table = solution.stats.largest_table;
  } catch (const partita::Error& e) {
    std::snprintf(out.error, sizeof out.error, "%s", e.what());
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  out.peak_mib = static_cast<double>(u.ru_maxrss) / 1024.0; // KiB on Linux
  return out;
}

std::string json_escaped(const char* s) {
  std::string out;
  for (; *s != '\0'; ++s) {
    if (*s == '"' || *s == '\\') {
      out += '\\';
    }
    out += (static_cast<unsigned char>(*s) < 0x20) ? ' ' : *s;
  }
  return out;
}

// Runs case `index` in a fresh process (this program again, with --case), so that the peak RSS is
// that case's alone, and reads its outcome back through a pipe.
Outcome run_isolated(std::size_t index) {
  int fd[2];
  if (pipe(fd) != 0) {
    return run(kCases[index]);
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    const std::string i = std::to_string(index), out = std::to_string(fd[1]);
    execl("/proc/self/exe", "partita_bench_pase", "--case", i.c_str(), "--out-fd", out.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fd[1]);
  Outcome o;
  std::size_t got = 0;
  while (got < sizeof o) {
    const auto n = read(fd[0], reinterpret_cast<char*>(&o) + got, sizeof o - got);
    if (n <= 0) {
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != sizeof o) {
    o = Outcome{};
    std::snprintf(o.error, sizeof o.error, "the child process died (status %d)", status);
  }
  return o;
}

} // namespace

int main(int argc, char** argv) {
  bool json = false;
  std::string only;
  int child_case = -1, child_fd = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--graph") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (std::strcmp(argv[i], "--case") == 0 && i + 1 < argc) {
      child_case = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--out-fd") == 0 && i + 1 < argc) {
      child_fd = std::atoi(argv[++i]);
    }
  }
  if (child_case >= 0 && static_cast<std::size_t>(child_case) < std::size(kCases) && child_fd >= 0) {
    const Outcome o = run(kCases[child_case]);
    return write(child_fd, &o, sizeof o) == static_cast<ssize_t>(sizeof o) ? 0 : 1;
  }
  if (json) {
    fmt::print("[");
  } else {
    fmt::print("{:<12} {:>3} {:>18} {:>18} {:>5} {:>9} {:>9} {:>10} {:>9} {:>5} {:>4} {:>6} {:>3} {:>9}\n", "graph",
               "P", "our cost", "reference cost", "equal", "build s", "solve s", "ref s", "peak MiB", "V", "E",
               "configs", "w", "table");
  }
  bool all_equal = true;
  bool first = true;
  for (std::size_t i = 0; i < std::size(kCases); ++i) {
    const Case& c = kCases[i];
    if (!only.empty() && only != c.graph) {
      continue;
    }
    const Outcome o = run_isolated(i);
    const bool failed = o.error[0] != '\0';
    const std::string ours = failed ? "-" : pase::format_cost(o.cost);
    const std::string ref = c.reference > 0 ? pase::format_cost(c.reference) : "did not finish";
    const std::string equal = c.reference > 0 ? (!failed && ours == ref ? "yes" : "no") : "-";
    all_equal = all_equal && equal != "no";
    const std::string ref_time = c.reference > 0 ? reference_time(c.graph) : "-";
    if (json) {
      fmt::print("{}\n  {{\"graph\": \"{}\", \"procs\": {}, \"cost\": {}, \"reference\": {}, \"equal\": {}, "
                 "\"build_s\": {:.4f}, \"solve_s\": {:.4f}, \"reference_s\": \"{}\", \"peak_mib\": {:.1f}, "
                 "\"vertices\": {}, \"edges\": {}, \"configs\": {}, \"width\": {}, \"largest_table\": {}, "
                 "\"error\": \"{}\"}}",
                 first ? "" : ",", c.graph, c.procs, failed ? "null" : ours, c.reference > 0 ? ref : "null",
                 equal == "yes" ? "true" : (equal == "no" ? "false" : "null"), o.build_s, o.solve_s, ref_time,
                 o.peak_mib, o.vertices, o.edges, o.configs, o.width, o.largest_table, json_escaped(o.error));
    } else {
      fmt::print("{:<12} {:>3} {:>18} {:>18} {:>5} {:>9.3f} {:>9.3f} {:>10} {:>9.1f} {:>5} {:>4} {:>6} {:>3} {:>9}\n",
                 c.graph, c.procs, ours, ref, equal, o.build_s, o.solve_s, ref_time, o.peak_mib, o.vertices, o.edges,
                 o.configs, o.width, o.largest_table);
      if (failed) {
        fmt::print("  {}\n", o.error);
      }
    }
    std::fflush(stdout);
    first = false;
  }
  if (json) {
    fmt::print("\n]\n");
  }
  return all_equal ? 0 : 1;
}
