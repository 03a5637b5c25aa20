#pragma once

// What a run measured, per rank, on one timed iteration: one lane per rank, one box per recorded
// interval (partita.proto TraceEvent), coloured by kind: compute, communication, pipeline wait,
// optimizer. Hovering a box names the op, the phase and the time.

#include "partita/proto/partita.pb.h"

#include <QColor>
#include <QString>
#include <QWidget>

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
    QString text;
  };
  QRectF rectOf(const Box& b) const;

  std::vector<Box> m_boxes;
  int m_lanes = 0;
  int m_iteration = 0;
  double m_span = 0; // the longest rank's iteration
};

} // namespace partita::gui
