#include "common/candidates.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace partita::gui {

std::vector<Candidate> op_candidates(const Analysis& a, graph::OpId id) {
  const auto i = static_cast<std::size_t>(id);
  const auto& g = a.model.graph;
  const auto& s = a.semantics.at(i);
  const auto& chosen = a.strategy.ops.at(i);
  const int devices = std::max(1, a.strategy.devices);
  auto configs = sharding::enumerate_configs(s, {.max_devices = devices, .powers_of_two = true, .exact = false});
  if (std::find(configs.begin(), configs.end(), chosen.config) == configs.end()) {
    configs.push_back(chosen.config);
  }
  std::vector<Candidate> out;
  out.reserve(configs.size());
  for (const auto& config : configs) {
    const int k = std::max(1, config.devices());
    const bool is_chosen = config == chosen.config;
    // The chosen one is costed on its own devices; the others as builder.cpp's assign() places them.
    std::vector<int> placed(static_cast<std::size_t>(devices / k * k));
    std::iota(placed.begin(), placed.end(), 0);
    const std::vector<int>& on = is_chosen ? chosen.devices : placed;
    if (on.empty()) {
      continue;
    }
    Candidate c;
    c.config = config;
    c.copies = static_cast<int>(on.size()) / k;
    c.text = sharding::to_string(config, s) + (c.copies > 1 ? fmt::format(" x{} copies", c.copies) : "");
    c.cost = cost::op_cost(g, id, s, config, on, a.cluster, a.setup);
    c.chosen = is_chosen;
    out.push_back(std::move(c));
  }
  return out;
}

} // namespace partita::gui
