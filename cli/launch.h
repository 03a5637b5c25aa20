#pragma once

// Starting the runtime's MPI programs from the CLI: finding them next to `partita`, the mpirun
// command line, and running it with its output echoed as it comes.

#include <filesystem>
#include <string>
#include <utility>

namespace partita::cli {

// `program` (partita-run, partita-calibrate) next to this binary: build/<preset>/runtime/<program>
// for build/<preset>/cli/partita, or the same directory once installed. The environment variable
// `env` (PARTITA_RUN, ...) overrides.
std::filesystem::path find_runtime_program(const std::string& program, const char* env);

// Throws naming the launcher when it is not on PATH.
void require_launcher(const std::string& mpirun);

std::string shell_quoted(const std::string& s);

// `requested`, created, or a new temporary directory named after `prefix`.
std::filesystem::path make_work_dir(const std::string& requested, const std::string& prefix);

// "<mpirun> --timeout T -np P [--oversubscribe] [--allow-run-as-root] -x OMP_NUM_THREADS=N": the
// program and its arguments follow.
std::string mpirun_prefix(const std::string& mpirun, int timeout, int ranks, int threads);

// Runs `command` through the shell, echoing each line of its output (stdout and stderr) as it
// comes; returns the exit status and the whole output.
std::pair<int, std::string> run_streaming(const std::string& command);

} // namespace partita::cli
