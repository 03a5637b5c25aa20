#include "models/run_ops_model.h"

#include "common/format.h"

#include <QBrush>
#include <QColor>

#include <cmath>

namespace partita::gui {

bool sameOps(const RunRecord& a, const RunRecord& b) {
  if (a.result.ops_size() != b.result.ops_size()) {
    return false;
  }
  for (int i = 0; i < a.result.ops_size(); ++i) {
    if (a.result.ops(i).name() != b.result.ops(i).name()) {
      return false;
    }
  }
  return true;
}

RunOpsModel::RunOpsModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunOpsModel::setRuns(std::shared_ptr<const RunRecord> a, std::shared_ptr<const RunRecord> b) {
  beginResetModel();
  m_a = std::move(a);
  m_b = m_a && b && sameOps(*m_a, *b) ? std::move(b) : nullptr;
  endResetModel();
}

int RunOpsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !m_a ? 0 : m_a->result.ops_size();
}

int RunOpsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

double RunOpsModel::measuredSeconds(const RunRecord& r, int row) {
  if (r.comparison && row < static_cast<int>(r.comparison->ops.size())) {
    return r.comparison->ops[static_cast<std::size_t>(row)].measured.total();
  }
  const auto& m = r.result.ops(row);
  return m.forward_seconds() + m.backward_seconds() + m.forward_communication_seconds() +
         m.backward_communication_seconds() + m.gradient_sync_seconds() + m.pipeline_send_seconds();
}

QVariant RunOpsModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) {
    return {};
  }
  const int row = index.row();
  const auto& op = m_a->result.ops(row);
  const auto column = static_cast<Column>(index.column());
  const auto* c = m_a->comparison ? &m_a->comparison->ops[static_cast<std::size_t>(row)] : nullptr;
  const double measured = measuredSeconds(*m_a, row);
  const double b = m_b ? measuredSeconds(*m_b, row) : 0.0;
  const double error = c != nullptr ? c->error() : 0.0;
  const double change = m_b && measured > 0 ? (b - measured) / measured : 0.0;
  if (role == Qt::TextAlignmentRole) {
    return column >= Predicted ? QVariant(Qt::AlignRight | Qt::AlignVCenter)
                               : QVariant(Qt::AlignLeft | Qt::AlignVCenter);
  }
  if (role == Qt::BackgroundRole) {
    // Errors and changes beyond 25% stand out: red when the model (or run B) is slower, blue faster.
    const double v = column == Error ? error : column == ChangeB ? change : 0.0;
    if (std::fabs(v) > 0.25 && ((column == Error && c != nullptr) || (column == ChangeB && m_b))) {
      return QBrush(v > 0 ? QColor(0xf6, 0xd0, 0xd0) : QColor(0xd0, 0xdc, 0xf6));
    }
    return {};
  }
  if (role == Qt::ToolTipRole && op.stand_in()) {
    return tr("partita-run had no kernel for this op and ran a memory-bound stand-in of its byte count");
  }
  if (role != Qt::DisplayRole && role != SortRole) {
    return {};
  }
  const bool sort = role == SortRole;
  const auto dash = [&] { return sort ? QVariant(0.0) : QVariant(QStringLiteral("-")); };
  switch (column) {
  case Index: return sort ? QVariant(row) : QVariant(QString::number(row));
  case Op: return qs(op.type());
  case Name: return op.stand_in() && !sort ? qs(op.name()) + tr(" (stand-in)") : qs(op.name());
  case Predicted:
    if (c == nullptr) {
      return dash();
    }
    return sort ? QVariant(c->predicted.total()) : QVariant(formatMs(c->predicted.total()));
  case Measured: return sort ? QVariant(measured) : QVariant(formatMs(measured));
  case Error:
    if (c == nullptr || measured <= 0) {
      return dash();
    }
    return sort ? QVariant(error) : QVariant(QString::asprintf("%+.0f%%", 100 * error));
  case MeasuredB:
    if (!m_b) {
      return dash();
    }
    return sort ? QVariant(b) : QVariant(formatMs(b));
  case ChangeB:
    if (!m_b || measured <= 0) {
      return dash();
    }
    return sort ? QVariant(change) : QVariant(QString::asprintf("%+.0f%%", 100 * change));
  case ColumnCount: break;
  }
  return {};
}

QVariant RunOpsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  switch (static_cast<Column>(section)) {
  case Index: return tr("#");
  case Op: return tr("Op");
  case Name: return tr("Name");
  case Predicted: return tr("Predicted ms");
  case Measured: return tr("Measured ms");
  case Error: return tr("Error");
  case MeasuredB: return tr("Run B ms");
  case ChangeB: return tr("B vs A");
  case ColumnCount: break;
  }
  return {};
}

} // namespace partita::gui
