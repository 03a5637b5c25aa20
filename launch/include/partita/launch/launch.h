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

// What starts the ranks: Open MPI's mpirun (this machine, or the hosts of a hostfile), or Slurm's
// srun inside an allocation (the hosts are the allocation's).
enum class Launcher { mpirun, srun };

// "mpirun" or "srun"; throws partita::Error naming the choices otherwise.
Launcher parse_launcher(const std::string& name);

struct MpiJob {
  std::string mpirun = "mpirun"; // the mpirun to start (a name on PATH or a path); unused by srun
  int ranks = 2;
  int threads = 1;   // OMP_NUM_THREADS of every rank
  int timeout = 600; // mpirun --timeout, seconds: the whole job's limit (srun: the allocation's)
  std::filesystem::path program;
  std::vector<std::string> arguments; // the program's
  Launcher launcher = Launcher::mpirun;
  std::filesystem::path hostfile; // mpirun --hostfile; empty: this machine
};

// The launcher's command line, launcher first. mpirun: --hostfile when given (its slots say how
// many ranks each host takes), else --oversubscribe when the ranks outnumber this machine's cores;
// --allow-run-as-root as root, OMP_NUM_THREADS exported to every rank. srun:
// `srun -n P --kill-on-bad-exit=1 --export=ALL,OMP_NUM_THREADS=T`, no mpirun flags. Throws
// partita::Error for a hostfile under srun.
std::vector<std::string> job_command(const MpiJob& job);

// The program that job_command starts (mpirun's path or "srun"): for checking it is on PATH.
std::string launcher_program(const MpiJob& job);

// Throws partita::Error naming `hostfile` and the reason unless it is a readable regular file that
// names at least one host (a line that is neither blank nor a # comment).
void check_hostfile(const std::filesystem::path& hostfile);

// Before anything is planned or started: check_hostfile on the job's hostfile, and no hostfile
// under srun. Throws partita::Error.
void check_job(const MpiJob& job);

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
