#include "analysis_runner.h"

#include "format.h"

#include "partita/graph/error.h"

#include <QPromise>
#include <QtConcurrent/QtConcurrentRun>

namespace partita::gui {

namespace {
constexpr int progress_steps = 1000;
}

AnalysisRunner::AnalysisRunner(QObject* parent) : QObject(parent) {
  m_pool.setMaxThreadCount(1);
}

AnalysisRunner::~AnalysisRunner() {
  cancel();
  m_pool.waitForDone();
}

void AnalysisRunner::evaluate(const AnalysisInput& input) {
  start(tr("Evaluating %1 with %2 on %3 devices").arg(qs(input.model), qs(input.family)).arg(input.devices),
        [input](const std::atomic<bool>* cancel, const ProgressFn& progress) {
          return JobOutcome{run_analysis(input, cancel, progress), {}, {}, false};
        });
}

void AnalysisRunner::compare(const AnalysisInput& input) {
  start(tr("Comparing every strategy family on %1").arg(qs(input.model)),
        [input](const std::atomic<bool>* cancel, const ProgressFn& progress) {
          return JobOutcome{{}, run_comparison(input, cancel, progress), {}, false};
        });
}

void AnalysisRunner::cancel() {
  if (m_cancel) {
    m_cancel->store(true);
  }
}

template <typename Work> void AnalysisRunner::start(const QString& what, Work work) {
  if (m_watcher != nullptr) {
    // Superseded: its result is dropped, the watcher goes when the job ends.
    cancel();
    m_watcher->disconnect(this);
    connect(m_watcher, &QFutureWatcherBase::finished, m_watcher, &QObject::deleteLater);
    m_watcher = nullptr;
  }
  m_cancel = std::make_shared<std::atomic<bool>>(false);
  auto* watcher = new QFutureWatcher<JobOutcome>(this);
  m_watcher = watcher;
  connect(watcher, &QFutureWatcherBase::progressValueChanged, this,
          [this](int value) { Q_EMIT progressChanged(static_cast<double>(value) / progress_steps); });
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher] { onFinished(watcher); });
  auto job = [work = std::move(work), flag = m_cancel](QPromise<JobOutcome>& promise) {
    promise.setProgressRange(0, progress_steps);
    const ProgressFn progress = [&promise](double f) {
      promise.setProgressValue(static_cast<int>(std::clamp(f, 0.0, 1.0) * progress_steps));
    };
    try {
      promise.addResult(work(flag.get(), progress));
    } catch (const Cancelled&) {
      promise.addResult(JobOutcome{{}, {}, {}, true});
    } catch (const std::exception& e) {
      // partita::Error carries the core's message; anything else is still shown, not lost.
      promise.addResult(JobOutcome{{}, {}, QString::fromUtf8(e.what()), false});
    }
  };
  watcher->setFuture(QtConcurrent::run(&m_pool, std::move(job)));
  Q_EMIT started(what);
}

void AnalysisRunner::onFinished(QFutureWatcher<JobOutcome>* watcher) {
  watcher->deleteLater();
  if (watcher != m_watcher) {
    return;
  }
  m_watcher = nullptr;
  m_cancel.reset();
  const auto future = watcher->future();
  const JobOutcome outcome = future.resultCount() > 0 ? future.result() : JobOutcome{{}, {}, tr("no result"), false};
  if (outcome.cancelled) {
    Q_EMIT cancelled();
  } else if (!outcome.error.isEmpty()) {
    Q_EMIT failed(outcome.error);
  } else if (outcome.analysis) {
    Q_EMIT analysisReady(outcome.analysis);
  } else if (outcome.comparison) {
    Q_EMIT comparisonReady(outcome.comparison);
  }
  Q_EMIT finished();
}

} // namespace partita::gui
