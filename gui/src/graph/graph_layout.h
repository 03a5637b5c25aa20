#pragma once

// The model's graph laid out top to bottom, one node per op and one edge per producer/consumer
// pair of ops: Graphviz's dot (through libgvc) up to LayoutOptions::dotLimit ops, a layered
// longest-path layout of our own beyond (dot's crossing minimization grows too slowly for
// thousands of ops). Pure geometry of the model: it does not depend on the strategy, so a new
// strategy for the same model is only recoloured. Qt's coordinates: y grows downwards.

#include "common/analysis.h"

#include "partita/graph/graph.h"

#include <QPainterPath>
#include <QPointF>
#include <QRectF>
#include <QString>

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

namespace partita::gui {

inline constexpr double GraphNodeWidth = 176;
inline constexpr double GraphNodeHeight = 52;

struct LaidOutEdge {
  graph::OpId from = -1;
  graph::OpId to = -1;
  QPainterPath path; // from the producer's box to the arrow's base
  QPointF arrowBase; // the arrowhead goes from here ...
  QPointF arrowTip;  // ... to the consumer's box
};

enum class LayoutMethod { Automatic, Dot, Layered };

struct GraphLayout {
  std::vector<QRectF> nodes; // one per op, indexed by OpId
  std::vector<LaidOutEdge> edges;
  QRectF bounds;
  LayoutMethod method = LayoutMethod::Dot; // what was used (never Automatic)
  QString note;                            // why a fallback was used, if one was
};

struct LayoutOptions {
  LayoutMethod method = LayoutMethod::Automatic;
  int dotLimit = 1500; // Automatic: dot up to this many ops, layered beyond
  // Automatic: dot only while its ranked nodes (dotWork) stay within this, layered beyond. dot's
  // time grows with their square: on a 2-core EPYC, GPT-3 2.7B's graph at 8 layers (5,583
  // ranked nodes) took 0.3 s, 16 layers (20,427) 2.7 s, 32 layers (77,955) 33 s, with nslimit=1.
  long long dotWorkLimit = 21000;
};

// Distinct (producer, consumer) op pairs, sorted.
std::vector<std::pair<graph::OpId, graph::OpId>> opEdges(const graph::Graph& g);

// The nodes dot ranks: the ops plus, for every edge, one virtual node per rank it crosses (ranks by
// longest path from the sources, as dot's are at least). A tensor read all along the graph (a
// transformer's attention mask, read by every layer) makes many.
long long dotWork(const graph::Graph& g);

// Throws partita::Cancelled when `cancel` is set (dot itself runs to its end first: it cannot be
// interrupted, its result is then dropped).
std::shared_ptr<const GraphLayout> layoutGraph(const graph::Graph& g, const LayoutOptions& options = {},
                                               const std::atomic<bool>* cancel = nullptr,
                                               const ProgressFn& progress = {});

// The layered fallback (graph_layout_layered.cpp): ranks by longest path from the sources, order
// within a rank by barycenter sweeps, straight edges.
std::shared_ptr<GraphLayout> layoutLayered(const graph::Graph& g, const std::atomic<bool>* cancel,
                                           const ProgressFn& progress);

QString layoutMethodName(LayoutMethod method);

} // namespace partita::gui
