#include "run/run_job.h"

#include "common/format.h"

#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/launch/launch.h"
#include "partita/onnx/import.h"
#include "partita/strategy/plan_file.h"

#include <fmt/format.h>

#include <QDir>
#include <QRegularExpression>
#include <QTimer>

#include <filesystem>

namespace partita::gui {

namespace fs = std::filesystem;

RunJob::RunJob(QObject* parent) : QObject(parent) {}

RunJob::~RunJob() {
  if (isRunning()) {
    m_process->kill();
    m_process->waitForFinished(3000);
  }
}

bool RunJob::isRunning() const {
  return m_process != nullptr && m_process->state() != QProcess::NotRunning;
}

void RunJob::fail(const QString& message) {
  m_analysis.reset();
  Q_EMIT failed(message);
}

bool RunJob::start(const std::shared_ptr<const Analysis>& analysis, const RunSettings& settings) {
  if (isRunning()) {
    fail(tr("A run is already in progress."));
    return false;
  }
  if (!analysis) {
    fail(tr("Evaluate a strategy first: a run executes the plan on screen."));
    return false;
  }
  m_analysis = analysis;
  m_settings = settings;
  m_log.clear();
  m_pending.clear();
  m_cancelled = false;
  try {
    launch::MpiJob job;
    job.launcher = launch::parse_launcher(settings.launcher.toStdString());
    job.mpirun = settings.mpirun.toStdString();
    job.threads = settings.threads;
    job.timeout = settings.timeout;
    job.hostfile = settings.hostfile.trimmed().toStdString();
    launch::check_job(job);
    job.program = launch::find_runtime_program("partita-run", "PARTITA_RUN");
    if (!launch::on_path(launch::launcher_program(job))) {
      throw Error(fmt::format("'{}' was not found on PATH: {}", launch::launcher_program(job),
                              job.launcher == launch::Launcher::srun
                                  ? "srun is Slurm's (start the GUI inside an allocation)"
                                  : "install Open MPI (openmpi-bin)"));
    }
    m_dir = std::make_unique<QTemporaryDir>(QDir::tempPath() + QStringLiteral("/partita-gui-run-XXXXXX"));
    if (!m_dir->isValid()) {
      throw Error(fmt::format("cannot create a temporary directory: {}", m_dir->errorString().toStdString()));
    }
    const fs::path dir = m_dir->path().toStdString();
    const auto& a = *analysis;
    m_plan = strategy::to_plan(a.model.graph, a.cluster, a.strategy, a.prediction, a.setup, a.input.model);
    const auto options = input_import_options(a.input);
    for (const auto& [name, value] : options.dims) {
      (*m_plan.mutable_dims())[name] = value;
    }
    for (const auto& [name, values] : options.values) {
      m_plan.add_values(onnx_import::format_value(name, values));
    }
    io::write_json_file(dir / "plan.json", m_plan);
    job.ranks = m_plan.devices();
    job.arguments =
        launch::run_arguments(dir / "plan.json", settings.warmup, settings.iterations, settings.threads,
                              dir / "trace.json", dir / "measurements.json", settings.backend.toStdString());
    const auto command = launch::job_command(job);
    m_command = qs(launch::shell_line(command));
    QStringList arguments;
    for (std::size_t i = 1; i < command.size(); ++i) {
      arguments << qs(command[i]);
    }
    m_process = new QProcess(this);
    m_process->setProcessChannelMode(QProcess::MergedChannels);
    connect(m_process, &QProcess::readyRead, this, &RunJob::onReadyRead);
    connect(m_process, &QProcess::finished, this, &RunJob::onFinished);
    connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
      if (e == QProcess::FailedToStart) {
        fail(tr("Could not start %1: %2").arg(m_command, m_process->errorString()));
      }
    });
    m_started = QDateTime::currentDateTime();
    Q_EMIT output(tr("running: %1\n").arg(m_command));
    m_process->start(qs(command.front()), arguments);
  } catch (const std::exception& e) {
    fail(QString::fromUtf8(e.what()));
    return false;
  }
  return true;
}

void RunJob::cancel() {
  if (!isRunning()) {
    return;
  }
  m_cancelled = true;
  m_process->terminate();
  QTimer::singleShot(3000, m_process, [p = m_process] {
    if (p->state() != QProcess::NotRunning) {
      p->kill();
    }
  });
}

void RunJob::onReadyRead() {
  const QString text = QString::fromLocal8Bit(m_process->readAll());
  m_log += text;
  Q_EMIT output(text);
  // partita-run's rank 0 prints "progress: timed I/N" after every timed iteration.
  m_pending += text;
  static const QRegularExpression line(QStringLiteral("progress: timed (\\d+)/(\\d+)"));
  auto it = line.globalMatch(m_pending);
  while (it.hasNext()) {
    const auto m = it.next();
    Q_EMIT progress(m.captured(1).toInt(), m.captured(2).toInt());
  }
  const auto last_newline = m_pending.lastIndexOf(QLatin1Char('\n'));
  if (last_newline >= 0) {
    m_pending = m_pending.mid(last_newline + 1);
  }
}

void RunJob::onFinished(int exitCode, QProcess::ExitStatus status) {
  m_process->deleteLater();
  m_process = nullptr;
  if (m_cancelled) {
    fail(tr("Run cancelled."));
    return;
  }
  if (status != QProcess::NormalExit || exitCode != 0) {
    fail(tr("The run failed (exit status %1); its output is in the log.").arg(exitCode));
    return;
  }
  const fs::path measurements = fs::path(m_dir->path().toStdString()) / "measurements.json";
  auto record = std::make_shared<RunRecord>();
  try {
    record->result = strategy::read_run_result(measurements);
    record->comparison = strategy::compare(m_analysis->model.graph, m_analysis->prediction, record->result);
  } catch (const std::exception& e) {
    fail(tr("The run ended but its measurements could not be read: %1").arg(QString::fromUtf8(e.what())));
    return;
  }
  record->plan = m_plan;
  record->log = m_log;
  record->started = m_started;
  record->label = tr("%1 on %2 ranks, %3")
                      .arg(qs(m_analysis->strategy.family), QString::number(m_plan.devices()),
                           m_started.toString(QStringLiteral("HH:mm:ss")));
  m_analysis.reset();
  Q_EMIT finished(record);
}

} // namespace partita::gui
