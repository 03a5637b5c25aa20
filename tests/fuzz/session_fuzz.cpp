// libFuzzer target: arbitrary bytes as a partita-gui session file (gui/src/common/session.h:
// sessionFromJson, the reader File > Open Session uses). A partita::Error is the expected outcome
// for bad input; anything else (a crash, another exception, a leak) is a bug.

#include "common/session.h"

#include "partita/graph/error.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)partita::gui::sessionFromJson(std::string_view(reinterpret_cast<const char*>(data), size),
                                        "fuzz-session.json");
  } catch (const partita::Error&) {
  }
  return 0;
}
