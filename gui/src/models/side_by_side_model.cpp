#include "models/side_by_side_model.h"

#include "common/format.h"

#include <QBrush>
#include <QColor>
#include <QFont>

namespace partita::gui {

SideBySideModel::SideBySideModel(QObject* parent) : QAbstractTableModel(parent) {}

void SideBySideModel::setSideBySide(std::shared_ptr<const SideBySide> sideBySide) {
  beginResetModel();
  m_data = std::move(sideBySide);
  endResetModel();
}

int SideBySideModel::layerCount() const {
  if (!m_data || !m_data->a || !m_data->b || m_data->a->layers.size() != m_data->b->layers.size()) {
    return 0;
  }
  return static_cast<int>(m_data->a->layers.size());
}

bool SideBySideModel::differs(int row) const {
  const auto i = static_cast<std::size_t>(row);
  return m_data->a->layers[i].configuration != m_data->b->layers[i].configuration;
}

int SideBySideModel::differingRows() const {
  int n = 0;
  for (int row = 0; row < layerCount(); ++row) {
    n += differs(row) ? 1 : 0;
  }
  return n;
}

int SideBySideModel::rowCount(const QModelIndex& parent) const {
  const int layers = layerCount();
  return parent.isValid() || layers == 0 ? 0 : layers + 1;
}

int SideBySideModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant SideBySideModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) {
    return {};
  }
  const int row = index.row();
  const auto column = static_cast<Column>(index.column());
  const bool totals = row == layerCount();
  const auto& a = *m_data->a;
  const auto& b = *m_data->b;
  const bool differ = !totals && differs(row);
  if (role == DiffersRole) {
    return differ;
  }
  if (role == TotalsRole) {
    return totals;
  }
  if (role == Qt::BackgroundRole) {
    if (totals) {
      return QBrush(QColor(0xe8, 0xe8, 0xe8));
    }
    return differ ? QVariant(QBrush(QColor(0xff, 0xf0, 0xb3))) : QVariant();
  }
  if (role == Qt::FontRole && totals) {
    QFont bold;
    bold.setBold(true);
    return bold;
  }
  if (role == Qt::ForegroundRole && column == Delta) {
    // Green where B is faster, red where it is slower.
    const double d = totals
                         ? b.prediction.iteration_time - a.prediction.iteration_time
                         : b.layers[static_cast<std::size_t>(row)].time - a.layers[static_cast<std::size_t>(row)].time;
    if (d != 0) {
      return QBrush(d < 0 ? QColor(0x20, 0x80, 0x20) : QColor(0xc0, 0x20, 0x20));
    }
    return {};
  }
  if (role == Qt::TextAlignmentRole) {
    return column == TimeA || column == TimeB || column == Delta ? QVariant(Qt::AlignRight | Qt::AlignVCenter)
                                                                 : QVariant(Qt::AlignLeft | Qt::AlignVCenter);
  }
  if (role == Qt::ToolTipRole && differ) {
    return tr("The configurations differ");
  }
  if (role != Qt::DisplayRole && role != SortRole) {
    return {};
  }
  const bool sort = role == SortRole;
  auto time = [sort](double seconds) { return sort ? QVariant(seconds) : QVariant(formatMs(seconds)); };
  auto delta = [sort](double seconds) {
    if (sort) {
      return QVariant(seconds);
    }
    const QString text = formatMs(seconds);
    return QVariant(seconds > 0 ? QStringLiteral("+") + text : text);
  };
  if (totals) {
    switch (column) {
    case Layer: return sort ? QVariant(QStringLiteral("\uffff")) : QVariant(tr("Iteration (total)"));
    case TimeA: return time(a.prediction.iteration_time);
    case TimeB: return time(b.prediction.iteration_time);
    case Delta: return delta(b.prediction.iteration_time - a.prediction.iteration_time);
    case ConfigA: return sort ? QVariant(QString()) : QVariant(qs(a.family_title));
    case ConfigB: return sort ? QVariant(QString()) : QVariant(qs(b.family_title));
    default: return sort ? QVariant(QString()) : QVariant();
    }
  }
  const auto& la = a.layers[static_cast<std::size_t>(row)];
  const auto& lb = b.layers[static_cast<std::size_t>(row)];
  switch (column) {
  case Layer: return qs(la.name);
  case Type: return qs(la.type);
  case ConfigA: return qs(la.configuration);
  case TimeA: return time(la.time);
  case ConfigB: return qs(lb.configuration);
  case TimeB: return time(lb.time);
  case Delta: return delta(lb.time - la.time);
  case ColumnCount: break;
  }
  return {};
}

QVariant SideBySideModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  switch (static_cast<Column>(section)) {
  case Layer: return tr("Layer");
  case Type: return tr("Type");
  case ConfigA: return tr("A: configuration");
  case TimeA: return tr("A: ms");
  case ConfigB: return tr("B: configuration");
  case TimeB: return tr("B: ms");
  case Delta: return tr("B − A ms");
  case ColumnCount: break;
  }
  return {};
}

} // namespace partita::gui
