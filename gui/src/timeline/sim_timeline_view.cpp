#include "timeline/sim_timeline_view.h"

#include "common/format.h"
#include "timeline/sim_timeline_layout.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QScrollBar>
#include <QToolTip>
#include <QWheelEvent>

#include <algorithm>
#include <array>
#include <cmath>

namespace partita::gui {

using namespace timeline_layout;

namespace {
constexpr double maxZoom = 1e7; // far below a nanosecond per pixel for any real iteration
} // namespace

QColor SimTimelineView::colorOf(sim::TaskKind kind) {
  switch (kind) {
  case sim::TaskKind::forward: return {0x4c, 0x72, 0xb0};
  case sim::TaskKind::backward: return {0x55, 0xa8, 0x68};
  case sim::TaskKind::recompute: return {0x8c, 0xb8, 0xe0};
  case sim::TaskKind::collective: return {0xdd, 0x84, 0x52};
  case sim::TaskKind::parameter_gather: return {0xe5, 0xc0, 0x4a};
  case sim::TaskKind::redistribution: return {0x4f, 0xa8, 0xb8};
  case sim::TaskKind::send: return {0x93, 0x78, 0x60};
  case sim::TaskKind::gradient_sync: return {0xda, 0x8b, 0xc3};
  case sim::TaskKind::optimizer_step: return {0x81, 0x72, 0xb2};
  }
  return Qt::black;
}

SimTimelineView::SimTimelineView(QWidget* parent) : QAbstractScrollArea(parent) {
  viewport()->setMouseTracking(true);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOn);
  setVerticalScrollBarPolicy(Qt::ScrollBarAsNeeded);
  horizontalScrollBar()->setSingleStep(20);
  verticalScrollBar()->setSingleStep(laneHeight);
  setMinimumHeight(axisHeight + 4 * laneHeight);
}

void SimTimelineView::setAnalysis(std::shared_ptr<const Analysis> analysis) {
  m_analysis = std::move(analysis);
  m_critical.clear();
  m_span = 0;
  if (m_analysis && m_analysis->simulation) {
    const auto& sim = *m_analysis->simulation;
    m_span = sim.result.iteration_time;
    m_critical.assign(sim.tasks.tasks.size(), false);
    for (int t : sim.result.critical_path) {
      m_critical[static_cast<std::size_t>(t)] = true;
    }
  }
  m_zoom = 1;
  m_start = 0;
  rebuild();
}

void SimTimelineView::setCriticalOnly(bool only) {
  if (only != m_criticalOnly) {
    m_criticalOnly = only;
    rebuild();
  }
}

void SimTimelineView::setPipelineView(bool on) {
  if (on != m_pipelineView) {
    m_pipelineView = on;
    rebuild();
  }
}

QColor SimTimelineView::microBatchColor(int microBatch, sim::TaskKind kind) {
  // Hues a golden angle apart: neighbouring micro-batches differ clearly.
  const double hue = std::fmod(0.07 + 0.381966 * std::max(0, microBatch), 1.0);
  return kind == sim::TaskKind::backward ? QColor::fromHsvF(static_cast<float>(hue), 0.75F, 0.62F)
                                         : QColor::fromHsvF(static_cast<float>(hue), 0.5F, 0.93F);
}

int SimTimelineView::chunkOf(const sim::Task& task) const {
  const auto& pipe = m_analysis->strategy.pipeline;
  if (!pipe || pipe->chunks <= 1 || task.op < 0 || static_cast<std::size_t>(task.op) >= pipe->stage_of_op.size()) {
    return 0;
  }
  return pipe->stage_of_op[static_cast<std::size_t>(task.op)] / pipe->stages;
}

double SimTimelineView::idleShare(int lane) const {
  if (m_span <= 0 || lane < 0 || lane >= laneCount()) {
    return 0;
  }
  double busy = 0;
  for (const auto& b : m_lanes[static_cast<std::size_t>(lane)].boxes) {
    busy += b.end - b.start;
  }
  return std::max(0.0, 1 - busy / m_span);
}

