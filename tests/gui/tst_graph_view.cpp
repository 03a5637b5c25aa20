// The graph view and the File menu's sessions and exports, with real widgets and Graphviz under
// the offscreen platform: layouts of zoo models (dot and the layered fallback) put every op in a
// box and every edge downwards; a cancelled layout leaves the previous graph; selection follows
// between the table and the graph both ways; sessions round-trip and a corrupt one is reported;
// exports write files.

#include "app/main_window.h"
#include "common/analysis.h"
#include "common/format.h"
#include "common/session.h"
#include "common/split_category.h"
#include "graph/graph_layout.h"
#include "graph/graph_layout_job.h"
#include "graph/graph_scene.h"
#include "graph/graph_view.h"
#include "layers/inspector_panel.h"
#include "layers/layers_panel.h"
#include "models/layer_table_model.h"
#include "setup/setup_panel.h"

#include "partita/graph/error.h"
#include "partita/zoo/zoo.h"

#include <QFile>
#include <QGraphicsView>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QSettings>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QStandardPaths>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <QWheelEvent>

#include <set>

using namespace partita;
using namespace partita::gui;

namespace {

constexpr int wait_ms = 120000; // generous: debug builds on a shared machine; not a timing check

AnalysisInput smallInput() {
  AnalysisInput in;
  in.model = "zoo:gpt2?layers=1&hidden=64&heads=2&seq=8&batch=2";
  in.cluster = "dgx-a100";
  in.devices = 4;
  in.family = "hybrid";
  return in;
}

AnalysisInput mlpInput() {
  AnalysisInput in = smallInput();
  in.model = "zoo:mlp?batch=8&hidden=32&layers=2";
  return in;
}

void checkLayout(const graph::Graph& g, const GraphLayout& layout) {
  QCOMPARE(layout.nodes.size(), g.ops().size());
  // One edge per producer/consumer pair of ops.
  std::set<std::pair<graph::OpId, graph::OpId>> pairs;
  for (graph::OpId id = 0; id < static_cast<graph::OpId>(g.ops().size()); ++id) {
    for (graph::TensorId t : g.op(id).outputs) {
      if (t != graph::no_tensor) {
        for (graph::OpId c : g.tensor(t).consumers) {
          pairs.emplace(id, c);
        }
      }
    }
  }
  QVERIFY(!pairs.empty());
  QCOMPARE(layout.edges.size(), pairs.size());
  for (const auto& e : layout.edges) {
    QVERIFY(pairs.count({e.from, e.to}) == 1);
    const QRectF& from = layout.nodes[static_cast<std::size_t>(e.from)];
    const QRectF& to = layout.nodes[static_cast<std::size_t>(e.to)];
    // Layered top to bottom: every edge goes downwards.
    QVERIFY2(to.top() >= from.bottom(), qPrintable(QStringLiteral("edge %1 -> %2").arg(e.from).arg(e.to)));
    QVERIFY(!e.path.isEmpty());
  }
  for (const auto& r : layout.nodes) {
    QVERIFY(r.isValid());
    QVERIFY(layout.bounds.adjusted(-1, -1, 1, 1).contains(r));
  }
  // No two boxes overlap.
  for (std::size_t i = 0; i < layout.nodes.size(); ++i) {
    for (std::size_t j = i + 1; j < layout.nodes.size(); ++j) {
      QVERIFY(!layout.nodes[i].adjusted(1, 1, -1, -1).intersects(layout.nodes[j]));
    }
  }
}

} // namespace

class TestGraphView : public QObject {
  Q_OBJECT
private:
  std::shared_ptr<const Analysis> m_small;

  static bool evaluated(MainWindow& w, const AnalysisInput& in) {
    QSignalSpy shown(&w, &MainWindow::analysisShown);
    w.setupPanel()->setInput(in);
    w.evaluate();
    return shown.wait(wait_ms);
  }

