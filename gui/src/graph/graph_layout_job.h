#pragma once

// Runs layoutGraph() off the GUI thread with progress and cancel. dot cannot be interrupted:
// a cancelled or superseded layout runs to its end on the worker and its result is dropped.
// Graphviz is not thread-safe, so all layouts share one worker thread.

#include "common/analysis.h"
#include "graph/graph_layout.h"

#include <QFutureWatcher>
#include <QObject>

#include <atomic>
#include <memory>

namespace partita::gui {

struct LayoutOutcome {
  std::shared_ptr<const GraphLayout> layout;
  QString error;
  bool cancelled = false;
};

class GraphLayoutJob : public QObject {
  Q_OBJECT
public:
  explicit GraphLayoutJob(QObject* parent = nullptr);
  ~GraphLayoutJob() override;

  LayoutOptions options;

  // Lays out the model of `analysis`; a running layout is cancelled and its result dropped.
  void start(std::shared_ptr<const Analysis> analysis);
  void cancel(); // ends with cancelled() at once
  bool isRunning() const { return m_watcher != nullptr; }

Q_SIGNALS:
  void progressChanged(double fraction);
  void layoutReady(std::shared_ptr<const GraphLayout> layout, std::shared_ptr<const Analysis> analysis);
  void failed(const QString& message);
  void cancelled();
  void finished(); // after any of the three above

private:
  void drop(); // forgets the running job
  void onFinished(QFutureWatcher<LayoutOutcome>* watcher);

  QFutureWatcher<LayoutOutcome>* m_watcher = nullptr;
  std::shared_ptr<std::atomic<bool>> m_cancel;
  std::shared_ptr<const Analysis> m_analysis;
};

} // namespace partita::gui
