// The Scaling tab (a sweep over device counts, off the GUI thread, with gaps and cancel) and the
// Side by side tab (two strategies layer by layer, under QAbstractItemModelTester).

#include "app/main_window.h"
#include "common/analysis.h"
#include "common/analysis_runner.h"
#include "common/format.h"
#include "compare/side_by_side_panel.h"
#include "compare/sweep_panel.h"
#include "models/chart_adapter.h"
#include "models/side_by_side_model.h"
#include "setup/setup_panel.h"

#include "partita/graph/error.h"

#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTest>

#include <cmath>

using namespace partita;
using namespace partita::gui;

namespace {

constexpr int wait_ms = 120000; // generous: a shared machine; not a timing check

AnalysisInput smallInput() {
  AnalysisInput in;
  in.model = "zoo:gpt2?layers=1&hidden=64&heads=2&seq=8&batch=8";
  in.cluster = "dgx-a100";
  in.devices = 8;
  in.family = "hybrid";
  return in;
}

} // namespace

class TestScaling : public QObject {
  Q_OBJECT
private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("PartitaTest"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_scaling"));
    QSettings().clear();
  }

  void deviceLists() {
    QCOMPARE(default_sweep_devices(8), (std::vector<int>{1, 2, 4, 8}));
    QCOMPARE(default_sweep_devices(12), (std::vector<int>{1, 2, 4, 8, 12}));
    QCOMPARE(default_sweep_devices(1), (std::vector<int>{1}));
    QCOMPARE(parse_device_list("8, 2,4,2"), (std::vector<int>{2, 4, 8}));
    QVERIFY_THROWS_EXCEPTION(Error, (void)parse_device_list("1,two"));
    QVERIFY_THROWS_EXCEPTION(Error, (void)parse_device_list("0"));
    QVERIFY_THROWS_EXCEPTION(Error, (void)parse_device_list(" "));
  }

  void sweepPlotsOneLinePerFamilyWithGaps() {
    MainWindow w;
    w.setupPanel()->setInput(smallInput());
    auto* panel = w.sweepPanel();
    panel->setSelectedFamilies({"dp", "megatron", "pipeline"});
    panel->devicesEdit()->setText(QStringLiteral("1,2,4,8,16")); // 16: the preset grows to two nodes
    QSignalSpy shown(&w, &MainWindow::sweepShown);
    QSignalSpy progress(w.runner(), &AnalysisRunner::progressChanged);
    QTest::mouseClick(panel->runButton(), Qt::LeftButton);
    QVERIFY(w.isBusy()); // off the GUI thread
    QVERIFY2(shown.wait(wait_ms), qPrintable(w.errorMessage()));
    QVERIFY(progress.count() >= 1);

    const auto* s = panel->sweep();
    QVERIFY(s != nullptr);
    QCOMPARE(s->families, (std::vector<std::string>{"dp", "megatron", "pipeline"}));
    QCOMPARE(s->devices, (std::vector<int>{1, 2, 4, 8, 16}));
    QCOMPARE(s->cells.size(), std::size_t{15});
    for (const auto& f : s->families) {
      int points = 0;
      for (int n : s->devices) {
        const auto* cell = s->cell(f, n);
        QVERIFY(cell != nullptr);
        points += std::isfinite(SweepPanel::value(*cell, SweepPanel::Metric::Throughput)) ? 1 : 0;
      }
      QVERIFY2(points >= 4, f.c_str());
    }
    // A pipeline needs two stages: a gap at one device, not a zero.
    const auto* gap = s->cell("pipeline", 1);
    QVERIFY(!gap->error.empty());
    QVERIFY(std::isnan(SweepPanel::value(*gap, SweepPanel::Metric::Throughput)));
    QVERIFY(std::isnan(SweepPanel::value(*gap, SweepPanel::Metric::IterationTime)));
    // Each point is the core's evaluation at that count, as the Layers tab would show it.
    for (int n : {2, 16}) {
      auto at = smallInput();
      at.family = "megatron";
      at.devices = n;
      at.nodes = nodes_for(at);
      QCOMPARE(s->cell("megatron", n)->prediction.iteration_time, run_analysis(at)->prediction.iteration_time);
    }
    QCOMPARE(s->cluster_name, std::string("dgx-a100"));

    QCOMPARE(panel->chart()->seriesCount(), 3);
    QVERIFY(panel->chart()->title().contains(QStringLiteral("samples/s")));
    panel->setMetric(SweepPanel::Metric::IterationTime); // re-plots, no new sweep
    QVERIFY(panel->chart()->title().contains(QStringLiteral("Iteration time")));
    QCOMPARE(panel->chart()->seriesCount(), 3);
    QCOMPARE(panel->sweep(), s);
  }

