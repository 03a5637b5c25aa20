// The cluster editor and the edited cluster end to end: validation as you type with the core's
// own messages, an edited cluster changing the evaluation, cluster JSON files that the command
// line reads, and sessions that keep the edited cluster and the side-by-side choice.

#include "app/main_window.h"
#include "common/analysis.h"
#include "common/session.h"
#include "compare/side_by_side_panel.h"
#include "setup/cluster_editor.h"
#include "setup/setup_panel.h"

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>

using namespace partita;
using namespace partita::gui;

namespace {

constexpr int wait_ms = 120000; // generous: a shared machine; not a timing check

AnalysisInput smallInput() {
  AnalysisInput in;
  in.model = "zoo:gpt2?layers=1&hidden=64&heads=2&seq=8&batch=2";
  in.cluster = "dgx-a100";
  in.devices = 4;
  in.family = "dp"; // a fixed strategy: only the costs change with the cluster
  return in;
}

QLineEdit* edit(ClusterEditor& e, const char* path) {
  auto* w = qobject_cast<QLineEdit*>(e.fieldWidget(QLatin1String(path)));
  if (w == nullptr) {
    qFatal("no line edit for %s", path);
  }
  return w;
}

// Types `text` into a field key by key, as a user would.
void type(ClusterEditor& e, const char* path, const QString& text) {
  auto* w = edit(e, path);
  w->clear();
  QTest::keyClicks(w, text);
}

bool marked(ClusterEditor& e, const char* path) {
  return e.fieldWidget(QLatin1String(path))->property("invalid").toBool();
}

} // namespace

class TestClusterEditor : public QObject {
  Q_OBJECT
private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("PartitaTest"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_cluster_editor"));
    QSettings().clear();
  }

  void startsFromThePresetAndValidates() {
    ClusterEditor e(input_cluster_proto(smallInput()));
    QVERIFY(e.isValid());
    QVERIFY(e.okButton()->isEnabled());
    QCOMPARE(edit(e, "devices_per_node")->text(), QStringLiteral("8"));
    QCOMPARE(edit(e, "intra_node.link.bandwidth")->text(), QStringLiteral("230")); // GB/s
    QCOMPARE(edit(e, "device.memory_capacity")->text(), QStringLiteral("80"));     // GiB
    // Unchanged, the form gives back the preset, its links' measured figures included.
    const auto preset = cluster::to_proto(cluster::load_cluster("dgx-a100"));
    QCOMPARE(io::to_json(e.cluster()), io::to_json(preset));
    QVERIFY(e.cluster().intra_node().link().collectives_size() > 0);
  }

  // A cluster of mixed nodes: the other kinds' nodes in a table, one row per group; unchanged it
  // gives the file back; a bad cell is refused with the core's field; groups added and removed.
  void nodeGroupsOfOtherKinds() {
    const auto start =
        cluster::to_proto(cluster::load_cluster(std::string(PARTITA_SOURCE_DIR) + "/docs/clusters/a100-v100.json"));
    ClusterEditor e(start);
    QVERIFY(e.isValid());
    auto* table = e.nodeGroupsTable();
    QCOMPARE(table->rowCount(), 1);
    QCOMPARE(table->item(0, 0)->text(), QStringLiteral("2"));
    QVERIFY(table->item(0, 1)->text().startsWith(QStringLiteral("Tesla V100")));
    QCOMPARE(table->item(0, 5)->text(), QStringLiteral("32")); // GiB
    QCOMPARE(io::to_json(e.cluster()), io::to_json(start));
    auto* note = e.findChild<QLabel*>(QStringLiteral("keptNote"));
    QVERIFY2(note->text().contains(QStringLiteral("1 other device kind")), qPrintable(note->text()));

    table->item(0, 5)->setText(QStringLiteral("16"));
    QVERIFY(e.isValid());
    QCOMPARE(e.cluster().node_groups(0).device().memory_capacity(), 16.0 * 1024 * 1024 * 1024);
    QCOMPARE(e.cluster().node_groups(0).device().compute_efficiency_size(),
             start.node_groups(0).device().compute_efficiency_size()); // kept
    table->item(0, 0)->setText(QStringLiteral("0"));
    QVERIFY(!e.isValid());
    QCOMPARE(e.invalidField(), QStringLiteral("node_groups"));
    QVERIFY2(e.errorText().contains(QStringLiteral("node_groups[0].nodes")), qPrintable(e.errorText()));
    table->item(0, 0)->setText(QStringLiteral("3"));
    QVERIFY(e.isValid());

    e.addGroupButton()->click();
    QCOMPARE(table->rowCount(), 2);
    QCOMPARE(e.cluster().node_groups_size(), 2);
    QCOMPARE(cluster::from_proto(e.cluster(), "edited").device_count(), (2 + 3 + 1) * 8);
    table->setCurrentCell(0, 0);
    e.removeGroupButton()->click();
    QCOMPARE(e.cluster().node_groups_size(), 1);
    QCOMPARE(e.cluster().node_groups(0).nodes(), 1); // the added one is left
  }