  // Waits for the graph of the window's analysis to be on screen.
  static bool graphShown(MainWindow& w) {
    if (w.graphView()->showsCurrent()) {
      return true;
    }
    QSignalSpy shown(w.graphView(), &GraphView::layoutShown);
    return shown.wait(wait_ms) && w.graphView()->showsCurrent();
  }

private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("PartitaTest"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_graph_view"));
    QSettings().clear();
    m_small = run_analysis(smallInput());
  }

  void dotLayoutOfAZooModel() {
    const auto& g = m_small->model.graph;
    LayoutOptions options;
    options.method = LayoutMethod::Dot;
    const auto layout = layoutGraph(g, options);
    QCOMPARE(layout->method, LayoutMethod::Dot); // Graphviz's dot plugin is installed
    checkLayout(g, *layout);
  }

  void layeredLayoutBeyondTheDotLimit() {
    const auto& g = m_small->model.graph;
    LayoutOptions options;
    options.dotLimit = 5; // the small model counts as "large"
    const auto layout = layoutGraph(g, options);
    QCOMPARE(layout->method, LayoutMethod::Layered);
    QVERIFY(layout->note.contains(QStringLiteral("layered")));
    checkLayout(g, *layout);
  }

  // A graph with long edges (GPT-3 2.7B's attention mask, read by all 32 layers) would keep dot
  // busy for minutes: the layered layout is used, saying why. The count grows with the layers.
  void layeredLayoutForLongEdges() {
    const auto small = zoo::load("zoo:gpt3?size=2.7b&batch=1&layers=2").graph;
    const auto large = zoo::load("zoo:gpt3?size=2.7b&batch=1").graph;
    QVERIFY(dotWork(small) >= static_cast<long long>(small.ops().size()));
    QVERIFY(dotWork(large) > 10 * dotWork(small));
    LayoutOptions options;
    QVERIFY(static_cast<int>(large.ops().size()) <= options.dotLimit); // not too many ops
    QVERIFY(dotWork(large) > options.dotWorkLimit);
    const auto layout = layoutGraph(large, options);
    QCOMPARE(layout->method, LayoutMethod::Layered);
    QVERIFY2(layout->note.contains(QStringLiteral("long edges")), qPrintable(layout->note));
    checkLayout(large, *layout);
    QCOMPARE(layoutGraph(small, options)->method, LayoutMethod::Dot);
  }

  void cancelledLayoutThrows() {
    std::atomic<bool> cancel{true};
    QVERIFY_THROWS_EXCEPTION(Cancelled, layoutGraph(m_small->model.graph, {}, &cancel));
  }

  void splitKinds() {
    // Matrix product "b, m, n, k" style: derived from the semantics, not from names.
    const auto& a = *m_small;
    const auto batch = batchDims(a.model.graph, a.semantics);
    bool sawBatch = false;
    for (std::size_t i = 0; i < a.semantics.size(); ++i) {
      const auto& s = a.semantics[i];
      sharding::Config none{std::vector<int>(s.dims.size(), 1)};
      QCOMPARE(splitKind(none, s, batch[i]), SplitKind::Replicated);
      for (std::size_t d = 0; d < s.dims.size(); ++d) {
        if (!s.dims[d].splittable || s.dims[d].size < 2) {
          continue;
        }
        sharding::Config one = none;
        one.splits[d] = 2;
        const SplitKind expected = batch[i][d]           ? SplitKind::Batch
                                   : s.dims[d].reduction ? SplitKind::Reduction
                                                         : SplitKind::Feature;
        QCOMPARE(splitKind(one, s, batch[i]), expected);
        sawBatch = sawBatch || expected == SplitKind::Batch;
        for (std::size_t e = 0; e < s.dims.size(); ++e) {
          if (e != d && s.dims[e].splittable && s.dims[e].size >= 2) {
            sharding::Config two = one;
            two.splits[e] = 2;
            const SplitKind other = batch[i][e]           ? SplitKind::Batch
                                    : s.dims[e].reduction ? SplitKind::Reduction
                                                          : SplitKind::Feature;
            QCOMPARE(splitKind(two, s, batch[i]), other == expected ? expected : SplitKind::Mixed);
          }
        }
      }
    }
    QVERIFY(sawBatch);
  }

