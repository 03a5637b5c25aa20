// Pure model parallelism: every layer with weights splits its output features (Conv output
// channels, Gemm/MatMul columns, embedding width) over all devices; weightless ops follow the
// layout their input arrives in.

#include "search/families.h"

namespace partita::search::detail {

strategy::Strategy model_parallel(const Request& r) {
  Builder b(r, "mp");
  for (graph::OpId id : b.order()) {
    b.check_cancel();
    const int feature = has_weight(b.graph(), id) ? feature_dim(b.graph(), b.semantics(id), id) : -1;
    if (feature >= 0) {
      b.assign(id, b.split(id, {{feature, b.devices()}}));
    } else {
      b.follow(id);
    }
  }
  return b.finish(fmt::format("Every layer with weights splits its output features over {} devices, so each device "
                              "holds 1/{} of the weights and no weight gradient is synchronized; activations are "
                              "gathered between layers instead.",
                              b.devices(), b.devices()));
}

} // namespace partita::search::detail
