// load_cluster: a compiled-in preset ("dgx-a100", "dgx-a100?nodes=64") or a JSON file.

#include "cluster/embedded_presets.h"
#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <filesystem>
#include <set>

namespace partita::cluster {

namespace {

const char* const known_parameters = "nodes";

std::string joined_preset_names() {
  return fmt::format("{}", fmt::join(preset_names(), ", "));
}

int parse_positive(std::string_view spec, std::string_view key, std::string_view value) {
  int out = 0;
  const auto* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, out);
  if (value.empty() || ec != std::errc() || ptr != end || out < 1) {
    throw Error(
        fmt::format("cluster '{}': parameter '{}' must be a whole number of at least 1, got '{}'", spec, key, value));
  }
  return out;
}

// Applies "key=value&key=value" to the cluster before validation, so that the result is
// checked like any file.
void apply_parameters(std::string_view spec, std::string_view query, proto::Cluster& p) {
  std::set<std::string_view> given;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw Error(fmt::format("cluster '{}': expected key=value, got '{}' (known parameters: {})", spec, item,
                              known_parameters));
    }
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    if (!given.insert(key).second) {
      throw Error(fmt::format("cluster '{}': parameter '{}' given twice", spec, key));
    }
    if (key == "nodes") {
      p.set_nodes(parse_positive(spec, key, value));
    } else {
      throw Error(
          fmt::format("cluster '{}': unknown parameter '{}' (known parameters: {})", spec, key, known_parameters));
    }
  }
}

const detail::EmbeddedPreset* find_preset(std::string_view name) {
  for (const auto& preset : detail::embedded_presets()) {
    if (preset.name == name) {
      return &preset;
    }
  }
  return nullptr;
}

bool looks_like_path(std::string_view s) {
  return s.find('/') != std::string_view::npos || (s.size() > 5 && s.substr(s.size() - 5) == ".json");
}

} // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& preset : detail::embedded_presets()) {
    names.emplace_back(preset.name);
  }
  return names;
}

Cluster load_cluster(std::string_view spec) {
  // A file whose name happens to contain '?' is still read as a file.
  std::error_code ec;
  if (!spec.empty() && std::filesystem::is_regular_file(std::filesystem::path(spec), ec)) {
    proto::Cluster p;
    io::read_json_file(std::filesystem::path(spec), p);
    return from_proto(p, spec);
  }

  const auto question = spec.find('?');
  const std::string_view base = spec.substr(0, question);
  const std::string_view query = question == std::string_view::npos ? std::string_view{} : spec.substr(question + 1);

  proto::Cluster p;
  std::string source;
  if (const auto* preset = find_preset(base)) {
    source = fmt::format("cluster preset '{}'", preset->name);
    io::parse_json(preset->json, source, p);
  } else if (std::filesystem::is_regular_file(std::filesystem::path(base), ec)) {
    source = std::string(base);
    io::read_json_file(std::filesystem::path(base), p);
  } else if (looks_like_path(base) && std::filesystem::exists(std::filesystem::path(base), ec)) {
    io::read_json_file(std::filesystem::path(base), p); // names why it is not a file it reads
  } else if (looks_like_path(base)) {
    throw Error(fmt::format("{}: no such cluster file", base));
  } else {
    throw Error(fmt::format("unknown cluster '{}' (known presets: {}; or give the path of a JSON file)", base,
                            joined_preset_names()));
  }
  apply_parameters(spec, query, p);
  return from_proto(p, source);
}

} // namespace partita::cluster