void SimTimelineView::rebuildStages() {
  const auto& sim = *m_analysis->simulation;
  const auto& tg = sim.tasks;
  const auto isCompute = [](const sim::Task& t) {
    return t.stream == sim::Stream::compute && (t.kind == sim::TaskKind::forward || t.kind == sim::TaskKind::backward ||
                                                t.kind == sim::TaskKind::recompute);
  };
  // Each stage's lane: the compute stream of the lowest device that runs its kernels.
  std::vector<int> deviceOf(static_cast<std::size_t>(tg.stages), -1);
  for (const auto& t : tg.tasks) {
    if (isCompute(t) && t.stage >= 0 && t.stage < tg.stages) {
      const int first = tg.groups[static_cast<std::size_t>(t.group)].front();
      int& d = deviceOf[static_cast<std::size_t>(t.stage)];
      d = d < 0 ? first : std::min(d, first);
    }
  }
  std::vector<int> laneOfStage(static_cast<std::size_t>(tg.stages), -1);
  for (int s = 0; s < tg.stages; ++s) {
    if (deviceOf[static_cast<std::size_t>(s)] >= 0) {
      laneOfStage[static_cast<std::size_t>(s)] = static_cast<int>(m_lanes.size());
      Lane lane;
      lane.device = deviceOf[static_cast<std::size_t>(s)];
      lane.stage = s;
      m_lanes.push_back(std::move(lane));
    }
  }
  for (std::size_t i = 0; i < tg.tasks.size(); ++i) {
    const auto& t = tg.tasks[i];
    if (!isCompute(t) || (m_criticalOnly && !m_critical[i]) || t.stage < 0 || t.stage >= tg.stages) {
      continue;
    }
    const int lane = laneOfStage[static_cast<std::size_t>(t.stage)];
    const auto& group = tg.groups[static_cast<std::size_t>(t.group)];
    if (lane < 0 || !std::binary_search(group.begin(), group.end(), m_lanes[static_cast<std::size_t>(lane)].device)) {
      continue; // another device of the stage
    }
    ++m_taskCount;
    const auto& span = sim.result.schedule[i];
    m_lanes[static_cast<std::size_t>(lane)].boxes.push_back({span.start, span.finish, static_cast<int>(i), 1});
  }
  // One box per run of a micro-batch's pass through one chunk.
  for (auto& lane : m_lanes) {
    std::stable_sort(lane.boxes.begin(), lane.boxes.end(),
                     [](const Box& a, const Box& b) { return a.start < b.start; });
    std::vector<Box> merged;
    for (const auto& b : lane.boxes) {
      if (!merged.empty()) {
        auto& last = merged.back();
        const auto& a = tg.tasks[static_cast<std::size_t>(last.task)];
        const auto& t = tg.tasks[static_cast<std::size_t>(b.task)];
        if (a.micro_batch == t.micro_batch && a.kind == t.kind && chunkOf(a) == chunkOf(t)) {
          last.end = std::max(last.end, b.end);
          ++last.tasks;
          continue;
        }
      }
      merged.push_back(b);
    }
    lane.boxes = std::move(merged);
  }
}

