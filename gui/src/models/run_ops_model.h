#pragma once

// One row per op of a run: predicted and measured time per iteration and the error, from the
// core's comparison (strategy/measured.h); with a second run, its measured time and the change
// from the first, so that two runs (or a run and its prediction) sit side by side.

#include "run/run_job.h"

#include <QAbstractTableModel>

#include <memory>

namespace partita::gui {

class RunOpsModel : public QAbstractTableModel {
  Q_OBJECT
public:
  enum Column { Index, Op, Name, Predicted, Measured, Error, MeasuredB, ChangeB, ColumnCount };

  explicit RunOpsModel(QObject* parent = nullptr);

  // `b` may be null (one run); a `b` of another model (other op names) is ignored.
  void setRuns(std::shared_ptr<const RunRecord> a, std::shared_ptr<const RunRecord> b);
  const RunRecord* runA() const { return m_a.get(); }
  const RunRecord* runB() const { return m_b.get(); }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  // Measured per-iteration time of op `row` in run `r` (forward, backward, communication).
  static double measuredSeconds(const RunRecord& r, int row);

private:
  std::shared_ptr<const RunRecord> m_a, m_b;
};

// Two runs are comparable op by op when they ran the same ops (same names, same order).
bool sameOps(const RunRecord& a, const RunRecord& b);

} // namespace partita::gui
