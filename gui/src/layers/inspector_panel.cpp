#include "layers/inspector_panel.h"

#include "common/format.h"
#include "models/candidate_model.h"

#include "partita/graph/error.h"

#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QTextBrowser>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

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

// The auto family's runner-up of one op beside its chosen configuration, term by term: the op's
// own time terms and the redistribution of its inputs; what remains of the difference is the
// redistribution its consumers would need.
QString runnerUpTable(const search::AutoOpReport& r, const QString& chosen, const QString& runnerUp) {
  std::vector<std::string> names;
  auto sum = [&names](const std::vector<cost::Term>& terms, std::vector<double>& into) {
    for (const auto& t : terms) {
      auto it = std::find(names.begin(), names.end(), t.name);
      if (it == names.end()) {
        names.push_back(t.name);
        into.resize(names.size());
        it = names.end() - 1;
      }
      into.resize(names.size());
      into[static_cast<std::size_t>(it - names.begin())] += t.value;
    }
  };
  std::vector<double> a, b;
  sum(r.chosen_terms, a);
  sum(r.runner_up_terms, b);
  a.resize(names.size());
  b.resize(names.size());
  auto cell = [](double v) {
    return QStringLiteral("<td align=right>%1</td>").arg(v == 0 ? QStringLiteral("0") : formatSeconds(v));
  };
  auto diff = [](double v) {
    return QStringLiteral("<td align=right>%1</td>")
        .arg(v == 0 ? QStringLiteral("0") : (v > 0 ? QStringLiteral("+") : QString()) + formatSeconds(v));
  };
  QString html = QObject::tr("<table cellspacing=0 cellpadding=3><tr><th align=left>term</th><th>%1</th><th>%2</th>"
                             "<th>difference</th></tr>")
                     .arg(chosen.toHtmlEscaped(), runnerUp.toHtmlEscaped());
  double own = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (a[i] == 0 && b[i] == 0) {
      continue;
    }
    own += b[i] - a[i];
    html += QStringLiteral("<tr><td>%1</td>").arg(qs(names[i]).toHtmlEscaped()) + cell(a[i]) + cell(b[i]) +
            diff(b[i] - a[i]) + QStringLiteral("</tr>");
  }
  const double rest = r.runner_up_delta - own;
  if (std::abs(rest) > 1e-12 * std::max(1.0, std::abs(r.runner_up_delta))) {
    html +=
        QObject::tr("<tr><td>consumers' redistribution</td><td></td><td></td>") + diff(rest) + QStringLiteral("</tr>");
  }
  html += QObject::tr("<tr><td><b>iteration</b></td><td></td><td></td>") + diff(r.runner_up_delta) +
          QStringLiteral("</tr></table>");
  return html;
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
  if (layer != nullptr && !layer->runner_up.empty()) {
    verdict = tr(" Runner-up in the search: <b>%1</b>, %2 slower.")
                  .arg(qs(layer->runner_up).toHtmlEscaped(), formatSeconds(layer->runner_up_delta));
  } else if (chosen >= 0 && fastest >= 0 && chosen != fastest) {
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
  QString html;
  const auto* layer = m_analysis->layer_of(m_op);
  const auto& search = m_analysis->search;
  if (search && layer != nullptr && static_cast<std::size_t>(m_op) < search->ops.size() &&
      search->ops[static_cast<std::size_t>(m_op)].has_runner_up) {
    html += tr("<h3>The search's runner-up, every other op as chosen</h3>") +
            runnerUpTable(search->ops[static_cast<std::size_t>(m_op)], qs(layer->configuration), qs(layer->runner_up));
  }
  html += tr("<h3>Chosen configuration, as evaluated in the strategy</h3>") + costTable(pred.cost);
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
