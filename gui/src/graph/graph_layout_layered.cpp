// The layered fallback for graphs too big for dot: linear in ops and edges apart from a few
// barycenter sweeps. Ranks by longest path from the sources, so every edge goes downwards.

#include "graph/graph_layout.h"

#include "partita/graph/error.h"

#include <algorithm>
#include <numeric>

namespace partita::gui {

namespace {
constexpr double horizontalGap = 24;
constexpr double verticalGap = 40;
constexpr int sweeps = 4;
} // namespace

std::shared_ptr<GraphLayout> layoutLayered(const graph::Graph& g, const std::atomic<bool>* cancel,
                                           const ProgressFn& progress) {
  auto report = [&](double f) {
    if (progress) {
      progress(f);
    }
    if (cancel != nullptr && cancel->load()) {
      throw Cancelled();
    }
  };
  const auto edges = opEdges(g);
  const std::size_t n = g.ops().size();
  std::vector<std::vector<graph::OpId>> preds(n);
  std::vector<std::vector<graph::OpId>> succs(n);
  for (const auto& [from, to] : edges) {
    preds[static_cast<std::size_t>(to)].push_back(from);
    succs[static_cast<std::size_t>(from)].push_back(to);
  }
  const auto order = g.topological_order();
  std::vector<int> rank(n, 0);
  int ranks = n == 0 ? 0 : 1;
  for (graph::OpId id : order) {
    for (graph::OpId p : preds[static_cast<std::size_t>(id)]) {
      rank[static_cast<std::size_t>(id)] =
          std::max(rank[static_cast<std::size_t>(id)], rank[static_cast<std::size_t>(p)] + 1);
    }
    ranks = std::max(ranks, rank[static_cast<std::size_t>(id)] + 1);
  }
  std::vector<std::vector<graph::OpId>> layers(static_cast<std::size_t>(ranks));
  for (graph::OpId id : order) {
    layers[static_cast<std::size_t>(rank[static_cast<std::size_t>(id)])].push_back(id);
  }
  report(0.2);

  // Barycenter sweeps, down then up: order each rank by the mean position of its neighbours in
  // the rank before.
  std::vector<double> position(n, 0);
  auto number = [&](const std::vector<graph::OpId>& layer) {
    for (std::size_t i = 0; i < layer.size(); ++i) {
      position[static_cast<std::size_t>(layer[i])] = static_cast<double>(i);
    }
  };
  for (const auto& layer : layers) {
    number(layer);
  }
  auto reorder = [&](std::vector<graph::OpId>& layer, const std::vector<std::vector<graph::OpId>>& neighbours) {
    std::vector<double> key(layer.size());
    for (std::size_t i = 0; i < layer.size(); ++i) {
      const auto& nb = neighbours[static_cast<std::size_t>(layer[i])];
      key[i] = nb.empty() ? position[static_cast<std::size_t>(layer[i])]
                          : std::accumulate(nb.begin(), nb.end(), 0.0, [&](double s, graph::OpId o) {
                              return s + position[static_cast<std::size_t>(o)];
                            }) / static_cast<double>(nb.size());
    }
    std::vector<std::size_t> idx(layer.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return key[a] < key[b]; });
    std::vector<graph::OpId> sorted;
    sorted.reserve(layer.size());
    for (std::size_t i : idx) {
      sorted.push_back(layer[i]);
    }
    layer = std::move(sorted);
    number(layer);
  };
  for (int s = 0; s < sweeps; ++s) {
    if (s % 2 == 0) {
      for (std::size_t r = 1; r < layers.size(); ++r) {
        reorder(layers[r], preds);
      }
    } else {
      for (std::size_t r = layers.size(); r-- > 1;) {
        reorder(layers[r - 1], succs);
      }
    }
    report(0.2 + 0.6 * (s + 1) / sweeps);
  }

  auto layout = std::make_shared<GraphLayout>();
  layout->method = LayoutMethod::Layered;
  layout->nodes.resize(n);
  std::size_t widest = 0;
  for (const auto& layer : layers) {
    widest = std::max(widest, layer.size());
  }
  const double pitch = GraphNodeWidth + horizontalGap;
  const double fullWidth = static_cast<double>(widest) * pitch;
  for (std::size_t r = 0; r < layers.size(); ++r) {
    const auto& layer = layers[r];
    const double left = (fullWidth - static_cast<double>(layer.size()) * pitch) / 2 + horizontalGap / 2;
    for (std::size_t i = 0; i < layer.size(); ++i) {
      layout->nodes[static_cast<std::size_t>(layer[i])] =
          QRectF(left + static_cast<double>(i) * pitch, static_cast<double>(r) * (GraphNodeHeight + verticalGap),
                 GraphNodeWidth, GraphNodeHeight);
    }
  }
  layout->edges.reserve(edges.size());
  for (const auto& [from, to] : edges) {
    const QRectF& a = layout->nodes[static_cast<std::size_t>(from)];
    const QRectF& b = layout->nodes[static_cast<std::size_t>(to)];
    LaidOutEdge e{from, to, {}, QPointF(b.center().x(), b.top() - 8), QPointF(b.center().x(), b.top())};
    const QPointF start(a.center().x(), a.bottom());
    e.path.moveTo(start);
    const double dy = (e.arrowBase.y() - start.y()) / 2;
    e.path.cubicTo(start + QPointF(0, dy), e.arrowBase - QPointF(0, dy), e.arrowBase);
    layout->edges.push_back(std::move(e));
  }
  layout->bounds = QRectF(0, 0, fullWidth, static_cast<double>(layers.size()) * (GraphNodeHeight + verticalGap));
  report(1.0);
  return layout;
}

} // namespace partita::gui
