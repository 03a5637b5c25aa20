#pragma once

// The Scaling tab: iteration time or samples/s (a toggle) against the device count, one line per
// selected strategy family, on a log-2 axis. The sweep is the core's (search::sweep, as `partita
// compare --devices 1,2,4,...`), run off the GUI thread; a family that cannot apply at a count
// leaves a gap in its line, not a zero.

#include "common/analysis.h"

#include <QWidget>

#include <memory>

class QComboBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QPushButton;

namespace partita::gui {

class ChartWidget;

class SweepPanel : public QWidget {
  Q_OBJECT
public:
  enum class Metric { IterationTime, Throughput };

  explicit SweepPanel(QWidget* parent = nullptr);

  void setSweep(std::shared_ptr<const Sweep> sweep);
  const Sweep* sweep() const { return m_sweep.get(); }

  std::vector<std::string> selectedFamilies() const;
  void setSelectedFamilies(const std::vector<std::string>& families);
  // The counts typed in; empty: the default (1, 2, 4, ... up to `clusterDevices`). Throws
  // partita::Error naming a bad item.
  std::vector<int> deviceCounts(int clusterDevices) const;

  Metric metric() const;
  void setMetric(Metric metric);

  // The plotted value of a cell: NaN for a gap (the family could not apply).
  static double value(const search::SweepCell& cell, Metric metric);

  QLineEdit* devicesEdit() const { return m_devices; }
  QPushButton* runButton() const { return m_run; }
  ChartWidget* chart() const { return m_chart; }

Q_SIGNALS:
  void sweepRequested();

private:
  void plot();

  std::shared_ptr<const Sweep> m_sweep;
  QListWidget* m_families;
  QLineEdit* m_devices;
  QComboBox* m_metric;
  QPushButton* m_run;
  QLabel* m_header;
  ChartWidget* m_chart;
};

} // namespace partita::gui
