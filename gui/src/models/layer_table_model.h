#pragma once

// One row per op of an Analysis, in topological order: what the optimizer chose for it and what
// that costs. Display strings for reading, raw numbers under SortRole for sorting.

#include "common/analysis.h"

#include "partita/strategy/measured.h"

#include <QAbstractTableModel>

#include <memory>
#include <optional>

namespace partita::gui {

class LayerTableModel : public QAbstractTableModel {
  Q_OBJECT
public:
  enum Column {
    Index,
    Op,
    Name,
    Shape,
    Configuration,
    Stage, // plans with a pipeline: the stage (and interleaved chunk) that runs the op
    Compute,
    Communication,
    Redistribution,
    Memory,
    Share,
    RunnerUp, // the auto family: the best other configuration and what it would add
    Measured, // of a run of this plan (Run tab), when there is one
    Error,
    ColumnCount
  };

  explicit LayerTableModel(QObject* parent = nullptr);

  void setAnalysis(std::shared_ptr<const Analysis> analysis);
  // Measured against this analysis' prediction (strategy::compare), or nothing: the Measured and
  // Error columns then show "-".
  void setMeasured(std::optional<strategy::RunComparison> measured);
  bool hasMeasured() const { return m_measured.has_value(); }
  const Analysis* analysis() const { return m_analysis.get(); }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  // The row of op `id`, or -1.
  int rowOf(graph::OpId id) const;

private:
  std::shared_ptr<const Analysis> m_analysis;
  std::optional<strategy::RunComparison> m_measured;
};

} // namespace partita::gui
