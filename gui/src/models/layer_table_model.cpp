#include "models/layer_table_model.h"

#include "common/format.h"
#include "common/split_category.h"

#include <QBrush>
#include <QColor>

#include <algorithm>
#include <cmath>

namespace partita::gui {

LayerTableModel::LayerTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void LayerTableModel::setAnalysis(std::shared_ptr<const Analysis> analysis) {
  beginResetModel();
  m_analysis = std::move(analysis);
  m_measured.reset();
  endResetModel();
}

void LayerTableModel::setMeasured(std::optional<strategy::RunComparison> measured) {
  if (measured && (!m_analysis || measured->ops.size() != m_analysis->model.graph.ops().size())) {
    measured.reset(); // not of this model
  }
  m_measured = std::move(measured);
  if (rowCount() > 0) {
    Q_EMIT dataChanged(index(0, Measured), index(rowCount() - 1, Error));
  }
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
    return (column >= Compute && column != RunnerUp) || column == Index || column == Stage
               ? QVariant(Qt::AlignRight | Qt::AlignVCenter)
               : QVariant(Qt::AlignLeft | Qt::AlignVCenter);
  }
  if (role == Qt::ToolTipRole && column == Name) {
    return qs(l.name);
  }
  const auto* families = m_analysis->families ? &*m_analysis->families : nullptr;
  if (l.differs_from_family && families != nullptr && (column == Configuration || column == Index)) {
    // What auto chose otherwise than the closest hand-made family.
    if (role == Qt::BackgroundRole) {
      return QBrush(differsColor());
    }
    if (role == Qt::ToolTipRole) {
      return tr("Configured otherwise than %1, the hand-made family closest to this plan").arg(qs(families->closest));
    }
  }
  if (role == Qt::ToolTipRole && column == RunnerUp && !l.runner_up.empty()) {
    return tr("With %1 here and every other op as chosen, the iteration would take %2 longer")
        .arg(qs(l.runner_up), formatSeconds(l.runner_up_delta));
  }
  const strategy::OpComparison* m = m_measured && l.op >= 0 && static_cast<std::size_t>(l.op) < m_measured->ops.size()
                                        ? &m_measured->ops[static_cast<std::size_t>(l.op)]
                                        : nullptr;
  if (role == Qt::BackgroundRole && column == Error && m != nullptr && std::fabs(m->error()) > 0.25) {
    // Red: the model predicts slower than measured; blue: faster.
    return QBrush(m->error() > 0 ? QColor(0xf6, 0xd0, 0xd0) : QColor(0xd0, 0xdc, 0xf6));
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
  case Stage:
    if (l.stage < 0) {
      return sort ? QVariant(-1) : QVariant(QStringLiteral("-"));
    }
    if (sort) {
      return l.stage * 1024 + std::max(0, l.chunk);
    }
    return l.chunk < 0 ? QVariant(l.stage) : QVariant(tr("%1, chunk %2").arg(l.stage).arg(l.chunk));
  case Compute: return sort ? QVariant(l.compute) : QVariant(formatMs(l.compute));
  case Communication: return sort ? QVariant(l.communication) : QVariant(formatMs(l.communication));
  case Redistribution: return sort ? QVariant(l.redistribution) : QVariant(formatMs(l.redistribution));
  case Memory: return sort ? QVariant(l.memory) : QVariant(formatBytes(l.memory));
  case Share: return sort ? QVariant(l.share) : QVariant(formatPercent(l.share));
  case RunnerUp:
    if (l.runner_up.empty()) {
      return sort ? QVariant(0.0) : QVariant(QStringLiteral("-"));
    }
    return sort ? QVariant(l.runner_up_delta)
                : QVariant(QStringLiteral("%1 (+%2)").arg(qs(l.runner_up), formatMs(l.runner_up_delta)));
  case Measured:
    if (m == nullptr) {
      return sort ? QVariant(0.0) : QVariant(QStringLiteral("-"));
    }
    return sort ? QVariant(m->measured.total()) : QVariant(formatMs(m->measured.total()));
  case Error:
    if (m == nullptr || m->measured.total() <= 0) {
      return sort ? QVariant(0.0) : QVariant(QStringLiteral("-"));
    }
    return sort ? QVariant(m->error()) : QVariant(QString::asprintf("%+.0f%%", 100 * m->error()));
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
    case Stage:
      return tr("The pipeline stage whose devices run the op, from 0 (interleaved: and its model chunk on that "
                "stage); - without a pipeline");
    case Compute: return tr("Forward, backward and recompute time on the op's slowest device");
    case Communication: return tr("Partial-sum reduces and weight-gradient synchronization");
    case Redistribution: return tr("Moving inputs from the producer's layout to this op's layout");
    case Memory: return tr("Parameters, gradients, optimizer state, activations and backward workspace per device");
    case Share: return tr("Share of the iteration's terms added up");
    case RunnerUp: return tr("The auto family: the op's best other configuration and the milliseconds it would add");
    case Measured: return tr("Forward, backward and communication time a run of this plan measured (Run tab)");
    case Error: return tr("(predicted - measured) / measured of the op's total");
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
  case Stage: return tr("Stage");
  case Compute: return tr("Compute ms");
  case Communication: return tr("Comm. ms");
  case Redistribution: return tr("Redist. ms");
  case Memory: return tr("Memory");
  case Share: return tr("Share");
  case RunnerUp: return tr("Runner-up (+ms)");
  case Measured: return tr("Measured ms");
  case Error: return tr("Error");
  case ColumnCount: break;
  }
  return {};
}

} // namespace partita::gui
