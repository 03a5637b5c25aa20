#include "app/main_window.h"

#include "charts/charts_panel.h"
#include "common/analysis_runner.h"
#include "common/format.h"
#include "compare/compare_panel.h"
#include "compare/side_by_side_panel.h"
#include "compare/sweep_panel.h"
#include "graph/graph_view.h"
#include "layers/inspector_panel.h"
#include "layers/layers_panel.h"
#include "models/layer_table_model.h"
#include "run/run_panel.h"
#include "search/pareto_panel.h"
#include "setup/setup_panel.h"
#include "timeline/timeline_panel.h"

#include "partita/graph/error.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QToolButton>
#include <QVBoxLayout>

namespace partita::gui {

namespace {
std::string fmt_value(const std::string& v) {
  return v.empty() ? std::string("(none)") : v;
}
std::string fmt_value(int v) {
  return std::to_string(v);
}
std::string fmt_value(bool v) {
  return v ? "on" : "off";
}
} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), m_runner(new AnalysisRunner(this)), m_setup(new SetupPanel(this)),
      m_messageBar(new QWidget(this)), m_message(new QLabel(m_messageBar)), m_staleBar(new QLabel(this)),
      m_tabs(new QTabWidget(this)), m_layers(new LayersPanel(this)), m_inspector(new InspectorPanel(this)),
      m_charts(new ChartsPanel(this)), m_timeline(new TimelinePanel(this)), m_pareto(new ParetoPanel(this)),
      m_graph(new GraphView(this)), m_compare(new ComparePanel(this)), m_sweep(new SweepPanel(this)),
      m_sideBySide(new SideBySidePanel(this)), m_run(new RunPanel(this)), m_status(new QLabel(this)),
      m_progress(new QProgressBar(this)), m_cancel(new QPushButton(tr("Cancel"), this)) {
  setWindowTitle(tr("Partita"));
  setAcceptDrops(true);

  // The message bar: the core's error, verbatim, until dismissed or the next success.
  m_messageBar->setObjectName(QStringLiteral("messageBar"));
  m_messageBar->setAutoFillBackground(true);
  m_messageBar->setStyleSheet(QStringLiteral("#messageBar { background: #fbe3e4; border: 1px solid #e0a0a0; }"));
  m_message->setWordWrap(true);
  m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* close = new QToolButton(m_messageBar);
  close->setText(QStringLiteral("✕"));
  close->setAutoRaise(true);
  close->setToolTip(tr("Dismiss"));
  auto* barLayout = new QHBoxLayout(m_messageBar);
  barLayout->setContentsMargins(8, 4, 4, 4);
  barLayout->addWidget(m_message, 1);
  barLayout->addWidget(close, 0, Qt::AlignTop);
  m_messageBar->hide();

  auto* layersSplitter = new QSplitter(Qt::Vertical, this);
  layersSplitter->addWidget(m_layers);
  layersSplitter->addWidget(m_inspector);
  layersSplitter->setStretchFactor(0, 1);
  layersSplitter->setStretchFactor(1, 1);
  m_tabs->addTab(layersSplitter, tr("&Layers"));
  m_tabs->addTab(m_graph, tr("&Graph"));
  m_tabs->addTab(m_charts, tr("C&harts"));
  m_tabs->addTab(m_timeline, tr("&Timeline"));
  m_tabs->addTab(m_pareto, tr("3-&D search"));
  m_tabs->addTab(m_compare, tr("Com&pare"));
  m_tabs->addTab(m_sweep, tr("&Scaling"));
  m_tabs->addTab(m_sideBySide, tr("Side &by side"));
  m_tabs->addTab(m_run, tr("R&un"));

  auto* right = new QWidget(this);
  auto* rightLayout = new QVBoxLayout(right);
  rightLayout->setContentsMargins(0, 0, 0, 0);
  rightLayout->addWidget(m_messageBar);
  // Results of another set-up than the panel's are marked until evaluated again.
  m_staleBar->setObjectName(QStringLiteral("staleBar"));
  m_staleBar->setWordWrap(true);
  m_staleBar->setStyleSheet(
      QStringLiteral("#staleBar { background: #fff4c2; border: 1px solid #e0c860; padding: 4px 8px; }"));
  m_staleBar->hide();
  rightLayout->addWidget(m_staleBar);
  rightLayout->addWidget(m_tabs, 1);

  auto* scroll = new QScrollArea(this);
  scroll->setWidget(m_setup);
  scroll->setWidgetResizable(true);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll->setMinimumWidth(m_setup->sizeHint().width() + 20);
  auto* splitter = new QSplitter(Qt::Horizontal, this);
  splitter->addWidget(scroll);
  splitter->addWidget(right);
  splitter->setStretchFactor(1, 1);
  setCentralWidget(splitter);

  m_progress->setRange(0, 1000);
  m_progress->setMaximumWidth(240);
  m_progress->setTextVisible(false);
  m_cancel->setToolTip(tr("Stop the running job (Esc)"));
  m_cancel->setShortcut(QKeySequence(Qt::Key_Escape));
  statusBar()->addWidget(m_status, 1);
  statusBar()->addPermanentWidget(m_progress);
  statusBar()->addPermanentWidget(m_cancel);
  setBusy(false);

  buildMenus();

  connect(close, &QToolButton::clicked, this, &MainWindow::hideError);
  connect(m_setup, &SetupPanel::evaluateRequested, this, &MainWindow::evaluate);
  connect(m_setup, &SetupPanel::replanRequested, this, &MainWindow::evaluate);
  connect(m_setup, &SetupPanel::inputChanged, this, &MainWindow::updateStale);
  connect(m_setup, &SetupPanel::openFileRequested, this, &MainWindow::openFileDialog);
  connect(m_compare, &ComparePanel::compareRequested, this, &MainWindow::compare);
  connect(m_run, &RunPanel::runsChanged, this, &MainWindow::showMeasured);
  connect(m_sweep, &SweepPanel::sweepRequested, this, &MainWindow::sweep);
  connect(m_sideBySide, &SideBySidePanel::sideBySideRequested, this, &MainWindow::sideBySide);
  connect(m_setup, &SetupPanel::customClusterChanged, m_sideBySide, &SideBySidePanel::offerCustomCluster);
  connect(m_cancel, &QPushButton::clicked, this, &MainWindow::cancel);
  connect(m_pareto, &ParetoPanel::openRequested, this, [this](const AnalysisInput& input) {
    m_setup->setInput(input);
    evaluate();
  });
  connect(m_layers, &LayersPanel::opSelected, m_inspector, &InspectorPanel::showOp);
  // Selection follows between the table and the graph both ways (each ignores its own op).
  connect(m_layers, &LayersPanel::opSelected, m_graph, &GraphView::selectOp);
  connect(m_graph, &GraphView::opSelected, m_layers, &LayersPanel::selectOp);
  connect(m_graph, &GraphView::layoutShown, this, [this] { m_graph->selectOp(m_inspector->op()); });

  connect(m_runner, &AnalysisRunner::started, this, [this](const QString& what) { setBusy(true, what); });
  connect(m_runner, &AnalysisRunner::progressChanged, this,
          [this](double f) { m_progress->setValue(static_cast<int>(f * 1000)); });
  connect(m_runner, &AnalysisRunner::analysisReady, this, &MainWindow::showAnalysis);
  connect(m_runner, &AnalysisRunner::comparisonReady, this, [this](std::shared_ptr<const Comparison> c) {
    hideError();
    m_compare->setComparison(c);
    m_status->setText(tr("Compared %1 strategy families.").arg(c->families.size()));
    Q_EMIT comparisonShown();
  });
  connect(m_runner, &AnalysisRunner::sweepReady, this, [this](std::shared_ptr<const Sweep> s) {
    hideError();
    m_sweep->setSweep(s);
    m_status->setText(tr("Swept %1 families over %2 device counts.").arg(s->families.size()).arg(s->devices.size()));
    Q_EMIT sweepShown();
  });
  connect(m_runner, &AnalysisRunner::sideBySideReady, this, [this](std::shared_ptr<const SideBySide> s) {
    hideError();
    m_sideBySide->setSideBySide(s);
    m_status->setText(tr("A: %1, B: %2.").arg(qs(s->a->family_title), qs(s->b->family_title)));
    Q_EMIT sideBySideShown();
  });
  connect(m_runner, &AnalysisRunner::failed, this, &MainWindow::showError);
  connect(m_runner, &AnalysisRunner::cancelled, this, [this] { m_status->setText(tr("Cancelled.")); });
  connect(m_runner, &AnalysisRunner::finished, this, [this] {
    setBusy(false);
    m_pendingFile.clear();
  });
  resize(1500, 920);
}

