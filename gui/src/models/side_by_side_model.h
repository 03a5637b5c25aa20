#pragma once

// Two strategies for one model, layer by layer: each configuration and time, the time delta
// (B - A), rows whose configuration differs highlighted, and a totals line (iteration time) last.

#include "common/analysis.h"

#include <QAbstractTableModel>

#include <memory>

namespace partita::gui {

class SideBySideModel : public QAbstractTableModel {
  Q_OBJECT
public:
  enum Column { Layer, Type, ConfigA, TimeA, ConfigB, TimeB, Delta, ColumnCount };
  static constexpr int DiffersRole = Qt::UserRole + 20; // bool: the two configurations differ
  static constexpr int TotalsRole = Qt::UserRole + 21;  // bool: the totals line

  explicit SideBySideModel(QObject* parent = nullptr);

  // Throws nothing: two analyses of different models show no rows.
  void setSideBySide(std::shared_ptr<const SideBySide> sideBySide);
  const SideBySide* sideBySide() const { return m_data.get(); }

  // Layer rows whose configuration differs (the totals line excluded).
  int differingRows() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
  int layerCount() const;
  bool differs(int row) const;

  std::shared_ptr<const SideBySide> m_data;
};

} // namespace partita::gui
