// The exact stage partition: dynamic programming over cut points. F[s][b], the smallest
// bottleneck of stages 0..s holding the first b ops, is the minimum over the start a of stage s of
// max(F[s-1][a], cost of stage s over [a, b)), taken over the starts where stage s fits its memory.
// For each (s, b) the start sweeps down from b - 1, pricing the stage incrementally: an op joining
// at the front turns its reads from earlier ops into receives and the receives of its own outputs
// into moves inside the stage. Memory only grows as the stage does, and so do its own kernels' time,
// so a sweep stops at the first start that does not fit, or whose kernels alone already reach the
// best bottleneck found: both prunings are exact.

#include "partita/search/bapipe.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

namespace partita::search::bapipe {

namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();

double memory_of(const StagePrices& sp, double resident, double activations, double workspace, int micro) {
  return resident + activations * sp.in_flight + workspace / micro;
}

} // namespace

StageCost stage_cost(const Problem& p, int s, int first, int last) {
  const auto& sp = p.stages[static_cast<std::size_t>(s)];
  StageCost c;
  double communication = 0, resident = 0, activations = 0, workspace = 0;
  for (int i = first; i < last; ++i) {
    const auto k = static_cast<std::size_t>(i);
    c.compute += sp.compute[k];
    communication += sp.communication[k];
    c.sync += sp.sync[k];
    resident += sp.resident[k];
    activations += sp.activations[k];
    workspace = std::max(workspace, sp.workspace[k]);
  }
  // A tensor sent into the stage is sent once, charged to its first reader there (evaluate()
  // sends a tensor into a layout once); every reader copies it.
  std::map<int, std::size_t> first_reader; // tensor -> edge
  for (std::size_t e = 0; e < p.edges.size(); ++e) {
    const auto& edge = p.edges[e];
    if (edge.to < first || edge.to >= last) {
      continue;
    }
    if (edge.from >= first) {
      communication += sp.inner[e];
      continue;
    }
    c.receive += sp.receive_copies[e];
    auto [it, inserted] = first_reader.emplace(edge.tensor, e);
    if (!inserted && edge.to < p.edges[it->second].to) {
      it->second = e;
    }
  }
  for (const auto& [tensor, e] : first_reader) {
    c.receive += sp.receive_transfer[e];
  }
  const double m = p.micro_batches;
  c.time = (c.compute + communication + c.receive) / m;
  c.compute /= m;
  c.receive /= m;
  c.memory = memory_of(sp, resident, activations, workspace, p.micro_batches);
  return c;
}

