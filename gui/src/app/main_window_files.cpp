// MainWindow: menus, the Open dialog, drag and drop of ONNX files, recent files in QSettings.

#include "app/main_window.h"

#include "app/help.h"

#include <QAction>
#include <QApplication>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenu>
#include <QMenuBar>
#include <QMimeData>
#include <QSettings>
#include <QUrl>

namespace partita::gui {

namespace {
const QString recent_key = QStringLiteral("recentFiles");
constexpr int max_recent = 10;

QString droppedOnnx(const QMimeData* mime) {
  if (mime == nullptr || !mime->hasUrls()) {
    return {};
  }
  for (const QUrl& url : mime->urls()) {
    if (url.isLocalFile() && url.toLocalFile().endsWith(QStringLiteral(".onnx"), Qt::CaseInsensitive)) {
      return url.toLocalFile();
    }
  }
  return {};
}
} // namespace

void MainWindow::buildMenus() {
  auto* file = menuBar()->addMenu(tr("&File"));
  auto* open = file->addAction(tr("&Open ONNX…"), this, &MainWindow::openFileDialog);
  open->setShortcut(QKeySequence::Open);
  m_recentMenu = file->addMenu(tr("Open &Recent"));
  file->addSeparator();
  file->addAction(tr("Open &Session…"), this, &MainWindow::openSessionDialog)
      ->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
  file->addAction(tr("Sa&ve Session…"), this, &MainWindow::saveSessionDialog)->setShortcut(QKeySequence::Save);
  file->addSeparator();
  const QString pictures = tr("PNG image (*.png);;SVG drawing (*.svg)");
  file->addAction(tr("Export &Table…"), this,
                  [this] { exportDialog(tr("Export the layer table"), tr("CSV (*.csv)"), &MainWindow::exportTable); });
  file->addAction(tr("Export &Charts…"), this,
                  [this, pictures] { exportDialog(tr("Export the charts"), pictures, &MainWindow::exportCharts); });
  file->addAction(tr("Export &Graph…"), this,
                  [this, pictures] { exportDialog(tr("Export the graph"), pictures, &MainWindow::exportGraph); });
  file->addSeparator();
  auto* quit = file->addAction(tr("&Quit"), qApp, &QApplication::closeAllWindows);
  quit->setShortcut(QKeySequence::Quit);

  auto* run = menuBar()->addMenu(tr("&Run"));
  run->addAction(tr("&Evaluate"), this, &MainWindow::evaluate)->setShortcut(QKeySequence(Qt::Key_F5));
  run->addAction(tr("&Compare all families"), this, &MainWindow::compare)->setShortcut(QKeySequence(Qt::Key_F6));
  run->addAction(tr("C&ancel"), this, &MainWindow::cancel);

  auto* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("Partita &Help"), this, [this] { showHelp(this); })->setShortcut(QKeySequence::HelpContents);
  help->addAction(tr("&About Partita"), this, [this] { showAbout(this); });
  help->addAction(tr("About &Qt"), qApp, &QApplication::aboutQt);
  rebuildRecentMenu();
}

void MainWindow::openFileDialog() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open an ONNX model"), QString(),
                                                    tr("ONNX models (*.onnx);;All files (*)"));
  if (!path.isEmpty()) {
    openFile(path);
  }
}

QStringList MainWindow::recentFiles() const {
  return QSettings().value(recent_key).toStringList();
}

void MainWindow::addRecentFile(const QString& path) {
  const QString absolute = QFileInfo(path).absoluteFilePath();
  QStringList files = recentFiles();
  files.removeAll(absolute);
  files.prepend(absolute);
  while (files.size() > max_recent) {
    files.removeLast();
  }
  QSettings().setValue(recent_key, files);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  m_recentMenu->clear();
  const QStringList files = recentFiles();
  for (const QString& f : files) {
    m_recentMenu->addAction(QFileInfo(f).fileName(), this, [this, f] { openFile(f); })->setToolTip(f);
  }
  m_recentMenu->setEnabled(!files.isEmpty());
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (!droppedOnnx(event->mimeData()).isEmpty()) {
    event->acceptProposedAction();
  }
}

void MainWindow::dropEvent(QDropEvent* event) {
  const QString path = droppedOnnx(event->mimeData());
  if (!path.isEmpty()) {
    event->acceptProposedAction();
    openFile(path);
  }
}

} // namespace partita::gui
