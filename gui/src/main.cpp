// partita-gui: the desktop explorer. `partita-gui [MODEL]` evaluates MODEL (a zoo spec such as
// zoo:resnet50?batch=32 or an ONNX file) at start; `--screenshots DIR` renders the main window,
// the inspector and the charts to DIR/*.png and exits (scripts/screenshots).

#include "main_window.h"
#include "screenshots.h"
#include "setup_panel.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

int main(int argc, char** argv) {
  QApplication app(argc, argv);
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
    }
  }
  if (parser.isSet(devices)) {
    input.devices = parser.value(devices).toInt();
    input.nodes = 0; // grown below to fit
  }
  if (parser.isSet(cluster)) {
    input.cluster = parser.value(cluster).toStdString();
  }
  if (parser.isSet(family)) {
    input.family = parser.value(family).toStdString();
  }
  input.nodes = partita::gui::nodes_for(input);
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
