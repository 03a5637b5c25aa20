#pragma once

// Grid arithmetic shared by config.cpp, layout.cpp and redistribution.cpp. Internal to core.
// These helpers write into caller-owned buffers: redistribute() walks every device of two grids
// for every pair of configs the search tries, so they must not allocate per position.

#include "partita/graph/error.h"
#include "partita/sharding/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>

namespace partita::sharding::detail {

// Coordinates of grid position `position` (last split dim fastest), one per dim, into `out`.
inline void unravel(const Config& c, int position, std::span<int> out) {
  int rest = position;
  for (std::size_t i = c.splits.size(); i-- > 0;) {
    const int f = c.splits[i];
    out[i] = rest % f;
    rest /= f;
  }
}

// Size of one part of a dim of `size` elements cut into `parts` balanced ceil-division blocks.
inline std::int64_t part_size(std::int64_t size, int parts) {
  return (size + parts - 1) / parts;
}

// [begin, end) of part `index` of `parts`; trailing parts may be short or empty when parts does
// not divide size (or exceeds it, as for a strided conv's input mapped to a larger output dim).
inline void part_range(std::int64_t size, int parts, int index, std::int64_t& begin, std::int64_t& end) {
  const std::int64_t step = part_size(size, parts);
  begin = std::min(size, step * index);
  end = std::min(size, step * (index + 1));
}

// Checks that a device list fits a config: one entry per grid position.
inline void check_devices(const Config& c, std::span<const int> devices, std::string_view what) {
  if (static_cast<std::int64_t>(devices.size()) != c.devices()) {
    throw Error(fmt::format("{}: {} devices given for a config on {} devices", what, devices.size(), c.devices()));
  }
}

// Several copies of the grid: devices.size() a multiple of c.devices(), device i at position
// i % c.devices().
inline void check_device_copies(const Config& c, std::span<const int> devices, std::string_view what) {
  const auto k = c.devices();
  if (devices.empty() || static_cast<std::int64_t>(devices.size()) % k != 0) {
    throw Error(fmt::format("{}: {} devices given for copies of a config on {} devices", what, devices.size(), k));
  }
}

} // namespace partita::sharding::detail
