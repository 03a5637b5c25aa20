// The dot layout through libgvc. Graphviz is C and keeps global state, so its headers stay in
// this file and every call into it holds one mutex.

#include "graph/graph_layout.h"

#include "partita/graph/error.h"

#include <QCoreApplication>

#include <gvc.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>

namespace partita::gui {

namespace {

std::mutex& graphvizMutex() {
  static std::mutex m;
  return m;
}

void checkCancel(const std::atomic<bool>* cancel) {
  if (cancel != nullptr && cancel->load()) {
    throw Cancelled();
  }
}

// cgraph's setters take char*; they copy the strings.
void set(void* object, const char* name, const std::string& value) {
  std::string n(name);
  std::string v(value);
  std::string empty;
  agsafeset(object, n.data(), v.data(), empty.data());
}

std::string inches(double pixels) {
  return std::to_string(pixels / 72.0);
}

// Frees the graph (and its layout) and the context on every path out.
struct DotGraph {
  GVC_t* gvc = nullptr;
  Agraph_t* graph = nullptr;
  bool laidOut = false;
  ~DotGraph() {
    if (laidOut) {
      gvFreeLayout(gvc, graph);
    }
    if (graph != nullptr) {
      agclose(graph);
    }
    if (gvc != nullptr) {
      gvFreeContext(gvc);
    }
  }
};

// Returns nullptr when dot is not available (no layout plugin): the caller falls back.
std::shared_ptr<GraphLayout> layoutDot(const graph::Graph& g, long long work, const std::atomic<bool>* cancel,
                                       const ProgressFn& progress) {
  const auto edges = opEdges(g);
  std::lock_guard lock(graphvizMutex());
  checkCancel(cancel);
  DotGraph dot;
  dot.gvc = gvContext();
  std::string name("model");
  dot.graph = agopen(name.data(), Agdirected, nullptr);
  if (dot.gvc == nullptr || dot.graph == nullptr) {
    return nullptr;
  }
  set(dot.graph, "rankdir", "TB");
  set(dot.graph, "nodesep", "0.3");
  set(dot.graph, "ranksep", "0.45");
  if (g.ops().size() > 400) {
    set(dot.graph, "mclimit", "0.3"); // fewer crossing-minimization passes on big graphs
  }
  if (work > 2000) {
    // Long edges: placing x coordinates (network simplex) dominates; one pass per node is enough
    // to read the graph (5.9 s -> 0.3 s for 5,583 ranked nodes).
    set(dot.graph, "nslimit", "1");
  }
  // Declared before any node so that every node gets them.
  agattr(dot.graph, AGNODE, const_cast<char*>("shape"), const_cast<char*>("box"));
  agattr(dot.graph, AGNODE, const_cast<char*>("fixedsize"), const_cast<char*>("true"));
  agattr(dot.graph, AGNODE, const_cast<char*>("label"), const_cast<char*>(""));
  const std::string width = inches(GraphNodeWidth);
  const std::string height = inches(GraphNodeHeight);
  std::vector<Agnode_t*> nodes(g.ops().size());
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    std::string id = "op" + std::to_string(i);
    nodes[i] = agnode(dot.graph, id.data(), 1);
    set(nodes[i], "width", width);
    set(nodes[i], "height", height);
  }
  std::vector<Agedge_t*> dotEdges;
  dotEdges.reserve(edges.size());
  for (const auto& [from, to] : edges) {
    dotEdges.push_back(
        agedge(dot.graph, nodes[static_cast<std::size_t>(from)], nodes[static_cast<std::size_t>(to)], nullptr, 1));
  }
  if (progress) {
    progress(0.2);
  }
  if (gvLayout(dot.gvc, dot.graph, "dot") != 0) {
    return nullptr;
  }
  dot.laidOut = true;
  checkCancel(cancel);
  if (progress) {
    progress(0.9);
  }

