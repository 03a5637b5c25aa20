#pragma once

// The inspector of one op: every candidate configuration with its cost in named terms, sorted by
// time, and the formula of each term of the chosen configuration (and of the candidate the user
// selects), so one can see why the chosen one wins.

#include "common/analysis.h"

#include <QWidget>

#include <memory>

class QLabel;
class QSortFilterProxyModel;
class QTableView;
class QTextBrowser;

namespace partita::gui {

class CandidateModel;

class InspectorPanel : public QWidget {
  Q_OBJECT
public:
  explicit InspectorPanel(QWidget* parent = nullptr);

  void setAnalysis(std::shared_ptr<const Analysis> analysis);
  void showOp(graph::OpId id);
  graph::OpId op() const { return m_op; }

  CandidateModel* model() const { return m_model; }
  QSortFilterProxyModel* proxy() const { return m_proxy; }
  QTableView* view() const { return m_view; }
  QTextBrowser* formulas() const { return m_formulas; }
  QLabel* header() const { return m_header; }

private:
  void showFormulas(int candidateRow);

  std::shared_ptr<const Analysis> m_analysis;
  graph::OpId m_op = -1;
  QLabel* m_header;
  CandidateModel* m_model;
  QSortFilterProxyModel* m_proxy;
  QTableView* m_view;
  QTextBrowser* m_formulas;
};

} // namespace partita::gui
