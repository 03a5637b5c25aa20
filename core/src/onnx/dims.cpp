#include "partita/graph/error.h"
#include "partita/onnx/import.h"

#include <fmt/format.h>

#include <charconv>

namespace partita::onnx_import {

std::optional<AxisKey> axis_key(std::string_view key) {
  const auto colon = key.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == key.size()) {
    return std::nullopt;
  }
  std::int64_t axis = 0;
  const char* begin = key.data() + colon + 1;
  const char* end = key.data() + key.size();
  if (*begin == '-' || *begin == '+' || std::from_chars(begin, end, axis).ptr != end) {
    return std::nullopt;
  }
  return AxisKey{std::string(key.substr(0, colon)), axis};
}

ImportOptions parse_dims(std::string_view text) {
  ImportOptions options;
  std::string item;
  const auto flush = [&] {
    if (item.empty()) {
      return;
    }
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error(fmt::format("dimension '{}': expected NAME=VALUE or INPUT:AXIS=VALUE", item));
    }
    const std::string key = item.substr(0, eq);
    std::int64_t value = 0;
    const char* begin = item.data() + eq + 1;
    const char* end = item.data() + item.size();
    if (begin == end || std::from_chars(begin, end, value).ptr != end || value <= 0) {
      const auto axis = axis_key(key);
      throw Error(
          fmt::format("dimension '{}': the value of {} must be a positive integer, not '{}'", item,
                      axis ? fmt::format("input '{}' axis {}", axis->input, axis->axis) : fmt::format("'{}'", key),
                      item.substr(eq + 1)));
    }
    options.dims[key] = value;
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
