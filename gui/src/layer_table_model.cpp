#include "layer_table_model.h"

#include "format.h"

#include <QBrush>
#include <QColor>

namespace partita::gui {

LayerTableModel::LayerTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void LayerTableModel::setAnalysis(std::shared_ptr<const Analysis> analysis) {
  beginResetModel();
  m_analysis = std::move(analysis);
  endResetModel();
}

int LayerTableModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() || !m_analysis) {
    return 0;
  }
  return static_cast<int>(m_analysis->layers.size());
}

int LayerTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

int LayerTableModel::rowOf(graph::OpId id) const {
  if (!m_analysis) {
    return -1;
  }
  for (std::size_t i = 0; i < m_analysis->layers.size(); ++i) {
    if (m_analysis->layers[i].op == id) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

QVariant LayerTableModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) {
    return {};
  }
  const auto& l = m_analysis->layers[static_cast<std::size_t>(index.row())];
  const auto column = static_cast<Column>(index.column());
  if (role == OpIdRole) {
    return l.op;
  }
  if (role == Qt::TextAlignmentRole) {
    return column >= Compute || column == Index ? QVariant(Qt::AlignRight | Qt::AlignVCenter)
                                                : QVariant(Qt::AlignLeft | Qt::AlignVCenter);
  }
  if (role == Qt::ToolTipRole && column == Name) {
    return qs(l.name);
  }
  if (role == Qt::BackgroundRole && column == Share && l.share >= 0.05) {
    // The layers worth looking at first.
    return QBrush(QColor::fromHsvF(0.08, std::min(1.0, l.share * 2.0), 1.0));
  }
  if (role != Qt::DisplayRole && role != SortRole) {
    return {};
  }
  const bool sort = role == SortRole;
  switch (column) {
  case Index: return l.op;
  case Op: return qs(l.type);
  case Name: return qs(l.name);
  case Shape: return qs(l.output_shape);
  case Configuration: return qs(l.configuration);
  case Compute: return sort ? QVariant(l.compute) : QVariant(formatMs(l.compute));
  case Communication: return sort ? QVariant(l.communication) : QVariant(formatMs(l.communication));
  case Redistribution: return sort ? QVariant(l.redistribution) : QVariant(formatMs(l.redistribution));
  case Memory: return sort ? QVariant(l.memory) : QVariant(formatMiB(l.memory));
  case Share: return sort ? QVariant(l.share) : QVariant(formatPercent(l.share));
  case ColumnCount: break;
  }
  return {};
}

QVariant LayerTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= ColumnCount) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  if (role == Qt::ToolTipRole) {
    switch (static_cast<Column>(section)) {
    case Compute: return tr("Forward, backward and recompute time on the op's slowest device");
    case Communication: return tr("Partial-sum reduces and weight-gradient synchronization");
    case Redistribution: return tr("Moving inputs from the producer's layout to this op's layout");
    case Memory: return tr("Parameters, gradients, optimizer state, activations and backward workspace per device");
    case Share: return tr("Share of the iteration time");
    default: return {};
    }
  }
  if (role != Qt::DisplayRole) {
    return {};
  }
  switch (static_cast<Column>(section)) {
  case Index: return tr("#");
  case Op: return tr("Op");
  case Name: return tr("Name");
  case Shape: return tr("Output shape");
  case Configuration: return tr("Configuration");
  case Compute: return tr("Compute ms");
  case Communication: return tr("Comm. ms");
  case Redistribution: return tr("Redist. ms");
  case Memory: return tr("Memory MiB");
  case Share: return tr("Share");
  case ColumnCount: break;
  }
  return {};
}

} // namespace partita::gui
