#pragma once

// Starting the runtime's MPI programs (partita-run, partita-calibrate) as processes, the same way
// from the CLI and from the GUI: finding the binary and building the mpirun command line.

#include <filesystem>
#include <string>
#include <vector>

namespace partita::launch {

// The directory of the running executable (/proc/self/exe). Throws partita::Error.
std::filesystem::path self_directory();

// `program` (partita-run, partita-calibrate) next to the running binary: build/<preset>/runtime/
// for build/<preset>/{cli,gui}/, or the same directory once installed. The environment variable
// `override_env` (PARTITA_RUN, ...) wins when set. Throws partita::Error saying where it looked and
// how to build it.
std::filesystem::path find_runtime_program(const std::string& program, const std::string& override_env);

// True when `program` is a path that exists or a name found on PATH.
bool on_path(const std::string& program);

struct MpiJob {
  std::string mpirun = "mpirun";
  int ranks = 2;
  int threads = 1;   // OMP_NUM_THREADS of every rank
  int timeout = 600; // mpirun --timeout, seconds: the whole job's limit
  std::filesystem::path program;
  std::vector<std::string> arguments; // the program's
};

// mpirun's command line, program first: --oversubscribe when the ranks outnumber the cores,
// --allow-run-as-root as root, OMP_NUM_THREADS exported to every rank.
std::vector<std::string> mpirun_command(const MpiJob& job);

// partita-run's arguments for a timed run of `plan` on `backend` (cpu, cuda) writing `trace` and
// `measurements`.
std::vector<std::string> run_arguments(const std::filesystem::path& plan, int warmup, int iterations, int threads,
                                       const std::filesystem::path& trace, const std::filesystem::path& measurements,
                                       const std::string& backend = "cpu");

// One shell word per argument, quoted where needed: for showing a command and for popen.
std::string shell_line(const std::vector<std::string>& command);

// A new directory under the system's temporary directory, "<prefix>-XXXXXX"; or `requested`,
// created when missing. Throws partita::Error.
std::filesystem::path make_work_dir(const std::string& requested, const std::string& prefix);

} // namespace partita::launch
