#pragma once

// Families x device counts: each family's strategy evaluated at each count. What `partita compare`
// prints (one count: families side by side; several: a scaling sweep) and what the GUI's compare
// tab and scaling chart plot, computed once here.

#include "partita/cluster/cluster.h"
#include "partita/graph/graph.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/strategy.h"

#include <functional>
#include <string>
#include <vector>

namespace partita::search {

struct SweepCell {
  std::string family;
  int devices = 0;
  strategy::Prediction prediction;
  std::string error; // non-empty when the family cannot apply at this count: a gap, not a zero
};

struct SweepRequest {
  std::vector<std::string> families; // optimizer names
  std::vector<int> devices;          // device counts, in the order to report
  // The cluster for a device count (a preset may grow by nodes). Its errors abort the sweep.
  std::function<cluster::Cluster(int devices)> cluster_for;
  // Everything else a search needs (set-up, pipeline options, cancel); graph, cluster, devices and
  // progress are set per cell.
  Request base;
  std::function<void(double)> progress; // fraction of cells done, may be empty
  // Each cell's iteration simulated (sim::simulate_prediction), as `plan` and the GUI show it;
  // false: its terms added up.
  bool simulate = true;
};

// Cells in devices-major order (every family at devices[0], then at devices[1], ...). A family
// that throws partita::Error at a count gets the message in its cell; partita::Cancelled (from
// base.cancel) and unknown family names propagate.
std::vector<SweepCell> sweep(const graph::Graph& g, const SweepRequest& request);

// The matrix products (cost::product_shape) that the plans of `families` for `g` on `devices`
// devices of `cluster` run on one device, each shape once, sorted: what `partita calibrate
// --for-model` has timed so that the cost model prices those products at their measured times.
// Pipelined plans are left out (their micro-batches' products are priced on the curves), and so
// is a family that cannot lay the model out at that count. Unknown family names throw.
std::vector<cluster::TimedProduct> plan_products(const graph::Graph& g, const cluster::Cluster& cluster, int devices,
                                                 const std::vector<std::string>& families);

} // namespace partita::search
