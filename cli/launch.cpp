#include "launch.h"

#include "partita/graph/error.h"
#include "partita/launch/launch.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <iostream>

namespace partita::cli {

void require_launcher(const std::string& mpirun) {
  if (!launch::on_path(mpirun)) {
    throw Error(fmt::format("'{}' was not found on PATH: {}", mpirun,
                            mpirun == "srun" ? "--launcher srun needs Slurm's srun (run inside an allocation)"
                                             : "install Open MPI (openmpi-bin) or pass --mpirun"));
  }
}

void add_launch_options(CLI::App& cmd, LaunchSettings& s, const std::string& hostfile_note) {
  cmd.add_option("--mpirun", s.mpirun, "the mpirun to start (with --launcher mpirun)")->capture_default_str();
  cmd.add_option("--launcher", s.launcher,
                 "what starts the ranks: mpirun (this machine, or the hosts of --hostfile) or srun (inside a Slurm "
                 "allocation: srun -n P, its hosts)")
      ->check(CLI::IsMember({"mpirun", "srun"}))
      ->capture_default_str();
  cmd.add_option("--hostfile", s.hostfile,
                 "Open MPI hostfile (one host a line, e.g. 'node1 slots=4'), passed to mpirun as --hostfile; " +
                     hostfile_note);
}

launch::MpiJob checked_job(const LaunchSettings& s, int ranks, int threads, int timeout) {
  launch::MpiJob job;
  job.launcher = launch::parse_launcher(s.launcher);
  job.mpirun = s.mpirun;
  job.hostfile = s.hostfile;
  job.ranks = ranks;
  job.threads = threads;
  job.timeout = timeout;
  launch::check_job(job);
  return job;
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
