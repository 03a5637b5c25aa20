#include "graph/graph_scene.h"

#include "common/format.h"

#include <QFontMetricsF>
#include <QGraphicsItem>
#include <QGraphicsPathItem>
#include <QPainter>
#include <QStyleOptionGraphicsItem>

namespace partita::gui {

// One op: a rounded box with its type, its name and its configuration.
class OpNodeItem : public QGraphicsItem {
public:
  OpNodeItem(graph::OpId id, const QRectF& rect) : m_id(id), m_rect(rect) {
    setFlag(ItemIsSelectable);
    setAcceptHoverEvents(true);
    setZValue(1);
  }

  graph::OpId op() const { return m_id; }
  SplitKind kind() const { return m_kind; }
  bool differs() const { return m_differs; }
  void setContent(const QString& type, const QString& name, const QString& config, SplitKind kind, bool differs) {
    m_type = type;
    m_name = name;
    m_config = config;
    m_kind = kind;
    m_differs = differs;
    update();
  }

  QRectF boundingRect() const override { return m_rect.adjusted(-3, -3, 3, 3); }

  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) override {
    const QColor fill = splitKindColor(m_kind);
    const bool selected = isSelected();
    if (selected) {
      painter->setPen(QPen(QColor(0x10, 0x50, 0xc0), 3.0));
    } else if (m_differs) {
      painter->setPen(QPen(differsColor().darker(170), 3.0, Qt::DashLine));
    } else {
      painter->setPen(QPen(fill.darker(160), 1.0));
    }
    painter->setBrush(fill);
    painter->drawRoundedRect(m_rect, 8, 8);
    // Too small to read: the box alone.
    const double lod = option->levelOfDetailFromTransform(painter->worldTransform());
    if (lod < 0.35) {
      return;
    }
    painter->setPen(Qt::black);
    QFont font = painter->font();
    font.setPointSizeF(9);
    const QRectF text = m_rect.adjusted(8, 3, -8, -3);
    const double line = text.height() / 3;
    QFont bold = font;
    bold.setBold(true);
    painter->setFont(bold);
    QFontMetricsF boldMetrics(bold);
    painter->drawText(QRectF(text.left(), text.top(), text.width(), line), Qt::AlignCenter,
                      boldMetrics.elidedText(m_type, Qt::ElideRight, text.width()));
    painter->setFont(font);
    QFontMetricsF metrics(font);
    painter->drawText(QRectF(text.left(), text.top() + line, text.width(), line), Qt::AlignCenter,
                      metrics.elidedText(m_name, Qt::ElideLeft, text.width()));
    painter->setPen(QColor(0x30, 0x30, 0x30));
    painter->drawText(QRectF(text.left(), text.top() + 2 * line, text.width(), line), Qt::AlignCenter,
                      metrics.elidedText(m_config, Qt::ElideRight, text.width()));
  }

private:
  graph::OpId m_id;
  QRectF m_rect;
  QString m_type, m_name, m_config;
  SplitKind m_kind = SplitKind::Replicated;
  bool m_differs = false; // auto: configured otherwise than the closest hand-made family
};

namespace {
const QColor edgeColor(0x70, 0x70, 0x70);

QPainterPath arrowHead(const QPointF& base, const QPointF& tip) {
  const QPointF d = tip - base;
  const double length = std::max(1e-6, std::hypot(d.x(), d.y()));
  const QPointF unit = d / length;
  const QPointF normal(-unit.y(), unit.x());
  const QPointF back = tip - unit * 9;
  QPainterPath head;
  head.moveTo(tip);
  head.lineTo(back + normal * 4.5);
  head.lineTo(back - normal * 4.5);
  head.closeSubpath();
  return head;
}
} // namespace

GraphScene::GraphScene(QObject* parent) : QGraphicsScene(parent) {
  setItemIndexMethod(QGraphicsScene::BspTreeIndex);
  connect(this, &QGraphicsScene::selectionChanged, this, &GraphScene::onSelectionChanged);
}

GraphScene::~GraphScene() {
  // ~QGraphicsScene removes the items, which changes the selection after this class is gone.
  disconnect(this, &QGraphicsScene::selectionChanged, this, &GraphScene::onSelectionChanged);
}

void GraphScene::clearGraph() {
  m_selecting = true;
  clear();
  m_selecting = false;
  m_nodes.clear();
  m_edgeCount = 0;
  m_layout.reset();
  m_analysis.reset();
}

void GraphScene::showLayout(std::shared_ptr<const GraphLayout> layout, std::shared_ptr<const Analysis> analysis) {
  clearGraph();
  m_layout = std::move(layout);
  m_analysis = std::move(analysis);
  const QPen pen(edgeColor, 1.2);
  for (const auto& e : m_layout->edges) {
    auto* path = addPath(e.path, pen);
    path->setZValue(0);
    auto* head = addPath(arrowHead(e.arrowBase, e.arrowTip), QPen(Qt::NoPen), edgeColor);
    head->setZValue(0);
    ++m_edgeCount;
  }
  m_nodes.reserve(m_layout->nodes.size());
  for (std::size_t i = 0; i < m_layout->nodes.size(); ++i) {
    auto* item = new OpNodeItem(static_cast<graph::OpId>(i), m_layout->nodes[i]);
    addItem(item);
    m_nodes.push_back(item);
  }
  setSceneRect(m_layout->bounds.adjusted(-40, -40, 40, 40));
  label(*m_analysis);
}

