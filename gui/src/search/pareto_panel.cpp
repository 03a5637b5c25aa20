#include "search/pareto_panel.h"

#include "common/format.h"
#include "models/chart_adapter.h"

#include "partita/cost/setup.h"

#include <QFont>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <optional>

namespace partita::gui {

namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;

// The inputs that decide a 3d search's front besides the family's own fields.
bool same_space(const AnalysisInput& a, const AnalysisInput& b) {
  return same_model(a, b) && a.cluster == b.cluster && a.custom_cluster == b.custom_cluster && a.nodes == b.nodes &&
         a.devices == b.devices && a.precision == b.precision && a.optimizer == b.optimizer &&
         a.fp32_gradients == b.fp32_gradients;
}

// How a point's iteration was predicted: simulated (with its terms added up beside it), or the
// terms added up alone where the search's simulation budget or the plan's size left it so.
QString howPredicted(const search::three_d::Point& p) {
  return p.simulated ? ParetoPanel::tr("simulated; terms added up %1").arg(formatSeconds(p.additive_time))
                     : ParetoPanel::tr("terms added up");
}

} // namespace

AnalysisInput point_input(const AnalysisInput& base, const search::three_d::Candidate& c) {
  AnalysisInput in = base;
  in.family = "megatron";
  in.tensor_parallel = c.tensor;
  in.stages = c.pipeline;
  in.micro_batches = c.micro_batches;
  const bool interleaved = c.schedule == strategy::Schedule::interleaved;
  in.schedule = interleaved ? "interleaved" : "1f1b";
  if (interleaved) {
    in.chunks = c.chunks;
  }
  in.zero_stage = c.zero_stage;
  in.recompute = std::string(cost::recompute_name(c.recompute));
  in.sequence_parallel = c.sequence_parallel;
  // Megatron-LM's cut, or the layers shared out by the stages' speed (mixed nodes).
  in.balance = c.speed_cut ? "speed" : "layers";
  in.stage_layout.clear();
  if (c.per_layer) { // the pipeline family, each stage laid out by the per-layer search
    in.family = "pipeline";
    in.tensor_parallel = 0;
    in.balance = c.layers_cut ? "layers" : "time";
    in.stage_layout = "searched";
  }
  return in;
}

ParetoPanel::ParetoPanel(QWidget* parent)
    : QWidget(parent), m_summary(new QLabel(this)), m_chart(new ChartWidget(this)), m_table(new QTableWidget(this)),
      m_open(new QPushButton(tr("Open the selected plan"), this)) {
  m_summary->setWordWrap(true);
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_summary->setObjectName(QStringLiteral("paretoSummary"));
  m_table->setObjectName(QStringLiteral("paretoTable"));
  m_table->setColumnCount(5);
  m_table->setHorizontalHeaderLabels(
      {tr("#"), tr("Configuration"), tr("Iteration"), tr("Memory per device"), tr("Options (partita plan)")});
  m_table->horizontalHeaderItem(4)->setToolTip(tr("The command-line options that give this plan"));
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->verticalHeader()->hide();
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_open->setObjectName(QStringLiteral("openParetoPoint"));
  m_open->setToolTip(tr("Evaluate this point's plan (the megatron family with its options) in every tab"));

  auto* layout = new QVBoxLayout(this);
  layout->addWidget(m_summary);
  auto* splitter = new QSplitter(Qt::Vertical, this);
  splitter->addWidget(m_chart);
  auto* lower = new QWidget(this);
  auto* lowerLayout = new QVBoxLayout(lower);
  lowerLayout->setContentsMargins(0, 0, 0, 0);
  lowerLayout->addWidget(m_table, 1);
  auto* buttons = new QHBoxLayout;
  buttons->addStretch(1);
  buttons->addWidget(m_open);
  lowerLayout->addLayout(buttons);
  splitter->addWidget(lower);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 2);
  splitter->setSizes({600, 260}); // the chart first
  layout->addWidget(splitter, 1);

  connect(m_chart, &ChartWidget::pointClicked, this, &ParetoPanel::openPoint);
  connect(m_table, &QTableWidget::cellDoubleClicked, this, [this](int row, int) { openPoint(row); });
  connect(m_open, &QPushButton::clicked, this, [this] { openPoint(m_table->currentRow()); });
  connect(m_table, &QTableWidget::currentCellChanged, this,
          [this](int row) { m_open->setEnabled(row >= 0 && row < pointCount()); });
  show();
}

int ParetoPanel::pointCount() const {
  return m_search ? static_cast<int>(m_search->three_d->pareto.size()) : 0;
}