void SimTimelineView::rebuild() {
  m_lanes.clear();
  m_laneTops.clear();
  m_taskCount = 0;
  if (m_analysis && m_analysis->simulation && m_pipelineView) {
    rebuildStages();
  } else if (m_analysis && m_analysis->simulation) {
    const auto& sim = *m_analysis->simulation;
    const auto& tg = sim.tasks;
    // Lanes: each used device's compute stream, then its communication channel when it has one.
    std::vector<std::array<int, sim::stream_count>> laneOf(static_cast<std::size_t>(tg.devices));
    std::vector<std::array<bool, sim::stream_count>> has(static_cast<std::size_t>(tg.devices));
    for (auto& l : laneOf) {
      l.fill(-1);
    }
    for (auto& h : has) {
      h.fill(false);
    }
    for (const auto& t : tg.tasks) {
      for (int d : tg.groups[static_cast<std::size_t>(t.group)]) {
        has[static_cast<std::size_t>(d)][static_cast<std::size_t>(t.stream)] = true;
      }
    }
    for (int d = 0; d < tg.devices; ++d) {
      for (int s = 0; s < sim::stream_count; ++s) {
        if (has[static_cast<std::size_t>(d)][static_cast<std::size_t>(s)]) {
          laneOf[static_cast<std::size_t>(d)][static_cast<std::size_t>(s)] = static_cast<int>(m_lanes.size());
          Lane lane;
          lane.device = d;
          lane.stream = static_cast<sim::Stream>(s);
          m_lanes.push_back(std::move(lane));
        }
      }
    }
    for (std::size_t i = 0; i < tg.tasks.size(); ++i) {
      if (m_criticalOnly && !m_critical[i]) {
        continue;
      }
      ++m_taskCount;
      const auto& t = tg.tasks[i];
      const auto& span = sim.result.schedule[i];
      for (int d : tg.groups[static_cast<std::size_t>(t.group)]) {
        const int lane = laneOf[static_cast<std::size_t>(d)][static_cast<std::size_t>(t.stream)];
        m_lanes[static_cast<std::size_t>(lane)].boxes.push_back({span.start, span.finish, static_cast<int>(i)});
      }
    }
  }
  int top = axisHeight + deviceGap;
  for (std::size_t i = 0; i < m_lanes.size(); ++i) {
    m_laneTops.push_back(top);
    const bool lastOfDevice = i + 1 == m_lanes.size() || m_lanes[i + 1].device != m_lanes[i].device;
    top += laneHeight + (lastOfDevice ? deviceGap : laneGap);
  }
  for (auto& lane : m_lanes) {
    std::stable_sort(lane.boxes.begin(), lane.boxes.end(),
                     [](const Box& a, const Box& b) { return a.start < b.start; });
    lane.maxEnd.resize(lane.boxes.size());
    double latest = 0;
    for (std::size_t i = 0; i < lane.boxes.size(); ++i) {
      latest = std::max(latest, lane.boxes[i].end);
      lane.maxEnd[i] = latest;
    }
  }
  updateScrollBars();
  viewport()->update();
  Q_EMIT viewChanged();
}

int SimTimelineView::boxCount() const {
  std::size_t n = 0;
  for (const auto& lane : m_lanes) {
    n += lane.boxes.size();
  }
  return static_cast<int>(n);
}

QString SimTimelineView::laneLabel(int lane) const {
  const auto& l = m_lanes.at(static_cast<std::size_t>(lane));
  if (l.stage >= 0) {
    return tr("stage %1 (device %2)").arg(l.stage).arg(l.device);
  }
  switch (l.stream) {
  case sim::Stream::compute: return tr("device %1 compute").arg(l.device);
  case sim::Stream::communication: return tr("device %1 comm").arg(l.device);
  case sim::Stream::gradients: return tr("device %1 gradient sync").arg(l.device);
  }
  return {};
}

int SimTimelineView::timeWidth() const {
  return std::max(1, viewport()->width() - labelWidth - rightMargin);
}

double SimTimelineView::pixelsPerSecond() const {
  return m_span > 0 ? m_zoom * timeWidth() / m_span : 0;
}

double SimTimelineView::visibleSpan() const {
  return m_span > 0 ? m_span / m_zoom : 0;
}

double SimTimelineView::timeAt(double x) const {
  const double pps = pixelsPerSecond();
  return pps > 0 ? m_start + (x - labelWidth) / pps : 0;
}

double SimTimelineView::xOf(double t) const {
  return labelWidth + (t - m_start) * pixelsPerSecond();
}

int SimTimelineView::laneTop(int lane) const {
  return m_laneTops[static_cast<std::size_t>(lane)] - verticalScrollBar()->value();
}

int SimTimelineView::laneAt(int y) const {
  const int content = y + verticalScrollBar()->value();
  const auto it = std::upper_bound(m_laneTops.begin(), m_laneTops.end(), content);
  if (it == m_laneTops.begin()) {
    return -1;
  }
  const auto lane = static_cast<int>(it - m_laneTops.begin()) - 1;
  return content < m_laneTops[static_cast<std::size_t>(lane)] + laneHeight ? lane : -1;
}

