#pragma once

// The laid-out graph as graphics items: one rounded box per op, filled by the kind of its chosen
// split, and the edges between them. The scene's selection is the selected op.

#include "common/analysis.h"
#include "common/split_category.h"
#include "graph/graph_layout.h"

#include <QGraphicsScene>

#include <memory>
#include <vector>

class QPainter;

namespace partita::gui {

class OpNodeItem;

class GraphScene : public QGraphicsScene {
  Q_OBJECT
public:
  explicit GraphScene(QObject* parent = nullptr);
  ~GraphScene() override;

  // Builds the items of `layout` for the model of `analysis`, coloured by its strategy.
  void showLayout(std::shared_ptr<const GraphLayout> layout, std::shared_ptr<const Analysis> analysis);
  // Same model, another strategy: recolours and relabels the boxes in place.
  void recolor(std::shared_ptr<const Analysis> analysis);
  void clearGraph();

  const GraphLayout* graphLayout() const { return m_layout.get(); }
  const std::shared_ptr<const Analysis>& shownAnalysis() const { return m_analysis; }
  int nodeCount() const { return static_cast<int>(m_nodes.size()); }
  int edgeCount() const { return m_edgeCount; }
  OpNodeItem* node(graph::OpId id) const;
  SplitKind kindOf(graph::OpId id) const;

  // Selects op `id` without emitting opSelected; -1 clears the selection.
  void selectOp(graph::OpId id);
  graph::OpId selectedOp() const;
  // Ops whose name or type contains `text` (case-insensitive), in op order.
  std::vector<graph::OpId> find(const QString& text) const;

  // The legend of the split kinds, drawn at `topLeft`, and the outline of the auto family's
  // departures from `differsFrom` (a family name) when given; returns its size.
  static QSizeF paintLegend(QPainter& painter, const QPointF& topLeft, const QFont& font,
                            const QString& differsFrom = {});

Q_SIGNALS:
  void opSelected(graph::OpId id); // by the user

private:
  void onSelectionChanged();
  void label(const Analysis& a);

  std::shared_ptr<const GraphLayout> m_layout;
  std::shared_ptr<const Analysis> m_analysis;
  std::vector<OpNodeItem*> m_nodes; // by OpId
  int m_edgeCount = 0;
  bool m_selecting = false;
};

} // namespace partita::gui