  void sweepDefaultsToPowersOfTwoUpToTheCluster() {
    MainWindow w;
    auto in = smallInput();
    in.cluster = "localhost-cpu"; // 2 devices
    in.devices = 2;
    w.setupPanel()->setInput(in);
    w.sweepPanel()->setSelectedFamilies({"dp"});
    QSignalSpy shown(&w, &MainWindow::sweepShown);
    w.sweep();
    QVERIFY2(shown.wait(wait_ms), qPrintable(w.errorMessage()));
    QCOMPARE(w.sweepPanel()->sweep()->devices, (std::vector<int>{1, 2}));
    QCOMPARE(w.sweepPanel()->chart()->seriesCount(), 1);

    // A bad list is the window's error, and nothing runs.
    QSignalSpy error(&w, &MainWindow::errorShown);
    w.sweepPanel()->devicesEdit()->setText(QStringLiteral("1,x"));
    w.sweep();
    QCOMPARE(error.count(), 1);
    QVERIFY(w.errorMessage().contains(QStringLiteral("'x'")));
    QVERIFY(!w.isBusy());
  }

  void cancelASweep() {
    MainWindow w;
    w.show();
    auto big = smallInput();
    // Full size, and the per-layer search on up to 256 devices among the cells: seconds even in a
    // release build (the hand-made families alone take a tenth of a second a cell, and could end
    // before the click on a busy machine).
    big.model = "zoo:gpt2";
    w.setupPanel()->setInput(big);
    w.sweepPanel()->setSelectedFamilies({"hybrid", "auto"});
    QCOMPARE(w.sweepPanel()->selectedFamilies().size(), std::size_t{2}); // auto among them
    w.sweepPanel()->devicesEdit()->setText(QStringLiteral("64,256"));
    QSignalSpy cancelled(w.runner(), &AnalysisRunner::cancelled);
    QSignalSpy shown(&w, &MainWindow::sweepShown);
    QSignalSpy clicked(w.cancelButton(), &QPushButton::clicked);
    w.sweep();
    QVERIFY(w.isBusy());
    // Clicked where the user sees it: once the status bar has laid the shown button out.
    QVERIFY(
        QTest::qWaitFor([&] { return w.cancelButton()->isVisible() && !w.cancelButton()->rect().isEmpty(); }, wait_ms));
    QVERIFY(w.isBusy());
    QTest::mouseClick(w.cancelButton(), Qt::LeftButton);
    QCOMPARE(clicked.count(), 1);
    // Counted from before the wait: a signal that came during the click is not missed.
    QVERIFY(QTest::qWaitFor([&] { return cancelled.count() >= 1; }, wait_ms));
    QCOMPARE(shown.count(), 0);
    QVERIFY(!w.isBusy());
    QVERIFY(w.sweepPanel()->sweep() == nullptr);
    // And the core's flag stops the sweep itself.
    std::atomic<bool> flag{true};
    QVERIFY_THROWS_EXCEPTION(Cancelled, (void)run_sweep(smallInput(), {"dp"}, {1, 2}, &flag));
  }

