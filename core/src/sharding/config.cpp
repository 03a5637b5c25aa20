// Configurations, their enumeration for the search, and the logical device grid they form.

#include "partita/sharding/config.h"

#include "partita/graph/error.h"
#include "sharding/grid.h"

#include <fmt/format.h>

#include <limits>

namespace partita::sharding {

int Config::devices() const {
  std::int64_t n = 1;
  for (const int f : splits) {
    if (f < 1) {
      throw Error(fmt::format("config has split factor {}; factors must be >= 1", f));
    }
    n *= f;
    if (n > std::numeric_limits<int>::max() || n < 0) {
      throw Error(fmt::format("config splits over {} or more devices", n));
    }
  }
  return static_cast<int>(n);
}

std::string to_string(const Config& c, const graph::OpSemantics& s) {
  std::string out;
  for (std::size_t i = 0; i < c.splits.size(); ++i) {
    if (c.splits[i] == 1) {
      continue;
    }
    if (!out.empty()) {
      out += ' ';
    }
    out += fmt::format("{}:{}", i < s.dims.size() ? s.dims[i].name : fmt::format("d{}", i), c.splits[i]);
  }
  return out.empty() ? "replicated" : out;
}

Config make_config(const graph::OpSemantics& s, std::span<const std::pair<std::string, int>> splits) {
  Config c;
  c.splits.assign(s.dims.size(), 1);
  std::vector<bool> given(s.dims.size(), false);
  for (const auto& [name, factor] : splits) {
    const int d = s.find_dim(name);
    if (d < 0) {
      std::string names;
      for (const auto& dim : s.dims) {
        names += names.empty() ? dim.name : " " + dim.name;
      }
      throw Error(fmt::format("config: the op has no dim '{}' (its dims: {})", name, names.empty() ? "none" : names));
    }
    const auto& dim = s.dims[static_cast<std::size_t>(d)];
    if (given[static_cast<std::size_t>(d)]) {
      throw Error(fmt::format("config: dim '{}' is given twice", name));
    }
    given[static_cast<std::size_t>(d)] = true;
    if (factor < 1) {
      throw Error(fmt::format("config: dim '{}' has factor {}; factors must be >= 1", name, factor));
    }
    if (factor > 1 && !dim.splittable) {
      throw Error(fmt::format("config: dim '{}' is not splittable", name));
    }
    if (factor > dim.size) {
      throw Error(fmt::format("config: dim '{}' has size {}, smaller than its factor {}", name, dim.size, factor));
    }
    c.splits[static_cast<std::size_t>(d)] = factor;
  }
  return c;
}

namespace {

// Depth-first over the splittable dims in dim order with factors ascending, so configs come out
// in lexicographic order of `splits` (the replicated config first). `capacity[i]` is the largest
// product dims i.. can reach; it prunes branches that cannot use exactly max_devices.
struct Enumerator {
  const EnumerateOptions& options;
  std::vector<int> dims;    // splittable dims with size > 1
  std::vector<int> largest; // per entry of dims: largest allowed factor
  std::vector<std::int64_t> capacity;
  Config current;
  std::vector<Config>& out;

