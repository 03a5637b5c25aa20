#pragma once

// What a run measured, per rank, on one timed iteration: one lane per rank, one box per recorded
// interval (partita.proto TraceEvent), coloured by kind: compute, communication, pipeline wait,
// optimizer. Below it, on the same time axis, the predicted iteration as the event simulator runs
// it (Analysis::simulation): one lane per device, its compute stream above its communication
// stream, so that a gap shows where the model and the machine part ways. Hovering a box names the
// op, the phase and the time.

#include "common/analysis.h"

#include "partita/proto/partita.pb.h"

#include <QColor>
#include <QString>
#include <QWidget>

class QPainter;

#include <algorithm>
#include <memory>
#include <vector>

namespace partita::gui {

class TimelineWidget : public QWidget {
  Q_OBJECT
public:
  enum class Kind { Compute, Communication, Wait, Optimizer };
  static Kind kindOf(const std::string& phase);
  static QColor colorOf(Kind kind);

  explicit TimelineWidget(QWidget* parent = nullptr);

  // Shows `iteration` of `run` (events outside it are not drawn).
  void setRun(const proto::RunResult* run, int iteration);
  // The predicted iteration of the run's plan under the measured one (null, or an analysis without
  // a simulation: none).
  void setPredicted(std::shared_ptr<const Analysis> analysis);
  int predictedBoxCount() const; // for tests
  int predictedLaneCount() const { return static_cast<int>(m_predictedLanes.size()); }
  double predictedSpan() const { return m_predictedSpan; }
  double axisSpan() const { return std::max(m_span, m_predictedSpan); } // the common time axis
  // The tooltip text of the box at `pos`, empty if none.
  QString textAt(const QPointF& pos) const;
  int iteration() const { return m_iteration; }
  int boxCount() const { return static_cast<int>(m_boxes.size()); } // for tests
  int laneCount() const { return m_lanes; }
  QSize sizeHint() const override;

protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override; // tooltips

private:
  struct Box {
    int rank = 0;
    double start = 0, end = 0; // seconds from the rank's iteration start
    Kind kind = Kind::Compute;
    bool communication = false; // predicted: on the communication stream (the lower half)
    QString text;
  };
  QRectF rectOf(const Box& b) const;
  QRectF predictedRectOf(const Box& b) const; // Box::rank is the predicted lane, Box::stream its half
  int measuredHeight() const;                 // the axis and the measured lanes
  void paintAxis(QPainter& p, int top) const;

  std::vector<Box> m_boxes;
  std::shared_ptr<const Analysis> m_analysis;
  std::vector<int> m_predictedLanes; // device of each predicted lane
  std::vector<Box> m_predicted;
  double m_predictedSpan = 0;
  int m_lanes = 0;
  int m_iteration = 0;
  double m_span = 0; // the longest rank's iteration
};

} // namespace partita::gui
