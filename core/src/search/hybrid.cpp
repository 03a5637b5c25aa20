// Hybrid data + model parallelism in groups (Pal et al., IEEE Micro 2019): model parallelism
// inside a group of g devices, data parallelism across the P/g groups. Their analysis compares
// the data-parallel speedup with the hybrid one for each group size; here the same comparison
// is made with Partita's cost model, and the explanation lists it.

#include "search/families.h"

#include "partita/strategy/strategy.h"

#include <limits>

namespace partita::search::detail {

strategy::Strategy hybrid_with_group(const Request& r, int g, const std::string& family) {
  Builder b(r, family);
  const int groups = b.devices() / g;
  for (graph::OpId id : b.order()) {
    b.check_cancel();
    const auto& s = b.semantics(id);
    const int feature = has_weight(b.graph(), id) ? feature_dim(b.graph(), s, id) : -1;
    if (feature >= 0) {
      b.assign(id, b.split(id, {{b.batch_dim(id), groups}, {feature, g}}));
    } else if (b.batch_dim(id) >= 0 && g == 1) {
      b.assign(id, b.split(id, {{b.batch_dim(id), groups}}));
    } else {
      b.follow(id);
    }
  }
  return b.finish("");
}

strategy::Strategy hybrid(const Request& r) {
  std::string table;
  double best_time = std::numeric_limits<double>::infinity();
  strategy::Strategy best;
  int best_g = 1;
  const int max_g = std::min(r.devices, r.cluster->devices_per_node);
  for (int g = 1; g <= max_g; g *= 2) {
    auto st = hybrid_with_group(r, g, "hybrid");
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
  best.explanation =
      fmt::format("Model parallelism inside groups of {} devices and data parallelism across {} groups. "
                  "Predicted iteration time by group size: {}; g={} is fastest{}.",
                  best_g, r.devices / best_g, table, best_g, best_g == 1 ? " (plain data parallelism wins here)" : "");
  return best;
}

} // namespace partita::search::detail