  void viewShowsTheGraphAndFinds() {
    GraphView view;
    view.resize(900, 700);
    view.show();
    QSignalSpy shown(&view, &GraphView::layoutShown);
    view.setAnalysis(m_small);
    QVERIFY(view.isLayingOut());
    QVERIFY(shown.wait(wait_ms));
    QVERIFY(view.showsCurrent());
    const auto& g = m_small->model.graph;
    QCOMPARE(view.scene()->nodeCount(), static_cast<int>(g.ops().size()));
    QCOMPARE(view.scene()->edgeCount(), static_cast<int>(opEdges(g).size()));

    // Find by name selects the op and centres it.
    QSignalSpy selected(&view, &GraphView::opSelected);
    const QString name = QString::fromStdString(g.op(static_cast<graph::OpId>(g.ops().size() - 1)).name);
    QVERIFY(view.find(name));
    QCOMPARE(selected.count(), 1);
    const graph::OpId found = view.selectedOp();
    QVERIFY(QString::fromStdString(g.op(found).name).contains(name));
    QVERIFY(view.zoom() >= 0.5); // readable
    const QRectF visible = view.canvas()->mapToScene(view.canvas()->viewport()->rect()).boundingRect();
    QVERIFY(visible.contains(view.scene()->graphLayout()->nodes[static_cast<std::size_t>(found)]));
    QVERIFY(!view.find(QStringLiteral("no op is called this")));

    // Fit shows everything; the wheel zooms.
    view.fit();
    QVERIFY(view.canvas()
                ->mapToScene(view.canvas()->viewport()->rect())
                .boundingRect()
                .adjusted(-2, -2, 2, 2)
                .contains(view.scene()->graphLayout()->bounds));
    const double before = view.zoom();
    QWheelEvent wheel(QPointF(100, 100), view.canvas()->viewport()->mapToGlobal(QPointF(100, 100)), QPoint(),
                      QPoint(0, 240), Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
    QCoreApplication::sendEvent(view.canvas()->viewport(), &wheel);
    QVERIFY(view.zoom() > before);

    // Same model, another strategy: recoloured at once, no new layout.
    auto dp = smallInput();
    dp.family = "dp";
    const auto dpAnalysis = run_analysis(dp);
    const auto* layoutBefore = view.scene()->graphLayout();
    view.setAnalysis(dpAnalysis);
    QVERIFY(!view.isLayingOut());
    QCOMPARE(view.scene()->graphLayout(), layoutBefore);
    QVERIFY(view.showsCurrent());
    int batchSplit = 0;
    for (graph::OpId id = 0; id < view.scene()->nodeCount(); ++id) {
      batchSplit += view.scene()->kindOf(id) == SplitKind::Batch ? 1 : 0;
    }
    QVERIFY(batchSplit > 0); // data parallelism splits the batch
  }

  void cancellingALayoutLeavesThePreviousGraph() {
    GraphView view;
    QSignalSpy shown(&view, &GraphView::layoutShown);
    view.setAnalysis(m_small);
    QVERIFY(shown.wait(wait_ms));
    const auto* before = view.scene()->graphLayout();
    const int nodes = view.scene()->nodeCount();

    QSignalSpy cancelled(&view, &GraphView::layoutCancelled);
    view.setAnalysis(run_analysis(mlpInput()));
    QVERIFY(view.isLayingOut());
    view.cancelLayout();
    QCOMPARE(cancelled.count(), 1);
    QVERIFY(!view.isLayingOut());
    QTest::qWait(200); // the abandoned worker's result, if it comes, must be dropped
    QCOMPARE(view.scene()->graphLayout(), before);
    QCOMPARE(view.scene()->nodeCount(), nodes);
    QCOMPARE(shown.count(), 1);
    QVERIFY(!view.showsCurrent()); // another model's graph: no selection sync
    QVERIFY(view.statusLabel()->text().contains(QStringLiteral("cancelled")));
  }

  void selectionFollowsTableAndGraph() {
    MainWindow w;
    w.show();
    QVERIFY(evaluated(w, smallInput()));
    QVERIFY(graphShown(w));
    auto* table = w.layersPanel()->view();
    auto* proxy = w.layersPanel()->proxy();
    // The inspected op is selected in the graph too.
    QCOMPARE(w.graphView()->selectedOp(), w.inspector()->op());

    // Table -> graph.
    const int row = table->currentIndex().row() == 2 ? 3 : 2;
    table->setCurrentIndex(proxy->index(row, 0));
    const graph::OpId fromTable = proxy->index(row, 0).data(OpIdRole).toInt();
    QCOMPARE(w.graphView()->selectedOp(), fromTable);

    // Graph -> table (and the inspector): a click on a box.
    w.tabs()->setCurrentWidget(w.graphView());
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QCoreApplication::processEvents();
    const graph::OpId other = fromTable == 0 ? 1 : 0;
    auto* canvas = w.graphView()->canvas();
    const QPointF box = w.graphView()->scene()->graphLayout()->nodes[static_cast<std::size_t>(other)].center();
    QVERIFY(w.graphView()->zoom() > 0.2); // fitted when the tab was shown, not while hidden
    canvas->centerOn(box);
    QTest::mouseClick(canvas->viewport(), Qt::LeftButton, Qt::NoModifier, canvas->mapFromScene(box));
    QCOMPARE(table->currentIndex().data(OpIdRole).toInt(), other);
    QCOMPARE(w.inspector()->op(), other);
    QCOMPARE(w.graphView()->selectedOp(), other);

    // Find (Ctrl+F, Enter) selects in the table too.
    const auto& g = w.analysis()->model.graph;
    w.graphView()->findEdit()->setText(QString::fromStdString(g.op(3).name));
    QTest::keyClick(w.graphView()->findEdit(), Qt::Key_Return);
    QCOMPARE(w.graphView()->selectedOp(), 3);
    QCOMPARE(table->currentIndex().data(OpIdRole).toInt(), 3);
  }

  void sessionRoundTrip() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath(QStringLiteral("session.json"));
    AnalysisInput in = smallInput();
    in.family = "megatron";
    in.precision = "bf16";
    in.optimizer = "sgd";
    in.zero_stage = 1;
    in.recompute = "full";
    in.devices = 2;

    MainWindow w;
    QVERIFY(evaluated(w, in));
    const graph::OpId selected = 4;
    w.layersPanel()->selectOp(selected);
    QVERIFY(w.saveSession(path));
    QVERIFY(QFile::exists(path));
    const auto saved = loadSession(path.toStdString());
    QCOMPARE(saved.input, w.setupPanel()->input());
    QCOMPARE(saved.selectedOp, w.analysis()->model.graph.op(selected).name);

    // A fresh window restores it: the same settings, the evaluation re-run, the op selected.
    MainWindow restored;
    QSignalSpy shown(&restored, &MainWindow::analysisShown);
    QVERIFY(restored.openSession(path));
    QVERIFY(shown.wait(wait_ms));
    QCOMPARE(restored.setupPanel()->input(), w.setupPanel()->input());
    QCOMPARE(restored.analysis()->input, w.analysis()->input);
    QCOMPARE(restored.analysis()->prediction.iteration_time, w.analysis()->prediction.iteration_time);
    QCOMPARE(restored.inspector()->op(), selected);
    QVERIFY(restored.errorMessage().isEmpty());
  }

