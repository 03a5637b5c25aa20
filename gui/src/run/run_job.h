#pragma once

// A real run of the current analysis' plan (issue 5's Run panel): the plan is written as
// `partita plan -o` writes it, `mpirun -np P partita-run plan.json` is started as a QProcess with
// the command line the CLI uses (partita/launch/launch.h), its output streams into the log, and
// what it measured (partita.proto RunResult) is laid against the analysis' prediction by the core
// (strategy/measured.h). The GUI thread never waits on the process.

#include "common/analysis.h"
#include "run/run_record.h"

#include "partita/proto/partita.pb.h"
#include "partita/strategy/measured.h"

#include <QDateTime>
#include <QObject>
#include <QProcess>
#include <QString>
#include <QTemporaryDir>

#include <memory>
#include <optional>

namespace partita::gui {

struct RunSettings {
  int iterations = 10;
  int warmup = 2;
  int threads = 1;
  int timeout = 600;                       // seconds, the whole job
  QString backend = QStringLiteral("cpu"); // partita-run --backend: cpu or cuda
  QString mpirun = QStringLiteral("mpirun");
  QString launcher = QStringLiteral("mpirun"); // or srun (inside a Slurm allocation)
  QString hostfile;                            // mpirun --hostfile; empty: this machine
};

class RunJob : public QObject {
  Q_OBJECT
public:
  explicit RunJob(QObject* parent = nullptr);
  ~RunJob() override;

  // Starts a run of `analysis`' strategy; false (and failed() emitted) when it cannot start:
  // no partita-run, no mpirun, a plan that cannot be written. One run at a time.
  bool start(const std::shared_ptr<const Analysis>& analysis, const RunSettings& settings);
  // Ends the job (SIGTERM to mpirun, which ends its ranks; SIGKILL after 3 s); failed() follows.
  void cancel();
  bool isRunning() const;
  QString commandLine() const { return m_command; }

Q_SIGNALS:
  void output(const QString& text);   // as it comes, stdout and stderr merged
  void progress(int done, int total); // timed iterations
  void finished(std::shared_ptr<const RunRecord> run);
  void failed(const QString& message);

private:
  void onReadyRead();
  void onFinished(int exitCode, QProcess::ExitStatus status);
  void fail(const QString& message);

  QProcess* m_process = nullptr;
  std::unique_ptr<QTemporaryDir> m_dir;
  std::shared_ptr<const Analysis> m_analysis;
  RunSettings m_settings;
  proto::Plan m_plan;
  QString m_command, m_log, m_pending;
  QDateTime m_started;
  bool m_cancelled = false;
};

} // namespace partita::gui
