// Group hybrid parallelism (Joo & Youn, IEEE Access 2021): workers form groups of g; inside a
// group the model is split layer-wise over the g workers (model parallelism, one batch in
// flight: no micro-batches), the P/g groups train data-parallel and synchronize the gradients of
// each layer only among the workers that hold it (|W|/g per worker over P/g replicas). The group
// size trades the idle time of layer-wise model parallelism against the gradient traffic of
// data parallelism; their training-time model picks it. Partita evaluates that model with its
// own cost model for every g that fits a node and keeps the fastest, listing the times.

#include "search/families.h"

#include "partita/strategy/strategy.h"

#include <limits>

namespace partita::search::detail {

strategy::Strategy group_hybrid(const Request& r) {
  std::string table;
  double best_time = std::numeric_limits<double>::infinity();
  strategy::Strategy best;
  int best_g = 1;
  const int max_g = std::min({r.devices, r.cluster->devices_per_node, static_cast<int>(r.graph->ops().size())});
  for (int g = 1; g <= max_g; g *= 2) {
    if (r.devices % g != 0) {
      continue;
    }
    strategy::Strategy st;
    if (g == 1) {
      st = data_parallel(r);
    } else {
      Request grouped = r;
      grouped.stages = g;
      grouped.micro_batches = 1;
      grouped.cuts.clear();
      grouped.balance = "time";
      st = pipeline(grouped);
    }
    const auto p = strategy::evaluate(*r.graph, *r.cluster, st, r.setup);
    table += fmt::format("{}g={}: {:.4g} ms", table.empty() ? "" : ", ", g, p.iteration_time * 1e3);
    if (p.iteration_time < best_time) {
      best_time = p.iteration_time;
      best = std::move(st);
      best_g = g;
    }
    if (r.progress) {
      r.progress(static_cast<double>(g) / max_g);
    }
  }
  best.family = "ghp";
  best.explanation =
      fmt::format("Groups of {} workers: the layers split over the {} workers of a group (model parallel), {} groups "
                  "data parallel, each layer's gradients synchronized among the {} workers that hold it. Predicted "
                  "iteration time by group size: {}; g={} is fastest{}.",
                  best_g, best_g, r.devices / best_g, r.devices / best_g, table, best_g,
                  best_g == 1 ? " (plain data parallelism wins here)" : "");
  return best;
}

} // namespace partita::search::detail
