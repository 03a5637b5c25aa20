#pragma once

// Runs run_analysis(), run_comparison(), run_sweep() and run_side_by_side() off the GUI thread (QtConcurrent on a pool
// of its own), reports progress, and cancels through the core's cancel flag. One job at a time: a new job cancels the
// running one, whose result is then dropped.

#include "common/analysis.h"

#include <QFutureWatcher>
#include <QObject>
#include <QThreadPool>

#include <atomic>
#include <memory>

namespace partita::gui {

struct JobOutcome {
  std::shared_ptr<const Analysis> analysis;
  std::shared_ptr<const Comparison> comparison;
  std::shared_ptr<const Sweep> sweep;
  std::shared_ptr<const SideBySide> sideBySide;
  QString error; // the core's message
  bool cancelled = false;
};

class AnalysisRunner : public QObject {
  Q_OBJECT
public:
  explicit AnalysisRunner(QObject* parent = nullptr);
  ~AnalysisRunner() override;

  bool isRunning() const { return m_watcher != nullptr; }

  void evaluate(const AnalysisInput& input);
  void compare(const AnalysisInput& input);
  void sweep(const AnalysisInput& input, const std::vector<std::string>& families, const std::vector<int>& devices);
  void sideBySide(const AnalysisInput& first, const SideBySideChoice& choice);
  // Sets the running job's cancel flag; it ends with cancelled() at its next check.
  void cancel();

Q_SIGNALS:
  void started(const QString& what);
  void progressChanged(double fraction); // 0 .. 1
  void analysisReady(std::shared_ptr<const Analysis> analysis);
  void comparisonReady(std::shared_ptr<const Comparison> comparison);
  void sweepReady(std::shared_ptr<const Sweep> sweep);
  void sideBySideReady(std::shared_ptr<const SideBySide> sideBySide);
  void failed(const QString& message);
  void cancelled();
  void finished(); // after any of the above

private:
  template <typename Work> void start(const QString& what, Work work);
  void onFinished(QFutureWatcher<JobOutcome>* watcher);

  QThreadPool m_pool;
  QFutureWatcher<JobOutcome>* m_watcher = nullptr;
  std::shared_ptr<std::atomic<bool>> m_cancel;
};

} // namespace partita::gui
