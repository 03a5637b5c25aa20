#include "partita/search/sweep.h"

#include "partita/graph/error.h"
#include "partita/sim/simulate.h"

namespace partita::search {

std::vector<SweepCell> sweep(const graph::Graph& g, const SweepRequest& request) {
  std::vector<const Optimizer*> families;
  families.reserve(request.families.size());
  for (const auto& f : request.families) {
    families.push_back(&find_optimizer(f)); // unknown names fail before any work
  }
  const double total = static_cast<double>(families.size() * request.devices.size());
  std::vector<SweepCell> cells;
  cells.reserve(families.size() * request.devices.size());
  for (int devices : request.devices) {
    const auto cl = request.cluster_for(devices);
    for (const auto* f : families) {
      if (request.base.cancel != nullptr && request.base.cancel->load()) {
        throw Cancelled();
      }
      SweepCell cell{std::string(f->name()), devices, {}, {}};
      Request r = request.base;
      r.graph = &g;
      r.cluster = &cl;
      r.devices = devices;
      const double done = static_cast<double>(cells.size());
      r.progress = [&](double x) {
        if (request.progress) {
          request.progress((done + x) / total);
        }
      };
      try {
        const auto st = f->optimize(r);
        cell.prediction = strategy::evaluate(g, cl, st, r.setup);
        if (request.simulate) {
          sim::simulate_prediction(g, cl, st, cell.prediction);
        }
      } catch (const Cancelled&) {
        throw;
      } catch (const Error& e) {
        cell.error = e.what();
      }
      cells.push_back(std::move(cell));
    }
  }
  if (request.progress) {
    request.progress(1.0);
  }
  return cells;
}

} // namespace partita::search