void SimTimelineView::updateScrollBars() {
  m_syncing = true;
  const double pps = pixelsPerSecond();
  // The whole iteration at this zoom, m_span x pps, which is m_zoom x timeWidth() exactly (the
  // product in floating point can land a hair above a whole pixel and scroll by one).
  const int contentWidth = m_span > 0 ? static_cast<int>(std::ceil(m_zoom * timeWidth() - 1e-9)) : 0;
  m_start = std::clamp(m_start, 0.0, std::max(0.0, m_span - visibleSpan()));
  auto* h = horizontalScrollBar();
  h->setRange(0, std::max(0, contentWidth - timeWidth()));
  h->setPageStep(timeWidth());
  h->setValue(static_cast<int>(std::lround(m_start * pps)));
  const int contentHeight = m_laneTops.empty() ? 0 : m_laneTops.back() + laneHeight;
  auto* v = verticalScrollBar();
  v->setRange(0, std::max(0, contentHeight + deviceGap - viewport()->height()));
  v->setPageStep(std::max(1, viewport()->height() - axisHeight));
  m_syncing = false;
}

void SimTimelineView::scrollContentsBy(int, int) {
  if (!m_syncing) {
    const double pps = pixelsPerSecond();
    m_start = pps > 0 ? horizontalScrollBar()->value() / pps : 0;
    Q_EMIT viewChanged();
  }
  viewport()->update();
}

void SimTimelineView::zoomBy(double factor, double anchorX) {
  if (m_span <= 0) {
    return;
  }
  const double anchor = timeAt(anchorX);
  m_zoom = std::clamp(m_zoom * factor, 1.0, maxZoom);
  const double pps = pixelsPerSecond();
  m_start = anchor - (anchorX - labelWidth) / pps;
  updateScrollBars();
  viewport()->update();
  Q_EMIT viewChanged();
}

void SimTimelineView::zoomIn() {
  zoomBy(2, labelWidth + timeWidth() / 2.0);
}

void SimTimelineView::zoomOut() {
  zoomBy(0.5, labelWidth + timeWidth() / 2.0);
}

void SimTimelineView::zoomToFit() {
  m_zoom = 1;
  m_start = 0;
  updateScrollBars();
  viewport()->update();
  Q_EMIT viewChanged();
}

void SimTimelineView::resizeEvent(QResizeEvent* event) {
  QAbstractScrollArea::resizeEvent(event);
  updateScrollBars();
}

void SimTimelineView::wheelEvent(QWheelEvent* event) {
  if (event->modifiers() & Qt::ControlModifier) {
    const double steps = event->angleDelta().y() / 120.0;
    zoomBy(std::pow(1.25, steps), event->position().x());
    event->accept();
    return;
  }
  QAbstractScrollArea::wheelEvent(event);
}

void SimTimelineView::mousePressEvent(QMouseEvent* event) {
  if (event->button() == Qt::LeftButton) {
    m_dragging = true;
    m_dragFrom = event->position().toPoint();
    viewport()->setCursor(Qt::ClosedHandCursor);
  }
}

void SimTimelineView::mouseMoveEvent(QMouseEvent* event) {
  if (m_dragging) {
    const QPoint now = event->position().toPoint();
    const QPoint d = now - m_dragFrom;
    m_dragFrom = now;
    horizontalScrollBar()->setValue(horizontalScrollBar()->value() - d.x());
    verticalScrollBar()->setValue(verticalScrollBar()->value() - d.y());
  }
}

void SimTimelineView::mouseReleaseEvent(QMouseEvent* event) {
  if (event->button() == Qt::LeftButton) {
    m_dragging = false;
    viewport()->unsetCursor();
  }
}

