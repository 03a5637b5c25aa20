#include "search/simulated_ranking.h"

#include <algorithm>

namespace partita::search::detail {

double simulated_lower_bound(const strategy::Prediction& p, int stages) {
  double hidden = 0, bubble = 0;
  for (const auto& t : p.iteration) {
    if (t.name == "gradient sync" || t.name == "redistribution") {
      hidden += t.value;
    } else if (t.name == "pipeline bubble") {
      bubble = t.value;
    }
  }
  return p.iteration_time - std::min(hidden / std::max(1, stages) + bubble, p.iteration_time);
}

std::size_t simulation_work(const sim::TaskGraph& tg) {
  std::size_t work = tg.tasks.size();
  for (const auto& t : tg.tasks) {
    if (sim::shares_links(t) && static_cast<std::size_t>(t.group) < tg.group_links.size()) {
      work += tg.group_links[static_cast<std::size_t>(t.group)].size();
    }
  }
  return work;
}

} // namespace partita::search::detail
