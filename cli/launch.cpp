#include "launch.h"

#include "partita/graph/error.h"
#include "partita/launch/launch.h"

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
