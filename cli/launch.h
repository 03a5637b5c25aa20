#pragma once

// The CLI's side of starting the runtime's MPI programs (the command line itself comes from
// partita/launch/launch.h, shared with the GUI): checking the launcher and running the command
// with its output echoed as it comes.

#include "partita/launch/launch.h"

#include <string>
#include <utility>

namespace CLI {
class App;
}

namespace partita::cli {

// How the ranks start, as `partita run` and `partita calibrate` take it.
struct LaunchSettings {
  std::string mpirun = "mpirun";
  std::string launcher = "mpirun"; // or srun
  std::string hostfile;
};

// Adds --mpirun, --launcher and --hostfile to `cmd`; `hostfile_note` ends --hostfile's help (what
// must be on every host).
void add_launch_options(CLI::App& cmd, LaunchSettings& s, const std::string& hostfile_note);

// The job of `ranks` ranks these settings start, checked (launch::check_job) before anything runs.
launch::MpiJob checked_job(const LaunchSettings& s, int ranks, int threads, int timeout);

// Throws naming the launcher when it is not on PATH.
void require_launcher(const std::string& mpirun);

// Runs `command` through the shell, echoing each line of its output (stdout and stderr) as it
// comes; returns the exit status and the whole output.
std::pair<int, std::string> run_streaming(const std::string& command);

} // namespace partita::cli