  // The node link's measured all-reduce figures describe it as loaded: a bandwidth typed anew
  // counts for every collective, and the note said they are kept only until then.
  void typingALinkDropsItsMeasuredFigures() {
    ClusterEditor e(input_cluster_proto(smallInput()));
    auto* note = e.findChild<QLabel*>(QStringLiteral("keptNote"));
    QVERIFY(note != nullptr);
    QVERIFY2(note->text().contains(QStringLiteral("node link's measured figures")), qPrintable(note->text()));
    // The NIC's field shows its small-message figure; the note gives the rate large messages reach.
    QCOMPARE(edit(e, "inter_node.nic.bandwidth")->text(), QStringLiteral("6"));
    QVERIFY2(note->text().contains(QStringLiteral("up to 24 GB/s")), qPrintable(note->text()));
    QVERIFY2(note->text().contains(QStringLiteral("24 regime(s) by collective and message size, up to 232")),
             qPrintable(note->text()));
    type(e, "inter_node.nic.latency", edit(e, "inter_node.nic.latency")->text()); // the same text: kept
    QVERIFY(e.cluster().intra_node().link().collectives_size() > 0);
    type(e, "intra_node.link.bandwidth", QStringLiteral("150"));
    QVERIFY(e.isValid());
    QCOMPARE(e.cluster().intra_node().link().collectives_size(), 0);
    QCOMPARE(e.cluster().intra_node().link().protocols_size(), 0);
    QCOMPARE(e.cluster().intra_node().link().bandwidth(), 150e9);
  }

  void aSingleNodePresetNeedsNoNetworkUntilItGrows() {
    AnalysisInput in = smallInput();
    in.cluster = "localhost-cpu"; // one node, no network in the file
    in.devices = 2;
    ClusterEditor e(input_cluster_proto(in));
    QVERIFY(e.isValid());
    QVERIFY(!e.cluster().has_inter_node());
    QVERIFY(edit(e, "inter_node.nic.bandwidth")->text().isEmpty());
    type(e, "nodes", QStringLiteral("2"));
    QVERIFY(!e.isValid());
    QCOMPARE(e.invalidField(), QStringLiteral("inter_node.nic.bandwidth"));
    type(e, "inter_node.nic.bandwidth", QStringLiteral("12.5"));
    QVERIFY2(e.isValid(), qPrintable(e.errorText()));
    QCOMPARE(cluster::from_proto(e.cluster(), "edited").device_count(), 4);
  }

