#pragma once

// One row per strategy family of a Comparison: iteration time, throughput, peak memory, fits.

#include "common/analysis.h"

#include <QAbstractTableModel>

#include <memory>

namespace partita::gui {

class CompareModel : public QAbstractTableModel {
  Q_OBJECT
public:
  enum Column { Family, Title, Iteration, Throughput, PeakMemory, Fits, ColumnCount };

  explicit CompareModel(QObject* parent = nullptr);

  void setComparison(std::shared_ptr<const Comparison> comparison);
  const Comparison* comparison() const { return m_comparison.get(); }
  // The row of the family to choose (strategy::fastest_that_fits), shown in bold; -1 when none fits.
  int bestRow() const { return m_best; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
  std::shared_ptr<const Comparison> m_comparison;
  int m_best = -1;
};

} // namespace partita::gui
