// The launcher command lines the CLI and the GUI share (partita/launch/launch.h): mpirun with and
// without a hostfile, srun, and the hostfile checks that run before anything starts.

#include "partita/graph/error.h"
#include "partita/launch/launch.h"
#include "test_support.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace partita::launch {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

MpiJob job_of(Launcher launcher) {
  MpiJob job;
  job.launcher = launcher;
  job.mpirun = "/opt/mpi/bin/mpirun";
  job.ranks = 4;
  job.threads = 2;
  job.timeout = 90;
  job.program = "/opt/partita/partita-run";
  job.arguments = {"plan.json", "--backend", "cuda"};
  return job;
}

bool contains(const std::vector<std::string>& words, const std::string& word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

fs::path scratch(const std::string& name) {
  return fs::path(test::scratch_dir()) / name;
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(JobCommand, SrunHasNoMpirunFlags) {
  const auto command = job_command(job_of(Launcher::srun));
  EXPECT_THAT(command, ElementsAre("srun", "-n", "4", "--kill-on-bad-exit=1", "--export=ALL,OMP_NUM_THREADS=2",
                                   "/opt/partita/partita-run", "plan.json", "--backend", "cuda"));
  EXPECT_EQ(launcher_program(job_of(Launcher::srun)), "srun");
}

TEST(JobCommand, MpirunPassesTheHostfileAndDoesNotOversubscribe) {
  auto job = job_of(Launcher::mpirun);
  job.ranks = 4096; // more than this machine's cores: only the hostfile's slots count
  job.hostfile = "/etc/partita/hosts";
  const auto command = job_command(job);
  ASSERT_GE(command.size(), 7U);
  EXPECT_THAT(std::vector(command.begin(), command.begin() + 7),
              ElementsAre("/opt/mpi/bin/mpirun", "--timeout", "90", "-np", "4096", "--hostfile", "/etc/partita/hosts"));
  EXPECT_FALSE(contains(command, "--oversubscribe"));
  EXPECT_TRUE(contains(command, "OMP_NUM_THREADS=2"));
  EXPECT_THAT(std::vector(command.end() - 4, command.end()),
              ElementsAre("/opt/partita/partita-run", "plan.json", "--backend", "cuda"));
  EXPECT_EQ(launcher_program(job), "/opt/mpi/bin/mpirun");
}

TEST(JobCommand, MpirunWithoutHostfileOversubscribesThisMachine) {
  auto job = job_of(Launcher::mpirun);
  job.ranks = 4096;
  const auto command = job_command(job);
  EXPECT_FALSE(contains(command, "--hostfile"));
  EXPECT_TRUE(contains(command, "--oversubscribe"));
}

TEST(JobCommand, HostfileUnderSrunIsRefused) {
  auto job = job_of(Launcher::srun);
  job.hostfile = "/etc/partita/hosts";
  EXPECT_THAT(error_of([&] { job_command(job); }), HasSubstr("hostfile /etc/partita/hosts: a hostfile is for mpirun"));
  EXPECT_THAT(error_of([&] { check_job(job); }), HasSubstr("Slurm allocation"));
}

TEST(Launcher, ParsesItsNames) {
  EXPECT_EQ(parse_launcher("mpirun"), Launcher::mpirun);
  EXPECT_EQ(parse_launcher("srun"), Launcher::srun);
  EXPECT_THAT(error_of([] { parse_launcher("aprun"); }), HasSubstr("unknown launcher 'aprun': mpirun or srun"));
}

TEST(Hostfile, AcceptsOneHost) {
  const fs::path file = scratch("hosts-ok");
  write(file, "# this machine, twice\nlocalhost slots=1\nlocalhost slots=1\n");
  EXPECT_NO_THROW(check_hostfile(file));
  auto job = job_of(Launcher::mpirun);
  job.hostfile = file;
  EXPECT_NO_THROW(check_job(job));
}

TEST(Hostfile, NamesTheFileAndTheReason) {
  const fs::path missing = scratch("no-such-hosts");
  EXPECT_EQ(error_of([&] { check_hostfile(missing); }), "hostfile " + missing.string() + ": cannot open: no such file");

  const fs::path dir = scratch("hosts-dir");
  fs::create_directories(dir);
  EXPECT_THAT(error_of([&] { check_hostfile(dir); }), HasSubstr(dir.string() + ": not a regular file (a directory)"));

  const fs::path empty = scratch("hosts-empty");
  write(empty, "");
  EXPECT_EQ(error_of([&] { check_hostfile(empty); }),
            "hostfile " + empty.string() + ": names no host (it is empty): list one host a line, e.g. 'node1 slots=4'");

  const fs::path comments = scratch("hosts-comments");
  write(comments, "# nothing yet\n\n   \n");
  EXPECT_THAT(error_of([&] { check_hostfile(comments); }), HasSubstr("only blank lines and # comments"));

  auto job = job_of(Launcher::mpirun);
  job.hostfile = empty;
  EXPECT_THAT(error_of([&] { check_job(job); }), HasSubstr(empty.string()));
}

} // namespace
} // namespace partita::launch