MainWindow::~MainWindow() = default;

void MainWindow::evaluate() {
  m_pendingFile.clear();
  m_runner->evaluate(m_setup->input());
}

void MainWindow::openFile(const QString& path) {
  auto input = m_setup->input();
  if (input.model != path.toStdString()) {
    input.model = path.toStdString();
    input.dims.clear(); // another file's dimension and input values would not apply
    input.values.clear();
  }
  m_runner->evaluate(input);
  m_pendingFile = path; // after evaluate(): a superseded job's finished() clears it
}

void MainWindow::compare() {
  m_runner->compare(m_setup->input());
}

void MainWindow::sweep() {
  const auto input = m_setup->input();
  std::vector<int> devices;
  try {
    devices = m_sweep->deviceCounts(load_input_cluster(input).device_count());
  } catch (const Error& e) {
    showError(QString::fromUtf8(e.what()));
    return;
  }
  m_runner->sweep(input, m_sweep->selectedFamilies(), devices);
}

void MainWindow::sideBySide() {
  m_runner->sideBySide(m_setup->input(), m_sideBySide->choice());
}

void MainWindow::cancel() {
  m_runner->cancel();
  m_graph->cancelLayout();
  m_status->setText(tr("Cancelling…"));
}

bool MainWindow::isBusy() const {
  return m_runner->isRunning();
}

