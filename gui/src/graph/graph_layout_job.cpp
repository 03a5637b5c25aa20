#include "graph/graph_layout_job.h"

#include "partita/graph/error.h"

#include <QPromise>
#include <QThreadPool>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>

namespace partita::gui {

namespace {
constexpr int progressSteps = 1000;

// One thread for every layout of the process (Graphviz keeps global state); waited for at exit.
QThreadPool* layoutPool() {
  static QThreadPool pool;
  pool.setMaxThreadCount(1);
  return &pool;
}
} // namespace

GraphLayoutJob::GraphLayoutJob(QObject* parent) : QObject(parent) {}

GraphLayoutJob::~GraphLayoutJob() {
  // The worker holds what it needs (the analysis, the flag); it finishes on its own.
  if (m_cancel) {
    m_cancel->store(true);
  }
}

void GraphLayoutJob::drop() {
  if (m_watcher == nullptr) {
    return;
  }
  m_cancel->store(true);
  m_watcher->disconnect(this);
  connect(m_watcher, &QFutureWatcherBase::finished, m_watcher, &QObject::deleteLater);
  m_watcher = nullptr;
  m_cancel.reset();
  m_analysis.reset();
}

void GraphLayoutJob::start(std::shared_ptr<const Analysis> analysis) {
  drop();
  m_cancel = std::make_shared<std::atomic<bool>>(false);
  m_analysis = std::move(analysis);
  auto* watcher = new QFutureWatcher<LayoutOutcome>(this);
  m_watcher = watcher;
  connect(watcher, &QFutureWatcherBase::progressValueChanged, this,
          [this](int value) { Q_EMIT progressChanged(static_cast<double>(value) / progressSteps); });
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher] { onFinished(watcher); });
  auto job = [analysis = m_analysis, flag = m_cancel, options = options](QPromise<LayoutOutcome>& promise) {
    promise.setProgressRange(0, progressSteps);
    const ProgressFn progress = [&promise](double f) {
      promise.setProgressValue(static_cast<int>(std::clamp(f, 0.0, 1.0) * progressSteps));
    };
    try {
      promise.addResult(LayoutOutcome{layoutGraph(analysis->model.graph, options, flag.get(), progress), {}, false});
    } catch (const Cancelled&) {
      promise.addResult(LayoutOutcome{{}, {}, true});
    } catch (const std::exception& e) {
      promise.addResult(LayoutOutcome{{}, QString::fromUtf8(e.what()), false});
    }
  };
  watcher->setFuture(QtConcurrent::run(layoutPool(), std::move(job)));
}

void GraphLayoutJob::cancel() {
  if (m_watcher == nullptr) {
    return;
  }
  drop();
  Q_EMIT cancelled();
  Q_EMIT finished();
}

void GraphLayoutJob::onFinished(QFutureWatcher<LayoutOutcome>* watcher) {
  watcher->deleteLater();
  if (watcher != m_watcher) {
    return;
  }
  const auto analysis = m_analysis;
  m_watcher = nullptr;
  m_cancel.reset();
  m_analysis.reset();
  const auto future = watcher->future();
  const LayoutOutcome outcome = future.resultCount() > 0 ? future.result() : LayoutOutcome{{}, tr("no result"), false};
  if (outcome.cancelled) {
    Q_EMIT cancelled();
  } else if (!outcome.error.isEmpty()) {
    Q_EMIT failed(outcome.error);
  } else {
    Q_EMIT layoutReady(outcome.layout, analysis);
  }
  Q_EMIT finished();
}

} // namespace partita::gui
