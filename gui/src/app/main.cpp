// partita-gui: the desktop explorer. `partita-gui [MODEL]` evaluates MODEL (a zoo spec such as
// zoo:resnet50?batch=32 or an ONNX file) at start; `--screenshots DIR` renders the main window,
// the inspector and the charts to DIR/*.png and exits (scripts/screenshots).

#include "app/main_window.h"
#include "app/screenshots.h"
#include "setup/setup_panel.h"

#include "partita/graph/error.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QSpinBox>
#include <QTimer>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace {

// A command-line mistake: named on stderr, exit status 2 (nothing is replaced by another value).
[[noreturn]] void refuse(const QString& message) {
  std::fprintf(stderr, "partita-gui: %s\n", message.toLocal8Bit().constData());
  std::exit(2);
}

int run(QApplication& app);

} // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  try {
    return run(app);
  } catch (const std::exception& e) {
    // No exception leaves main: the core's message, and a failure status.
    std::fprintf(stderr, "partita-gui: %s\n", e.what());
    return 1;
  }
}

namespace {

int run(QApplication& app) {
  QApplication::setOrganizationName(QStringLiteral("Partita"));
  QApplication::setApplicationName(QStringLiteral("partita-gui"));
  QApplication::setApplicationVersion(QStringLiteral(PARTITA_VERSION));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Partita: explore parallelization strategies for DNN training"));
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument(QStringLiteral("model"),
                               QStringLiteral("zoo model spec (zoo:resnet50?batch=32) or ONNX file to evaluate"));
  QCommandLineOption devices(QStringLiteral("devices"), QStringLiteral("devices to use"), QStringLiteral("N"));
  QCommandLineOption cluster(QStringLiteral("cluster"), QStringLiteral("cluster preset"), QStringLiteral("NAME"));
  QCommandLineOption family(QStringLiteral("strategy"), QStringLiteral("strategy family"), QStringLiteral("NAME"));
  QCommandLineOption screenshots(QStringLiteral("screenshots"), QStringLiteral("render screenshots to DIR and exit"),
                                 QStringLiteral("DIR"));
  parser.addOptions({devices, cluster, family, screenshots});
  parser.process(app);

  partita::gui::MainWindow window;
  auto input = window.setupPanel()->input();
  const QStringList args = parser.positionalArguments();
  if (!args.isEmpty()) {
    input.model = args.front().toStdString();
    if (!args.front().startsWith(QStringLiteral("zoo:"))) {
      input.dims.clear();
      input.values.clear();
    }
  }
  if (parser.isSet(devices)) {
    bool ok = false;
    input.devices = parser.value(devices).toInt(&ok);
    if (!ok || input.devices < 1) {
      refuse(QStringLiteral("--devices: expected a whole number of devices, at least 1, got '%1'")
                 .arg(parser.value(devices)));
    }
    input.nodes = 0; // grown below to fit
  }
  if (parser.isSet(cluster)) {
    input.cluster = parser.value(cluster).toStdString();
  }
  if (parser.isSet(family)) {
    input.family = parser.value(family).toStdString();
    const auto offered = partita::gui::offered_families();
    if (std::none_of(offered.begin(), offered.end(), [&](const auto* f) { return f->name() == input.family; })) {
      QStringList names;
      for (const auto* f : offered) {
        names << QString::fromStdString(std::string(f->name()));
      }
      refuse(QStringLiteral("--strategy: no family '%1' (families: %2)")
                 .arg(parser.value(family), names.join(QStringLiteral(", "))));
    }
  }
  try {
    input.nodes = partita::gui::nodes_for(input);
    (void)partita::gui::load_input_cluster(input);
  } catch (const partita::Error& e) {
    refuse(QStringLiteral("--cluster/--devices: %1").arg(QString::fromUtf8(e.what())));
  }
  const auto* panel = window.setupPanel();
  if (input.devices > panel->devicesSpin()->maximum() || input.nodes > panel->nodesSpin()->maximum()) {
    refuse(QStringLiteral("--devices: %1 devices (%2 nodes) is more than the window holds: at most %3 devices and %4 "
                          "nodes")
               .arg(input.devices)
               .arg(input.nodes)
               .arg(panel->devicesSpin()->maximum())
               .arg(panel->nodesSpin()->maximum()));
  }
  window.setupPanel()->setInput(input);

  if (parser.isSet(screenshots)) {
    return partita::gui::render_screenshots(window, parser.value(screenshots));
  }
  window.show();
  if (!args.isEmpty() || parser.isSet(devices) || parser.isSet(cluster) || parser.isSet(family)) {
    QTimer::singleShot(0, &window, &partita::gui::MainWindow::evaluate);
  }
  return QApplication::exec();
}

} // namespace
