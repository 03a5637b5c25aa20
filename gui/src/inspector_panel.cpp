#include "inspector_panel.h"

#include "candidate_model.h"
#include "format.h"

#include "partita/graph/error.h"

#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace partita::gui {

namespace {

QString termRows(const std::vector<cost::Term>& terms, bool time) {
  QString html;
  for (const auto& t : terms) {
    html += QStringLiteral("<tr><td><b>") + qs(t.name).toHtmlEscaped() + QStringLiteral("</b></td><td align=right>") +
            (time ? formatSeconds(t.value) : formatBytes(t.value)) + QStringLiteral("</td><td>") +
            qs(t.formula).toHtmlEscaped() + QStringLiteral("</td></tr>");
  }
  return html;
}

QString costTable(const cost::OpCost& c) {
  return QStringLiteral("<table cellspacing=0 cellpadding=3>") + termRows(c.time, true) + termRows(c.memory, false) +
         QStringLiteral("</table>");
}

} // namespace

InspectorPanel::InspectorPanel(QWidget* parent)
    : QWidget(parent), m_header(new QLabel(this)), m_model(new CandidateModel(this)),
      m_proxy(new QSortFilterProxyModel(this)), m_view(new QTableView(this)), m_formulas(new QTextBrowser(this)) {
  m_proxy->setSourceModel(m_model);
  m_proxy->setSortRole(SortRole);
  m_view->setModel(m_proxy);
  m_view->setSortingEnabled(true);
  m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_view->setSelectionMode(QAbstractItemView::SingleSelection);
  m_view->verticalHeader()->hide();
  m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 6);
  m_view->setAlternatingRowColors(true);
  m_view->setWordWrap(false);
  m_header->setWordWrap(true);
  m_header->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_formulas->setOpenLinks(false);

  auto* splitter = new QSplitter(Qt::Horizontal, this);
  splitter->addWidget(m_view);
  splitter->addWidget(m_formulas);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 2);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_header);
  layout->addWidget(splitter, 1);

  connect(m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
    showFormulas(current.isValid() ? m_proxy->mapToSource(current).row() : -1);
  });
  setAnalysis(nullptr);
}

void InspectorPanel::setAnalysis(std::shared_ptr<const Analysis> analysis) {
  m_analysis = std::move(analysis);
  m_op = -1;
  m_model->setCandidates({});
  m_header->setText(m_analysis ? tr("Select a layer to see every configuration it could take.")
                               : tr("Evaluate a model, then select a layer."));
  m_formulas->clear();
}

void InspectorPanel::showOp(graph::OpId id) {
  if (!m_analysis || id < 0 || static_cast<std::size_t>(id) >= m_analysis->strategy.ops.size()) {
    return;
  }
  m_op = id;
  const auto& a = *m_analysis;
  const auto& op = a.model.graph.op(id);
  std::vector<Candidate> candidates;
  try {
    // One op's candidates: tens to a few hundred op_cost calls, milliseconds.
    candidates = op_candidates(a, id);
  } catch (const Error& e) {
    m_model->setCandidates({});
    m_header->setText(tr("%1 (%2): %3").arg(qs(op.name).toHtmlEscaped(), qs(op.type), QString::fromUtf8(e.what())));
    m_formulas->clear();
    return;
  }
  m_model->setCandidates(std::move(candidates));
  m_view->sortByColumn(CandidateModel::TotalColumn, Qt::AscendingOrder);
  m_view->resizeColumnsToContents();
  const auto* layer = a.layer_of(id);
  const int fastest = m_proxy->rowCount() > 0 ? m_proxy->mapToSource(m_proxy->index(0, 0)).row() : -1;
  const int chosen = m_model->chosenRow();
  QString verdict;
  if (chosen >= 0 && fastest >= 0 && chosen != fastest) {
    verdict = tr(" Not the fastest alone: the strategy weighs redistribution to its neighbours and the family's "
                 "rules too.");
  }
  m_header->setText(tr("<b>%1</b> (%2) · %3 candidate configurations on %4 devices · chosen: <b>%5</b>, %6 in the "
                       "iteration.%7")
                        .arg(qs(op.name).toHtmlEscaped(), qs(op.type), QString::number(m_model->rowCount()),
                             QString::number(a.strategy.devices),
                             layer != nullptr ? qs(layer->configuration) : QStringLiteral("?"),
                             layer != nullptr ? formatSeconds(layer->time) : QStringLiteral("?"), verdict));
  if (chosen >= 0) {
    const auto index = m_proxy->mapFromSource(m_model->index(chosen, 0));
    m_view->selectionModel()->setCurrentIndex(index, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    m_view->scrollTo(index, QAbstractItemView::PositionAtCenter);
  }
  showFormulas(chosen);
}

void InspectorPanel::showFormulas(int candidateRow) {
  if (!m_analysis || m_op < 0) {
    m_formulas->clear();
    return;
  }
  const auto& pred = m_analysis->prediction.ops[static_cast<std::size_t>(m_op)];
  QString html = tr("<h3>Chosen configuration, as evaluated in the strategy</h3>") + costTable(pred.cost);
  const auto& candidates = m_model->candidates();
  if (candidateRow >= 0 && static_cast<std::size_t>(candidateRow) < candidates.size() &&
      !candidates[static_cast<std::size_t>(candidateRow)].chosen) {
    const auto& c = candidates[static_cast<std::size_t>(candidateRow)];
    html += tr("<h3>Candidate %1</h3>").arg(qs(c.text).toHtmlEscaped()) + costTable(c.cost);
  }
  html += tr("<p><i>Candidates are costed alone; the redistribution of their inputs depends on the neighbours' "
             "layouts and appears only in the chosen configuration's terms.</i></p>");
  m_formulas->setHtml(html);
}

} // namespace partita::gui
