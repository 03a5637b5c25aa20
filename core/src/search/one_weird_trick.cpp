// Krizhevsky's "one weird trick" (arXiv 1404.5997): data parallelism for convolutional layers
// (much compute, few weights) and model parallelism for fully-connected layers (little compute,
// most of the weights).

#include "search/families.h"

namespace partita::search::detail {

strategy::Strategy one_weird_trick(const Request& r) {
  Builder b(r, "owt");
  int convs = 0, fcs = 0;
  for (graph::OpId id : b.order()) {
    b.check_cancel();
    const auto& s = b.semantics(id);
    if (s.op_class == graph::OpClass::convolution && b.batch_dim(id) >= 0) {
      b.assign(id, b.split(id, {{b.batch_dim(id), b.devices()}}));
      ++convs;
    } else if (s.op_class == graph::OpClass::contraction && has_weight(b.graph(), id) &&
               feature_dim(b.graph(), s, id) >= 0) {
      b.assign(id, b.split(id, {{feature_dim(b.graph(), s, id), b.devices()}}));
      ++fcs;
    } else {
      b.follow(id);
    }
  }
  return b.finish(fmt::format("{} convolutions split their batch over {} devices (data parallel); {} fully-connected "
                              "layers split their output features over {} devices (model parallel); the rest follows "
                              "its input's layout.",
                              convs, b.devices(), fcs, b.devices()));
}

} // namespace partita::search::detail