  auto layout = std::make_shared<GraphLayout>();
  layout->method = LayoutMethod::Dot;
  const boxf bb = GD_bb(dot.graph);
  auto toQt = [&](pointf p) { return QPointF(p.x - bb.LL.x, bb.UR.y - p.y); };
  layout->nodes.reserve(nodes.size());
  for (Agnode_t* n : nodes) {
    const QPointF c = toQt(ND_coord(n));
    layout->nodes.emplace_back(c.x() - GraphNodeWidth / 2, c.y() - GraphNodeHeight / 2, GraphNodeWidth,
                               GraphNodeHeight);
  }
  for (std::size_t i = 0; i < edges.size(); ++i) {
    LaidOutEdge e;
    e.from = edges[i].first;
    e.to = edges[i].second;
    const QRectF& a = layout->nodes[static_cast<std::size_t>(e.from)];
    const QRectF& b = layout->nodes[static_cast<std::size_t>(e.to)];
    const splines* spl = ED_spl(dotEdges[i]);
    if (spl != nullptr && spl->size > 0 && spl->list[0].size >= 4) {
      const bezier& bz = spl->list[0];
      e.path.moveTo(toQt(bz.list[0]));
      for (int k = 1; k + 2 < bz.size; k += 3) {
        e.path.cubicTo(toQt(bz.list[k]), toQt(bz.list[k + 1]), toQt(bz.list[k + 2]));
      }
      e.arrowBase = toQt(bz.list[bz.size - 1]);
      e.arrowTip = bz.eflag != 0 ? toQt(bz.ep) : QPointF(b.center().x(), b.top());
    } else {
      e.path.moveTo(a.center().x(), a.bottom());
      e.arrowBase = QPointF(b.center().x(), b.top() - 8);
      e.path.lineTo(e.arrowBase);
      e.arrowTip = QPointF(b.center().x(), b.top());
    }
    layout->edges.push_back(std::move(e));
  }
  layout->bounds = QRectF(0, 0, bb.UR.x - bb.LL.x, bb.UR.y - bb.LL.y);
  return layout;
}

} // namespace

QString layoutMethodName(LayoutMethod method) {
  switch (method) {
  case LayoutMethod::Automatic: return QCoreApplication::translate("GraphLayout", "automatic");
  case LayoutMethod::Dot: return QCoreApplication::translate("GraphLayout", "Graphviz dot");
  case LayoutMethod::Layered: return QCoreApplication::translate("GraphLayout", "layered (longest path)");
  }
  return {};
}

std::vector<std::pair<graph::OpId, graph::OpId>> opEdges(const graph::Graph& g) {
  std::vector<std::pair<graph::OpId, graph::OpId>> edges;
  for (graph::OpId id = 0; id < static_cast<graph::OpId>(g.ops().size()); ++id) {
    for (graph::TensorId t : g.op(id).outputs) {
      if (t == graph::no_tensor) {
        continue;
      }
      for (graph::OpId consumer : g.tensor(t).consumers) {
        if (consumer != id) {
          edges.emplace_back(id, consumer);
        }
      }
    }
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  return edges;
}

long long dotWork(const graph::Graph& g) {
  std::vector<long long> rank(g.ops().size(), 0);
  const auto edges = opEdges(g);
  std::vector<std::vector<graph::OpId>> readers(g.ops().size());
  for (const auto& [from, to] : edges) {
    readers[static_cast<std::size_t>(from)].push_back(to);
  }
  for (const graph::OpId id : g.topological_order()) {
    for (const graph::OpId to : readers[static_cast<std::size_t>(id)]) {
      rank[static_cast<std::size_t>(to)] =
          std::max(rank[static_cast<std::size_t>(to)], rank[static_cast<std::size_t>(id)] + 1);
    }
  }
  auto work = static_cast<long long>(g.ops().size());
  for (const auto& [from, to] : edges) {
    work += std::max(0LL, rank[static_cast<std::size_t>(to)] - rank[static_cast<std::size_t>(from)] - 1);
  }
  return work;
}

std::shared_ptr<const GraphLayout> layoutGraph(const graph::Graph& g, const LayoutOptions& options,
                                               const std::atomic<bool>* cancel, const ProgressFn& progress) {
  checkCancel(cancel);
  const bool tooBig = static_cast<int>(g.ops().size()) > options.dotLimit;
  const long long work = dotWork(g);
  const bool tooLong = work > options.dotWorkLimit;
  const bool useDot =
      options.method == LayoutMethod::Dot || (options.method == LayoutMethod::Automatic && !tooBig && !tooLong);
  std::shared_ptr<GraphLayout> layout;
  QString note;
  if (useDot) {
    layout = layoutDot(g, work, cancel, progress);
    if (!layout) {
      note = QCoreApplication::translate("GraphLayout", "Graphviz's dot layout is not available: layered layout used");
    }
  } else if (tooBig) {
    note = QCoreApplication::translate("GraphLayout", "%1 ops, more than %2: layered layout instead of dot")
               .arg(g.ops().size())
               .arg(options.dotLimit);
  } else {
    note = QCoreApplication::translate("GraphLayout",
                                       "%1 ops whose long edges make %2 nodes for dot to rank, more than %3 (it would "
                                       "take minutes): layered layout instead of dot")
               .arg(g.ops().size())
               .arg(work)
               .arg(options.dotWorkLimit);
  }
  if (!layout) {
    layout = layoutLayered(g, cancel, progress);
    layout->note = note;
  }
  checkCancel(cancel);
  if (progress) {
    progress(1.0);
  }
  return layout;
}

} // namespace partita::gui
