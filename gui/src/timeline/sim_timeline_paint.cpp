// SimTimelineView's painting: the axis, the lanes and only the boxes in view.

#include "timeline/sim_timeline_layout.h"
#include "timeline/sim_timeline_view.h"

#include "common/format.h"

#include <QPaintEvent>
#include <QPainter>
#include <QScrollBar>

#include <cmath>
#include <limits>

namespace partita::gui {

using namespace timeline_layout;

namespace {

const QColor criticalColor(0xd0, 0x10, 0x20);
constexpr double criticalStrip = 3;

// 1, 2 or 5 times a power of ten, at least `raw`.
double niceStep(double raw) {
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * p >= raw) {
      return m * p;
    }
  }
  return 10 * p;
}

struct Unit {
  double seconds;
  const char* name;
};

Unit unitFor(double step) {
  if (step >= 1) {
    return {1, "s"};
  }
  if (step >= 1e-3) {
    return {1e-3, "ms"};
  }
  if (step >= 1e-6) {
    return {1e-6, "µs"};
  }
  return {1e-9, "ns"};
}

} // namespace

void SimTimelineView::paintAxis(QPainter& p, double t0, double t1) {
  const double pps = pixelsPerSecond();
  const double step = niceStep(90 / pps);
  const Unit unit = unitFor(step);
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step / unit.seconds) + 1e-9)));
  const QColor grid = palette().mid().color().lighter(130);
  const int bottom = viewport()->height();
  for (double t = std::ceil(t0 / step) * step; t <= t1; t += step) {
    const double x = xOf(t);
    p.setPen(grid);
    p.drawLine(QPointF(x, axisHeight - 4), QPointF(x, bottom));
    p.setPen(palette().text().color());
    p.drawText(QRectF(x + 3, 0, 90, axisHeight - 4), Qt::AlignLeft | Qt::AlignVCenter,
               QString::number(t / unit.seconds, 'f', decimals) + QLatin1Char(' ') + QString::fromUtf8(unit.name));
  }
  p.setPen(palette().mid().color());
  p.drawLine(QPoint(labelWidth, axisHeight - 1), QPoint(viewport()->width(), axisHeight - 1));
}

void SimTimelineView::paintLane(QPainter& p, const Lane& lane, int top, double t0, double t1) {
  const auto& sim = *m_analysis->simulation;
  const auto& g = m_analysis->model.graph;
  const auto [first, last] = visibleRange(lane, t0, t1);
  const double left = labelWidth, right = labelWidth + timeWidth();
  long long mergedColumn = std::numeric_limits<long long>::min();
  if (lane.stage >= 0) {
    // The pipeline view: what the stage does not compute is hatched (the bubble), under the boxes.
    const double x0 = std::max(left, xOf(0)), x1 = std::min(right, xOf(m_span));
    if (x1 > x0) {
      p.fillRect(QRectF(x0, top, x1 - x0, laneHeight), QBrush(palette().mid().color(), Qt::BDiagPattern));
    }
  }
  for (std::size_t i = first; i < last; ++i) {
    const Box& b = lane.boxes[i];
    const auto& task = sim.tasks.tasks[static_cast<std::size_t>(b.task)];
    if (lane.stage >= 0) {
      const double bx0 = std::max(left - 2, xOf(b.start));
      const double bx1 = std::min(right + 2, xOf(b.end));
      const QRectF r(bx0, top, std::max(1.0, bx1 - bx0), laneHeight);
      const QColor color = microBatchColor(task.micro_batch, task.kind);
      p.fillRect(r, color);
      if (task.kind == sim::TaskKind::recompute) {
        p.fillRect(r, QBrush(color.darker(160), Qt::Dense5Pattern));
      }
      ++m_painted;
      if (r.width() > 3) {
        p.setPen(palette().base().color());
        p.drawLine(r.topLeft(), r.bottomLeft());
      }
      const QString label = (task.kind == sim::TaskKind::forward
                                 ? QStringLiteral("F")
                                 : (task.kind == sim::TaskKind::backward ? QStringLiteral("B") : QStringLiteral("R"))) +
                            QString::number(task.micro_batch);
      if (r.width() > p.fontMetrics().horizontalAdvance(label) + 4) {
        p.setPen(task.kind == sim::TaskKind::backward ? Qt::white : Qt::black);
        p.drawText(r, Qt::AlignCenter, label);
      }
      continue;
    }
    const double x0 = std::max(left - 2, xOf(b.start));
    const double x1 = std::min(right + 2, xOf(b.end));
    const bool critical = m_critical[static_cast<std::size_t>(b.task)];
    if (x1 - x0 < 1) {
      // Narrower than a pixel: one pixel column for all of them, in the first one's colour.
      const auto column = static_cast<long long>(std::floor(x0));
      if (column == mergedColumn) {
        continue;
      }
      mergedColumn = column;
      p.fillRect(QRectF(static_cast<double>(column), top, 1, laneHeight), colorOf(task.kind));
      if (critical) {
        p.fillRect(QRectF(static_cast<double>(column), top, 1, criticalStrip), criticalColor);
      }
      ++m_painted;
      continue;
    }
    const QRectF r(x0, top, x1 - x0, laneHeight);
    p.fillRect(r, colorOf(task.kind));
    ++m_painted;
    if (r.width() > 3) {
      p.setPen(palette().base().color());
      p.drawLine(r.topLeft(), r.bottomLeft());
    }
    // The critical path: a strip along the top, outlined where the box is wide enough.
    if (critical) {
      p.fillRect(QRectF(r.left(), top, r.width(), criticalStrip), criticalColor);
      if (r.width() > 8) {
        p.setPen(QPen(criticalColor, 1));
        p.drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
      }
    }
    if (r.width() > 40) {
      const QString label = task.op >= 0 ? qs(g.op(task.op).name) : tr("bucket %1").arg(task.bucket);
      p.setPen(Qt::white);
      const QRectF inner = r.adjusted(4, criticalStrip, -3, 0);
      p.drawText(inner, Qt::AlignLeft | Qt::AlignVCenter,
                 p.fontMetrics().elidedText(label, Qt::ElideRight, static_cast<int>(inner.width())));
    }
  }
}