std::pair<std::size_t, std::size_t> SimTimelineView::visibleRange(const Lane& lane, double t0, double t1) const {
  // The first box that ends after t0 (maxEnd is non-decreasing), up to the first that starts after t1.
  const auto first =
      static_cast<std::size_t>(std::lower_bound(lane.maxEnd.begin(), lane.maxEnd.end(), t0) - lane.maxEnd.begin());
  const auto last = static_cast<std::size_t>(
      std::upper_bound(lane.boxes.begin(), lane.boxes.end(), t1, [](double t, const Box& b) { return t < b.start; }) -
      lane.boxes.begin());
  return {first, std::max(first, last)};
}

QString SimTimelineView::textAt(const QPoint& pos) const {
  const int laneIndex = laneAt(pos.y());
  if (laneIndex < 0 || pos.x() < labelWidth || !m_analysis || !m_analysis->simulation) {
    return {};
  }
  const auto& lane = m_lanes[static_cast<std::size_t>(laneIndex)];
  // Within two pixels: boxes narrower than a pixel can still be hovered.
  const double slack = 2 / std::max(pixelsPerSecond(), 1e-30);
  const double t = timeAt(pos.x());
  const auto [first, last] = visibleRange(lane, t - slack, t + slack);
  int best = -1;
  double bestDistance = slack;
  for (std::size_t i = first; i < last; ++i) {
    const auto& b = lane.boxes[i];
    const double distance = t < b.start ? b.start - t : (t > b.end ? t - b.end : 0);
    if (distance <= bestDistance) {
      best = b.task;
      bestDistance = distance;
      if (distance == 0) {
        break;
      }
    }
  }
  if (best < 0) {
    return {};
  }
  const auto& sim = *m_analysis->simulation;
  const auto& g = m_analysis->model.graph;
  const auto& task = sim.tasks.tasks[static_cast<std::size_t>(best)];
  if (lane.stage >= 0) {
    const auto box =
        std::find_if(lane.boxes.begin(), lane.boxes.end(), [best](const Box& b) { return b.task == best; });
    QString text = tr("<b>stage %1: micro-batch %2, %3</b>")
                       .arg(lane.stage)
                       .arg(task.micro_batch)
                       .arg(qs(sim::task_kind_name(task.kind)));
    const auto& pipe = m_analysis->strategy.pipeline;
    if (pipe && pipe->chunks > 1) {
      text += tr(" through chunk %1").arg(chunkOf(task));
    }
    text += tr("<br>start %1, duration %2, %n kernel task(s)", "", box->tasks)
                .arg(formatSeconds(box->start), formatSeconds(box->end - box->start));
    return text;
  }
  const auto& span = sim.result.schedule[static_cast<std::size_t>(best)];
  QString text = QStringLiteral("<b>%1</b>").arg(qs(sim::task_name(g, sim.tasks, best)).toHtmlEscaped());
  if (task.op >= 0) {
    const auto& op = g.op(task.op);
    text += tr("<br>op: %1 (%2)").arg(qs(op.name).toHtmlEscaped(), qs(op.type).toHtmlEscaped());
  }
  text += tr("<br>kind: %1, cost term: %2").arg(qs(sim::task_kind_name(task.kind)), qs(task.term).toHtmlEscaped());
  text += tr("<br>start %1, duration %2").arg(formatSeconds(span.start), formatSeconds(span.finish - span.start));
  const auto& devices = sim.tasks.groups[static_cast<std::size_t>(task.group)];
  text += tr("<br>on %n device(s)", "", static_cast<int>(devices.size()));
  if (task.micro_batch >= 0) {
    text += tr(", micro-batch %1").arg(task.micro_batch);
  }
  if (m_critical[static_cast<std::size_t>(best)]) {
    text += tr("<br><i>on the critical path</i>");
  }
  return text;
}

bool SimTimelineView::viewportEvent(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    const auto* help = static_cast<QHelpEvent*>(event);
    const QString text = textAt(help->pos());
    if (text.isEmpty()) {
      QToolTip::hideText();
      event->ignore();
    } else {
      QToolTip::showText(help->globalPos(), text, viewport());
    }
    return true;
  }
  return QAbstractScrollArea::viewportEvent(event);
}

} // namespace partita::gui
