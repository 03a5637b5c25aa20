// libFuzzer target: arbitrary bytes through the whole ONNX import path (wire filter, protobuf
// parse, shape inference, graph construction, op descriptions). A partita::Error is the
// expected outcome for bad input; anything else (a crash, another exception, a leak) is a bug.

#include "partita/graph/error.h"
#include "partita/graph/summary.h"
#include "partita/onnx/import.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto result = partita::onnx_import::import_bytes(std::string_view(reinterpret_cast<const char*>(data), size),
                                                           "fuzz.onnx", {{{"batch", 2}, {"seq", 4}}});
    (void)partita::graph::summarize(result.graph);
  } catch (const partita::Error&) {
  }
  return 0;
}
