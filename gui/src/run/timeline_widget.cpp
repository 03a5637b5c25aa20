#include "run/timeline_widget.h"

#include "common/format.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>
#include <map>

namespace partita::gui {

namespace {

constexpr int laneHeight = 26;
constexpr int laneGap = 6;
constexpr int labelWidth = 84;
constexpr int axisHeight = 22;
constexpr int headerHeight = 22; // the predicted part's title
constexpr int scaleHeight = 24;  // the time axis at the bottom

TimelineWidget::Kind kindOfTask(sim::TaskKind k) {
  switch (k) {
  case sim::TaskKind::forward:
  case sim::TaskKind::backward:
  case sim::TaskKind::recompute: return TimelineWidget::Kind::Compute;
  case sim::TaskKind::optimizer_step: return TimelineWidget::Kind::Optimizer;
  default: return TimelineWidget::Kind::Communication;
  }
}

// A round step of about a tenth of `span` (1, 2 or 5 times a power of ten).
double tickStep(double span) {
  const double raw = span / 8;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0}) {
    if (m * decade >= raw) {
      return m * decade;
    }
  }
  return 10 * decade;
}

// A tick's time in the unit of the step: "20 ms", "2.5 ms", "500 µs".
QString tickLabel(double t, double step) {
  const auto [scale, unit] = step >= 1      ? std::pair{1.0, "s"}
                             : step >= 1e-3 ? std::pair{1e3, "ms"}
                                            : std::pair{1e6, "µs"};
  return QStringLiteral("%1 %2").arg(QString::number(t * scale, 'g', 6), QString::fromUtf8(unit));
}

} // namespace

TimelineWidget::Kind TimelineWidget::kindOf(const std::string& phase) {
  if (phase == "forward" || phase == "backward") {
    return Kind::Compute;
  }
  if (phase == "optimizer") {
    return Kind::Optimizer;
  }
  if (phase == "pipeline receive (wait)") {
    return Kind::Wait;
  }
  return Kind::Communication;
}

QColor TimelineWidget::colorOf(Kind kind) {
  switch (kind) {
  case Kind::Compute: return {0x4c, 0x72, 0xb0};
  case Kind::Communication: return {0xdd, 0x84, 0x52};
  case Kind::Wait: return {0xb0, 0xb0, 0xb0};
  case Kind::Optimizer: return {0x81, 0x72, 0xb2};
  }
  return Qt::black;
}

TimelineWidget::TimelineWidget(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setMinimumHeight(2 * laneHeight + axisHeight);
}

QSize TimelineWidget::sizeHint() const {
  int h = measuredHeight() + scaleHeight;
  if (!m_predictedLanes.empty()) {
    h += headerHeight + static_cast<int>(m_predictedLanes.size()) * (laneHeight + laneGap);
  }
  return {800, h};
}

int TimelineWidget::measuredHeight() const {
  return axisHeight + std::max(m_lanes, 1) * (laneHeight + laneGap) + laneGap;
}