  void negativeBandwidthMarksTheFieldWithTheCoreMessage() {
    ClusterEditor e(input_cluster_proto(smallInput()));
    QSignalSpy validated(&e, &ClusterEditor::validated);
    type(e, "intra_node.link.bandwidth", QStringLiteral("-50"));
    QVERIFY(validated.count() >= 3); // once per key
    QVERIFY(!e.isValid());
    QVERIFY(!e.okButton()->isEnabled());
    QVERIFY(!e.saveButton()->isEnabled());
    QCOMPARE(e.invalidField(), QStringLiteral("intra_node.link.bandwidth"));
    QVERIFY(marked(e, "intra_node.link.bandwidth"));
    QVERIFY(!marked(e, "devices_per_node"));
    // The message is the core's: the same field and reason cluster::validate() gives.
    const auto core = cluster::validate(e.cluster());
    QVERIFY(core.has_value());
    QCOMPARE(core->field, std::string("intra_node.link.bandwidth"));
    QVERIFY(e.errorText().contains(QString::fromStdString(core->reason)));
    QVERIFY2(e.errorText().contains(QStringLiteral("must be positive")), qPrintable(e.errorText()));
    auto* message = e.findChild<QLabel*>(QStringLiteral("validationMessage"));
    QVERIFY(message != nullptr);
    QCOMPARE(message->text(), e.errorText());

    type(e, "intra_node.link.bandwidth", QStringLiteral("150"));
    QVERIFY(e.isValid());
    QVERIFY(e.okButton()->isEnabled());
    QVERIFY(!marked(e, "intra_node.link.bandwidth"));
    QCOMPARE(e.cluster().intra_node().link().bandwidth(), 1.5e11);
  }

  void zeroDevicesAndOtherBadFields() {
    ClusterEditor e(input_cluster_proto(smallInput()));
    type(e, "devices_per_node", QStringLiteral("0"));
    QVERIFY(!e.okButton()->isEnabled());
    QCOMPARE(e.invalidField(), QStringLiteral("devices_per_node"));
    QVERIFY2(e.errorText().contains(QStringLiteral("field 'devices_per_node': must be at least 1, got 0")),
             qPrintable(e.errorText()));
    type(e, "devices_per_node", QStringLiteral("4"));
    QVERIFY(e.isValid());

    // Not a number: the form says so before the core sees it.
    type(e, "device.peak_fp32", QStringLiteral("fast"));
    QVERIFY(!e.isValid());
    QCOMPARE(e.invalidField(), QStringLiteral("device.peak_fp32"));
    type(e, "device.peak_fp32", QStringLiteral("19.5"));
    QVERIFY(e.isValid());

    // Two nodes need a network; a NIC without bandwidth is the core's "must be positive".
    type(e, "inter_node.nic.bandwidth", QStringLiteral("0"));
    QCOMPARE(e.invalidField(), QStringLiteral("inter_node.nic.bandwidth"));
    type(e, "inter_node.nic.bandwidth", QStringLiteral("25"));
    QVERIFY(e.isValid());

    // A node that is not switched and has no direct pairs: the core names intra_node.fallback,
    // the form marks the checkbox that governs it.
    qobject_cast<QCheckBox*>(e.fieldWidget(QStringLiteral("intra_node.switched")))->setChecked(false);
    QVERIFY(!e.isValid());
    QCOMPARE(e.invalidField(), QStringLiteral("intra_node.switched"));
    QVERIFY(e.errorText().contains(QStringLiteral("intra_node.fallback")));
  }

