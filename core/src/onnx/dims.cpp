#include "partita/graph/error.h"
#include "partita/onnx/import.h"

#include <fmt/format.h>

#include <charconv>

namespace partita::onnx_import {

ImportOptions parse_dims(std::string_view text) {
  ImportOptions options;
  std::string item;
  const auto flush = [&] {
    if (item.empty()) {
      return;
    }
    const auto eq = item.find('=');
    std::int64_t value = 0;
    const char* begin = eq == std::string::npos ? nullptr : item.data() + eq + 1;
    const char* end = item.data() + item.size();
    if (eq == std::string::npos || eq == 0 || begin == end || std::from_chars(begin, end, value).ptr != end ||
        value <= 0) {
      throw Error(fmt::format("dimension '{}': expected NAME=VALUE with a positive integer value", item));
    }
    options.dims[item.substr(0, eq)] = value;
    item.clear();
  };
  for (const char c : text) {
    if (c == '&' || c == ',' || c == ' ') {
      flush();
    } else {
      item += c;
    }
  }
  flush();
  return options;
}

std::string format_dims(const ImportOptions& options) {
  std::string out;
  for (const auto& [name, value] : options.dims) {
    out += fmt::format("{}{}={}", out.empty() ? "" : "&", name, value);
  }
  return out;
}

} // namespace partita::onnx_import
