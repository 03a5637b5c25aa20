#include "models/candidate_model.h"

#include "common/format.h"

#include <QFont>

#include <algorithm>

namespace partita::gui {

CandidateModel::CandidateModel(QObject* parent) : QAbstractTableModel(parent) {}

void CandidateModel::setCandidates(std::vector<Candidate> candidates) {
  beginResetModel();
  m_candidates = std::move(candidates);
  m_timeTerms.clear();
  for (const auto& c : m_candidates) {
    for (const auto& t : c.cost.time) {
      if (std::find(m_timeTerms.begin(), m_timeTerms.end(), t.name) == m_timeTerms.end()) {
        m_timeTerms.push_back(t.name);
      }
    }
  }
  endResetModel();
}

int CandidateModel::chosenRow() const {
  for (std::size_t i = 0; i < m_candidates.size(); ++i) {
    if (m_candidates[i].chosen) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

int CandidateModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_candidates.size());
}

int CandidateModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : memoryColumn() + 1;
}

QVariant CandidateModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) {
    return {};
  }
  const auto& c = m_candidates[static_cast<std::size_t>(index.row())];
  const int column = index.column();
  if (role == Qt::FontRole && c.chosen) {
    QFont bold;
    bold.setBold(true);
    return bold;
  }
  if (role == Qt::TextAlignmentRole) {
    return column == 0 ? QVariant(Qt::AlignLeft | Qt::AlignVCenter) : QVariant(Qt::AlignRight | Qt::AlignVCenter);
  }
  if (role == Qt::ToolTipRole && column == 0) {
    return c.chosen ? tr("The configuration the strategy chose") : QVariant();
  }
  if (role != Qt::DisplayRole && role != SortRole) {
    return {};
  }
  const bool sort = role == SortRole;
  if (column == 0) {
    return c.chosen && !sort ? QString(qs(c.text) + tr("  (chosen)")) : qs(c.text);
  }
  if (column == 1) {
    return c.copies;
  }
  double value = 0;
  if (column == TotalColumn) {
    value = c.cost.time_total();
  } else if (column == memoryColumn()) {
    return sort ? QVariant(c.cost.memory_total()) : QVariant(formatBytes(c.cost.memory_total()));
  } else {
    value = c.cost.get(m_timeTerms[static_cast<std::size_t>(column - FixedColumns)]);
  }
  return sort ? QVariant(value) : QVariant(formatMs(value));
}

QVariant CandidateModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= columnCount()) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  if (role != Qt::DisplayRole) {
    return {};
  }
  if (section == 0) {
    return tr("Configuration");
  }
  if (section == 1) {
    return tr("Copies");
  }
  if (section == TotalColumn) {
    return tr("Total ms");
  }
  if (section == memoryColumn()) {
    return tr("Memory");
  }
  return QString(qs(m_timeTerms[static_cast<std::size_t>(section - FixedColumns)]) + tr(" ms"));
}

} // namespace partita::gui
