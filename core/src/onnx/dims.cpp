#include "partita/graph/error.h"
#include "partita/onnx/import.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

std::pair<std::string, std::vector<std::int64_t>> parse_value(std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    throw Error(fmt::format("value '{}': expected INPUT=VALUE or INPUT=[V1,V2,...]", text));
  }
  const std::string name(text.substr(0, eq));
  std::string_view rest = text.substr(eq + 1);
  const bool list = rest.size() >= 2 && rest.front() == '[' && rest.back() == ']';
  if (list) {
    rest = rest.substr(1, rest.size() - 2);
  }
  std::vector<std::int64_t> values;
  std::size_t start = 0;
  while (start <= rest.size()) {
    const auto comma = list ? rest.find(',', start) : std::string_view::npos;
    std::string_view item = rest.substr(start, comma == std::string_view::npos ? rest.size() - start : comma - start);
    while (!item.empty() && item.front() == ' ') {
      item.remove_prefix(1);
    }
    while (!item.empty() && item.back() == ' ') {
      item.remove_suffix(1);
    }
    std::int64_t v = 0;
    if (item == "true") {
      v = 1;
    } else if (item == "false") {
      v = 0;
    } else if (item.empty() ||
               std::from_chars(item.data(), item.data() + item.size(), v).ptr != item.data() + item.size()) {
      throw Error(fmt::format("value '{}': '{}' is not an integer (or true/false){}", text, item,
                              list ? "" : "; several values are written INPUT=[V1,V2,...]"));
    }
    values.push_back(v);
    if (comma == std::string_view::npos) {
      break;
    }
    start = comma + 1;
  }
  return {name, values};
}

std::string format_value(const std::string& name, const std::vector<std::int64_t>& values) {
  return values.size() == 1 ? fmt::format("{}={}", name, values.front())
                            : fmt::format("{}=[{}]", name, fmt::join(values, ","));
}

void add_value(ImportOptions& options, std::string_view text) {
  auto [name, contents] = parse_value(text);
  if (options.values.count(name) != 0) {
    throw Error(fmt::format("input '{}' is given twice", name));
  }
  options.values[name] = std::move(contents);
}

void parse_values(std::string_view text, ImportOptions& options) {
  std::string item;
  int depth = 0;
  for (const char c : text) {
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    if (depth == 0 && (c == ' ' || c == '&' || c == ';')) {
      if (!item.empty()) {
        add_value(options, item);
      }
      item.clear();
    } else {
      item += c;
    }
  }
  if (!item.empty()) {
    add_value(options, item);
  }
}

std::string format_values(const ImportOptions& options) {
  std::string out;
  for (const auto& [name, values] : options.values) {
    out += (out.empty() ? "" : " ") + format_value(name, values);
  }
  return out;
}

std::string format_dims(const ImportOptions& options) {
  std::string out;
  for (const auto& [name, value] : options.dims) {
    out += fmt::format("{}{}={}", out.empty() ? "" : "&", name, value);
  }
  return out;
}

} // namespace partita::onnx_import
