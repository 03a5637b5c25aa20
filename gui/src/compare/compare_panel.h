#pragma once

// The Compare tab: every strategy family on the current model and cluster, as a table and a
// throughput bar chart.

#include "common/analysis.h"

#include <QWidget>

#include <memory>

class QLabel;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace partita::gui {

class ChartWidget;
class CompareModel;

class ComparePanel : public QWidget {
  Q_OBJECT
public:
  explicit ComparePanel(QWidget* parent = nullptr);

  void setComparison(const std::shared_ptr<const Comparison>& comparison);

  CompareModel* model() const { return m_model; }
  QPushButton* compareButton() const { return m_compare; }
  ChartWidget* chart() const { return m_chart; }

Q_SIGNALS:
  void compareRequested();

private:
  CompareModel* m_model;
  QSortFilterProxyModel* m_proxy;
  QPushButton* m_compare;
  QLabel* m_header;
  QTableView* m_view;
  ChartWidget* m_chart;
};

} // namespace partita::gui
