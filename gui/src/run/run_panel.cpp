#include "run/run_panel.h"

#include "common/format.h"
#include "models/chart_adapter.h"
#include "models/run_ops_model.h"
#include "run/timeline_widget.h"

#include <QComboBox>
#include <QFontDatabase>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QThread>
#include <QVBoxLayout>

#include <algorithm>

namespace partita::gui {

RunPanel::RunPanel(QWidget* parent)
    : QWidget(parent), m_job(new RunJob(this)), m_model(new RunOpsModel(this)),
      m_proxy(new QSortFilterProxyModel(this)), m_run(new QPushButton(tr("&Run on this machine"), this)),
      m_cancel(new QPushButton(tr("Cancel"), this)), m_iterations(new QSpinBox(this)), m_threads(new QSpinBox(this)),
      m_backend(new QComboBox(this)), m_launcher(new QComboBox(this)), m_hostfile(new QLineEdit(this)),
      m_progress(new QProgressBar(this)), m_status(new QLabel(this)), m_summary(new QLabel(this)),
      m_list(new QListWidget(this)), m_compareWith(new QComboBox(this)), m_view(new QTableView(this)),
      m_scatter(new ChartWidget(this)), m_timeline(new TimelineWidget(this)), m_iteration(new QSpinBox(this)),
      m_log(new QPlainTextEdit(this)) {
  m_run->setToolTip(tr("Write the plan on screen and run it for real: mpirun -np <devices> partita-run plan.json"));
  m_iterations->setRange(1, 1000);
  m_iterations->setValue(10);
  m_threads->setRange(1, std::max(1, QThread::idealThreadCount()));
  m_threads->setValue(1);
  m_backend->addItem(tr("CPU (oneDNN + MPI)"), QStringLiteral("cpu"));
  m_backend->addItem(tr("CUDA (cuBLAS/cuDNN + NCCL)"), QStringLiteral("cuda"));
  m_backend->setToolTip(tr("partita-run's backend; CUDA needs one GPU per rank"));
  m_launcher->addItem(tr("mpirun"), QStringLiteral("mpirun"));
  m_launcher->addItem(tr("srun (Slurm)"), QStringLiteral("srun"));
  m_launcher->setToolTip(tr("What starts the ranks: Open MPI's mpirun (this machine, or the hosts of the hostfile), "
                            "or srun -n <devices> inside a Slurm allocation"));
  m_hostfile->setPlaceholderText(tr("hostfile (empty: this machine)"));
  m_hostfile->setClearButtonEnabled(true);
  m_hostfile->setToolTip(tr("An Open MPI hostfile, one host a line (node1 slots=4), passed to mpirun as --hostfile; "
                            "partita-run must be at the same path on every host"));
  connect(m_launcher, &QComboBox::currentIndexChanged, this,
          [this] { m_hostfile->setEnabled(m_launcher->currentData().toString() == QStringLiteral("mpirun")); });
  m_progress->setRange(0, 1);
  m_progress->setValue(0);
  m_progress->setTextVisible(true);
  m_status->setWordWrap(true);
  m_status->setObjectName(QStringLiteral("runStatus"));
  m_status->setTextFormat(Qt::RichText); // every text set below is escaped: '&' in a model spec shows as '&'
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_summary->setWordWrap(true);
  m_summary->setTextFormat(Qt::RichText);
  m_log->setReadOnly(true);
  m_log->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  m_log->setMaximumBlockCount(20000);

  m_proxy->setSourceModel(m_model);
  m_proxy->setSortRole(SortRole);
  m_view->setModel(m_proxy);
  m_view->setSortingEnabled(true);
  m_view->sortByColumn(RunOpsModel::Measured, Qt::DescendingOrder);
  m_view->verticalHeader()->hide();
  m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_view->horizontalHeader()->setStretchLastSection(true);

  m_iteration->setPrefix(tr("iteration "));
  m_iteration->setRange(0, 0);

  auto* controls = new QHBoxLayout;
  controls->addWidget(m_run);
  controls->addWidget(m_cancel);
  controls->addWidget(new QLabel(tr("timed iterations"), this));
  controls->addWidget(m_iterations);
  controls->addWidget(new QLabel(tr("threads per rank"), this));
  controls->addWidget(m_threads);
  controls->addWidget(m_backend);
  controls->addWidget(m_launcher);
  controls->addWidget(m_hostfile);
  controls->addWidget(m_progress, 1);

  auto* left = new QWidget(this);
  auto* leftLayout = new QVBoxLayout(left);
  leftLayout->setContentsMargins(0, 0, 0, 0);
  leftLayout->addWidget(new QLabel(tr("Runs (A)"), left));
  leftLayout->addWidget(m_list, 1);
  leftLayout->addWidget(new QLabel(tr("Side by side with (B)"), left));
  leftLayout->addWidget(m_compareWith);

  auto* timelinePage = new QWidget(this);
  auto* timelineLayout = new QVBoxLayout(timelinePage);
  timelineLayout->addWidget(m_iteration, 0, Qt::AlignLeft);
  timelineLayout->addWidget(m_timeline, 1);
  auto* legend = new QLabel(timelinePage);
  legend->setTextFormat(Qt::RichText);
  QStringList items;
  for (const auto& [kind, name] : {std::pair{TimelineWidget::Kind::Compute, tr("compute")},
                                   std::pair{TimelineWidget::Kind::Communication, tr("communication")},
                                   std::pair{TimelineWidget::Kind::Wait, tr("pipeline wait")},
                                   std::pair{TimelineWidget::Kind::Optimizer, tr("optimizer")}}) {
    items << QStringLiteral("<span style='color:%1'>&#9632;</span> %2").arg(TimelineWidget::colorOf(kind).name(), name);
  }
  legend->setText(items.join(QStringLiteral("&nbsp;&nbsp;")));
  timelineLayout->addWidget(legend);

  m_views = new QTabWidget(this);
  auto* tabs = m_views;
  tabs->addTab(m_view, tr("Per op"));
  tabs->addTab(m_scatter, tr("Predicted vs measured"));
  tabs->addTab(timelinePage, tr("Timeline: measured and predicted"));
  tabs->addTab(m_log, tr("Log"));

  auto* right = new QWidget(this);
  auto* rightLayout = new QVBoxLayout(right);
  rightLayout->setContentsMargins(0, 0, 0, 0);
  rightLayout->addWidget(m_summary);
  rightLayout->addWidget(tabs, 1);

  auto* splitter = new QSplitter(Qt::Horizontal, this);
  splitter->addWidget(left);
  splitter->addWidget(right);
  splitter->setSizes({220, 900});

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(controls);
  layout->addWidget(m_status);
  layout->addWidget(splitter, 1);

  connect(m_run, &QPushButton::clicked, this, &RunPanel::startRun);
  connect(m_cancel, &QPushButton::clicked, this, &RunPanel::cancelRun);
  connect(m_job, &RunJob::output, this, [this](const QString& text) {
    m_log->moveCursor(QTextCursor::End);
    m_log->insertPlainText(text);
  });
  connect(m_job, &RunJob::progress, this, [this](int done, int total) {
    m_progress->setRange(0, total);
    m_progress->setValue(done);
  });
  connect(m_job, &RunJob::finished, this, &RunPanel::onFinished);
  connect(m_job, &RunJob::failed, this, &RunPanel::onFailed);
  connect(m_list, &QListWidget::currentRowChanged, this,
          [this] { showRuns(m_list->currentRow(), m_compareWith->currentIndex() - 1); });
  connect(m_compareWith, &QComboBox::currentIndexChanged, this,
          [this] { showRuns(m_list->currentRow(), m_compareWith->currentIndex() - 1); });
  connect(m_iteration, &QSpinBox::valueChanged, this, &RunPanel::showTimeline);
  showRuns(-1, -1);
  updateButtons();
}

RunSettings RunPanel::settings() const {
  RunSettings s;
  s.iterations = m_iterations->value();
  s.threads = m_threads->value();
  s.backend = m_backend->currentData().toString();
  s.launcher = m_launcher->currentData().toString();
  if (m_hostfile->isEnabled()) {
    s.hostfile = m_hostfile->text().trimmed();
  }
  return s;
}

bool RunPanel::matches(const RunRecord& run, const Analysis& analysis) {
  const auto& r = run.result;
  return r.model() == analysis.input.model && r.family() == analysis.strategy.family &&
         r.ranks() == analysis.prediction.devices_used;
}

void RunPanel::setAnalysis(std::shared_ptr<const Analysis> analysis) {
  m_analysis = std::move(analysis);
  bool changed = false;
  for (auto& run : m_runs) {
    if (m_analysis && !run->comparison && matches(*run, *m_analysis)) {
      try {
        auto compared = std::make_shared<RunRecord>(*run);
        compared->comparison = strategy::compare(m_analysis->model.graph, m_analysis->prediction, run->result);
        run = std::move(compared);
        changed = true;
      } catch (const std::exception&) {
        // Ops that differ (the file changed since the run): shown without a prediction.
      }
    }
  }
  if (changed) {
    showRuns(m_list->currentRow(), m_compareWith->currentIndex() - 1);
  }
  showTimeline();
  updateButtons();
  if (!m_job->isRunning()) {
    m_status->setText(m_analysis
                          ? tr("Runs the %1 plan of %2 on %3 ranks of this machine (mpirun + partita-run).")
                                .arg(qs(m_analysis->strategy.family), qs(m_analysis->model_label).toHtmlEscaped(),
                                     QString::number(m_analysis->prediction.devices_used))
                          : tr("Evaluate a strategy first: a run executes the plan on screen."));
  }
}

void RunPanel::updateButtons() {
  const bool running = m_job->isRunning();
  m_run->setEnabled(!running && m_analysis != nullptr);
  m_cancel->setEnabled(running);
}

bool RunPanel::startRun() {
  m_log->clear();
  m_progress->setRange(0, 0); // busy until the first timed iteration
  const bool ok = m_job->start(m_analysis, settings());
  if (ok) {
    m_status->setText(tr("Running: %1").arg(m_job->commandLine().toHtmlEscaped()));
  }
  updateButtons();
  return ok;
}

void RunPanel::cancelRun() {
  m_job->cancel();
}

void RunPanel::onFinished(std::shared_ptr<const RunRecord> run) {
  m_progress->setRange(0, 1);
  m_progress->setValue(1);
  m_status->setText(tr("Finished: %1").arg(m_job->commandLine().toHtmlEscaped()));
  addRun(std::move(run));
  updateButtons();
}

void RunPanel::onFailed(const QString& message) {
  m_progress->setRange(0, 1);
  m_progress->setValue(0);
  m_status->setText(QStringLiteral("<b>%1</b>").arg(message.toHtmlEscaped()));
  updateButtons();
}

void RunPanel::addRun(std::shared_ptr<const RunRecord> run) {
  m_runs.push_back(run);
  m_list->addItem(run->label);
  m_compareWith->clear();
  m_compareWith->addItem(tr("(prediction only)"));
  for (const auto& r : m_runs) {
    m_compareWith->addItem(r->label);
  }
  m_list->setCurrentRow(static_cast<int>(m_runs.size()) - 1);
  Q_EMIT runFinished(run);
  Q_EMIT runsChanged();
}

void RunPanel::clearRuns() {
  m_runs.clear();
  m_list->clear();
  m_compareWith->clear();
  showRuns(-1, -1);
  Q_EMIT runsChanged();
}

QString RunPanel::summaryText() const {
  return m_summary->text();
}

QString RunPanel::logText() const {
  return m_log->toPlainText();
}

void RunPanel::showRuns(int a, int b) {
  const auto at = [&](int i) {
    return i >= 0 && i < static_cast<int>(m_runs.size()) ? m_runs[static_cast<std::size_t>(i)] : nullptr;
  };
  const auto runA = at(a);
  const auto runB = at(b);
  m_model->setRuns(runA, runB == runA ? nullptr : runB);
  m_view->resizeColumnsToContents();
  if (!runA) {
    m_summary->setText(tr("No run yet. <b>Run on this machine</b> executes the plan on screen with real kernels and "
                          "collectives and lays what it measured against the prediction."));
    m_scatter->clear(tr("Predicted vs measured per op"));
    m_iteration->setRange(0, 0);
    m_timeline->setRun(nullptr, 0);
    return;
  }
  const auto& r = runA->result;
  QString text = tr("<b>%1</b>: %2 (%3 strategy), %4 ranks, backend %5, %6 timed iterations.<br>")
                     .arg(runA->label.toHtmlEscaped(), qs(r.model()).toHtmlEscaped(), qs(r.family()),
                          QString::number(r.ranks()), qs(r.backend()), QString::number(r.timed_iterations()));
  QList<ScatterPoint> points;
  if (runA->comparison) {
    const auto& c = *runA->comparison;
    text += tr("Iteration: predicted %1 ms, measured %2 ms (min %3, max %4): error <b>%5</b>. "
               "Per-op mean absolute error <b>%6</b> over %7 ops.")
                .arg(formatMs(c.predicted_iteration), formatMs(c.measured_iteration), formatMs(c.measured_min),
                     formatMs(c.measured_max), QString::asprintf("%+.0f%%", 100 * c.iteration_error()),
                     formatPercent(c.per_op_mape), QString::number(c.ops_counted));
    for (std::size_t i = 0; i < c.ops.size(); ++i) {
      const auto& op = c.ops[i];
      points << ScatterPoint{op.predicted.total() * 1e3, op.measured.total() * 1e3,
                             tr("%1 (%2): predicted %3 ms, measured %4 ms")
                                 .arg(qs(r.ops(static_cast<int>(i)).name()), qs(r.ops(static_cast<int>(i)).type()),
                                      formatMs(op.predicted.total()), formatMs(op.measured.total()))};
    }
  } else {
    text += tr("Iteration: measured %1 ms (no prediction of this model on screen to compare with).")
                .arg(formatMs(strategy::measured_iteration_seconds(r)));
  }
  double tensors = 0;
  for (const auto& m : r.memory()) {
    tensors = std::max(tensors, m.tensor_bytes());
  }
  if (tensors > 0) {
    text += tr("<br>Memory held by the fullest rank: %1.").arg(formatBytes(tensors));
  }
  if (m_model->runB() != nullptr) {
    const auto& rb = m_model->runB()->result;
    const double ta = strategy::measured_iteration_seconds(r), tb = strategy::measured_iteration_seconds(rb);
    text += tr("<br>Side by side with <b>%1</b>: %2 ms, %3 against A.")
                .arg(m_model->runB()->label.toHtmlEscaped(), formatMs(tb),
                     ta > 0 ? QString::asprintf("%+.0f%%", 100 * (tb - ta) / ta) : QStringLiteral("-"));
  }
  m_summary->setText(text);
  m_scatter->showScatter(tr("Predicted vs measured per op (ms per iteration, log-log)"), points, tr("predicted ms"),
                         tr("measured ms"), tr("predicted = measured"));
  m_iteration->setRange(0, std::max(0, r.timed_iterations() - 1));
  showTimeline();
}

void RunPanel::showTimeline() {
  const auto* a = m_model->runA();
  m_timeline->setRun(a != nullptr ? &a->result : nullptr, m_iteration->value());
  // The predicted iteration under the measured one, when the run is of the plan on screen (or
  // alone, before any run, so that the tab shows what a run will be laid against).
  const bool predicted = m_analysis && (a == nullptr || matches(*a, *m_analysis));
  m_timeline->setPredicted(predicted ? m_analysis : nullptr);
}

} // namespace partita::gui
