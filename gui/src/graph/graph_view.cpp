#include "graph/graph_view.h"

#include "common/export.h"
#include "common/format.h"
#include "graph/graph_layout_job.h"
#include "graph/graph_scene.h"

#include <QAction>
#include <QFileInfo>
#include <QGraphicsView>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QShortcut>
#include <QToolBar>
#include <QVBoxLayout>
#include <QWheelEvent>

#include <cmath>

namespace partita::gui {

namespace {

constexpr double minZoom = 0.02;
constexpr double maxZoom = 4.0;

// Wheel zooms about the cursor, dragging pans, F fits.
class GraphCanvas : public QGraphicsView {
public:
  GraphCanvas(QGraphicsScene* scene, QWidget* parent) : QGraphicsView(scene, parent) {
    setRenderHints(QPainter::Antialiasing | QPainter::TextAntialiasing);
    setDragMode(QGraphicsView::ScrollHandDrag);
    setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
    setViewportUpdateMode(QGraphicsView::BoundingRectViewportUpdate);
    setBackgroundBrush(QColor(0xfb, 0xfb, 0xfb));
  }

  void fitAll() {
    if (scene()->items().isEmpty()) {
      return;
    }
    fitInView(scene()->sceneRect(), Qt::KeepAspectRatio);
    clampZoom();
  }

  void scaleBy(double factor) {
    const double current = transform().m11();
    const double target = std::clamp(current * factor, minZoom, maxZoom);
    scale(target / current, target / current);
  }

protected:
  void wheelEvent(QWheelEvent* event) override {
    if (event->angleDelta().y() == 0) {
      QGraphicsView::wheelEvent(event);
      return;
    }
    scaleBy(std::pow(1.0015, event->angleDelta().y()));
    event->accept();
  }