  void sideBySideHighlightsExactlyTheDifferingRows() {
    // One weird trick differs from data parallel on the fully-connected layers (model parallel)
    // and agrees on the convolutions (data parallel).
    AnalysisInput in;
    in.model = "zoo:alexnet?batch=16";
    in.cluster = "dgx-a100";
    in.devices = 4;
    in.family = "dp";
    SideBySideChoice b;
    b.family = "owt";
    const auto both = run_side_by_side(in, b);
    SideBySideModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setSideBySide(both);
    const auto& la = both->a->layers;
    const auto& lb = both->b->layers;
    QCOMPARE(model.rowCount(), static_cast<int>(la.size()) + 1);
    QCOMPARE(model.columnCount(), static_cast<int>(SideBySideModel::ColumnCount));
    int convs = 0, fcs = 0;
    for (int row = 0; row < static_cast<int>(la.size()); ++row) {
      const auto i = static_cast<std::size_t>(row);
      const bool differs = model.index(row, 0).data(SideBySideModel::DiffersRole).toBool();
      QCOMPARE(differs, la[i].configuration != lb[i].configuration);
      QCOMPARE(model.index(row, SideBySideModel::ConfigA).data().toString().toStdString(), la[i].configuration);
      QCOMPARE(model.index(row, SideBySideModel::ConfigB).data().toString().toStdString(), lb[i].configuration);
      QCOMPARE(model.index(row, 0).data(Qt::BackgroundRole).isValid(), differs);
      QCOMPARE(model.index(row, SideBySideModel::Delta).data(SortRole).toDouble(), lb[i].time - la[i].time);
      if (la[i].type == "Conv") {
        QVERIFY2(!differs, la[i].name.c_str());
        ++convs;
      }
      if (la[i].type == "Gemm" || la[i].type == "MatMul") {
        QVERIFY2(differs, la[i].name.c_str());
        ++fcs;
      }
    }
    QCOMPARE(convs, 5);
    QCOMPARE(fcs, 3);
    QVERIFY(model.differingRows() >= fcs);
    QVERIFY(model.differingRows() < static_cast<int>(la.size()));
    // The totals line: the iteration times and their delta.
    const int last = model.rowCount() - 1;
    QVERIFY(model.index(last, 0).data(SideBySideModel::TotalsRole).toBool());
    QVERIFY(!model.index(last, 0).data(SideBySideModel::DiffersRole).toBool());
    QCOMPARE(model.index(last, SideBySideModel::TimeA).data(SortRole).toDouble(), both->a->prediction.iteration_time);
    QCOMPARE(model.index(last, SideBySideModel::Delta).data(SortRole).toDouble(),
             both->b->prediction.iteration_time - both->a->prediction.iteration_time);
    model.setSideBySide(nullptr);
    QCOMPARE(model.rowCount(), 0);
  }

  void sideBySideInTheWindow() {
    MainWindow w;
    QAbstractItemModelTester tester(w.sideBySidePanel()->model(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
    auto in = smallInput();
    in.devices = 4;
    w.setupPanel()->setInput(in);
    // The same family on twice the devices of another preset.
    SideBySideChoice b;
    b.family = "hybrid";
    b.cluster = "dgx-h100";
    b.devices = 8;
    w.sideBySidePanel()->setChoice(b);
    QCOMPARE(w.sideBySidePanel()->choice(), b);
    QSignalSpy shown(&w, &MainWindow::sideBySideShown);
    QTest::mouseClick(w.sideBySidePanel()->runButton(), Qt::LeftButton);
    QVERIFY(w.isBusy());
    QVERIFY2(shown.wait(wait_ms), qPrintable(w.errorMessage()));
    const auto* s = w.sideBySidePanel()->model()->sideBySide();
    QVERIFY(s != nullptr);
    QCOMPARE(s->a->input.devices, 4);
    QCOMPARE(s->a->cluster.name, std::string("dgx-a100"));
    QCOMPARE(s->b->input.devices, 8);
    QCOMPARE(s->b->cluster.name, std::string("dgx-h100"));
    QCOMPARE(w.sideBySidePanel()->model()->rowCount(), static_cast<int>(s->a->layers.size()) + 1);
  }
};

QTEST_MAIN(TestScaling)
#include "tst_scaling.moc"
