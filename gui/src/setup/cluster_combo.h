#pragma once

// The cluster lists of the set-up panel and of Side by side hold the presets and, once a cluster
// has been edited, one more item for it: the same item, the same way, in both.

#include <QComboBox>
#include <QCoreApplication>
#include <QString>

namespace partita::gui {

// bool: the item is the edited cluster (its name in Qt::UserRole).
inline constexpr int EditedClusterRole = Qt::UserRole + 11;

// The edited cluster's item, added at the end when there is none yet, now named `name`; its row.
inline int setEditedClusterItem(QComboBox* combo, const QString& name) {
  int row = -1;
  for (int k = 0; k < combo->count(); ++k) {
    if (combo->itemData(k, EditedClusterRole).toBool()) {
      row = k;
    }
  }
  if (row < 0) {
    combo->addItem(QString());
    row = combo->count() - 1;
    combo->setItemData(row, true, EditedClusterRole);
  }
  combo->setItemText(row, QCoreApplication::translate("partita::gui", "%1 (edited)").arg(name));
  combo->setItemData(row, name, Qt::UserRole);
  return row;
}

} // namespace partita::gui
