#pragma once

// The layer table with its filter and the totals line (iteration time, throughput, peak memory
// against capacity). Selecting a row selects its op for the inspector.

#include "common/analysis.h"

#include <QWidget>

#include <memory>

class QLabel;
class QLineEdit;
class QSortFilterProxyModel;
class QTableView;

namespace partita::gui {

class LayerTableModel;

class LayersPanel : public QWidget {
  Q_OBJECT
public:
  explicit LayersPanel(QWidget* parent = nullptr);

  void setAnalysis(const std::shared_ptr<const Analysis>& analysis);
  void selectOp(graph::OpId id);

  LayerTableModel* model() const { return m_model; }
  QSortFilterProxyModel* proxy() const { return m_proxy; }
  QTableView* view() const { return m_view; }
  QLineEdit* filterEdit() const { return m_filter; }
  QLabel* totalsLabel() const { return m_totals; }

Q_SIGNALS:
  void opSelected(graph::OpId id);

private:
  static QString autoSummary(const Analysis& a);       // the auto family: its margin, departures and search size
  static QString notes(const strategy::Prediction& p); // the prediction's notes (a quantized model)

  LayerTableModel* m_model;
  QSortFilterProxyModel* m_proxy;
  QLineEdit* m_filter;
  QTableView* m_view;
  QLabel* m_totals;
};

} // namespace partita::gui
