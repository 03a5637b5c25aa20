#include "common/analysis_runner.h"

#include "common/format.h"

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
          JobOutcome out;
          out.analysis = run_analysis(input, cancel, progress);
          return out;
        });
}

void AnalysisRunner::compare(const AnalysisInput& input) {
  start(tr("Comparing every strategy family on %1").arg(qs(input.model)),
        [input](const std::atomic<bool>* cancel, const ProgressFn& progress) {
          JobOutcome out;
          out.comparison = run_comparison(input, cancel, progress);
          return out;
        });
}

void AnalysisRunner::sweep(const AnalysisInput& input, const std::vector<std::string>& families,
                           const std::vector<int>& devices) {
  start(tr("Sweeping %1 families over %2 device counts on %3")
            .arg(families.size())
            .arg(devices.size())
            .arg(qs(input.model)),
        [input, families, devices](const std::atomic<bool>* cancel, const ProgressFn& progress) {
          JobOutcome out;
          out.sweep = run_sweep(input, families, devices, cancel, progress);
          return out;
        });
}

void AnalysisRunner::sideBySide(const AnalysisInput& first, const SideBySideChoice& choice) {
  start(tr("Evaluating %1 beside %2").arg(qs(first.family), qs(choice.family)),
        [first, choice](const std::atomic<bool>* cancel, const ProgressFn& progress) {
          JobOutcome out;
          out.sideBySide = run_side_by_side(first, choice, cancel, progress);
          return out;
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
      JobOutcome out;
      out.cancelled = true;
      promise.addResult(std::move(out));
    } catch (const std::exception& e) {
      // partita::Error carries the core's message; anything else is still shown, not lost.
      JobOutcome out;
      out.error = QString::fromUtf8(e.what());
      promise.addResult(std::move(out));
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
  JobOutcome outcome;
  if (future.resultCount() > 0) {
    outcome = future.result();
  } else {
    outcome.error = tr("no result");
  }
  if (outcome.cancelled) {
    Q_EMIT cancelled();
  } else if (!outcome.error.isEmpty()) {
    Q_EMIT failed(outcome.error);
  } else if (outcome.analysis) {
    Q_EMIT analysisReady(outcome.analysis);
  } else if (outcome.comparison) {
    Q_EMIT comparisonReady(outcome.comparison);
  } else if (outcome.sweep) {
    Q_EMIT sweepReady(outcome.sweep);
  } else if (outcome.sideBySide) {
    Q_EMIT sideBySideReady(outcome.sideBySide);
  }
  Q_EMIT finished();
}

} // namespace partita::gui
