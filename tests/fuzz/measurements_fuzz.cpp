// libFuzzer target: arbitrary bytes as a measurements file (readers.h). A partita::Error is the expected
// outcome for bad input; anything else (a crash, another exception, a leak) is a bug.

#include "readers.h"

#include "partita/graph/error.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    partita::fuzz::measurements_file(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const partita::Error&) {
  }
  return 0;
}
