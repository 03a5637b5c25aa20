// The Run panel over real runs: mpirun + partita-run on this machine (2 ranks), measured laid
// against predicted by the core, the per-op model under QAbstractItemModelTester, the timeline,
// side by side, cancel, and a missing runtime named in the error.

#include "app/main_window.h"
#include "charts/charts_panel.h"
#include "common/analysis.h"
#include "common/format.h"
#include "common/session.h"
#include "layers/layers_panel.h"
#include "models/chart_adapter.h"
#include "models/layer_table_model.h"
#include "models/run_ops_model.h"
#include "run/run_panel.h"
#include "run/timeline_widget.h"
#include "setup/setup_panel.h"

#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

using namespace partita;
using namespace partita::gui;

namespace {

std::shared_ptr<const Analysis> mlp(const std::string& size) {
  AnalysisInput in;
  in.model = "zoo:mlp?" + size;
  in.cluster = "localhost-cpu";
  in.nodes = 1;
  in.devices = 2;
  in.family = "dp";
  in.optimizer = "sgd";
  return run_analysis(in);
}

} // namespace

class TestRunPanel : public QObject {
  Q_OBJECT
private:
  std::shared_ptr<const Analysis> m_small = mlp("batch=16&input=64&hidden=64&layers=2&classes=8");

private Q_SLOTS:
  // The model spec's '&' is shown as '&': rich text, escaped exactly once.
  void statusShowsTheModelSpecAsTyped() {
    RunPanel panel;
    panel.setAnalysis(m_small);
    auto* status = panel.findChild<QLabel*>(QStringLiteral("runStatus"));
    QVERIFY(status != nullptr);
    QCOMPARE(status->textFormat(), Qt::RichText);
    QVERIFY(status->text().contains(QStringLiteral("batch=16&amp;input=64")));
    QVERIFY(!status->text().contains(QStringLiteral("&amp;amp;")));
  }

