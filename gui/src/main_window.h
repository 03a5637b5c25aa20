#pragma once

// Partita's main window: the set-up panel on the left; on the right a message bar for the core's
// errors and tabs for the layer table with its inspector, the charts and the comparison; in the
// status bar the progress of the running job and its Cancel button. All work runs in an
// AnalysisRunner, off the GUI thread.

#include "analysis.h"

#include <QMainWindow>

#include <memory>

class QLabel;
class QMenu;
class QProgressBar;
class QPushButton;
class QTabWidget;

namespace partita::gui {

class AnalysisRunner;
class ChartsPanel;
class ComparePanel;
class InspectorPanel;
class LayersPanel;
class SetupPanel;

class MainWindow : public QMainWindow {
  Q_OBJECT
public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Evaluates what the side panel says.
  void evaluate();
  // Evaluates an ONNX file with the panel's other settings; it joins the model list and the recent
  // files only once it loaded.
  void openFile(const QString& path);
  void compare();
  void cancel();

  std::shared_ptr<const Analysis> analysis() const { return m_analysis; }
  QString errorMessage() const; // empty when the message bar is hidden
  bool isBusy() const;
  QStringList recentFiles() const;

  SetupPanel* setupPanel() const { return m_setup; }
  LayersPanel* layersPanel() const { return m_layers; }
  InspectorPanel* inspector() const { return m_inspector; }
  ChartsPanel* chartsPanel() const { return m_charts; }
  ComparePanel* comparePanel() const { return m_compare; }
  QTabWidget* tabs() const { return m_tabs; }
  AnalysisRunner* runner() const { return m_runner; }
  QPushButton* cancelButton() const { return m_cancel; }

Q_SIGNALS:
  void analysisShown();   // a new analysis is on screen
  void comparisonShown(); // a new comparison is on screen
  void errorShown(const QString& message);

protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

private:
  void buildMenus();
  void showAnalysis(std::shared_ptr<const Analysis> analysis);
  void showError(const QString& message);
  void hideError();
  void setBusy(bool busy, const QString& what = {});
  void addRecentFile(const QString& path);
  void rebuildRecentMenu();
  void openFileDialog();

  std::shared_ptr<const Analysis> m_analysis;
  AnalysisRunner* m_runner;
  SetupPanel* m_setup;
  QWidget* m_messageBar;
  QLabel* m_message;
  QTabWidget* m_tabs;
  LayersPanel* m_layers;
  InspectorPanel* m_inspector;
  ChartsPanel* m_charts;
  ComparePanel* m_compare;
  QLabel* m_status;
  QProgressBar* m_progress;
  QPushButton* m_cancel;
  QMenu* m_recentMenu = nullptr;
  QString m_pendingFile; // the ONNX file being opened, until it loads
};

} // namespace partita::gui
