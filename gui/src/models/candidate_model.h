#pragma once

// The inspector's table: every candidate configuration of one op, with its total time and one
// column per named time term (cost::Term names, as the core reports them), then memory.

#include "common/candidates.h"

#include <QAbstractTableModel>
#include <QStringList>

#include <vector>

namespace partita::gui {

class CandidateModel : public QAbstractTableModel {
  Q_OBJECT
public:
  static constexpr int FixedColumns = 3; // configuration, copies, total ms

  explicit CandidateModel(QObject* parent = nullptr);

  void setCandidates(std::vector<Candidate> candidates);
  const std::vector<Candidate>& candidates() const { return m_candidates; }
  int chosenRow() const; // -1 when none

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  // Column of the total time, to sort by.
  static constexpr int TotalColumn = 2;

private:
  std::vector<Candidate> m_candidates;
  std::vector<std::string> m_timeTerms; // union of the candidates' time term names, first-seen order
  int memoryColumn() const { return FixedColumns + static_cast<int>(m_timeTerms.size()); }
};

} // namespace partita::gui