void GraphScene::recolor(std::shared_ptr<const Analysis> analysis) {
  m_analysis = std::move(analysis);
  label(*m_analysis);
}

void GraphScene::label(const Analysis& a) {
  const auto batch = batchDims(a.model.graph, a.semantics);
  for (auto* item : m_nodes) {
    const auto i = static_cast<std::size_t>(item->op());
    const auto& op = a.model.graph.op(item->op());
    const auto* layer = a.layer_of(item->op());
    const auto& config = a.strategy.ops[i].config;
    const SplitKind kind = splitKind(config, a.semantics[i], batch[i]);
    const QString configText = layer != nullptr ? qs(layer->configuration) : QString();
    const bool differs = layer != nullptr && layer->differs_from_family;
    item->setContent(qs(op.type), qs(op.name), configText, kind, differs);
    QString tip =
        QStringLiteral("<b>%1</b> %2<br>%3").arg(qs(op.type), qs(op.name).toHtmlEscaped(), splitKindName(kind));
    if (differs && a.families) {
      tip +=
          QStringLiteral("<br>configured otherwise than %1, the closest hand-made family").arg(qs(a.families->closest));
    }
    if (layer != nullptr && !layer->runner_up.empty()) {
      tip += QStringLiteral("<br>runner-up %1 (+%2)")
                 .arg(qs(layer->runner_up).toHtmlEscaped(), formatSeconds(layer->runner_up_delta));
    }
    if (layer != nullptr) {
      tip += QStringLiteral("<br>%1<br>output %2<br>%3 per iteration, %4 per device")
                 .arg(configText.toHtmlEscaped(), qs(layer->output_shape), formatSeconds(layer->time),
                      formatBytes(layer->memory));
    }
    item->setToolTip(tip);
  }
}

OpNodeItem* GraphScene::node(graph::OpId id) const {
  return id >= 0 && static_cast<std::size_t>(id) < m_nodes.size() ? m_nodes[static_cast<std::size_t>(id)] : nullptr;
}

SplitKind GraphScene::kindOf(graph::OpId id) const {
  const auto* item = node(id);
  return item != nullptr ? item->kind() : SplitKind::Replicated;
}

void GraphScene::selectOp(graph::OpId id) {
  if (id == selectedOp()) {
    return;
  }
  m_selecting = true;
  clearSelection();
  if (auto* item = node(id)) {
    item->setSelected(true);
  }
  m_selecting = false;
}

graph::OpId GraphScene::selectedOp() const {
  const auto items = selectedItems();
  for (auto* item : items) {
    if (auto* n = dynamic_cast<OpNodeItem*>(item)) {
      return n->op();
    }
  }
  return -1;
}

std::vector<graph::OpId> GraphScene::find(const QString& text) const {
  std::vector<graph::OpId> found;
  if (!m_analysis || text.isEmpty()) {
    return found;
  }
  const auto& g = m_analysis->model.graph;
  for (auto* item : m_nodes) {
    const auto& op = g.op(item->op());
    if (qs(op.name).contains(text, Qt::CaseInsensitive) || qs(op.type).contains(text, Qt::CaseInsensitive)) {
      found.push_back(item->op());
    }
  }
  return found;
}

void GraphScene::onSelectionChanged() {
  if (m_selecting) {
    return;
  }
  const graph::OpId id = selectedOp();
  if (id >= 0) {
    Q_EMIT opSelected(id);
  }
}

QSizeF GraphScene::paintLegend(QPainter& painter, const QPointF& topLeft, const QFont& font,
                               const QString& differsFrom) {
  painter.save();
  painter.setFont(font);
  const QFontMetricsF metrics(font);
  const double swatch = metrics.height();
  double x = topLeft.x();
  for (int k = 0; k < SplitKindCount; ++k) {
    const auto kind = static_cast<SplitKind>(k);
    const QRectF box(x, topLeft.y(), swatch * 1.6, swatch);
    painter.setPen(QPen(splitKindColor(kind).darker(160), 1));
    painter.setBrush(splitKindColor(kind));
    painter.drawRoundedRect(box, 3, 3);
    painter.setPen(Qt::black);
    const QString name = splitKindName(kind);
    const double w = metrics.horizontalAdvance(name);
    painter.drawText(QRectF(box.right() + 5, topLeft.y(), w + 2, swatch), Qt::AlignVCenter | Qt::AlignLeft, name);
    x = box.right() + 5 + w + 18;
  }
  if (!differsFrom.isEmpty()) {
    const QRectF box(x, topLeft.y() + 1, swatch * 1.6, swatch - 2);
    painter.setPen(QPen(differsColor().darker(170), 2.5, Qt::DashLine));
    painter.setBrush(Qt::NoBrush);
    painter.drawRoundedRect(box, 3, 3);
    painter.setPen(Qt::black);
    const QString name = QObject::tr("otherwise than %1").arg(differsFrom);
    const double w = metrics.horizontalAdvance(name);
    painter.drawText(QRectF(box.right() + 5, topLeft.y(), w + 2, swatch), Qt::AlignVCenter | Qt::AlignLeft, name);
    x = box.right() + 5 + w + 18;
  }
  painter.restore();
  return {x - topLeft.x(), swatch};
}

} // namespace partita::gui
