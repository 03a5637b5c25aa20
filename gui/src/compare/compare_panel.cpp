#include "compare/compare_panel.h"

#include "common/format.h"
#include "models/chart_adapter.h"
#include "models/compare_model.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

namespace partita::gui {

ComparePanel::ComparePanel(QWidget* parent)
    : QWidget(parent), m_model(new CompareModel(this)), m_proxy(new QSortFilterProxyModel(this)),
      m_compare(new QPushButton(tr("Compare all families"), this)), m_header(new QLabel(this)),
      m_view(new QTableView(this)), m_chart(new ChartWidget(this)) {
  m_proxy->setSourceModel(m_model);
  m_proxy->setSortRole(SortRole);
  m_view->setModel(m_proxy);
  m_view->setSortingEnabled(true);
  m_view->sortByColumn(-1, Qt::AscendingOrder); // the core's family order until a header is clicked
  m_view->verticalHeader()->hide();
  m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
  // The strategy's description takes the spare width, not the last column.
  m_view->horizontalHeader()->setStretchLastSection(false);
  m_view->horizontalHeader()->setSectionResizeMode(CompareModel::Title, QHeaderView::Stretch);
  m_compare->setToolTip(tr("Run every strategy family on the model, cluster and devices chosen on the left"));
  m_header->setWordWrap(true);

  auto* top = new QHBoxLayout;
  top->addWidget(m_compare);
  top->addWidget(m_header, 1);
  auto* splitter = new QSplitter(Qt::Vertical, this);
  splitter->addWidget(m_view);
  splitter->addWidget(m_chart);
  splitter->setSizes({320, 480});
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(top);
  layout->addWidget(splitter, 1);

  connect(m_compare, &QPushButton::clicked, this, &ComparePanel::compareRequested);
  setComparison(nullptr);
}

void ComparePanel::setComparison(const std::shared_ptr<const Comparison>& comparison) {
  m_model->setComparison(comparison);
  if (!comparison) {
    m_header->setText(tr("Runs every strategy family on the current model and cluster."));
    m_chart->clear(tr("Throughput per family"));
    return;
  }
  const auto& in = comparison->input;
  m_header->setText(tr("<b>%1</b> on %2 (%3 devices), %4, %5")
                        .arg(qs(comparison->model_label).toHtmlEscaped(), qs(in.cluster), QString::number(in.devices),
                             qs(in.precision), qs(in.optimizer)));
  m_view->resizeColumnsToContents();
  QStringList families;
  ChartSeries fit{tr("fits"), {}, QColor(0x4c, 0x72, 0xb0)};
  ChartSeries over{tr("does not fit"), {}, QColor(0xc0, 0x20, 0x20)};
  for (const auto& f : comparison->families) {
    families << qs(f.family);
    const bool ok = f.error.empty();
    const double v = ok ? f.prediction.samples_per_second : 0.0;
    fit.values << (ok && f.prediction.fits ? v : 0.0);
    over.values << (ok && !f.prediction.fits ? v : 0.0);
  }
  m_chart->showBars(tr("Throughput per family (samples/s, higher is better)"), families, {fit, over}, tr("samples/s"),
                    true, ChartWidget::Orientation::Vertical);
}

} // namespace partita::gui
