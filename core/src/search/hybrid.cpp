// Hybrid data + model parallelism in groups (Pal et al., IEEE Micro 2019): model parallelism
// inside a group of g devices, data parallelism across the P/g groups. Their analysis compares
// the data-parallel speedup with the hybrid one for each group size; here the same comparison
// is made with Partita's cost model, and the explanation lists it.

#include "search/families.h"

#include "partita/strategy/strategy.h"

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
  auto choice = fastest_group(r, std::min(r.devices, r.cluster->devices_per_node),
                              [&](int g) { return hybrid_with_group(r, g, "hybrid"); });
  const int g = choice.group;
  choice.strategy.explanation =
      fmt::format("Model parallelism inside groups of {} devices and data parallelism across {} groups. "
                  "Predicted iteration time by group size: {}; g={} is fastest{}.",
                  g, r.devices / g, choice.table, g, g == 1 ? " (plain data parallelism wins here)" : "");
  return std::move(choice.strategy);
}

} // namespace partita::search::detail
