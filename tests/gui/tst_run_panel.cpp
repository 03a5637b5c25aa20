// The Run panel over real runs: mpirun + partita-run on this machine (2 ranks), measured laid
// against predicted by the core, the per-op model under QAbstractItemModelTester, the timeline,
// side by side, cancel, and a missing runtime named in the error.

#include "analysis.h"
#include "chart_adapter.h"
#include "format.h"
#include "run_ops_model.h"
#include "run_panel.h"
#include "timeline_widget.h"

#include <QAbstractItemModelTester>
#include <QPushButton>
#include <QSignalSpy>
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
    QVERIFY(panel.runButton()->isEnabled());

    // A second run side by side with the first.
    QVERIFY(panel.startRun());
    QVERIFY(finished.wait(120000));
    panel.showRuns(1, 0);
    QVERIFY(model->runB() != nullptr);
    QVERIFY(model->index(0, RunOpsModel::ChangeB).data().toString().endsWith(QLatin1Char('%')));
    QVERIFY(panel.summaryText().contains(QStringLiteral("Side by side with")));
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