  void editedClusterChangesTheEvaluation() {
    const auto in = smallInput();
    ClusterEditor e(input_cluster_proto(in));
    type(e, "intra_node.link.bandwidth", QStringLiteral("23")); // a tenth of 230 GB/s
    auto* name = qobject_cast<QLineEdit*>(e.fieldWidget(QStringLiteral("name")));
    name->setText(QStringLiteral("slow-a100"));
    QVERIFY(e.isValid());

    MainWindow w;
    QSignalSpy shown(&w, &MainWindow::analysisShown);
    w.setupPanel()->setInput(in);
    w.evaluate();
    QVERIFY(shown.wait(wait_ms));
    const auto preset = w.analysis();

    w.setupPanel()->setCustomCluster(io::to_json(e.cluster()));
    const auto edited = w.setupPanel()->input();
    QCOMPARE(edited.custom_cluster, io::to_json(e.cluster()));
    QCOMPARE(edited.cluster, std::string("slow-a100"));
    QVERIFY(w.setupPanel()->clusterCombo()->currentText().contains(QStringLiteral("slow-a100 (edited)")));
    QVERIFY(!w.setupPanel()->nodesSpin()->isEnabled()); // the edited cluster's own node count
    // B of the side-by-side view may use it too, once chosen.
    auto* bClusters = w.sideBySidePanel()->clusterCombo();
    QVERIFY(bClusters->findText(QStringLiteral("slow-a100 (edited)")) >= 0);
    QVERIFY(w.sideBySidePanel()->choice().custom_cluster.empty());
    bClusters->setCurrentIndex(bClusters->findText(QStringLiteral("slow-a100 (edited)")));
    QCOMPARE(w.sideBySidePanel()->choice().custom_cluster, edited.custom_cluster);
    w.evaluate();
    QVERIFY(shown.wait(wait_ms));
    const auto slow = w.analysis();
    QCOMPARE(slow->cluster.name, std::string("slow-a100"));
    QCOMPARE(slow->cluster.intra_link.bandwidth, 2.3e10);
    QCOMPARE(slow->strategy.ops.size(), preset->strategy.ops.size());
    // Data parallel all-reduces its gradients over the node's link: a tenth of the bandwidth, more time.
    QVERIFY(preset->prediction.communication_time > 0);
    QVERIFY2(slow->prediction.communication_time > preset->prediction.communication_time * 1.2,
             qPrintable(QStringLiteral("%1 vs %2")
                            .arg(slow->prediction.communication_time)
                            .arg(preset->prediction.communication_time)));
    QCOMPARE(slow->prediction.compute_time, preset->prediction.compute_time);

    // Back to the preset: the preset's figures again.
    AnalysisInput back = in;
    w.setupPanel()->setInput(back);
    QVERIFY(w.setupPanel()->input().custom_cluster.empty());
    QVERIFY(w.setupPanel()->nodesSpin()->isEnabled());
  }

  void clusterFileRoundTripReadByTheCommandLineLoader() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath(QStringLiteral("my-cluster.json"));
    ClusterEditor e(input_cluster_proto(smallInput()));
    qobject_cast<QLineEdit*>(e.fieldWidget(QStringLiteral("name")))->setText(QStringLiteral("my-cluster"));
    type(e, "nodes", QStringLiteral("3"));
    type(e, "devices_per_node", QStringLiteral("4"));
    type(e, "intra_node.link.latency", QStringLiteral("2.5"));
    QVERIFY(e.saveTo(path));

    // What `partita ... --cluster FILE` reads (cluster::load_cluster).
    const auto c = cluster::load_cluster(path.toStdString());
    QCOMPARE(c.name, std::string("my-cluster"));
    QCOMPARE(c.nodes, 3);
    QCOMPARE(c.devices_per_node, 4);
    QCOMPARE(c.device_count(), 12);
    QCOMPARE(c.intra_link.latency, 2.5e-6);

    ClusterEditor other(input_cluster_proto(smallInput()));
    QVERIFY(other.openFrom(path));
    QCOMPARE(io::to_json(other.cluster()), io::to_json(e.cluster()));
    QCOMPARE(edit(other, "nodes")->text(), QStringLiteral("3"));

    // An invalid form does not write; the file on disk stays as it was.
    QFile before(path);
    QVERIFY(before.open(QIODevice::ReadOnly));
    const QByteArray saved = before.readAll();
    type(e, "nodes", QStringLiteral("-2"));
    QVERIFY(!e.saveTo(path));
    QFile after(path);
    QVERIFY(after.open(QIODevice::ReadOnly));
    QCOMPARE(after.readAll(), saved);

