#include "partita/launch/launch.h"

#include "partita/graph/error.h"
#include "partita/io/json_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <sstream>
#include <thread>

namespace partita::launch {

namespace fs = std::filesystem;

fs::path self_directory() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    throw Error(fmt::format("cannot locate the running binary (/proc/self/exe: {})", ec.message()));
  }
  return self.parent_path();
}

fs::path find_runtime_program(const std::string& program, const std::string& override_env) {
  if (const char* env = std::getenv(override_env.c_str()); env != nullptr && *env != '\0') {
    if (!fs::exists(env)) {
      throw Error(fmt::format("{}={}: no such file", override_env, env));
    }
    return env;
  }
  const fs::path dir = self_directory();
  const std::array candidates{dir / program, dir.parent_path() / "runtime" / program};
  for (const auto& c : candidates) {
    if (fs::exists(c)) {
      return c;
    }
  }
  throw Error(fmt::format("{} was not found next to this program (looked for {} and {}); build it with "
                          "`cmake --build <build dir> --target {}` (it needs MPI and oneDNN: scripts/install-deps), "
                          "or set {}",
                          program, candidates[0].string(), candidates[1].string(), program, override_env));
}

bool on_path(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    return fs::exists(program);
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  std::string d;
  while (std::getline(dirs, d, ':')) {
    if (!d.empty() && fs::exists(fs::path(d) / program)) {
      return true;
    }
  }
  return false;
}

Launcher parse_launcher(const std::string& name) {
  if (name == "mpirun") {
    return Launcher::mpirun;
  }
  if (name == "srun") {
    return Launcher::srun;
  }
  throw Error(fmt::format("unknown launcher '{}': mpirun or srun", name));
}

std::string launcher_program(const MpiJob& job) {
  return job.launcher == Launcher::srun ? "srun" : job.mpirun;
}

void check_hostfile(const fs::path& hostfile) {
  // A hostfile lists hosts, a few lines each: 1 MiB is far past any real one.
  std::string text;
  try {
    text = io::read_text_file(hostfile, std::uintmax_t{1} << 20);
  } catch (const Error& e) {
    throw Error(fmt::format("hostfile {}", e.what()));
  }
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first != std::string::npos && line[first] != '#') {
      return;
    }
  }
  throw Error(fmt::format("hostfile {}: names no host (it is {}): list one host a line, e.g. "
                          "'node1 slots=4'",
                          hostfile.string(), text.empty() ? "empty" : "only blank lines and # comments"));
}

namespace {
void refuse_hostfile_under_srun(const MpiJob& job) {
  if (job.launcher == Launcher::srun && !job.hostfile.empty()) {
    throw Error(fmt::format("hostfile {}: a hostfile is for mpirun; under srun the hosts are the Slurm allocation's",
                            job.hostfile.string()));
  }
}
} // namespace

void check_job(const MpiJob& job) {
  refuse_hostfile_under_srun(job);
  if (!job.hostfile.empty()) {
    check_hostfile(job.hostfile);
  }
}

std::vector<std::string> job_command(const MpiJob& job) {
  refuse_hostfile_under_srun(job);
  if (job.launcher == Launcher::srun) {
    std::vector<std::string> out{"srun",
                                 "-n",
                                 std::to_string(job.ranks),
                                 "--kill-on-bad-exit=1",
                                 fmt::format("--export=ALL,OMP_NUM_THREADS={}", job.threads),
                                 job.program.string()};
    out.insert(out.end(), job.arguments.begin(), job.arguments.end());
    return out;
  }
  std::vector<std::string> out{job.mpirun, "--timeout", std::to_string(job.timeout), "-np", std::to_string(job.ranks)};
  if (!job.hostfile.empty()) {
    out.insert(out.end(), {"--hostfile", job.hostfile.string()});
  } else if (static_cast<unsigned>(job.ranks) > std::max(1U, std::thread::hardware_concurrency())) {
    out.emplace_back("--oversubscribe");
  }
  if (geteuid() == 0) {
    out.emplace_back("--allow-run-as-root");
  }
  out.insert(out.end(), {"-x", fmt::format("OMP_NUM_THREADS={}", job.threads), job.program.string()});
  out.insert(out.end(), job.arguments.begin(), job.arguments.end());
  return out;
}

std::vector<std::string> run_arguments(const fs::path& plan, int warmup, int iterations, int threads,
                                       const fs::path& trace, const fs::path& measurements,
                                       const std::string& backend) {
  return {plan.string(),
          "--warmup",
          std::to_string(warmup),
          "--iterations",
          std::to_string(iterations),
          "--threads",
          std::to_string(threads),
          "--trace",
          trace.string(),
          "--measurements",
          measurements.string(),
          "--backend",
          backend};
}

std::string shell_line(const std::vector<std::string>& command) {
  std::string out;
  for (const auto& word : command) {
    if (!out.empty()) {
      out += ' ';
    }
    const bool plain = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                               "0123456789-_./=:,+@%") == std::string::npos;
    if (plain) {
      out += word;
      continue;
    }
    out += '\'';
    for (const char c : word) {
      out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    out += '\'';
  }
  return out;
}

fs::path make_work_dir(const std::string& requested, const std::string& prefix) {
  if (!requested.empty()) {
    std::error_code ec;
    fs::create_directories(requested, ec);
    if (ec) {
      throw Error(fmt::format("cannot create the directory {}: {}", requested, ec.message()));
    }
    return requested;
  }
  std::string pattern = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw Error(fmt::format("cannot create a temporary directory {}", pattern));
  }
  return pattern;
}

} // namespace partita::launch
