#pragma once

// Partita's main window: the set-up panel on the left; on the right a message bar for the core's
// errors and tabs for the layer table with its inspector, the charts and the comparison; in the
// status bar the progress of the running job and its Cancel button. All work runs in an
// AnalysisRunner, off the GUI thread.

#include "common/analysis.h"

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
class GraphView;
class InspectorPanel;
class LayersPanel;
class ParetoPanel;
class RunPanel;
class SetupPanel;
class SideBySidePanel;
class SweepPanel;
class TimelinePanel;

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
  // The Scaling tab's sweep over its families and device counts (shows the error when the counts
  // do not parse).
  void sweep();
  // The Side by side tab: the panel's set-up (A) beside the tab's choice (B).
  void sideBySide();
  void cancel();

  // File menu actions; each returns false after showing the error in the message bar, leaving
  // what is on screen as it was.
  bool saveSession(const QString& path);
  bool openSession(const QString& path);  // sets the panel and re-runs the evaluation
  bool exportTable(const QString& path);  // CSV
  bool exportCharts(const QString& path); // PNG or SVG by suffix
  bool exportGraph(const QString& path);  // PNG or SVG by suffix

  std::shared_ptr<const Analysis> analysis() const { return m_analysis; }
  QString errorMessage() const; // empty when the message bar is hidden
  // What of the set-up differs from the analysis on screen ("devices 8 → 64, family"); empty when
  // the results are current. Shown above the results until they are.
  QString staleReason() const;
  bool isBusy() const;
  QStringList recentFiles() const;

  SetupPanel* setupPanel() const { return m_setup; }
  LayersPanel* layersPanel() const { return m_layers; }
  InspectorPanel* inspector() const { return m_inspector; }
  ChartsPanel* chartsPanel() const { return m_charts; }
  TimelinePanel* timelinePanel() const { return m_timeline; }
  ParetoPanel* paretoPanel() const { return m_pareto; }
  GraphView* graphView() const { return m_graph; }
  ComparePanel* comparePanel() const { return m_compare; }
  SweepPanel* sweepPanel() const { return m_sweep; }
  RunPanel* runPanel() const { return m_run; }
  SideBySidePanel* sideBySidePanel() const { return m_sideBySide; }
  QTabWidget* tabs() const { return m_tabs; }
  AnalysisRunner* runner() const { return m_runner; }
  QPushButton* cancelButton() const { return m_cancel; }

Q_SIGNALS:
  void analysisShown();   // a new analysis is on screen
  void comparisonShown(); // a new comparison is on screen
  void sweepShown();      // a new scaling sweep is on screen
  void sideBySideShown(); // a new side-by-side is on screen
  void errorShown(const QString& message);

protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

private:
  void buildMenus();
  void showAnalysis(std::shared_ptr<const Analysis> analysis);
  // The latest run of the plan on screen (same model, family and devices), measured against it, in
  // the layer table and the charts.
  void showMeasured();
  void showError(const QString& message);
  void hideError();
  void updateStale();
  void setBusy(bool busy, const QString& what = {});
  void addRecentFile(const QString& path);
  void rebuildRecentMenu();
  void openFileDialog();
  void saveSessionDialog();
  void openSessionDialog();
  void exportDialog(const QString& title, const QString& filter, bool (MainWindow::*action)(const QString&));
  void selectOp(graph::OpId id); // table, graph and inspector

  std::shared_ptr<const Analysis> m_analysis;
  AnalysisRunner* m_runner;
  SetupPanel* m_setup;
  QWidget* m_messageBar;
  QLabel* m_message;
  QLabel* m_staleBar;
  QTabWidget* m_tabs;
  LayersPanel* m_layers;
  InspectorPanel* m_inspector;
  ChartsPanel* m_charts;
  TimelinePanel* m_timeline;
  ParetoPanel* m_pareto;
  GraphView* m_graph;
  ComparePanel* m_compare;
  SweepPanel* m_sweep;
  SideBySidePanel* m_sideBySide;
  RunPanel* m_run;
  QLabel* m_status;
  QProgressBar* m_progress;
  QPushButton* m_cancel;
  QMenu* m_recentMenu = nullptr;
  QString m_pendingFile; // the ONNX file being opened, until it loads
  QString m_pendingOp;   // the op a restored session selects once evaluated
};

} // namespace partita::gui