    // A file that does not validate: the loader's message names the file and the field.
    QVERIFY(!other.openFrom(dir.filePath(QStringLiteral("missing.json"))));
  }

  void sessionKeepsTheEditedClusterAndTheSideBySideChoice() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    auto p = input_cluster_proto(smallInput());
    p.set_name("edited-a100");
    p.mutable_intra_node()->mutable_link()->set_bandwidth(1e11);
    SessionState state;
    state.input = smallInput();
    state.input.cluster = "edited-a100";
    state.input.custom_cluster = io::to_json(p);
    state.selectedOp = "h.0.attn.qkv";
    state.sideBySide.family = "owt";
    state.sideBySide.cluster = "dgx1";
    state.sideBySide.nodes = 2;
    state.sideBySide.devices = 16;
    // The parallelism options and the Megatron-LM set-up flags are kept too.
    state.input.tensor_parallel = 2;
    state.input.stages = 2;
    state.input.micro_batches = 4;
    state.input.schedule = "interleaved";
    state.input.chunks = 3;
    state.input.balance = "speed";
    state.input.stage_layout = "auto";
    state.input.sequence_parallel = true;
    state.input.fp32_gradients = true;
    state.input.values = "sr=16000 use_cache_branch=false"; // an ONNX file's input values
    const QString path = dir.filePath(QStringLiteral("session.json"));
    saveSession(path.toStdString(), state);
    const auto loaded = loadSession(path.toStdString());
    QCOMPARE(loaded.input.custom_cluster, state.input.custom_cluster);
    QCOMPARE(loaded.sideBySide, state.sideBySide);
    QCOMPARE(loaded.input.schedule, std::string("interleaved"));
    QCOMPARE(loaded.input.chunks, 3);
    QCOMPARE(loaded.input.balance, std::string("speed"));
    QCOMPARE(loaded.input.stage_layout, std::string("auto"));
    QVERIFY(loaded.input.sequence_parallel);
    QCOMPARE(loaded.input.values, state.input.values);
    QVERIFY(loaded == state);
    state.input.values.clear(); // the window below holds a built-in model, which takes none
    const auto defaults = AnalysisInput{};
    state.input.tensor_parallel = defaults.tensor_parallel; // hybrid below reads none of them
    state.input.stages = defaults.stages;
    state.input.micro_batches = defaults.micro_batches;
    state.input.schedule = defaults.schedule;
    state.input.chunks = defaults.chunks;
    state.input.balance = defaults.balance;
    state.input.stage_layout = defaults.stage_layout;

    // B on an edited cluster too.
    state.sideBySide.custom_cluster = io::to_json(p);
    state.sideBySide.cluster = "edited-a100";
    saveSession(path.toStdString(), state);
    QVERIFY(loadSession(path.toStdString()) == state);

    // Through the window: save, then open in another window.
    MainWindow w;
    w.setupPanel()->setInput(state.input);
    w.sideBySidePanel()->setChoice(state.sideBySide);
    QCOMPARE(w.sideBySidePanel()->choice(), state.sideBySide);
    const QString windowPath = dir.filePath(QStringLiteral("window.json"));
    QVERIFY(w.saveSession(windowPath));
    MainWindow w2;
    QSignalSpy shown(&w2, &MainWindow::analysisShown);
    QVERIFY(w2.openSession(windowPath));
    QCOMPARE(w2.setupPanel()->input().custom_cluster, state.input.custom_cluster);
    QCOMPARE(w2.sideBySidePanel()->choice(), state.sideBySide);
    QVERIFY2(shown.wait(wait_ms), qPrintable(w2.errorMessage()));
    QCOMPARE(w2.analysis()->cluster.name, std::string("edited-a100"));
    QCOMPARE(w2.analysis()->cluster.intra_link.bandwidth, 1e11);

    // An edited cluster that does not validate: the session is refused, naming the field.
    p.set_devices_per_node(0);
    state.input.custom_cluster = io::to_json(p);
    saveSession(path.toStdString(), state);
    try {
      (void)loadSession(path.toStdString());
      QFAIL("a session with an invalid cluster loaded");
    } catch (const Error& e) {
      QVERIFY2(QString::fromUtf8(e.what()).contains(QStringLiteral("field 'custom_cluster.devices_per_node'")),
               e.what());
    }
    // A pipeline cut that is none of the four: refused, naming it.
    state.input.custom_cluster.clear();
    state.input.balance = "fastest";
    saveSession(path.toStdString(), state);
    try {
      (void)loadSession(path.toStdString());
      QFAIL("a session with an unknown cut loaded");
    } catch (const Error& e) {
      QVERIFY2(QString::fromUtf8(e.what()).contains(QStringLiteral("cut 'fastest'")), e.what());
    }
  }
};

QTEST_MAIN(TestClusterEditor)
#include "tst_cluster_editor.moc"
