#pragma once

// The cluster presets of resources/clusters/, compiled in by cmake/embed_cluster_presets.cmake.

#include <span>
#include <string_view>

namespace partita::cluster::detail {

struct EmbeddedPreset {
  std::string_view name; // file name without ".json"
  std::string_view json;
};

// Sorted by name.
std::span<const EmbeddedPreset> embedded_presets();

} // namespace partita::cluster::detail