void SimTimelineView::paintEvent(QPaintEvent*) {
  QPainter p(viewport());
  p.fillRect(viewport()->rect(), palette().base());
  m_painted = 0;
  if (m_lanes.empty()) {
    QString text = tr("The simulated iteration of the evaluated strategy appears here.");
    if (m_analysis && !m_analysis->simulation) {
      text = qs(m_analysis->simulation_note);
    }
    p.setPen(palette().text().color());
    p.drawText(viewport()->rect().adjusted(20, 20, -20, -20), Qt::AlignCenter | Qt::TextWordWrap, text);
    return;
  }
  const double t0 = m_start, t1 = m_start + visibleSpan();
  const int width = viewport()->width(), height = viewport()->height();
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.9);
  p.setFont(small);

  // Devices in alternating bands, their lanes' names on the left.
  p.setClipRect(QRect(0, axisHeight, width, height - axisHeight));
  for (int i = 0; i < laneCount(); ++i) {
    const int top = laneTop(i);
    if (top > height || top + laneHeight < axisHeight) {
      continue;
    }
    const auto& lane = m_lanes[static_cast<std::size_t>(i)];
    if (lane.device % 2 == 1) {
      p.fillRect(QRect(0, top - 1, width, laneHeight + 2), palette().alternateBase());
    }
    p.setPen(palette().text().color());
    p.drawText(QRect(4, top, labelWidth - 10, laneHeight), Qt::AlignRight | Qt::AlignVCenter, laneLabel(i));
  }
  p.setClipping(false);
  paintAxis(p, t0, t1);

  p.setClipRect(QRect(labelWidth, axisHeight, timeWidth(), height - axisHeight));
  for (int i = 0; i < laneCount(); ++i) {
    const int top = laneTop(i);
    if (top > height || top + laneHeight < axisHeight) {
      continue;
    }
    paintLane(p, m_lanes[static_cast<std::size_t>(i)], top, t0, t1);
  }
  // The end of the iteration.
  if (m_span <= t1) {
    const double x = xOf(m_span);
    p.setPen(QPen(palette().text().color(), 1, Qt::DashLine));
    p.drawLine(QPointF(x, axisHeight), QPointF(x, height));
  }
}

} // namespace partita::gui