QString ParetoPanel::summary() const {
  return m_summary->text();
}

void ParetoPanel::setAnalysis(const std::shared_ptr<const Analysis>& analysis) {
  if (analysis && analysis->three_d) {
    m_search = analysis;
  } else if (!analysis || !m_search || !same_space(analysis->input, m_search->input)) {
    m_search.reset();
  }
  m_shown = -1;
  if (m_search && analysis) {
    const auto& front = m_search->three_d->pareto;
    for (std::size_t i = 0; i < front.size(); ++i) {
      if (analysis == m_search ? front[i].candidate.text() == m_search->three_d->best.candidate.text()
                               : analysis->input == point_input(m_search->input, front[i].candidate)) {
        m_shown = static_cast<int>(i);
        break;
      }
    }
  }
  show();
}

void ParetoPanel::openPoint(int index) {
  if (index < 0 || index >= pointCount()) {
    return;
  }
  Q_EMIT openRequested(
      point_input(m_search->input, m_search->three_d->pareto[static_cast<std::size_t>(index)].candidate));
}

void ParetoPanel::show() {
  m_table->setRowCount(0);
  if (!m_search) {
    m_summary->setText(tr("Choose the family 3d and evaluate: the 3-D search (pipeline stages x tensor x data "
                          "parallel, micro-batch, schedule, ZeRO, recomputation, sequence parallelism) shows its "
                          "choice and the Pareto front of iteration time against memory per device here."));
    m_chart->clear(tr("Pareto front: evaluate the 3d family"));
    m_open->setEnabled(false);
    return;
  }
  const auto& r = *m_search->three_d;
  m_summary->setText(tr("<b>%1</b> (%2 devices, %3)<br>%4")
                         .arg(qs(m_search->model_label).toHtmlEscaped())
                         .arg(m_search->input.devices)
                         .arg(qs(m_search->cluster.name).toHtmlEscaped())
                         .arg(qs(m_search->strategy.explanation).toHtmlEscaped()));
  QList<ScatterPoint> points;
  int best = -1;
  for (std::size_t i = 0; i < r.pareto.size(); ++i) {
    const auto& p = r.pareto[i];
    points << ScatterPoint{
        p.peak_memory / gib, p.iteration_time,
        tr("%1\n%2 an iteration (%3), %4 per device")
            .arg(qs(p.candidate.text()), formatSeconds(p.iteration_time), howPredicted(p), formatBytes(p.peak_memory))};
    if (p.candidate.text() == r.best.candidate.text()) {
      best = static_cast<int>(i);
    }
  }
  const int marked = m_shown >= 0 ? m_shown : best;
  // The limit line would squeeze points far below it to the left edge: then the title alone says it.
  double most = 0;
  for (const auto& p : r.pareto) {
    most = std::max(most, p.peak_memory);
  }
  std::optional<ChartLimit> limit;
  if (most >= 0.2 * r.memory_limit) {
    limit = ChartLimit{tr("memory limit"), r.memory_limit / gib};
  }
  m_chart->showFront(tr("Pareto front: %1 plans that fit in %2, none beaten in both time and memory")
                         .arg(r.pareto.size())
                         .arg(formatBytes(r.memory_limit)),
                     points, marked, m_shown >= 0 && m_shown != best ? tr("on screen") : tr("chosen (fastest)"),
                     tr("memory per device (GiB)"), tr("iteration, simulated or terms added up (s)"), limit);
  m_table->setRowCount(static_cast<int>(r.pareto.size()));
  for (std::size_t i = 0; i < r.pareto.size(); ++i) {
    const auto& p = r.pareto[i];
    const int row = static_cast<int>(i);
    const QStringList cells = {QString::number(row + 1), qs(p.candidate.text()),
                               p.simulated ? formatSeconds(p.iteration_time)
                                           : tr("%1 (terms added up)").arg(formatSeconds(p.iteration_time)),
                               formatBytes(p.peak_memory), qs(p.candidate.options())};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (row == best || row == m_shown) {
        QFont f = item->font();
        f.setBold(true);
        item->setFont(f);
      }
      if (c == 1) {
        item->setToolTip(row == best ? tr("The fastest plan that fits: the 3d family's choice") : QString());
      }
      m_table->setItem(row, c, item);
    }
  }
  m_table->resizeColumnsToContents();
  m_table->horizontalHeader()->setStretchLastSection(true);
  if (marked >= 0) {
    m_table->selectRow(marked);
  }
  m_open->setEnabled(m_table->currentRow() >= 0);
}

} // namespace partita::gui
