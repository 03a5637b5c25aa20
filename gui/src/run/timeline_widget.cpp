#include "run/timeline_widget.h"

#include "common/format.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <map>

namespace partita::gui {

namespace {

constexpr int laneHeight = 26;
constexpr int laneGap = 6;
constexpr int labelWidth = 64;
constexpr int axisHeight = 22;

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
  return {800, axisHeight + std::max(m_lanes, 2) * (laneHeight + laneGap) + laneGap};
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
  const double scale = m_span > 0 ? w / m_span : 0;
  const double x0 = labelWidth + b.start * scale;
  const double x1 = labelWidth + b.end * scale;
  return {x0, static_cast<double>(axisHeight + b.rank * (laneHeight + laneGap) + laneGap), std::max(1.0, x1 - x0),
          static_cast<double>(laneHeight)};
}

void TimelineWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  if (m_lanes == 0) {
    p.drawText(rect(), Qt::AlignCenter, tr("No run: the per-rank timeline of a run's iteration appears here."));
    return;
  }
  p.setPen(palette().text().color());
  p.drawText(QRect(labelWidth, 0, width() - labelWidth, axisHeight), Qt::AlignLeft | Qt::AlignVCenter,
             tr("timed iteration %1: %2 on the slowest rank").arg(QString::number(m_iteration), formatSeconds(m_span)));
  for (int r = 0; r < m_lanes; ++r) {
    p.drawText(QRect(0, axisHeight + r * (laneHeight + laneGap) + laneGap, labelWidth - 6, laneHeight),
               Qt::AlignRight | Qt::AlignVCenter, tr("rank %1").arg(r));
  }
  for (const auto& b : m_boxes) {
    const QRectF r = rectOf(b);
    p.fillRect(r, colorOf(b.kind));
    if (r.width() > 3) {
      p.setPen(palette().base().color());
      p.drawLine(r.topLeft(), r.bottomLeft());
    }
  }
}

bool TimelineWidget::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    const auto* help = static_cast<QHelpEvent*>(event);
    for (const auto& b : m_boxes) {
      if (rectOf(b).contains(help->pos())) {
        QToolTip::showText(help->globalPos(), b.text, this);
        return true;
      }
    }
    QToolTip::hideText();
    event->ignore();
    return true;
  }
  return QWidget::event(event);
}

} // namespace partita::gui
