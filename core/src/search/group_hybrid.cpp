// Group hybrid parallelism (Joo & Youn, IEEE Access 2021): workers form groups of g; inside a
// group the model is split layer-wise over the g workers (model parallelism, one batch in
// flight: no micro-batches), the P/g groups train data-parallel and synchronize the gradients of
// each layer only among the workers that hold it (|W|/g per worker over P/g replicas). The group
// size trades the idle time of layer-wise model parallelism against the gradient traffic of
// data parallelism; their training-time model picks it. Partita evaluates that model with its
// own cost model for every g that fits a node and keeps the fastest, listing the times.

#include "search/families.h"

#include "partita/strategy/strategy.h"

#include <algorithm>

namespace partita::search::detail {

strategy::Strategy group_hybrid(const Request& r) {
  const int max_g = std::min({r.devices, r.cluster->devices_per_node, static_cast<int>(r.graph->ops().size())});
  auto choice = fastest_group(r, max_g, [&](int g) {
    if (g == 1) {
      return data_parallel(r);
    }
    Request grouped = r;
    grouped.stages = g;
    grouped.micro_batches = 1;
    grouped.cuts.clear();
    grouped.balance = "time";
    return pipeline(grouped);
  });
  const int g = choice.group;
  auto best = std::move(choice.strategy);
  best.family = "ghp";
  best.explanation = fmt::format(
      "Groups of {} workers: the layers split over the {} workers of a group (model parallel), {} groups "
      "data parallel, each layer's gradients synchronized among the {} workers that hold it. Predicted "
      "iteration time by group size: {}; g={} is fastest{}.",
      g, g, r.devices / g, r.devices / g, choice.table, g, g == 1 ? " (plain data parallelism wins here)" : "");
  return best;
}

} // namespace partita::search::detail
