// The inputs kept for the fuzzed readers (tests/fuzz/<reader>/): real files the fuzzer starts
// from and hostile ones (what the fuzzer found, and the classes issue reports named: NaN and
// negative figures, a partial run, a device listed twice). Each must be read, or refused with a
// partita::Error that names the file; nothing else may come out (the asan preset runs this too).

#include "readers.h"

#include "partita/graph/error.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

namespace partita::fuzz {
namespace {

struct Outcome {
  int files = 0, read = 0, refused = 0;
};

Outcome run_all(const char* reader, const std::function<void(std::string_view)>& read, const char* source) {
  const auto dir = std::filesystem::path(PARTITA_SOURCE_DIR) / "tests/fuzz" / reader;
  Outcome out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    ++out.files;
    try {
      read(bytes.str());
      ++out.read;
    } catch (const Error& e) {
      ++out.refused;
      std::printf("%s: %s\n", entry.path().filename().c_str(), e.what());
      EXPECT_NE(std::string(e.what()).find(source), std::string::npos) << entry.path() << ": " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << entry.path() << ": not a partita::Error: " << e.what();
    }
  }
  return out;
}

// Every kept file is handled, and the set holds files that read and files that are refused.
TEST(FuzzedReaders, ClusterFiles) {
  const auto o = run_all("cluster", cluster_file, "fuzz-cluster.json");
  EXPECT_GE(o.read, 2);
  EXPECT_GE(o.refused, 3);
}

TEST(FuzzedReaders, PlanFiles) {
  const auto o = run_all("plan", plan_file, "fuzz-plan.json");
  EXPECT_GE(o.read, 1);
  EXPECT_GE(o.refused, 3);
}

TEST(FuzzedReaders, MeasurementsFiles) {
  const auto o = run_all("measurements", measurements_file, "fuzz-measurements.json");
  EXPECT_GE(o.read, 1);
  EXPECT_GE(o.refused, 3);
}

} // namespace
} // namespace partita::fuzz