QString MainWindow::errorMessage() const {
  return m_messageBar->isHidden() ? QString() : m_message->text();
}

void MainWindow::showAnalysis(std::shared_ptr<const Analysis> analysis) {
  hideError();
  if (!m_pendingFile.isEmpty() && analysis->input.model == m_pendingFile.toStdString()) {
    m_setup->selectModelFile(m_pendingFile);
    addRecentFile(m_pendingFile);
  }
  const bool sameModel = m_analysis && same_model(m_analysis->input, analysis->input);
  const graph::OpId previous = sameModel ? m_inspector->op() : -1;
  m_analysis = std::move(analysis);
  updateStale();
  m_layers->setAnalysis(m_analysis);
  m_inspector->setAnalysis(m_analysis);
  m_charts->setAnalysis(m_analysis);
  m_timeline->setAnalysis(m_analysis);
  m_pareto->setAnalysis(m_analysis);
  m_graph->setAnalysis(m_analysis);
  m_run->setAnalysis(m_analysis);
  showMeasured();
  const auto& a = *m_analysis;
  setWindowTitle(tr("Partita — %1 on %2").arg(qs(a.model_label), qs(a.cluster.name)));
  m_status->setText(
      tr("%1: %2 ops, %3 warnings").arg(qs(a.model_label)).arg(a.layers.size()).arg(a.model.warnings.size()));
  // A restored session's op; else keep the inspected op when the model is the same; else inspect
  // the most expensive layer.
  graph::OpId inspect = -1;
  if (!m_pendingOp.isEmpty()) {
    for (const auto& l : a.layers) {
      if (qs(l.name) == m_pendingOp) {
        inspect = l.op;
      }
    }
    m_pendingOp.clear();
  }
  if (inspect < 0 && previous >= 0 && a.layer_of(previous) != nullptr) {
    inspect = previous;
  } else if (inspect < 0) {
    double worst = -1;
    for (const auto& l : a.layers) {
      if (l.time > worst) {
        worst = l.time;
        inspect = l.op;
      }
    }
  }
  if (inspect >= 0) {
    selectOp(inspect);
  }
  Q_EMIT analysisShown();
}

