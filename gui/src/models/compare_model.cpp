#include "models/compare_model.h"

#include "common/format.h"

#include <QBrush>
#include <QColor>
#include <QFont>

#include <vector>

namespace partita::gui {

CompareModel::CompareModel(QObject* parent) : QAbstractTableModel(parent) {}

void CompareModel::setComparison(std::shared_ptr<const Comparison> comparison) {
  beginResetModel();
  m_comparison = std::move(comparison);
  m_best = -1;
  if (m_comparison) {
    std::vector<const strategy::Prediction*> alternatives;
    for (const auto& f : m_comparison->families) {
      alternatives.push_back(f.error.empty() ? &f.prediction : nullptr);
    }
    if (const auto best = strategy::fastest_that_fits(alternatives)) {
      m_best = static_cast<int>(*best);
    }
  }
  endResetModel();
}

int CompareModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !m_comparison ? 0 : static_cast<int>(m_comparison->families.size());
}

int CompareModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant CompareModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) {
    return {};
  }
  const auto& f = m_comparison->families[static_cast<std::size_t>(index.row())];
  const auto column = static_cast<Column>(index.column());
  const auto& p = f.prediction;
  const bool failed = !f.error.empty();
  if (role == Qt::ToolTipRole && failed) {
    return qs(f.error);
  }
  const bool best = index.row() == m_best;
  if (role == Qt::ToolTipRole && best) {
    return tr("The family to choose: the fastest that fits the device memory");
  }
  if (role == Qt::FontRole && best) {
    QFont bold;
    bold.setBold(true);
    return bold;
  }
  if (role == Qt::ForegroundRole && column == Fits && !failed && !p.fits) {
    return QBrush(QColor(0xc0, 0x20, 0x20));
  }
  if (role == Qt::TextAlignmentRole) {
    return column >= Iteration && column <= PeakMemory ? QVariant(Qt::AlignRight | Qt::AlignVCenter)
                                                       : QVariant(Qt::AlignLeft | Qt::AlignVCenter);
  }
  if (role != Qt::DisplayRole && role != SortRole) {
    return {};
  }
  const bool sort = role == SortRole;
  switch (column) {
  case Family: return qs(f.family);
  case Title: return qs(f.title);
  case Iteration:
    if (failed) {
      return sort ? QVariant(0.0) : QVariant(QStringLiteral("-"));
    }
    return sort ? QVariant(p.iteration_time) : QVariant(formatMs(p.iteration_time));
  case Throughput:
    if (failed) {
      return sort ? QVariant(0.0) : QVariant(QStringLiteral("-"));
    }
    return sort ? QVariant(p.samples_per_second) : QVariant(formatRate(p.samples_per_second));
  case PeakMemory:
    if (failed) {
      return sort ? QVariant(0.0) : QVariant(QStringLiteral("-"));
    }
    return sort ? QVariant(p.peak_memory) : QVariant(formatGiB(p.peak_memory));
  case Fits:
    if (failed) {
      return tr("error: %1").arg(qs(f.error));
    }
    return p.fits ? (best ? tr("yes, the fastest that fits") : tr("yes")) : tr("no");
  case ColumnCount: break;
  }
  return {};
}

QVariant CompareModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  switch (static_cast<Column>(section)) {
  case Family: return tr("Family");
  case Title: return tr("Strategy");
  case Iteration: return tr("Iteration ms");
  case Throughput: return tr("Throughput");
  case PeakMemory: return tr("Peak GiB");
  case Fits: return tr("Fits");
  case ColumnCount: break;
  }
  return {};
}

} // namespace partita::gui
