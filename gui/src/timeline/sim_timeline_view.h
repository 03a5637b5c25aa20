#pragma once

// The simulated iteration (Analysis::simulation) as a zoomable timeline: one lane per used device
// and stream (compute, communication), one box per task and device it occupies, coloured by
// kind, the critical path outlined. Ctrl+wheel or zoomIn()/zoomOut() zoom about a point, the
// scroll bars or a drag pan. Only what is visible is painted: each lane's boxes are sorted by
// start, found by binary search, and boxes narrower than a pixel are merged into one.

#include "common/analysis.h"

#include "partita/sim/task_graph.h"

#include <QAbstractScrollArea>
#include <QColor>
#include <QString>

#include <memory>
#include <utility>
#include <vector>

class QPainter;

namespace partita::gui {

class SimTimelineView : public QAbstractScrollArea {
  Q_OBJECT
public:
  static QColor colorOf(sim::TaskKind kind);

  explicit SimTimelineView(QWidget* parent = nullptr);

  void setAnalysis(std::shared_ptr<const Analysis> analysis);
  // Only the tasks of the critical path (the lanes stay).
  void setCriticalOnly(bool only);
  bool criticalOnly() const { return m_criticalOnly; }
  // The pipeline view: one lane per pipeline stage (the compute stream of its first device), each
  // micro-batch's forward, backward and recomputation through the stage (or through one of its
  // chunks) as one box coloured by micro-batch ("F3", "B3", "R3"; backward darker, recomputation
  // dotted), the time a stage computes nothing (the bubble) hatched. Plans with a pipeline only.
  void setPipelineView(bool on);
  bool pipelineView() const { return m_pipelineView; }
  // Pipeline view: the share of the iteration lane `lane`'s stage computes nothing.
  double idleShare(int lane) const;
  static QColor microBatchColor(int microBatch, sim::TaskKind kind);

  void zoomIn();
  void zoomOut();
  void zoomToFit();
  // Zooms by `factor` (> 1: in) keeping the time under viewport x `anchorX` in place.
  void zoomBy(double factor, double anchorX);

  // For tests and the panel.
  int laneCount() const { return static_cast<int>(m_lanes.size()); }
  QString laneLabel(int lane) const;
  int taskCount() const { return m_taskCount; }  // distinct tasks shown (each on one or more lanes)
  int boxCount() const;                          // task boxes on all lanes
  int paintedBoxes() const { return m_painted; } // boxes (or merged sub-pixel runs) of the last paint
  double visibleStart() const { return m_start; }
  double visibleSpan() const; // seconds across the viewport's time area
  double iterationTime() const { return m_span; }
  // The tooltip text of the box at viewport position `pos`, empty if none.
  QString textAt(const QPoint& pos) const;

Q_SIGNALS:
  void viewChanged(); // zoom or pan

protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  bool viewportEvent(QEvent* event) override; // tooltips
  void scrollContentsBy(int dx, int dy) override;

private:
  struct Box {
    double start = 0, end = 0;
    int task = 0;  // the first of the tasks it shows
    int tasks = 1; // pipeline view: the tasks merged into it
  };
  struct Lane {
    int device = 0;
    int stage = -1; // pipeline view
    sim::Stream stream = sim::Stream::compute;
    std::vector<Box> boxes;     // by start
    std::vector<double> maxEnd; // maxEnd[i]: the latest end of boxes[0..i]
  };

  void rebuild();
  void rebuildStages(); // the pipeline view's lanes
  int chunkOf(const sim::Task& task) const;
  void updateScrollBars();
  double pixelsPerSecond() const;
  double timeAt(double x) const; // viewport x -> seconds
  double xOf(double t) const;    // seconds -> viewport x
  int laneAt(int y) const;       // -1 when none
  int laneTop(int lane) const;   // viewport y
  int timeWidth() const;         // pixels of the time area
  // Lane boxes that may be visible between t0 and t1: [first, last).
  std::pair<std::size_t, std::size_t> visibleRange(const Lane& lane, double t0, double t1) const;
  void paintAxis(QPainter& p, double t0, double t1);
  void paintLane(QPainter& p, const Lane& lane, int top, double t0, double t1);

  std::shared_ptr<const Analysis> m_analysis;
  std::vector<Lane> m_lanes;
  std::vector<int> m_laneTops;  // content y of each lane (before vertical scrolling)
  std::vector<bool> m_critical; // per task
  bool m_criticalOnly = false;
  bool m_pipelineView = false;
  int m_taskCount = 0;
  double m_span = 0;  // the iteration time
  double m_start = 0; // seconds at the left edge of the time area
  double m_zoom = 1;  // 1: the whole iteration fits the width
  int m_painted = 0;
  QPoint m_dragFrom;
  bool m_dragging = false;
  bool m_syncing = false; // updating scroll bars from the view, not the other way
};

} // namespace partita::gui