  void runsAndComparesWithThePrediction() {
    RunPanel panel;
    panel.setAnalysis(m_small);
    QVERIFY(panel.runButton()->isEnabled());
    QSignalSpy finished(&panel, &RunPanel::runFinished);
    QSignalSpy failed(panel.job(), &RunJob::failed);
    QSignalSpy progress(panel.job(), &RunJob::progress);
    QVERIFY(panel.startRun());
    QVERIFY(!panel.runButton()->isEnabled());
    QVERIFY(panel.cancelButton()->isEnabled());
    QVERIFY2(finished.wait(120000), qPrintable(panel.logText() + failed.value(0).value(0).toString()));
    QCOMPARE(panel.runs().size(), std::size_t{1});
    const auto& run = *panel.runs().front();
    QVERIFY(run.comparison.has_value());
    const auto ops = m_small->model.graph.ops().size();
    QCOMPARE(run.comparison->ops.size(), ops);
    QCOMPARE(run.result.ranks(), 2);
    QVERIFY(run.comparison->measured_iteration > 0);
    QCOMPARE(progress.last().at(0).toInt(), 10);
    QVERIFY(panel.logText().contains(QStringLiteral("progress: timed 10/10")));
    QVERIFY(panel.summaryText().contains(QStringLiteral("Per-op mean absolute error")));

    // The per-op table: one row per op, measured times from the run.
    auto* model = panel.opsModel();
    QAbstractItemModelTester tester(model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(model->rowCount(), static_cast<int>(ops));
    for (int row = 0; row < model->rowCount(); ++row) {
      QCOMPARE(model->index(row, RunOpsModel::Name).data().toString(), qs(m_small->model.graph.op(row).name));
      QCOMPARE(model->index(row, RunOpsModel::Measured).data(SortRole).toDouble(),
               run.comparison->ops[static_cast<std::size_t>(row)].measured.total());
      QCOMPARE(model->index(row, RunOpsModel::ChangeB).data().toString(), QStringLiteral("-"));
    }
    QCOMPARE(panel.scatter()->seriesCount(), 2); // the ops and the diagonal
    QCOMPARE(panel.timeline()->laneCount(), 2);
    QVERIFY(panel.timeline()->boxCount() >= static_cast<int>(ops));
    // Under the measured ranks, the predicted iteration of the same plan on the same time axis:
    // one lane per device, every simulated task on each device it occupies.
    auto* timeline = panel.timeline();
    QVERIFY(m_small->simulation.has_value());
    QCOMPARE(timeline->predictedLaneCount(), 2);
    int expected = 0;
    for (const auto& t : m_small->simulation->tasks.tasks) {
      expected += static_cast<int>(m_small->simulation->tasks.groups[static_cast<std::size_t>(t.group)].size());
    }
    QCOMPARE(timeline->predictedBoxCount(), expected);
    QCOMPARE(timeline->predictedSpan(), m_small->simulation->result.iteration_time);
    QVERIFY(timeline->predictedSpan() > 0);
    QVERIFY(timeline->axisSpan() >= timeline->predictedSpan());
    timeline->resize(900, timeline->sizeHint().height());
    // The first predicted task starts at 0 on device 0's compute half, below the measured lanes.
    const int predictedTop = timeline->sizeHint().height() - 24 - 2 * (26 + 6);
    QVERIFY2(timeline->textAt(QPointF(85, predictedTop + 3)).contains(QStringLiteral("device 0, predicted")),
             qPrintable(timeline->textAt(QPointF(85, predictedTop + 3))));
    QVERIFY(!timeline->grab().isNull()); // paints
    QVERIFY(panel.runButton()->isEnabled());

    // A second run side by side with the first.
    QVERIFY(panel.startRun());
    QVERIFY(finished.wait(120000));
    panel.showRuns(1, 0);
    QVERIFY(model->runB() != nullptr);
    QVERIFY(model->index(0, RunOpsModel::ChangeB).data().toString().endsWith(QLatin1Char('%')));
    QVERIFY(panel.summaryText().contains(QStringLiteral("Side by side with")));
  }

  // Before any run the tab already shows the predicted iteration a run will be laid against.
  void predictedTimelineBeforeARun() {
    RunPanel panel;
    panel.setAnalysis(m_small);
    QCOMPARE(panel.timeline()->laneCount(), 0);
    QCOMPARE(panel.timeline()->predictedLaneCount(), 2);
    QVERIFY(panel.timeline()->predictedBoxCount() > 0);
    panel.setAnalysis(nullptr);
    QCOMPARE(panel.timeline()->predictedLaneCount(), 0);
  }

  void cancelEndsTheJob() {
    RunPanel panel;
    panel.setAnalysis(mlp("batch=256&input=1024&hidden=1024&layers=4&classes=16"));
    QSignalSpy failed(panel.job(), &RunJob::failed);
    QSignalSpy progress(panel.job(), &RunJob::progress);
    RunSettings many;
    many.iterations = 1000;
    QVERIFY(panel.job()->start(mlp("batch=256&input=1024&hidden=1024&layers=4&classes=16"), many));
    QVERIFY(panel.job()->isRunning());
    QVERIFY(progress.wait(120000));
    panel.cancelRun();
    QVERIFY(failed.wait(15000));
    QCOMPARE(failed.last().at(0).toString(), QStringLiteral("Run cancelled."));
    QVERIFY(!panel.job()->isRunning());
    QVERIFY(panel.runs().empty());
  }

  void badHostfileIsNamed() {
    RunPanel panel;
    panel.setAnalysis(m_small);
    QSignalSpy failed(panel.job(), &RunJob::failed);
    panel.hostfileEdit()->setText(QStringLiteral("/nonexistent/hosts"));
    QCOMPARE(panel.settings().hostfile, QStringLiteral("/nonexistent/hosts"));
    QVERIFY(!panel.startRun());
    QCOMPARE(failed.size(), 1);
    QCOMPARE(failed.last().at(0).toString(), QStringLiteral("hostfile /nonexistent/hosts: cannot open: no such file"));
    // srun takes its hosts from the Slurm allocation: the hostfile field is off, and not passed.
    panel.launcherChoice()->setCurrentIndex(panel.launcherChoice()->findData(QStringLiteral("srun")));
    QVERIFY(!panel.hostfileEdit()->isEnabled());
    QCOMPARE(panel.settings().launcher, QStringLiteral("srun"));
    QVERIFY(panel.settings().hostfile.isEmpty());
  }

  void missingRuntimeIsNamed() {
    const QByteArray saved = qgetenv("PARTITA_RUN");
    qputenv("PARTITA_RUN", "/nonexistent/partita-run");
    RunPanel panel;
    panel.setAnalysis(m_small);
    QSignalSpy failed(panel.job(), &RunJob::failed);
    QVERIFY(!panel.startRun());
    QCOMPARE(failed.size(), 1);
    QVERIFY(
        failed.last().at(0).toString().contains(QStringLiteral("PARTITA_RUN=/nonexistent/partita-run: no such file")));
    QVERIFY(panel.runButton()->isEnabled());
    qputenv("PARTITA_RUN", saved);
  }

  // The whole flow in the window: evaluate, run, measured beside predicted in the layer table and
  // the charts, the run kept in the session and laid against the prediction again on restore.
  void windowOverlaysAndSessionsKeepRuns() {
    MainWindow w;
    QSignalSpy shown(&w, &MainWindow::analysisShown);
    auto* setup = w.setupPanel();
    AnalysisInput in;
    in.model = "zoo:mlp?batch=16&input=64&hidden=64&layers=2&classes=8";
    in.cluster = "localhost-cpu";
    in.nodes = 1;
    in.devices = 2;
    in.family = "dp";
    in.optimizer = "sgd";
    setup->setInput(in);
    w.evaluate();
    QVERIFY(shown.wait(60000));
    auto* layers = w.layersPanel()->model();
    QVERIFY(!layers->hasMeasured());
    QCOMPARE(layers->index(0, LayerTableModel::Measured).data().toString(), QStringLiteral("-"));
    const int bars = w.chartsPanel()->layerChart()->seriesCount();

    QSignalSpy finished(w.runPanel(), &RunPanel::runFinished);
    QVERIFY(w.runPanel()->startRun());
    QVERIFY2(finished.wait(120000), qPrintable(w.runPanel()->logText()));
    QVERIFY(layers->hasMeasured());
    QVERIFY(layers->index(0, LayerTableModel::Measured).data(SortRole).toDouble() > 0);
    QVERIFY(layers->index(0, LayerTableModel::Error).data().toString().endsWith(QLatin1Char('%')));
    QCOMPARE(w.chartsPanel()->layerChart()->seriesCount(), bars + 1); // the measured markers

    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("session.json"));
    QVERIFY(w.saveSession(path));
    const auto saved = loadSession(path.toStdString());
    QCOMPARE(saved.runs.size(), std::size_t{1});
    QVERIFY(saved.runs.front()->result.SerializeAsString() == w.runPanel()->runs().front()->result.SerializeAsString());

    MainWindow restored;
    QSignalSpy restoredShown(&restored, &MainWindow::analysisShown);
    QVERIFY(restored.openSession(path));
    QVERIFY(restoredShown.wait(60000));
    QCOMPARE(restored.runPanel()->runs().size(), std::size_t{1});
    QVERIFY(restored.runPanel()->runs().front()->comparison.has_value());
    QVERIFY(restored.layersPanel()->model()->hasMeasured());
    QVERIFY(restored.runPanel()->summaryText().contains(QStringLiteral("Per-op mean absolute error")));
  }

  void runsOfAnotherModelAreNotSideBySide() {
    auto a = std::make_shared<RunRecord>();
    auto b = std::make_shared<RunRecord>();
    a->result.add_ops()->set_name("x");
    b->result.add_ops()->set_name("y");
    RunOpsModel model;
    model.setRuns(a, b);
    QVERIFY(model.runB() == nullptr);
    QCOMPARE(model.rowCount(), 1);
  }
};

QTEST_MAIN(TestRunPanel)
#include "tst_run_panel.moc"
