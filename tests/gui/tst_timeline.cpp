// The Timeline tab: after evaluating a small model, the simulated iteration is on screen as the
// core computed it, one lane per device and stream, every task modelled; the critical-path filter,
// the summary, zoom and pan, and the hover text.

#include "app/main_window.h"
#include "common/format.h"
#include "setup/setup_panel.h"
#include "timeline/sim_timeline_layout.h"
#include "timeline/sim_timeline_view.h"
#include "timeline/timeline_panel.h"

#include "partita/sim/simulate.h"

#include <QApplication>
#include <QCheckBox>
#include <QLabel>
#include <QScrollBar>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTest>
#include <QToolButton>
#include <QWheelEvent>

#include <set>
#include <utility>

using namespace partita;
using namespace partita::gui;

namespace {

constexpr int wait_ms = 120000; // generous: a shared machine; not a timing check

AnalysisInput smallInput() {
  AnalysisInput in;
  in.model = "zoo:gpt2?layers=1&hidden=64&heads=2&seq=8&batch=2";
  in.cluster = "dgx-a100";
  in.devices = 4;
  in.family = "hybrid";
  return in;
}

} // namespace

class TestTimeline : public QObject {
  Q_OBJECT
private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("PartitaTest"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_timeline"));
  }

  void simulatedIterationOnScreen() {
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    auto* panel = w.timelinePanel();
    auto* view = panel->view();
    QCOMPARE(view->laneCount(), 0);
    QSignalSpy shown(&w, &MainWindow::analysisShown);
    w.setupPanel()->setInput(smallInput());
    w.evaluate();
    QVERIFY(shown.wait(wait_ms));
    w.tabs()->setCurrentWidget(panel);
    QVERIFY(QTest::qWaitForWindowExposed(&w));

    const auto a = w.analysis();
    QVERIFY(a->simulation.has_value());
    const auto& sim = *a->simulation;
    // What the core computes for the same strategy, with the default options (overlap on).
    const auto direct = sim::simulate(a->model.graph, a->cluster, a->strategy, a->setup);
    QCOMPARE(sim.tasks.tasks.size(), direct.tasks.tasks.size());
    QCOMPARE(sim.result.iteration_time, direct.result.iteration_time);
    QVERIFY(sim.tasks.overlap);

    // One lane per device and stream that runs a task; devices with communication get two.
    std::set<std::pair<int, int>> lanes;
    int boxes = 0;
    for (const auto& t : sim.tasks.tasks) {
      for (int d : sim.tasks.groups[static_cast<std::size_t>(t.group)]) {
        lanes.insert({d, static_cast<int>(t.stream)});
        ++boxes;
      }
    }
    QCOMPARE(view->laneCount(), static_cast<int>(lanes.size()));
    QVERIFY(view->laneCount() > a->prediction.devices_used); // communication lanes too
    QCOMPARE(view->laneLabel(0), QStringLiteral("device 0 compute"));
    QCOMPARE(view->taskCount(), static_cast<int>(sim.tasks.tasks.size()));
    QCOMPARE(view->boxCount(), boxes);
    view->viewport()->repaint();
    QVERIFY(view->paintedBoxes() > 0);
    QVERIFY(view->paintedBoxes() <= boxes);

    // The summary states the simulated iteration (the prediction) and its terms added up.
    const QString summary = panel->summaryLabel()->text();
    QVERIFY2(summary.contains(formatSeconds(sim.result.iteration_time)), qPrintable(summary));
    QCOMPARE(a->prediction.iteration_time, sim.result.iteration_time);
    QVERIFY(a->prediction.simulated);
    QVERIFY2(summary.contains(formatSeconds(a->prediction.additive_time)), qPrintable(summary));
    QVERIFY2(summary.contains(QStringLiteral("exposed comm")), qPrintable(summary));

    // Only the critical path: fewer tasks, exactly the path's.
    QVERIFY(!sim.result.critical_path.empty());
    QVERIFY(sim.result.critical_path.size() < sim.tasks.tasks.size());
    panel->criticalOnlyBox()->setChecked(true);
    QCOMPARE(view->taskCount(), static_cast<int>(sim.result.critical_path.size()));
    QVERIFY(view->boxCount() < boxes);
    view->viewport()->repaint();
    QVERIFY(view->paintedBoxes() > 0);
    panel->criticalOnlyBox()->setChecked(false);
    QCOMPARE(view->taskCount(), static_cast<int>(sim.tasks.tasks.size()));

    // Zoom: the whole iteration first, then half of it per click, about the centre.
    const double whole = view->visibleSpan();
    QCOMPARE(whole, sim.result.iteration_time);
    QCOMPARE(view->horizontalScrollBar()->maximum(), 0);
    QTest::mouseClick(panel->zoomInButton(), Qt::LeftButton);
    QVERIFY(qAbs(view->visibleSpan() - whole / 2) < whole * 1e-9);
    QVERIFY(qAbs(view->visibleStart() - whole / 4) < whole * 1e-9);
    QVERIFY(view->horizontalScrollBar()->maximum() > 0);
    // Ctrl+wheel zooms in further; a plain wheel does not.
    const QPointF at(timeline_layout::labelWidth + 50, 60);
    QWheelEvent plain(at, view->viewport()->mapToGlobal(at), {}, {0, 120}, Qt::NoButton, Qt::NoModifier,
                      Qt::NoScrollPhase, false);
    QApplication::sendEvent(view->viewport(), &plain);
    QVERIFY(qAbs(view->visibleSpan() - whole / 2) < whole * 1e-9);
    QWheelEvent ctrl(at, view->viewport()->mapToGlobal(at), {}, {0, 120}, Qt::NoButton, Qt::ControlModifier,
                     Qt::NoScrollPhase, false);
    QApplication::sendEvent(view->viewport(), &ctrl);
    QVERIFY(view->visibleSpan() < whole / 2 * 0.9);
    // Pan with the scroll bar: the start moves, the span stays.
    const double span = view->visibleSpan();
    view->horizontalScrollBar()->setValue(view->horizontalScrollBar()->maximum());
    QVERIFY(qAbs(view->visibleStart() + span - whole) < whole * 1e-3);
    QVERIFY(qAbs(view->visibleSpan() - span) < whole * 1e-9);
    QTest::mouseClick(panel->zoomOutButton(), Qt::LeftButton);
    QVERIFY(view->visibleSpan() > span * 1.9);

    // Hovering a box names its task, kind, start and duration.
    view->zoomToFit();
    QString text;
    const int y = timeline_layout::axisHeight + timeline_layout::deviceGap + timeline_layout::laneHeight / 2;
    for (int x = timeline_layout::labelWidth; x < view->viewport()->width() && text.isEmpty(); ++x) {
      text = view->textAt(QPoint(x, y));
    }
    QVERIFY2(text.contains(QStringLiteral("kind: ")), qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("duration")), qPrintable(text));
    QVERIFY(view->textAt(QPoint(5, y)).isEmpty()); // the lane names
  }

  // The pipeline view of an interleaved plan: one lane per stage; on each, every micro-batch's
  // forward and backward through each chunk as one box, in the order the schedule runs them, the
  // boxes apart; the bubble's share stated; hover names the micro-batch and chunk.
  void pipelineViewByStage() {
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    auto* panel = w.timelinePanel();
    auto* view = panel->view();
    auto in = smallInput();
    in.model = "zoo:gpt2?layers=4&hidden=64&heads=2&seq=16&batch=8&vocab=128&positions=16";
    in.family = "megatron";
    in.devices = 4;
    in.tensor_parallel = 2;
    in.stages = 2;
    in.micro_batches = 4;
    in.schedule = "interleaved";
    in.chunks = 2;
    QSignalSpy shown(&w, &MainWindow::analysisShown);
    w.setupPanel()->setInput(in);
    w.evaluate();
    QVERIFY2(shown.wait(wait_ms), qPrintable(w.errorMessage()));
    w.tabs()->setCurrentWidget(panel);
    const auto a = w.analysis();
    QVERIFY(a->strategy.pipeline.has_value() && a->simulation.has_value());
    QVERIFY(panel->pipelineBox()->isEnabled());
    panel->pipelineBox()->setChecked(true);
    QVERIFY(view->pipelineView());
    QCOMPARE(view->laneCount(), 2);
    QCOMPARE(view->laneLabel(0), QStringLiteral("stage 0 (device 0)"));
    QCOMPARE(view->laneLabel(1), QStringLiteral("stage 1 (device 2)"));
    // 4 micro-batches x 2 chunks x forward and backward (no recomputation).
    QCOMPARE(view->boxCount(), 2 * 4 * 2 * 2);
    QVERIFY(panel->legendLabel()->text().contains(QStringLiteral("Idle share")));
    for (int lane = 0; lane < 2; ++lane) {
      QVERIFY(view->idleShare(lane) > 0 && view->idleShare(lane) < 1);
    }
    view->viewport()->repaint();
    QVERIFY(view->paintedBoxes() == view->boxCount());
    // The first box of stage 1 waits for stage 0's first forward: hover across stage 1's lane.
    QString text;
    const int y = timeline_layout::axisHeight + 2 * timeline_layout::deviceGap + timeline_layout::laneHeight +
                  timeline_layout::laneHeight / 2;
    int firstX = -1;
    for (int x = timeline_layout::labelWidth; x < view->viewport()->width() && text.isEmpty(); ++x) {
      text = view->textAt(QPoint(x, y));
      firstX = x;
    }
    QVERIFY2(text.contains(QStringLiteral("stage 1: micro-batch 0, forward</b> through chunk 0")), qPrintable(text));
    QVERIFY(firstX > timeline_layout::labelWidth + 2); // the bubble before it
    // Off again: the device lanes return.
    panel->pipelineBox()->setChecked(false);
    QVERIFY(view->laneCount() > 2);
    QCOMPARE(view->laneLabel(0), QStringLiteral("device 0 compute"));

    // A plan without a pipeline: the box is off and disabled.
    in.stages = 0;
    in.micro_batches = 0;
    in.schedule = "1f1b";
    panel->pipelineBox()->setChecked(true);
    w.setupPanel()->setInput(in);
    w.evaluate();
    QVERIFY2(shown.wait(wait_ms), qPrintable(w.errorMessage()));
    QVERIFY(!w.analysis()->strategy.pipeline.has_value());
    QVERIFY(!panel->pipelineBox()->isEnabled());
    QVERIFY(!view->pipelineView());
  }
};

QTEST_MAIN(TestTimeline)
#include "tst_timeline.moc"
