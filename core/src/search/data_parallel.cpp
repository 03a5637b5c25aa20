// Data parallelism: every op splits its batch dimension over all devices; weights are
// replicated and their gradients all-reduced (the rule of DESIGN 3.2.1 produces that sync).

#include "search/families.h"

namespace partita::search::detail {

strategy::Strategy data_parallel(const Request& r) {
  Builder b(r, "dp");
  for (graph::OpId id : b.order()) {
    b.check_cancel();
    if (b.batch_dim(id) >= 0) {
      b.assign(id, b.split(id, {{b.batch_dim(id), b.devices()}}));
    } else {
      b.follow(id);
    }
  }
  return b.finish(fmt::format("Every op splits its batch over {} devices and keeps a full copy of the weights; each "
                              "weight gradient is all-reduced over the {} copies.",
                              b.devices(), b.devices()));
}

} // namespace partita::search::detail
