#pragma once

// The CLI's side of starting the runtime's MPI programs (the command line itself comes from
// partita/launch/launch.h, shared with the GUI): checking the launcher and running the command
// with its output echoed as it comes.

#include <string>
#include <utility>

namespace partita::cli {

// Throws naming the launcher when it is not on PATH.
void require_launcher(const std::string& mpirun);

// Runs `command` through the shell, echoing each line of its output (stdout and stderr) as it
// comes; returns the exit status and the whole output.
std::pair<int, std::string> run_streaming(const std::string& command);

} // namespace partita::cli