void TimelineWidget::setPredicted(std::shared_ptr<const Analysis> analysis) {
  m_analysis = std::move(analysis);
  m_predicted.clear();
  m_predictedLanes.clear();
  m_predictedSpan = 0;
  if (m_analysis && m_analysis->simulation) {
    const auto& tg = m_analysis->simulation->tasks;
    const auto& r = m_analysis->simulation->result;
    m_predictedSpan = r.iteration_time;
    std::vector<int> laneOf(static_cast<std::size_t>(std::max(tg.devices, 0)), -1);
    for (std::size_t d = 0; d < r.devices.size() && d < laneOf.size(); ++d) {
      if (r.devices[d].used) {
        laneOf[d] = static_cast<int>(m_predictedLanes.size());
        m_predictedLanes.push_back(static_cast<int>(d));
      }
    }
    const auto& g = m_analysis->model.graph;
    for (std::size_t i = 0; i < tg.tasks.size() && i < r.schedule.size(); ++i) {
      const auto& t = tg.tasks[i];
      const auto& span = r.schedule[i];
      const QString what = t.op >= 0 && static_cast<std::size_t>(t.op) < g.ops().size()
                               ? qs(g.op(t.op).name)
                               : tr("gradient bucket %1").arg(t.bucket);
      for (const int d : tg.groups[static_cast<std::size_t>(t.group)]) {
        if (d < 0 || static_cast<std::size_t>(d) >= laneOf.size() || laneOf[static_cast<std::size_t>(d)] < 0) {
          continue;
        }
        Box b;
        b.rank = laneOf[static_cast<std::size_t>(d)];
        b.start = span.start;
        b.end = span.finish;
        b.kind = kindOfTask(t.kind);
        b.communication = t.stream != sim::Stream::compute;
        b.text = tr("device %1, predicted: %2, %3: %4")
                     .arg(QString::number(d), what, qs(sim::task_kind_name(t.kind)), formatSeconds(b.end - b.start));
        m_predicted.push_back(std::move(b));
      }
    }
  }
  updateGeometry();
  update();
}

int TimelineWidget::predictedBoxCount() const {
  return static_cast<int>(m_predicted.size());
}

void TimelineWidget::setRun(const proto::RunResult* run, int iteration) {
  m_boxes.clear();
  m_lanes = 0;
  m_span = 0;
  m_iteration = iteration;
  if (run != nullptr) {
    // Each rank's own iteration start: ranks' clocks are not aligned, their iteration boundaries are.
    std::map<int, double> origin;
    for (const auto& e : run->events()) {
      if (e.iteration() == iteration && e.op() < 0) {
        origin[e.rank()] = e.start();
        m_span = std::max(m_span, e.end() - e.start());
      }
    }
    for (const auto& e : run->events()) {
      const auto o = origin.find(e.rank());
      if (e.iteration() != iteration || e.op() < 0 || o == origin.end()) {
        continue;
      }
      Box b;
      b.rank = e.rank();
      b.start = e.start() - o->second;
      b.end = e.end() - o->second;
      b.kind = kindOf(e.phase());
      const QString name = e.op() < run->ops_size() ? qs(run->ops(e.op()).name()) : QString::number(e.op());
      b.text =
          tr("rank %1: %2, %3: %4").arg(QString::number(e.rank()), name, qs(e.phase()), formatSeconds(b.end - b.start));
      if (e.bytes() > 0) {
        b.text += tr(", %1 received").arg(formatBytes(e.bytes()));
      }
      m_boxes.push_back(b);
    }
    for (const auto& [rank, unused] : origin) {
      m_lanes = std::max(m_lanes, rank + 1);
    }
  }
  updateGeometry();
  update();
}

QRectF TimelineWidget::rectOf(const Box& b) const {
  const double w = std::max(1, width() - labelWidth - 8);
  const double scale = axisSpan() > 0 ? w / axisSpan() : 0;
  const double x0 = labelWidth + b.start * scale;
  const double x1 = labelWidth + b.end * scale;
  return {x0, static_cast<double>(axisHeight + b.rank * (laneHeight + laneGap) + laneGap), std::max(1.0, x1 - x0),
          static_cast<double>(laneHeight)};
}

QRectF TimelineWidget::predictedRectOf(const Box& b) const {
  const double w = std::max(1, width() - labelWidth - 8);
  const double scale = axisSpan() > 0 ? w / axisSpan() : 0;
  const double x0 = labelWidth + b.start * scale;
  const double x1 = labelWidth + b.end * scale;
  const double half = laneHeight / 2.0;
  const double top = measuredHeight() + headerHeight + b.rank * (laneHeight + laneGap) + (b.communication ? half : 0);
  return {x0, top, std::max(1.0, x1 - x0), half - 1};
}

