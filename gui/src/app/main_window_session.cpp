// MainWindow: sessions (File > Open/Save Session) and exports (table as CSV, charts and graph as
// PNG or SVG). Errors go to the message bar; what is on screen stays.

#include "app/main_window.h"
#include "charts/charts_panel.h"
#include "common/analysis_runner.h"
#include "common/export.h"
#include "common/session.h"
#include "compare/side_by_side_panel.h"
#include "graph/graph_view.h"
#include "layers/inspector_panel.h"
#include "run/run_panel.h"
#include "setup/setup_panel.h"

#include "partita/graph/error.h"

#include <QFileDialog>
#include <QStatusBar>

namespace partita::gui {

namespace {
std::filesystem::path fsPath(const QString& path) {
  return std::filesystem::path(path.toStdU16String());
}
} // namespace

bool MainWindow::saveSession(const QString& path) {
  SessionState state;
  state.input = m_setup->input();
  state.sideBySide = m_sideBySide->choice();
  state.runs = m_run->runs();
  if (m_analysis) {
    if (const auto* layer = m_analysis->layer_of(m_inspector->op())) {
      state.selectedOp = layer->name;
    }
  }
  try {
    gui::saveSession(fsPath(path), state);
  } catch (const std::exception& e) {
    showError(QString::fromUtf8(e.what()));
    return false;
  }
  statusBar()->showMessage(tr("Session saved to %1").arg(path), 5000);
  return true;
}

bool MainWindow::openSession(const QString& path) {
  SessionState state;
  try {
    state = loadSession(fsPath(path));
  } catch (const std::exception& e) {
    showError(QString::fromUtf8(e.what()));
    return false;
  }
  hideError();
  m_setup->setInput(state.input);
  m_sideBySide->setChoice(state.sideBySide);
  m_run->clearRuns();
  for (const auto& run : state.runs) {
    m_run->addRun(run);
  }
  m_pendingOp = QString::fromStdString(state.selectedOp);
  m_pendingFile.clear();
  m_runner->evaluate(state.input);
  return true;
}

bool MainWindow::exportTable(const QString& path) {
  if (!m_analysis) {
    showError(tr("No table to export: evaluate a model first"));
    return false;
  }
  const QString error = exportLayerTable(*m_analysis, path);
  if (!error.isEmpty()) {
    showError(error);
    return false;
  }
  statusBar()->showMessage(tr("Table exported to %1").arg(path), 5000);
  return true;
}

bool MainWindow::exportCharts(const QString& path) {
  if (!m_analysis) {
    showError(tr("No charts to export: evaluate a model first"));
    return false;
  }
  const QString error = exportWidget(m_charts, path);
  if (!error.isEmpty()) {
    showError(error);
    return false;
  }
  statusBar()->showMessage(tr("Charts exported to %1").arg(path), 5000);
  return true;
}

bool MainWindow::exportGraph(const QString& path) {
  const QString error = m_graph->exportImage(path);
  if (!error.isEmpty()) {
    showError(error);
    return false;
  }
  statusBar()->showMessage(tr("Graph exported to %1").arg(path), 5000);
  return true;
}

void MainWindow::saveSessionDialog() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Save session"), QStringLiteral("session.json"),
                                                    tr("Partita sessions (*.json);;All files (*)"));
  if (!path.isEmpty()) {
    saveSession(path);
  }
}

void MainWindow::openSessionDialog() {
  const QString path =
      QFileDialog::getOpenFileName(this, tr("Open session"), QString(), tr("Partita sessions (*.json);;All files (*)"));
  if (!path.isEmpty()) {
    openSession(path);
  }
}

void MainWindow::exportDialog(const QString& title, const QString& filter, bool (MainWindow::*action)(const QString&)) {
  const QString path = QFileDialog::getSaveFileName(this, title, QString(), filter);
  if (!path.isEmpty()) {
    (this->*action)(path);
  }
}

} // namespace partita::gui