void MainWindow::selectOp(graph::OpId id) {
  m_layers->selectOp(id);
  m_inspector->showOp(id);
  m_graph->selectOp(id);
}

void MainWindow::showError(const QString& message) {
  m_message->setText(message);
  m_messageBar->show();
  m_status->setText(tr("Failed; the previous result stays on screen."));
  Q_EMIT errorShown(message);
}

QString MainWindow::staleReason() const {
  if (!m_analysis) {
    return {};
  }
  const auto& was = m_analysis->input;
  const auto now = m_setup->input();
  QStringList changed;
  auto check = [&changed](const char* name, const auto& a, const auto& b) {
    if (a != b) {
      changed << QStringLiteral("%1 %2 → %3").arg(QString::fromUtf8(name), qs(fmt_value(a)), qs(fmt_value(b)));
    }
  };
  check("model", was.model, now.model);
  check("dimensions", was.dims, now.dims);
  check("input values", was.values, now.values);
  check("cluster", was.cluster, now.cluster);
  if (was.custom_cluster != now.custom_cluster) {
    changed << tr("the edited cluster");
  }
  check("nodes", was.nodes, now.nodes);
  check("devices", was.devices, now.devices);
  check("family", was.family, now.family);
  check("precision", was.precision, now.precision);
  check("optimizer", was.optimizer, now.optimizer);
  check("ZeRO stage", was.zero_stage, now.zero_stage);
  check("recompute", was.recompute, now.recompute);
  check("sequence parallelism", was.sequence_parallel, now.sequence_parallel);
  check("fp32 gradients", was.fp32_gradients, now.fp32_gradients);
  check("tensor-parallel width", was.tensor_parallel, now.tensor_parallel);
  check("stages", was.stages, now.stages);
  check("micro-batches", was.micro_batches, now.micro_batches);
  check("schedule", was.schedule, now.schedule);
  check("chunks", was.chunks, now.chunks);
  check("cut", was.balance, now.balance);
  check("stage layout", was.stage_layout, now.stage_layout);
  return changed.join(QStringLiteral(", "));
}

void MainWindow::updateStale() {
  const QString reason = staleReason();
  m_staleBar->setVisible(!reason.isEmpty());
  m_staleBar->setText(reason.isEmpty() ? QString()
                                       : tr("These results are of another set-up: %1. Press Enter in any field or "
                                            "Evaluate (Ctrl+Enter) to update them.")
                                             .arg(reason.toHtmlEscaped()));
}

void MainWindow::hideError() {
  m_messageBar->hide();
  m_message->clear();
}

void MainWindow::setBusy(bool busy, const QString& what) {
  m_progress->setVisible(busy);
  m_progress->setValue(0);
  m_cancel->setVisible(busy);
  m_cancel->setEnabled(busy);
  if (busy) {
    m_status->setText(what + QStringLiteral("…"));
  }
}

void MainWindow::showMeasured() {
  std::optional<strategy::RunComparison> measured;
  if (m_analysis) {
    const auto& runs = m_run->runs();
    for (auto it = runs.rbegin(); it != runs.rend() && !measured; ++it) {
      if (!RunPanel::matches(**it, *m_analysis)) {
        continue;
      }
      try {
        measured = strategy::compare(m_analysis->model.graph, m_analysis->prediction, (*it)->result);
      } catch (const Error&) {
        // Another model under the same name (a file changed since): no overlay.
      }
    }
  }
  m_layers->model()->setMeasured(measured);
  m_charts->setMeasured(measured);
}

} // namespace partita::gui