  void run(std::size_t i, int budget) {
    if (i == dims.size()) {
      if (!options.exact || budget == 1) {
        out.push_back(current);
      }
      return;
    }
    if (options.exact && capacity[i] < budget) {
      return;
    }
    const int limit = std::min(largest[i], budget);
    int& slot = current.splits[static_cast<std::size_t>(dims[i])];
    // 64-bit so that doubling past the largest power of two below INT_MAX cannot overflow.
    for (std::int64_t f = 1; f <= limit; f = options.powers_of_two ? f * 2 : f + 1) {
      // With exact, the remaining dims must make up budget / f: f has to divide it.
      if (options.exact && budget % f != 0) {
        continue;
      }
      slot = static_cast<int>(f);
      run(i + 1, static_cast<int>(budget / f));
    }
    slot = 1;
  }
};

} // namespace

std::vector<Config> enumerate_configs(const graph::OpSemantics& s, const EnumerateOptions& options) {
  if (options.max_devices < 1) {
    throw Error(fmt::format("enumerate_configs: max_devices is {}; it must be >= 1", options.max_devices));
  }
  std::vector<Config> out;
  Enumerator e{options, {}, {}, {}, Config{std::vector<int>(s.dims.size(), 1)}, out};
  for (std::size_t i = 0; i < s.dims.size(); ++i) {
    const auto& d = s.dims[i];
    if (!d.splittable || d.size <= 1) {
      continue;
    }
    int f = static_cast<int>(std::min<std::int64_t>(d.size, options.max_devices));
    if (options.powers_of_two) {
      int p = 1;
      while (p <= f / 2) {
        p *= 2;
      }
      f = p;
    }
    e.dims.push_back(static_cast<int>(i));
    e.largest.push_back(f);
  }
  e.capacity.assign(e.dims.size() + 1, 1);
  for (std::size_t i = e.dims.size(); i-- > 0;) {
    e.capacity[i] = std::min<std::int64_t>(e.capacity[i + 1] * e.largest[i], options.max_devices);
  }
  e.run(0, options.max_devices);
  return out;
}

std::vector<int> grid_coordinates(const Config& c, int position) {
  const int n = c.devices();
  if (n < 1 || position < 0 || position >= n) {
    throw Error(fmt::format("grid_coordinates: position {} is outside a grid of {} devices", position, n));
  }
  std::vector<int> out(c.splits.size(), 0);
  detail::unravel(c, position, out);
  return out;
}

std::vector<std::vector<int>> groups_along(const Config& c, std::span<const int> devices, std::span<const int> axes) {
  detail::check_devices(c, devices, "groups_along");
  std::vector<bool> along(c.splits.size(), false);
  for (const int a : axes) {
    if (a < 0 || static_cast<std::size_t>(a) >= c.splits.size()) {
      throw Error(fmt::format("groups_along: axis {} is not a dim of a config with {} dims", a, c.splits.size()));
    }
    along[static_cast<std::size_t>(a)] = true;
  }
  // A group is identified by the coordinates outside `axes`; groups are numbered by first
  // appearance, so both groups and their members come out in grid order.
  std::int64_t keys = 1;
  std::size_t members = 1; // of each group: the product of the splits along `axes`
  for (std::size_t i = 0; i < c.splits.size(); ++i) {
    keys *= along[i] ? 1 : c.splits[i];
    members *= along[i] ? static_cast<std::size_t>(c.splits[i]) : 1;
  }
  std::vector<int> group_of_key(static_cast<std::size_t>(keys), -1);
  std::vector<std::vector<int>> groups;
  groups.reserve(static_cast<std::size_t>(keys));
  // The grid coordinates of position p (the last axis fastest, as detail::unravel gives them),
  // advanced as an odometer, and the key with them: no division per position.
  std::vector<int> coords(c.splits.size(), 0);
  std::vector<std::int64_t> key_step(c.splits.size(), 0); // what one step of axis i adds to the key
  for (std::int64_t step = 1, i = static_cast<std::int64_t>(c.splits.size()); i-- > 0;) {
    if (!along[static_cast<std::size_t>(i)]) {
      key_step[static_cast<std::size_t>(i)] = step;
      step *= c.splits[static_cast<std::size_t>(i)];
    }
  }
  std::int64_t key = 0;
  for (std::size_t p = 0; p < devices.size(); ++p) {
    if (p > 0) {
      for (std::size_t i = c.splits.size(); i-- > 0;) {
        key += key_step[i];
        if (++coords[i] < c.splits[i]) {
          break;
        }
        key -= key_step[i] * coords[i];
        coords[i] = 0;
      }
    }
    int& g = group_of_key[static_cast<std::size_t>(key)];
    if (g < 0) {
      g = static_cast<int>(groups.size());
      groups.emplace_back().reserve(members);
    }
    groups[static_cast<std::size_t>(g)].push_back(devices[p]);
  }
  return groups;
}

} // namespace partita::sharding
