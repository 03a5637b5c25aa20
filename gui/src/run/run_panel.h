#pragma once

// The Run tab (issue 5): runs the plan on screen for real (RunJob: mpirun + partita-run), with
// progress, a live log and Cancel; then lays measured against predicted per op (table and a
// predicted-vs-measured scatter with the error figures) and shows what every rank did in a timed
// iteration. Runs stay in the list (and in the session), so two runs can be compared side by side.

#include "run/run_job.h"

#include <QWidget>

#include <memory>
#include <vector>

class QComboBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QSpinBox;
class QTabWidget;
class QTableView;

namespace partita::gui {

class ChartWidget;
class RunOpsModel;
class TimelineWidget;

class RunPanel : public QWidget {
  Q_OBJECT
public:
  explicit RunPanel(QWidget* parent = nullptr);

  // Also lays restored runs of this plan (same model, family and ranks) against its prediction.
  void setAnalysis(std::shared_ptr<const Analysis> analysis);
  // A run of `analysis`' plan: same model, strategy family and device count.
  static bool matches(const RunRecord& run, const Analysis& analysis);
  // Starts a run of the current analysis; false when it could not start (the reason is shown).
  bool startRun();
  void cancelRun();

  const std::vector<std::shared_ptr<const RunRecord>>& runs() const { return m_runs; }
  // Adds a finished (or restored) run and shows it.
  void addRun(std::shared_ptr<const RunRecord> run);
  void clearRuns();
  // Shows run `a`, side by side with run `b` (-1: none).
  void showRuns(int a, int b);

  RunJob* job() const { return m_job; }
  RunSettings settings() const;
  RunOpsModel* opsModel() const { return m_model; }
  TimelineWidget* timeline() const { return m_timeline; }
  ChartWidget* scatter() const { return m_scatter; }
  QTabWidget* views() const { return m_views; } // per op, scatter, timeline, log
  QString summaryText() const;
  QString logText() const;
  QPushButton* runButton() const { return m_run; }
  QPushButton* cancelButton() const { return m_cancel; }
  QComboBox* launcherChoice() const { return m_launcher; }
  QLineEdit* hostfileEdit() const { return m_hostfile; }

Q_SIGNALS:
  void runFinished(std::shared_ptr<const RunRecord> run); // also for restored runs
  void runsChanged();

private:
  void onFinished(std::shared_ptr<const RunRecord> run);
  void onFailed(const QString& message);
  void updateButtons();
  void showTimeline();

  std::shared_ptr<const Analysis> m_analysis;
  std::vector<std::shared_ptr<const RunRecord>> m_runs;
  RunJob* m_job;
  RunOpsModel* m_model;
  QSortFilterProxyModel* m_proxy;
  QPushButton* m_run;
  QPushButton* m_cancel;
  QSpinBox* m_iterations;
  QSpinBox* m_threads;
  QComboBox* m_backend;
  QComboBox* m_launcher;
  QLineEdit* m_hostfile;
  QProgressBar* m_progress;
  QLabel* m_status;
  QLabel* m_summary;
  QListWidget* m_list;
  QComboBox* m_compareWith;
  QTableView* m_view;
  ChartWidget* m_scatter;
  TimelineWidget* m_timeline;
  QSpinBox* m_iteration;
  QPlainTextEdit* m_log;
  QTabWidget* m_views;
};

} // namespace partita::gui