Partition partition(const Problem& p, const std::atomic<bool>* cancel) {
  const int n = p.ops;
  const int stages = static_cast<int>(p.stages.size());
  if (stages < 1 || stages > n) {
    throw Error(fmt::format("pipeline partition: {} stages for {} ops: every stage needs at least one op", stages, n));
  }
  std::vector<std::vector<std::size_t>> reads(static_cast<std::size_t>(n)), feeds(static_cast<std::size_t>(n));
  int tensors = 0;
  for (std::size_t e = 0; e < p.edges.size(); ++e) {
    const auto& edge = p.edges[e];
    if (edge.from < 0 || edge.from >= edge.to || edge.to >= n || edge.tensor < 0) {
      throw Error(
          fmt::format("pipeline partition: edge {} ({} -> {}) is not forward in the order", e, edge.from, edge.to));
    }
    reads[static_cast<std::size_t>(edge.to)].push_back(e);
    feeds[static_cast<std::size_t>(edge.from)].push_back(e);
    tensors = std::max(tensors, edge.tensor + 1);
  }
  // Per tensor during a sweep: which reader is charged its transfer (-1: none) and what it costs.
  std::vector<int> stamp(static_cast<std::size_t>(tensors), -1), charged_to(static_cast<std::size_t>(tensors), -1);
  std::vector<double> charged(static_cast<std::size_t>(tensors), 0.0);
  int sweep = 0;

  const auto width = static_cast<std::size_t>(n + 1);
  std::vector<double> best(static_cast<std::size_t>(stages) * width, infinity);
  std::vector<int> start(static_cast<std::size_t>(stages) * width, -1);
  auto at = [&](int s, int b) { return static_cast<std::size_t>(s) * width + static_cast<std::size_t>(b); };

  for (int s = 0; s < stages; ++s) {
    const auto& sp = p.stages[static_cast<std::size_t>(s)];
    const int last_end = n - (stages - 1 - s);
    for (int b = s + 1; b <= last_end; ++b) {
      if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
        throw Cancelled();
      }
      ++sweep;
      double own = 0, inner = 0, receive = 0, resident = 0, activations = 0, workspace = 0;
      double& cell = best[at(s, b)];
      const int lowest = s == 0 ? 0 : s;
      for (int a = b - 1; a >= lowest; --a) {
        const auto k = static_cast<std::size_t>(a);
        own += sp.compute[k] + sp.communication[k];
        resident += sp.resident[k];
        activations += sp.activations[k];
        workspace = std::max(workspace, sp.workspace[k]);
        if (memory_of(sp, resident, activations, workspace, p.micro_batches) > sp.memory_limit) {
          break; // a longer stage holds at least as much
        }
        if (own >= cell) {
          break; // a longer stage's kernels alone take at least as long
        }
        for (std::size_t e : reads[k]) {
          const auto t = static_cast<std::size_t>(p.edges[e].tensor);
          receive += sp.receive_copies[e];
          if (stamp[t] != sweep) {
            stamp[t] = sweep;
            charged_to[t] = -1;
          }
          if (charged_to[t] != a) {
            if (charged_to[t] >= 0) {
              receive -= charged[t];
            }
            charged_to[t] = a;
            charged[t] = sp.receive_transfer[e];
            receive += charged[t];
          }
        }
        for (std::size_t e : feeds[k]) {
          if (p.edges[e].to >= b) {
            continue;
          }
          const auto t = static_cast<std::size_t>(p.edges[e].tensor);
          receive -= sp.receive_copies[e];
          inner += sp.inner[e];
          if (stamp[t] == sweep && charged_to[t] >= 0) {
            receive -= charged[t];
            charged_to[t] = -1;
          }
        }
        if (s == 0 && a > 0) {
          continue; // the first stage starts at the first op
        }
        const double before = s == 0 ? 0.0 : best[at(s - 1, a)];
        const double candidate = std::max(before, own + inner + std::max(0.0, receive));
        if (candidate < cell) {
          cell = candidate;
          start[at(s, b)] = a;
        }
      }
    }
  }

  Partition out;
  if (best[at(stages - 1, n)] == infinity) {
    return out;
  }
  out.feasible = true;
  out.starts.assign(static_cast<std::size_t>(stages), 0);
  for (int s = stages - 1, b = n; s >= 0; --s) {
    const int a = start[at(s, b)];
    out.starts[static_cast<std::size_t>(s)] = a;
    b = a;
  }
  for (int s = 0; s < stages; ++s) {
    const int last = s + 1 < stages ? out.starts[static_cast<std::size_t>(s) + 1] : n;
    out.stages.push_back(stage_cost(p, s, out.starts[static_cast<std::size_t>(s)], last));
    out.bottleneck = std::max(out.bottleneck, out.stages.back().time);
  }
  // Tied weights whose readers the cut put on different stages (sync is not what the cut
  // minimizes, so adding it here keeps the cut exact).
  const auto stage_at = [&](int position) {
    return static_cast<int>(std::upper_bound(out.starts.begin(), out.starts.end(), position) - out.starts.begin()) - 1;
  };
  for (std::size_t t = 0; t < p.ties.size() && p.tie_extra; ++t) {
    const int sf = stage_at(p.ties[t].first), so = stage_at(p.ties[t].other);
    if (sf != so) {
      out.stages[static_cast<std::size_t>(sf)].sync += p.tie_extra(t, sf, so);
    }
  }
  double sync = 0;
  for (const auto& st : out.stages) {
    sync = std::max(sync, st.sync);
  }
  out.iteration_time = (p.micro_batches + stages - 1) * out.bottleneck + sync;
  return out;
}

} // namespace partita::search::bapipe
