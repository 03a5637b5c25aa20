#include "launch.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <sys/wait.h>
#include <thread>

namespace partita::cli {

namespace fs = std::filesystem;

fs::path find_runtime_program(const std::string& program, const char* env) {
  if (const char* value = std::getenv(env); value != nullptr && *value != '\0') {
    if (!fs::exists(value)) {
      throw Error(fmt::format("{}={}: no such file", env, value));
    }
    return value;
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    throw Error(fmt::format("cannot locate the partita binary (/proc/self/exe: {}) to find {} next to it; set {}",
                            ec.message(), program, env));
  }
  const fs::path dir = self.parent_path();
  const std::array candidates{dir / program, dir.parent_path() / "runtime" / program};
  for (const auto& c : candidates) {
    if (fs::exists(c)) {
      return c;
    }
  }
  throw Error(fmt::format("{} was not found next to {} (looked for {} and {}); build it with "
                          "`cmake --build <build dir> --target {}` (it needs MPI and oneDNN: "
                          "scripts/install-deps), or set {}",
                          program, self.string(), candidates[0].string(), candidates[1].string(), program, env));
}

void require_launcher(const std::string& mpirun) {
  bool found = false;
  if (mpirun.find('/') != std::string::npos) {
    found = fs::exists(mpirun);
  } else {
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path != nullptr ? path : "");
    std::string d;
    while (!found && std::getline(dirs, d, ':')) {
      found = !d.empty() && fs::exists(fs::path(d) / mpirun);
    }
  }
  if (!found) {
    throw Error(fmt::format("'{}' was not found on PATH: install Open MPI (openmpi-bin) or pass --mpirun", mpirun));
  }
}

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return out + "'";
}

fs::path make_work_dir(const std::string& requested, const std::string& prefix) {
  if (!requested.empty()) {
    fs::create_directories(requested);
    return requested;
  }
  std::string pattern = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw Error(fmt::format("cannot create a temporary directory {}", pattern));
  }
  return pattern;
}

std::string mpirun_prefix(const std::string& mpirun, int timeout, int ranks, int threads) {
  std::string launch = fmt::format("{} --timeout {} -np {}", shell_quoted(mpirun), timeout, ranks);
  const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
  if (static_cast<unsigned>(ranks) > cores) {
    launch += " --oversubscribe";
  }
  if (geteuid() == 0) {
    launch += " --allow-run-as-root";
  }
  return launch + fmt::format(" -x OMP_NUM_THREADS={}", threads);
}

std::pair<int, std::string> run_streaming(const std::string& command) {
  std::FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    throw Error(fmt::format("cannot start: {}", command));
  }
  std::string all;
  std::array<char, 4096> line{};
  while (std::fgets(line.data(), static_cast<int>(line.size()), pipe) != nullptr) {
    all += line.data();
    std::cout << "  | " << line.data() << std::flush;
  }
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0), all};
}

} // namespace partita::cli