void TimelineWidget::paintAxis(QPainter& p, int top) const {
  const double span = axisSpan();
  if (span <= 0) {
    return;
  }
  const double w = std::max(1, width() - labelWidth - 8);
  const double step = tickStep(span);
  p.setPen(palette().mid().color());
  p.drawLine(QPointF(labelWidth, top), QPointF(labelWidth + w, top));
  p.setPen(palette().text().color());
  for (double t = 0; t <= span * (1 + 1e-9); t += step) {
    const double x = labelWidth + t / span * w;
    p.drawLine(QPointF(x, top), QPointF(x, top + 4));
    p.drawText(QRectF(std::min(x - 40, width() - 80.0), top + 4, 80, scaleHeight - 4), Qt::AlignHCenter | Qt::AlignTop,
               tickLabel(t, step));
  }
}

void TimelineWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  if (m_lanes == 0 && m_predictedLanes.empty()) {
    p.drawText(rect(), Qt::AlignCenter, tr("No run: the per-rank timeline of a run's iteration appears here."));
    return;
  }
  p.setPen(palette().text().color());
  const QString measured = m_lanes > 0 ? tr("measured, timed iteration %1: %2 on the slowest rank")
                                             .arg(QString::number(m_iteration), formatSeconds(m_span))
                                       : tr("measured: no run of this plan yet");
  p.drawText(QRect(labelWidth, 0, width() - labelWidth, axisHeight), Qt::AlignLeft | Qt::AlignVCenter, measured);
  for (int r = 0; r < m_lanes; ++r) {
    p.drawText(QRect(0, axisHeight + r * (laneHeight + laneGap) + laneGap, labelWidth - 6, laneHeight),
               Qt::AlignRight | Qt::AlignVCenter, tr("rank %1").arg(r));
  }
  const auto fill = [&](const QRectF& r, Kind kind) {
    p.fillRect(r, colorOf(kind));
    if (r.width() > 3) {
      p.setPen(palette().base().color());
      p.drawLine(r.topLeft(), r.bottomLeft());
    }
  };
  for (const auto& b : m_boxes) {
    fill(rectOf(b), b.kind);
  }
  int bottom = measuredHeight();
  if (!m_predictedLanes.empty()) {
    p.setPen(palette().text().color());
    QString title = tr("predicted (simulated): %1").arg(formatSeconds(m_predictedSpan));
    if (m_span > 0 && m_predictedSpan > 0) {
      title += tr(", measured %1 of it").arg(QString::asprintf("%.0f%%", 100 * m_span / m_predictedSpan));
    }
    title += tr(" · each lane: compute above, communication below");
    p.drawText(QRect(labelWidth, bottom, width() - labelWidth, headerHeight), Qt::AlignLeft | Qt::AlignVCenter, title);
    for (std::size_t l = 0; l < m_predictedLanes.size(); ++l) {
      p.drawText(
          QRect(0, bottom + headerHeight + static_cast<int>(l) * (laneHeight + laneGap), labelWidth - 6, laneHeight),
          Qt::AlignRight | Qt::AlignVCenter, tr("device %1").arg(m_predictedLanes[l]));
    }
    for (const auto& b : m_predicted) {
      fill(predictedRectOf(b), b.kind);
    }
    bottom += headerHeight + static_cast<int>(m_predictedLanes.size()) * (laneHeight + laneGap);
  }
  paintAxis(p, bottom);
}

QString TimelineWidget::textAt(const QPointF& pos) const {
  for (const auto& b : m_boxes) {
    if (rectOf(b).contains(pos)) {
      return b.text;
    }
  }
  for (const auto& b : m_predicted) {
    if (predictedRectOf(b).contains(pos)) {
      return b.text;
    }
  }
  return {};
}

bool TimelineWidget::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    const auto* help = static_cast<QHelpEvent*>(event);
    const QString text = textAt(help->pos());
    if (!text.isEmpty()) {
      QToolTip::showText(help->globalPos(), text, this);
      return true;
    }
    QToolTip::hideText();
    event->ignore();
    return true;
  }
  return QWidget::event(event);
}

} // namespace partita::gui
