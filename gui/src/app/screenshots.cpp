#include "app/screenshots.h"

#include "app/help.h"
#include "app/main_window.h"
#include "charts/charts_panel.h"
#include "common/analysis_runner.h"
#include "compare/compare_panel.h"
#include "compare/side_by_side_panel.h"
#include "compare/sweep_panel.h"
#include "graph/graph_view.h"
#include "layers/inspector_panel.h"
#include "run/run_panel.h"
#include "search/pareto_panel.h"
#include "setup/cluster_editor.h"
#include "setup/setup_panel.h"
#include "timeline/sim_timeline_layout.h"
#include "timeline/sim_timeline_view.h"
#include "timeline/timeline_panel.h"

#include "partita/proto/partita.pb.h"

#include <QCheckBox>
#include <QDialog>
#include <QDir>
#include <QEventLoop>
#include <QLineEdit>
#include <QPixmap>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QTextStream>
#include <QTimer>

namespace partita::gui {

namespace {

// Runs the event loop until `signal` of `sender` fires or the runner fails; false on failure.
template <typename Signal> bool waitFor(MainWindow& window, Signal signal) {
  QEventLoop loop;
  bool ok = false;
  QObject::connect(&window, signal, &loop, [&] {
    ok = true;
    loop.quit();
  });
  QObject::connect(&window, &MainWindow::errorShown, &loop, [&](const QString& message) {
    QTextStream(stderr) << "screenshots: " << message << '\n';
    loop.quit();
  });
  QObject::connect(window.runner(), &AnalysisRunner::cancelled, &loop, &QEventLoop::quit);
  loop.exec();
  return ok;
}

void settle() {
  // Let layouts and charts' animations-free painting settle before grabbing.
  QEventLoop loop;
  QTimer::singleShot(300, &loop, &QEventLoop::quit);
  loop.exec();
}

bool save(QWidget* widget, const QString& path) {
  const bool ok = widget->grab().save(path, "PNG");
  QTextStream(stdout) << (ok ? "wrote " : "could not write ") << path << '\n';
  return ok;
}

} // namespace

int render_screenshots(MainWindow& window, const QString& directory) {
  if (!QDir().mkpath(directory)) {
    QTextStream(stderr) << "screenshots: cannot create " << directory << '\n';
    return 1;
  }
  const QDir dir(directory);
  window.resize(1440, 900);
  window.show();
  window.evaluate();
  if (!waitFor(window, &MainWindow::analysisShown)) {
    return 1;
  }
  settle();
  bool ok = save(&window, dir.filePath(QStringLiteral("main-window.png")));
  if (auto* split = qobject_cast<QSplitter*>(window.inspector()->parentWidget())) {
    split->setSizes({300, 560}); // room for the candidates and their formulas
    settle();
  }
  ok = save(window.inspector(), dir.filePath(QStringLiteral("inspector.png"))) && ok;
  window.tabs()->setCurrentWidget(window.chartsPanel());
  settle();
  ok = save(&window, dir.filePath(QStringLiteral("charts.png"))) && ok;
  // The simulated iteration, every device's compute and communication lanes.
  window.tabs()->setCurrentWidget(window.timelinePanel());
  settle();
  ok = save(&window, dir.filePath(QStringLiteral("timeline.png"))) && ok;
  // The graph at a readable zoom, centred on the inspected (most expensive) op.
  auto* graph = window.graphView();
  window.tabs()->setCurrentWidget(graph);
  if (graph->isLayingOut()) {
    QEventLoop loop;
    QObject::connect(graph, &GraphView::layoutShown, &loop, &QEventLoop::quit);
    QObject::connect(graph, &GraphView::layoutCancelled, &loop, &QEventLoop::quit);
    QObject::connect(graph, &GraphView::layoutFailed, &loop, &QEventLoop::quit);
    loop.exec();
  }
  settle();
  graph->zoomTo(0.85, graph->selectedOp());
  settle();
  ok = save(&window, dir.filePath(QStringLiteral("graph.png"))) && ok;
  window.tabs()->setCurrentWidget(window.comparePanel());
  window.compare();
  if (!waitFor(window, &MainWindow::comparisonShown)) {
    return 1;
  }
  settle();
  ok = save(&window, dir.filePath(QStringLiteral("compare.png"))) && ok;

  // The scaling sweep: the default families at 1 .. 64 devices (the preset grows by nodes).
  window.tabs()->setCurrentWidget(window.sweepPanel());
  window.sweepPanel()->devicesEdit()->setText(QStringLiteral("1,2,4,8,16,32,64"));
  window.sweep();
  if (!waitFor(window, &MainWindow::sweepShown)) {
    return 1;
  }
  settle();
  ok = save(&window, dir.filePath(QStringLiteral("scaling.png"))) && ok;

  // Side by side: the panel's family beside one weird trick on the same devices, scrolled to the
  // end, where a CNN's fully-connected layers differ, and the totals line.
  window.tabs()->setCurrentWidget(window.sideBySidePanel());
  SideBySideChoice b;
  b.family = window.setupPanel()->input().family == "owt" ? "dp" : "owt";
  window.sideBySidePanel()->setChoice(b);
  window.sideBySide();
  if (!waitFor(window, &MainWindow::sideBySideShown)) {
    return 1;
  }
  settle();
  window.sideBySidePanel()->view()->scrollToBottom();
  settle();
  ok = save(&window, dir.filePath(QStringLiteral("side-by-side.png"))) && ok;

  // The cluster editor on the selected preset, with a bad value typed in: the core's message.
  ClusterEditor editor(input_cluster_proto(window.setupPanel()->input()), &window);
  editor.setWindowFlag(Qt::Dialog);
  editor.resize(editor.sizeHint());
  editor.show();
  if (auto* bandwidth = qobject_cast<QLineEdit*>(editor.fieldWidget(QStringLiteral("intra_node.link.bandwidth")))) {
    bandwidth->setText(QStringLiteral("-300"));
  }
  settle();
  ok = save(&editor, dir.filePath(QStringLiteral("cluster-editor.png"))) && ok;

  // Help > Partita Help.
  QDialog* help = makeHelpDialog(&window);
  help->show();
  settle();
  ok = save(help, dir.filePath(QStringLiteral("help.png"))) && ok;
  help->close();
  editor.close();

  // The 3-D search of a GPT-3 2.7B on 32 A100s: its choice and Pareto front; then the front's point
  // with the most pipeline stages opened, its iteration by pipeline stage.
  AnalysisInput threeD;
  threeD.model = "zoo:gpt3?size=2.7b&batch=64";
  threeD.cluster = "dgx-a100";
  threeD.nodes = 4;
  threeD.devices = 32;
  threeD.family = "3d";
  threeD.precision = "bf16";
  window.setupPanel()->setInput(threeD);
  window.evaluate();
  if (!waitFor(window, &MainWindow::analysisShown)) {
    return 1;
  }
  window.tabs()->setCurrentWidget(window.paretoPanel());
  settle();
  ok = save(&window, dir.filePath(QStringLiteral("3d-search.png"))) && ok;
  if (const auto& front = window.analysis()->three_d->pareto; !front.empty()) {
    // The most stages, then the fewest boxes a lane (micro-batches x chunks): a readable picture.
    std::size_t deepest = 0;
    const auto boxes = [](const search::three_d::Candidate& c) { return c.micro_batches * c.chunks; };
    for (std::size_t i = 0; i < front.size(); ++i) {
      const auto& c = front[i].candidate;
      const auto& d = front[deepest].candidate;
      if (c.pipeline > d.pipeline || (c.pipeline == d.pipeline && boxes(c) < boxes(d))) {
        deepest = i;
      }
    }
    window.paretoPanel()->openPoint(static_cast<int>(deepest));
    if (!waitFor(window, &MainWindow::analysisShown)) {
      return 1;
    }
    window.tabs()->setCurrentWidget(window.timelinePanel());
    window.timelinePanel()->pipelineBox()->setChecked(true);
    settle();
    // The first third: the pipeline filling, then steady forward-backward pairs.
    window.timelinePanel()->view()->zoomBy(3, timeline_layout::labelWidth);
    settle();
    ok = save(&window, dir.filePath(QStringLiteral("pipeline.png"))) && ok;
    window.timelinePanel()->pipelineBox()->setChecked(false);
  }

  // A real run (mpirun + partita-run, 2 ranks of this machine) of a small transformer under
  // Megatron tensor parallelism: measured against predicted, the scatter and the timeline.
  AnalysisInput run;
  run.model = "zoo:gpt2?layers=2&hidden=256&heads=4&seq=64&batch=8&vocab=2000&positions=64";
  run.cluster = "localhost-cpu";
  run.nodes = 1;
  run.devices = 2;
  run.family = "megatron";
  run.optimizer = "sgd";
  window.setupPanel()->setInput(run);
  window.evaluate();
  if (!waitFor(window, &MainWindow::analysisShown)) {
    return 1;
  }
  window.tabs()->setCurrentWidget(window.runPanel());
  {
    QEventLoop loop;
    bool finished = false;
    QObject::connect(window.runPanel(), &RunPanel::runFinished, &loop, [&] {
      finished = true;
      loop.quit();
    });
    QObject::connect(window.runPanel()->job(), &RunJob::failed, &loop, [&](const QString& message) {
      QTextStream(stderr) << "screenshots: the run failed: " << message << '\n' << window.runPanel()->logText();
      loop.quit();
    });
    if (!window.runPanel()->startRun()) {
      return 1;
    }
    loop.exec();
    if (!finished) {
      return 1;
    }
  }
  settle();
  ok = save(&window, dir.filePath(QStringLiteral("run.png"))) && ok;
  window.runPanel()->views()->setCurrentIndex(1);
  settle();
  ok = save(window.runPanel(), dir.filePath(QStringLiteral("run-scatter.png"))) && ok;
  window.runPanel()->views()->setCurrentIndex(2);
  settle();
  ok = save(window.runPanel(), dir.filePath(QStringLiteral("run-timeline.png"))) && ok;
  return ok ? 0 : 1;
}

} // namespace partita::gui
