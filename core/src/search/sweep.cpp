#include "partita/search/sweep.h"

#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"
#include "partita/graph/op_semantics.h"

#include "partita/sim/simulate.h"
#include <algorithm>
#include <tuple>

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

std::vector<cluster::TimedProduct> plan_products(const graph::Graph& g, const cluster::Cluster& cluster, int devices,
                                                 const std::vector<std::string>& families) {
  std::vector<const Optimizer*> optimizers;
  for (const auto& f : families) {
    optimizers.push_back(&find_optimizer(f));
  }
  std::vector<graph::OpSemantics> semantics;
  semantics.reserve(g.ops().size());
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    semantics.push_back(graph::describe(g, static_cast<graph::OpId>(i)));
  }
  std::vector<cluster::TimedProduct> out;
  for (const auto* f : optimizers) {
    Request r;
    r.graph = &g;
    r.cluster = &cluster;
    r.devices = devices;
    strategy::Strategy st;
    try {
      st = f->optimize(r);
    } catch (const Error&) { // this family cannot lay the model out on these devices
      continue;
    }
    if (st.pipeline) {
      continue;
    }
    for (std::size_t i = 0; i < st.ops.size() && i < semantics.size(); ++i) {
      if (const auto p = cost::product_shape(g, g.op(static_cast<graph::OpId>(i)), semantics[i], st.ops[i].config)) {
        out.push_back(*p);
      }
    }
  }
  const auto shape = [](const cluster::TimedProduct& p) { return std::tie(p.batch, p.m, p.n, p.k); };
  std::sort(out.begin(), out.end(), [&](const auto& a, const auto& b) { return shape(a) < shape(b); });
  out.erase(std::unique(out.begin(), out.end(), [&](const auto& a, const auto& b) { return shape(a) == shape(b); }),
            out.end());
  return out;
}

} // namespace partita::search
