// Inputs the fuzzer once crashed on (tests/fuzz/regressions): each must now import or fail
// with a partita::Error.

#include "partita/graph/error.h"
#include "partita/graph/summary.h"
#include "partita/onnx/import.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace partita {
namespace {

TEST(OnnxFuzzRegressions, EveryCrashInputIsHandled) {
  const std::filesystem::path dir = std::filesystem::path(PARTITA_SOURCE_DIR) / "tests/fuzz/regressions";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    try {
      auto r = onnx_import::import_bytes(bytes.str(), entry.path().filename().string(), {{{"batch", 2}, {"seq", 4}}});
      (void)graph::summarize(r.graph);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(entry.path().filename().string()), std::string::npos) << e.what();
    }
    ++files;
  }
  EXPECT_GE(files, 2);
}

} // namespace
} // namespace partita
