#pragma once

// The 3-D search tab: what the 3d family chose and why (the runner-up, the binding constraint, the
// size of the space), and the Pareto front of iteration time against memory per device as a chart
// and a table. A point clicked in the chart, or a row opened in the table, asks the window to
// evaluate that point's plan: the megatron family with the point's options, so that every other
// tab shows it. The front stays until another 3d search or another model, cluster or device
// count; the point on screen is marked.

#include "common/analysis.h"

#include <QWidget>

#include <memory>

class QLabel;
class QPushButton;
class QTableWidget;

namespace partita::gui {

class ChartWidget;

// The evaluation input of a 3d search's point: `base` (the search's) with the megatron family and
// the point's shape, schedule and setup (the options `partita plan` prints beside it).
AnalysisInput point_input(const AnalysisInput& base, const search::three_d::Candidate& candidate);

class ParetoPanel : public QWidget {
  Q_OBJECT
public:
  explicit ParetoPanel(QWidget* parent = nullptr);

  // A 3d analysis replaces the front shown; another analysis of the same model, cluster and
  // devices keeps it (marking the point it is, if any); any other clears it.
  void setAnalysis(const std::shared_ptr<const Analysis>& analysis);

  // Asks for the plan of front point `index` (as a click on it does).
  void openPoint(int index);

  // For tests.
  int pointCount() const;
  int shownPoint() const { return m_shown; } // the front point on screen, -1 when none
  ChartWidget* chart() const { return m_chart; }
  QTableWidget* table() const { return m_table; }
  QString summary() const;

Q_SIGNALS:
  void openRequested(const AnalysisInput& input);

private:
  void show();

  std::shared_ptr<const Analysis> m_search; // the 3d analysis whose front is shown
  int m_shown = -1;
  QLabel* m_summary;
  ChartWidget* m_chart;
  QTableWidget* m_table;
  QPushButton* m_open;
};

} // namespace partita::gui