  void keyPressEvent(QKeyEvent* event) override {
    if (event->key() == Qt::Key_F && event->modifiers() == Qt::NoModifier) {
      fitAll();
      return;
    }
    if (event->key() == Qt::Key_Plus || event->key() == Qt::Key_Equal) {
      scaleBy(1.25);
      return;
    }
    if (event->key() == Qt::Key_Minus) {
      scaleBy(0.8);
      return;
    }
    QGraphicsView::keyPressEvent(event);
  }

private:
  void clampZoom() {
    const double current = transform().m11();
    if (current < minZoom || current > maxZoom) {
      const double target = std::clamp(current, minZoom, maxZoom);
      scale(target / current, target / current);
    }
  }
};

// The split kinds' colours, one line above the graph.
class LegendWidget : public QWidget {
public:
  explicit LegendWidget(QWidget* parent) : QWidget(parent) {
    setMinimumHeight(fontMetrics().height() + 8);
    QString tip;
    for (int k = 0; k < SplitKindCount; ++k) {
      tip += QStringLiteral("<b>%1</b>: %2<br>")
                 .arg(splitKindName(static_cast<SplitKind>(k)), splitKindDescription(static_cast<SplitKind>(k)));
    }
    setToolTip(tip);
  }
  void setDiffersFrom(const QString& family) {
    m_differsFrom = family;
    update();
  }

protected:
  void paintEvent(QPaintEvent*) override {
    QPainter painter(this);
    painter.setRenderHint(QPainter::Antialiasing);
    GraphScene::paintLegend(painter, QPointF(6, 4), font(), m_differsFrom);
  }

private:
  QString m_differsFrom;
};

QString differsFrom(const Analysis* a) {
  return a != nullptr && a->families ? qs(a->families->closest) : QString();
}

} // namespace

GraphView::GraphView(QWidget* parent)
    : QWidget(parent), m_scene(new GraphScene(this)), m_canvas(new GraphCanvas(m_scene, this)),
      m_job(new GraphLayoutJob(this)), m_find(new QLineEdit(this)), m_status(new QLabel(this)),
      m_progress(new QProgressBar(this)), m_cancel(new QPushButton(tr("Cancel layout"), this)),
      m_legend(new LegendWidget(this)) {
  auto* canvas = static_cast<GraphCanvas*>(m_canvas);
  auto* bar = new QToolBar(this);
  bar->setIconSize(QSize(16, 16));
  auto* fitAction = bar->addAction(tr("Fit"), this, &GraphView::fit);
  fitAction->setToolTip(tr("Fit the whole graph in the view (F)"));
  bar->addAction(tr("Zoom in"), this, [canvas] { canvas->scaleBy(1.25); })->setToolTip(tr("Zoom in (+, wheel)"));
  bar->addAction(tr("Zoom out"), this, [canvas] { canvas->scaleBy(0.8); })->setToolTip(tr("Zoom out (-, wheel)"));
  bar->addAction(tr("1:1"), this, [this] { zoomTo(1.0, selectedOp()); })->setToolTip(tr("Boxes at natural size"));
  bar->addSeparator();
  m_find->setPlaceholderText(tr("Find op by name (Ctrl+F, Enter for next)"));
  m_find->setClearButtonEnabled(true);
  m_find->setMaximumWidth(320);
  m_find->setObjectName(QStringLiteral("graphFind"));
  bar->addWidget(m_find);
  bar->addSeparator();
  bar->addWidget(m_status);
  m_progress->setRange(0, 1000);
  m_progress->setMaximumWidth(160);
  m_progress->setTextVisible(false);
  // A widget in a tool bar is shown and hidden through its action.
  m_progressAction = bar->addWidget(m_progress);
  m_cancelAction = bar->addWidget(m_cancel);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  layout->addWidget(bar);
  layout->addWidget(m_legend);
  layout->addWidget(m_canvas, 1);

  auto* findShortcut = new QShortcut(QKeySequence::Find, this);
  findShortcut->setContext(Qt::WidgetWithChildrenShortcut);
  connect(findShortcut, &QShortcut::activated, this, [this] {
    m_find->setFocus();
    m_find->selectAll();
  });
  connect(m_find, &QLineEdit::returnPressed, this, &GraphView::findNext);
  connect(m_cancel, &QPushButton::clicked, this, &GraphView::cancelLayout);
  connect(m_scene, &GraphScene::opSelected, this, [this](graph::OpId id) {
    if (showsCurrent()) {
      Q_EMIT opSelected(id);
    }
  });
  connect(m_job, &GraphLayoutJob::progressChanged, this,
          [this](double f) { m_progress->setValue(static_cast<int>(f * 1000)); });
  connect(m_job, &GraphLayoutJob::layoutReady, this,
          [this](std::shared_ptr<const GraphLayout> layout, std::shared_ptr<const Analysis> analysis) {
            m_scene->showLayout(std::move(layout), std::move(analysis));
            showStatus();
            // A hidden view has no size yet: fit when it is shown.
            m_fitPending = !m_canvas->isVisible();
            fit();
            Q_EMIT layoutShown();
          });
  connect(m_job, &GraphLayoutJob::cancelled, this, [this] {
    showStatus();
    m_status->setText(m_status->text() + tr(" · layout cancelled"));
    Q_EMIT layoutCancelled();
  });
  connect(m_job, &GraphLayoutJob::failed, this, [this](const QString& message) {
    m_status->setText(tr("Layout failed: %1").arg(message));
    Q_EMIT layoutFailed(message);
  });
  connect(m_job, &GraphLayoutJob::finished, this, [this] { setBusy(false); });
  setBusy(false);
  showStatus();
}

GraphView::~GraphView() = default;

void GraphView::setAnalysis(const std::shared_ptr<const Analysis>& analysis) {
  m_current = analysis;
  static_cast<LegendWidget*>(m_legend)->setDiffersFrom(differsFrom(analysis.get()));
  if (!analysis) {
    m_job->cancel();
    m_scene->clearGraph();
    showStatus();
    return;
  }
  const auto& shown = m_scene->shownAnalysis();
  const bool sameModel = shown && m_scene->graphLayout() != nullptr && same_model(shown->input, analysis->input) &&
                         shown->model.graph.ops().size() == analysis->model.graph.ops().size();
  if (sameModel) {
    m_job->cancel(); // a layout of another model would replace this one
    m_scene->recolor(analysis);
    showStatus();
    Q_EMIT layoutShown();
    return;
  }
  setBusy(true);
  m_status->setText(tr("Laying out %1 ops…").arg(analysis->model.graph.ops().size()));
  m_job->start(analysis);
}

void GraphView::cancelLayout() {
  m_job->cancel();
}

bool GraphView::isLayingOut() const {
  return m_job->isRunning();
}

void GraphView::setBusy(bool busy) {
  m_progressAction->setVisible(busy);
  m_progress->setValue(0);
  m_cancelAction->setVisible(busy);
}

void GraphView::showStatus() {
  const auto* layout = m_scene->graphLayout();
  if (layout == nullptr) {
    m_status->setText(tr("No graph: evaluate a model"));
    return;
  }
  QString text = tr("%1 ops, %2 edges · %3")
                     .arg(m_scene->nodeCount())
                     .arg(m_scene->edgeCount())
                     .arg(layoutMethodName(layout->method));
  if (!layout->note.isEmpty()) {
    text += QStringLiteral(" (") + layout->note + QLatin1Char(')');
  }
  m_status->setText(text);
  m_status->setToolTip(qs(m_scene->shownAnalysis()->model_label));
}

bool GraphView::showsCurrent() const {
  return m_current && m_scene->shownAnalysis() == m_current;
}

void GraphView::selectOp(graph::OpId id) {
  if (!showsCurrent()) {
    return; // another model's graph (its layout cancelled): its op ids mean other ops
  }
  m_scene->selectOp(id);
  const auto* layout = m_scene->graphLayout();
  if (layout != nullptr && id >= 0 && static_cast<std::size_t>(id) < layout->nodes.size()) {
    m_canvas->centerOn(layout->nodes[static_cast<std::size_t>(id)].center());
  }
}

graph::OpId GraphView::selectedOp() const {
  return m_scene->selectedOp();
}

bool GraphView::find(const QString& text) {
  const auto found = m_scene->find(text);
  if (found.empty()) {
    m_find->setStyleSheet(text.isEmpty() ? QString() : QStringLiteral("background: #fbe3e4;"));
    return false;
  }
  m_find->setStyleSheet({});
  if (text != m_lastFind) {
    m_lastFind = text;
    m_findIndex = 0;
  }
  const graph::OpId id = found[m_findIndex % found.size()];
  ++m_findIndex;
  if (zoom() < 0.6) {
    zoomTo(1.0); // a found box should be readable
  }
  selectOp(id);
  if (showsCurrent()) {
    Q_EMIT opSelected(id); // the table follows, as for a click
  }
  return true;
}

void GraphView::findNext() {
  find(m_find->text());
}

void GraphView::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (m_fitPending) {
    m_fitPending = false;
    fit();
  }
}

