#include "layers/layers_panel.h"

#include "common/format.h"
#include "common/split_category.h"
#include "models/layer_table_model.h"

#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QVBoxLayout>

namespace partita::gui {

LayersPanel::LayersPanel(QWidget* parent)
    : QWidget(parent), m_model(new LayerTableModel(this)), m_proxy(new QSortFilterProxyModel(this)),
      m_filter(new QLineEdit(this)), m_view(new QTableView(this)), m_totals(new QLabel(this)) {
  m_proxy->setSourceModel(m_model);
  m_proxy->setSortRole(SortRole);
  m_proxy->setFilterKeyColumn(-1); // op, name, shape and configuration alike
  m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);

  m_filter->setPlaceholderText(tr("Filter layers by op, name, shape or configuration"));
  m_filter->setClearButtonEnabled(true);
  m_filter->setObjectName(QStringLiteral("layerFilter"));

  m_view->setModel(m_proxy);
  m_view->setSortingEnabled(true);
  m_view->sortByColumn(LayerTableModel::Index, Qt::AscendingOrder);
  m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_view->setSelectionMode(QAbstractItemView::SingleSelection);
  m_view->setAlternatingRowColors(true);
  m_view->verticalHeader()->hide();
  m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 6);
  m_view->horizontalHeader()->setStretchLastSection(false);
  m_view->horizontalHeader()->setSectionResizeMode(LayerTableModel::Name, QHeaderView::Stretch);
  m_view->setWordWrap(false);

  m_totals->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_totals->setWordWrap(true);
  m_totals->setObjectName(QStringLiteral("totals"));

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_filter);
  layout->addWidget(m_view, 1);
  layout->addWidget(m_totals);

  connect(m_filter, &QLineEdit::textChanged, m_proxy, &QSortFilterProxyModel::setFilterFixedString);
  connect(m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
    if (current.isValid()) {
      Q_EMIT opSelected(current.data(OpIdRole).toInt());
    }
  });
  setAnalysis(nullptr);
}

void LayersPanel::setAnalysis(const std::shared_ptr<const Analysis>& analysis) {
  m_model->setAnalysis(analysis);
  if (!analysis) {
    m_totals->setText(tr("No model evaluated yet: choose one on the left and press Evaluate."));
    return;
  }
  m_view->resizeColumnsToContents();
  m_view->horizontalHeader()->setSectionResizeMode(LayerTableModel::Name, QHeaderView::Stretch);
  const auto& p = analysis->prediction;
  QStringList terms;
  for (const auto& t : p.iteration) {
    if (t.value > 0) {
      terms << qs(t.name) + QLatin1Char(' ') + formatSeconds(t.value);
    }
  }
  const QString fits = p.fits ? tr("<span style='color:#207020'>fits</span>")
                              : tr("<span style='color:#c02020'><b>does not fit</b></span>");
  m_totals->setText(tr("<b>%1</b> · %2 on %3 of %4 devices · iteration <b>%5</b> (%6) · <b>%7</b> at "
                       "batch %8 · peak memory <b>%9</b> of %10 per device: %11")
                        .arg(qs(analysis->model_label).toHtmlEscaped(), qs(analysis->family_title),
                             QString::number(analysis->strategy.devices),
                             QString::number(analysis->cluster.device_count()), formatSeconds(p.iteration_time),
                             p.simulated ? tr("simulated; its terms add up to %1: %2")
                                               .arg(formatSeconds(p.additive_time), terms.join(QStringLiteral(", ")))
                                         : terms.join(QStringLiteral(", ")),
                             formatRate(p.samples_per_second), QString::number(p.batch), formatBytes(p.peak_memory))
                        .arg(formatBytes(p.memory_capacity), fits) +
                    autoSummary(*analysis) + notes(p));
}

QString LayersPanel::notes(const strategy::Prediction& p) {
  QString text;
  for (const auto& note : p.notes) {
    text += tr("<br><i>Note: %1</i>").arg(qs(note).toHtmlEscaped());
  }
  return text;
}

QString LayersPanel::autoSummary(const Analysis& a) {
  if (!a.search) {
    return {};
  }
  const auto& r = *a.search;
  QString text;
  if (a.families && !a.families->closest.empty()) {
    const auto& f = *a.families;
    const double t = a.prediction.iteration_time; // simulated, as the families' times are
    const double margin = f.best_family_time > 0 ? 1 - t / f.best_family_time : 0;
    text += tr("<br>auto: like <b>%1</b>, except <span style='background:%2'>&nbsp;%3 ops&nbsp;</span>; "
               "%4 than the fastest hand-made family, %5 (%6)")
                .arg(qs(f.closest), differsColor().name())
                .arg(f.different.size())
                .arg(margin >= 0 ? tr("%1% faster").arg(100 * margin, 0, 'f', 1)
                                 : tr("%1% slower").arg(-100 * margin, 0, 'f', 1),
                     qs(f.best_family), formatSeconds(f.best_family_time));
  }
  if (r.lower_bound < r.objective && r.memory_priced) {
    text +=
        tr("; within %1% of the fastest plan that fits %2 (%3)")
            .arg(100 * (r.objective / r.lower_bound - 1), 0, 'f', 2)
            .arg(formatBytes(r.memory_limit), r.exact ? tr("Lagrangian bound") : tr("Lagrangian and bounded search"));
  } else if (r.lower_bound < r.objective) {
    text += tr("; within %1% of the fastest plan (a bounded search: too wide to search exactly)")
                .arg(100 * (r.objective / r.lower_bound - 1), 0, 'f', 2);
  }
  text += tr(" · searched %1 configurations of %2 ops (%3 distinct), %4 of tables")
              .arg(r.stats.configurations, 0, 'g', 4)
              .arg(r.stats.ops)
              .arg(r.stats.distinct_ops)
              .arg(formatBytes(r.stats.table_bytes + r.stats.dp.peak_bytes));
  return text;
}

void LayersPanel::selectOp(graph::OpId id) {
  const int row = m_model->rowOf(id);
  if (row < 0) {
    return;
  }
  const auto index = m_proxy->mapFromSource(m_model->index(row, 0));
  if (index.isValid()) {
    m_view->selectionModel()->setCurrentIndex(index, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    m_view->scrollTo(index, QAbstractItemView::PositionAtCenter);
  }
}

} // namespace partita::gui