  void corruptSessionIsReported() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    MainWindow w;
    QVERIFY(evaluated(w, smallInput()));
    const auto before = w.analysis();
    const auto inputBefore = w.setupPanel()->input();

    const QString garbage = dir.filePath(QStringLiteral("garbage.json"));
    QFile f(garbage);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{ \"model\": \"zoo:mlp\", \"devices\": \"many\" ");
    f.close();
    QVERIFY(!w.openSession(garbage));
    QVERIFY2(w.errorMessage().contains(QStringLiteral("garbage.json")), qPrintable(w.errorMessage()));

    const QString badField = dir.filePath(QStringLiteral("bad-field.json"));
    QFile g(badField);
    QVERIFY(g.open(QIODevice::WriteOnly));
    g.write(R"({"model": "zoo:mlp", "cluster": "dgx-a100", "nodes": 1, "devices": 0, "family": "hybrid"})");
    g.close();
    QVERIFY(!w.openSession(badField));
    QVERIFY2(w.errorMessage().contains(QStringLiteral("devices")), qPrintable(w.errorMessage()));

    QVERIFY(!w.openSession(dir.filePath(QStringLiteral("missing.json"))));
    QVERIFY(w.errorMessage().contains(QStringLiteral("missing.json")));
    // Nothing changed.
    QVERIFY(!w.isBusy());
    QCOMPARE(w.analysis(), before);
    QCOMPARE(w.setupPanel()->input(), inputBefore);
  }

  void exports() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    MainWindow w;
    w.show();
    QVERIFY(!w.exportTable(dir.filePath(QStringLiteral("early.csv")))); // nothing evaluated yet
    QVERIFY(evaluated(w, smallInput()));
    QVERIFY(graphShown(w));
    const auto& a = *w.analysis();

    const QString csv = dir.filePath(QStringLiteral("layers.csv"));
    QVERIFY(w.exportTable(csv));
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QStringList lines = QString::fromUtf8(f.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), static_cast<int>(a.layers.size()) + 1);
    QVERIFY(lines[0].startsWith(QStringLiteral("index,op,name,output_shape,configuration,stage,chunk,compute_s")));
    for (std::size_t i = 0; i < a.layers.size(); ++i) {
      QVERIFY(lines[static_cast<int>(i) + 1].startsWith(QString::number(a.layers[i].op) + QLatin1Char(',') +
                                                        QString::fromStdString(a.layers[i].type) + QLatin1Char(',')));
    }

    for (const QString& name : {QStringLiteral("graph.png"), QStringLiteral("graph.svg")}) {
      QVERIFY(w.exportGraph(dir.filePath(name)));
    }
    for (const QString& name : {QStringLiteral("charts.png"), QStringLiteral("charts.svg")}) {
      QVERIFY(w.exportCharts(dir.filePath(name)));
    }
    QImage graphPng(dir.filePath(QStringLiteral("graph.png")));
    QVERIFY(!graphPng.isNull());
    QVERIFY(graphPng.height() > graphPng.width()); // top to bottom
    QVERIFY(!QImage(dir.filePath(QStringLiteral("charts.png"))).isNull());
    for (const QString& name : {QStringLiteral("graph.svg"), QStringLiteral("charts.svg")}) {
      QFile svg(dir.filePath(name));
      QVERIFY(svg.open(QIODevice::ReadOnly));
      const QByteArray text = svg.readAll();
      QVERIFY2(text.contains("<svg") && text.contains("</svg>"), qPrintable(name));
    }
    // A name without a known suffix is an error in the window, not a file.
    QVERIFY(!w.exportGraph(dir.filePath(QStringLiteral("graph.bmpx"))));
    QVERIFY(w.errorMessage().contains(QStringLiteral(".svg")));
    QVERIFY(!QFile::exists(dir.filePath(QStringLiteral("graph.bmpx"))));
  }
};

QTEST_MAIN(TestGraphView)
#include "tst_graph_view.moc"
