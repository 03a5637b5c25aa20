// The event simulator against the additive prediction, closed forms and monotonicity.

#include "partita/graph/error.h"
#include "partita/search/optimizer.h"
#include "partita/sim/simulate.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"
#include "simple_cluster.h"

#include <gtest/gtest.h>

#include <cmath>

namespace partita {
namespace {

TEST(Explore, Print) {
  const auto cluster = cluster::load_cluster("dgx-a100");
  for (const char* spec : {"zoo:mlp", "zoo:bert?layers=2&hidden=256&heads=4&seq=64&batch=16",
                           "zoo:gpt2?layers=2&hidden=256&heads=4&seq=64&batch=16",
                           "zoo:resnet50?batch=16&image=64"}) {
    const auto model = zoo::load(spec);
    for (const auto& o : search::optimizers()) {
      if (o->name() == "given") continue;
      search::Request r;
      r.graph = &model.graph;
      r.cluster = &cluster;
      r.devices = 8;
      strategy::Strategy st;
      try {
        st = o->optimize(r);
      } catch (const Error& e) {
        std::printf("%s %s: %s\n", spec, std::string(o->name()).c_str(), e.what());
        continue;
      }
      const auto off = sim::simulate(model.graph, cluster, st, {}, {.overlap = false});
      const auto on = sim::simulate(model.graph, cluster, st, {}, {.overlap = true});
      std::printf("%-60s %-9s add %.6g off %.6g (rel %.2e) on %.6g tasks %zu cp %zu\n", spec,
                  std::string(o->name()).c_str(), off.prediction.iteration_time, off.result.iteration_time,
                  off.result.iteration_time / off.prediction.iteration_time - 1, on.result.iteration_time,
                  on.tasks.tasks.size(), on.result.critical_path.size());
    }
  }
}

} // namespace
} // namespace partita