void GraphView::fit() {
  static_cast<GraphCanvas*>(m_canvas)->fitAll();
}

void GraphView::zoomTo(double scale, graph::OpId centre) {
  m_fitPending = false;
  m_canvas->resetTransform();
  m_canvas->scale(scale, scale);
  if (const auto* layout = m_scene->graphLayout()) {
    if (centre >= 0 && static_cast<std::size_t>(centre) < layout->nodes.size()) {
      m_canvas->centerOn(layout->nodes[static_cast<std::size_t>(centre)].center());
    }
  }
}

double GraphView::zoom() const {
  return m_canvas->transform().m11();
}

QString GraphView::exportImage(const QString& path) const {
  if (m_scene->graphLayout() == nullptr) {
    return tr("No graph to export: evaluate a model first");
  }
  const QRectF source = m_scene->sceneRect();
  const QFont font = this->font();
  const double legendHeight = QFontMetricsF(font).height() + 16;
  const QSizeF size(std::max(source.width(), 640.0), source.height() + legendHeight);
  return exportPicture(path, size, [&](QPainter& painter, double scale) {
    painter.fillRect(QRectF(QPointF(0, 0), size * scale), Qt::white);
    painter.save();
    painter.scale(scale, scale);
    GraphScene::paintLegend(painter, QPointF(8, 8), font, differsFrom(m_scene->shownAnalysis().get()));
    painter.restore();
    m_scene->render(&painter, QRectF(0, legendHeight * scale, source.width() * scale, source.height() * scale), source);
  });
}

} // namespace partita::gui
