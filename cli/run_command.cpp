// partita run MODEL --cluster C --strategy NAME -np P: plans (as `partita plan` does), runs the
// plan for real with `mpirun -np P partita-run`, and lays what was measured against what was
// predicted, per op and per iteration.

#include "commands.h"
#include "launch.h"
#include "model_options.h"
#include "table.h"
#include "validators.h"

#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/launch/launch.h"
#include "partita/proto/partita.pb.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/measured.h"
#include "partita/strategy/plan_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>

namespace partita::cli {

namespace {

namespace fs = std::filesystem;

struct RunOptions {
  ModelOptions model;
  SetupOptions setup;
  std::string family = "dp";
  int ranks = 2;
  int iterations = 10;
  int warmup = 2;
  int threads = 1;
  std::string backend = "cpu";
  int top = 15;
  int timeout = 600;
  std::string work_dir;
  LaunchSettings launch;
  std::string json;
  std::string measurements; // an earlier run's: compare, do not launch
  bool overlap_gradients = false;
  double bucket_mb = 25;
  bool host_check = false;
};

std::string ms(double seconds) {
  return fmt::format("{:.3f}", seconds * 1e3);
}

std::string error_percent(double predicted, double measured) {
  if (measured <= 0) {
    return "-";
  }
  return fmt::format("{:+.0f}%", 100 * (predicted - measured) / measured);
}

} // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  o->setup.cluster = "localhost-cpu";
  auto* cmd = app.add_subcommand(
      "run", "Plan a strategy, run it for real over MPI (mpirun + partita-run), and compare measured with predicted");
  o->model.add_to(*cmd);
  o->setup.add_to(*cmd);
  o->setup.strategy_option =
      cmd->add_option("--strategy", o->family, "strategy family (see partita compare --help)")->capture_default_str();
  cmd->add_option("-n,--np", o->ranks, "MPI ranks = devices of the plan (-np P also works)")
      ->check(whole(1, 4096, "ranks"))
      ->capture_default_str();
  cmd->add_option("--iterations", o->iterations, "timed iterations")
      ->check(whole(1, 1000000, "iterations"))
      ->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "untimed iterations first")
      ->check(whole(0, 1000000, "iterations"))
      ->capture_default_str();
  cmd->add_option("--backend", o->backend, "partita-run's backend: cpu (oneDNN + MPI) or cuda (cuBLAS/cuDNN + NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "compute threads per rank")
      ->check(whole(1, 1024, "threads"))
      ->capture_default_str();
  cmd->add_option("--top", o->top, "ops shown in the per-op table (by measured time)")
      ->check(whole(1, 1 << 30, "ops"))
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout, "seconds before mpirun ends a run that hangs")
      ->check(whole(1, 7 * 24 * 3600, "seconds"))
      ->capture_default_str();
  auto* overlap = cmd->add_flag(
      "--overlap-gradients", o->overlap_gradients,
      "partita-run sums each weight's gradient over its replicas during the backward pass (DDP's buckets, "
      "--bucket-mb); with --backend cuda the prediction sums each full bucket beside the backward pass "
      "as NCCL does, on the CPU it stays one thing at a time on a rank (MPI moves the sums on only "
      "between the backward kernels)");
  cmd->add_option("--bucket-mb", o->bucket_mb, "--overlap-gradients: gradient bucket size in MB")
      ->check(real(1e-6, 1e6, "MB"))
      ->needs(overlap)
      ->capture_default_str();
  auto* host_check = cmd->add_flag(
      "--host-check", o->host_check,
      "partita-run times the host as partita-calibrate --probe does (a GEMM of each family, the memory-bound "
      "kernels of two sizes, the all-reduce inside a node) before the warm-up and after the timed iterations "
      "and writes the times to host_check.json in the work directory: which speed the host ran at during the "
      "run, to set beside a calibration's");
  cmd->add_option("--work-dir", o->work_dir,
                  "where the plan, trace and measurements go (default: a new temporary directory)");
  add_launch_options(*cmd, o->launch, "partita-run must be at the same path on every host");
  cmd->add_option("--measurements", o->measurements,
                  "compare an earlier run's measurements (the measurements.json of its work directory) with this "
                  "prediction instead of launching a run: a recalibrated cluster against what was measured (with "
                  "--strategy given --plan its plan.json, the same plan)")
      ->check(CLI::ExistingFile)
      ->excludes(host_check);
  cmd->add_option("--json", o->json,
                  "also write predicted against measured, per op and per iteration, as JSON to this file");
  cmd->callback([o] {
    // Checked before planning, which can take a while.
    launch::MpiJob job =
        o->measurements.empty() ? checked_job(o->launch, o->ranks, o->threads, o->timeout) : launch::MpiJob{};
    o->model.check_output(o->json, "--json");
    // 1. Plan, exactly as `partita plan` does.
    const auto model = o->model.load();
    const auto& g = model.graph;
    const auto cl = [&] {
      try {
        return cluster_for(o->setup.cluster, o->ranks);
      } catch (const Error& e) {
        throw Error(fmt::format("{} (-np {} plans for {} devices of --cluster; give a cluster file with that many, "
                                "or a preset that has them)",
                                e.what(), o->ranks, o->ranks));
      }
    }();
    // Simulated as partita-run runs it: one thing at a time on a rank (its collectives wait for its
    // kernels; with --overlap-gradients on the CPU, MPI moves the gradient sums on only between
    // kernels), the stages of a pipeline side by side; with --overlap-gradients on GPUs, NCCL sums
    // each full bucket on a stream of its own while the backward pass goes on.
    const bool gradients_beside = o->overlap_gradients && o->backend == "cuda";
    const auto planned = make_plan(
        g, cl, o->ranks, o->setup, o->family, o->model,
        sim::Options{.overlap = false, .overlap_gradients = gradients_beside, .bucket_bytes = o->bucket_mb * 1e6});
    const auto& p = planned.prediction;
    const auto& plan = planned.plan;
    const std::string spec = o->model.spec();
    const auto& family = search::find_optimizer(planned.strategy.family);
    // 2. Launch, or read what an earlier run measured.
    std::cout << fmt::format("plan {} on {} ({} of {} devices), {}: predicted iteration {} ms\n", spec, cl.name,
                             o->ranks, cl.device_count(), family.name(), ms(p.iteration_time));
    fs::path measurements = o->measurements;
    if (measurements.empty()) {
      job.program = launch::find_runtime_program("partita-run", "PARTITA_RUN");
      require_launcher(launch::launcher_program(job));
      const fs::path work = launch::make_work_dir(o->work_dir, "partita-run");
      const fs::path plan_file = work / "plan.json", trace = work / "trace.json";
      measurements = work / "measurements.json";
      io::write_json_file(plan_file, plan);
      job.arguments =
          launch::run_arguments(plan_file, o->warmup, o->iterations, o->threads, trace, measurements, o->backend);
      if (o->overlap_gradients) {
        job.arguments.insert(job.arguments.end(),
                             {"--overlap-gradients", "--bucket-mb", fmt::format("{:g}", o->bucket_mb)});
      }
      if (o->host_check) {
        job.arguments.insert(job.arguments.end(), {"--host-check", (work / "host_check.json").string()});
      }
      const std::string command = launch::shell_line(launch::job_command(job));
      std::cout << fmt::format("running: {}\n", command) << std::flush;
      const auto [status, output] = run_streaming(command);
      if (status != 0) {
        throw Error(fmt::format("the run failed (exit status {}); its output is above; plan in {}", status,
                                plan_file.string()));
      }
      if (!fs::exists(measurements)) {
        throw Error(fmt::format("the run ended without writing {}", measurements.string()));
      }
    } else {
      std::cout << fmt::format("measured: {} (an earlier run; nothing launched)\n", measurements.string());
    }

    // 3. Predicted against measured.
    const proto::RunResult doc = strategy::read_run_result(measurements);
    if (doc.ranks() > 0 && doc.ranks() != o->ranks) {
      throw Error(fmt::format("{}: field 'ranks': the run had {} ranks, and this prediction is for -np {}",
                              measurements.string(), doc.ranks(), o->ranks));
    }
    const auto c = [&] {
      try {
        return strategy::compare(g, p, doc);
      } catch (const Error& e) {
        throw Error(fmt::format("{}: {}", measurements.string(), e.what()));
      }
    }();
    std::vector<std::pair<double, std::size_t>> order;
    for (std::size_t i = 0; i < c.ops.size(); ++i) {
      order.emplace_back(c.ops[i].measured.total(), i);
    }
    std::sort(order.begin(), order.end(), std::greater<>());
    Table t({{"#"},
             {"op", Table::Align::left},
             {"name", Table::Align::left},
             {"fwd pred"},
             {"fwd meas"},
             {"bwd pred"},
             {"bwd meas"},
             {"comm pred"},
             {"comm meas"},
             {"step pred"},
             {"step meas"},
             {"total pred"},
             {"total meas"},
             {"error"}});
    for (std::size_t row = 0; row < order.size() && row < static_cast<std::size_t>(o->top); ++row) {
      const auto& op_c = c.ops[order[row].second];
      const auto& op = g.op(op_c.op);
      const auto& pr = op_c.predicted;
      const auto& m = op_c.measured;
      t.add_row({std::to_string(op_c.op), op.type, op.name.size() > 32 ? op.name.substr(0, 29) + "..." : op.name,
                 ms(pr.forward), ms(m.forward), ms(pr.backward), ms(m.backward), ms(pr.communication),
                 ms(m.communication), ms(pr.optimizer), ms(m.optimizer), ms(pr.total()), ms(m.total()),
                 error_percent(pr.total(), m.total())});
    }
    nlohmann::json json_ops = nlohmann::json::array();
    for (const auto& op_c : c.ops) {
      const auto& op = g.op(op_c.op);
      const auto& pr = op_c.predicted;
      const auto& m = op_c.measured;
      json_ops.push_back({{"id", op_c.op},
                          {"name", op.name},
                          {"type", op.type},
                          {"predicted",
                           {{"forward", pr.forward},
                            {"backward", pr.backward},
                            {"communication", pr.communication},
                            {"optimizer", pr.optimizer},
                            {"total", pr.total()}}},
                          {"measured",
                           {{"forward", m.forward},
                            {"backward", m.backward},
                            {"communication", m.communication},
                            {"optimizer", m.optimizer},
                            {"wait", op_c.measured_wait},
                            {"total", m.total()}}},
                          {"stand_in", op_c.stand_in}});
    }
    t.add_rule();
    t.add_row({"", "", fmt::format("all {} ops", order.size()), "", "", "", "", "", "", "", "", ms(c.predicted_ops),
               ms(c.measured_ops), error_percent(c.predicted_ops, c.measured_ops)});
    std::cout << fmt::format("\npredicted vs measured per op, ms per iteration (measured: median over {} timed "
                             "iterations of the slowest rank; error = (predicted - measured) / measured)\n",
                             doc.timed_iterations());
    std::cout << t.render();
    std::cout << fmt::format("per-op mean absolute error {:.0f}% over {} ops\n", 100 * c.per_op_mape, c.ops_counted);
    std::cout << fmt::format("\niteration: predicted {} ms, measured median {} ms (min {}, max {}, optimizer step {} "
                             "ms), error {}\n",
                             ms(c.predicted_iteration), ms(c.measured_iteration), ms(c.measured_min),
                             ms(c.measured_max), ms(c.measured_optimizer),
                             error_percent(c.predicted_iteration, c.measured_iteration));
    // A prediction for another machine (a GPU preset, a run on this CPU) is off by a factor, not by
    // percent: say which machine each side is, and how to predict this one.
    if (c.predicted_iteration > 0 && c.measured_iteration > 0) {
      const double ratio = c.measured_iteration / c.predicted_iteration;
      if (ratio > 3 || ratio < 1.0 / 3) {
        std::cerr << fmt::format(
            "partita run: warning: the run took {} the predicted time. The prediction is for cluster '{}' (device "
            "{}) and the run measured backend {}: if that is not the machine the cluster describes, calibrate this "
            "one (`partita calibrate --cluster {} -np {} -o mine.json`) and predict with --cluster mine.json\n",
            ratio > 1 ? fmt::format("{:.1f} times", ratio) : fmt::format("1/{:.1f} of", 1 / ratio), cl.name,
            cl.device.name.empty() ? std::string("unnamed") : cl.device.name,
            doc.backend().empty() ? std::string("(not recorded)") : doc.backend(),
            doc.backend().rfind("cuda", 0) == 0 ? "dgx-h100" : "localhost-cpu", o->ranks);
      }
    }
    double tensors = 0, resident = 0;
    for (const auto& m : doc.memory()) {
      tensors = std::max(tensors, m.tensor_bytes());
      resident = std::max(resident, m.peak_resident_bytes());
    }
    std::cout << fmt::format("memory on the fullest device: predicted {:.2f} MiB, held by the run {:.2f} MiB (tensors; "
                             "the process's peak resident set {:.1f} MiB)\n",
                             p.peak_memory / 1048576.0, tensors / 1048576.0, resident / 1048576.0);
    const fs::path dir = measurements.parent_path();
    if (o->measurements.empty()) {
      std::cout << fmt::format("plan, trace (Perfetto) and measurements in {}\n", dir.string());
    }
    if (!o->json.empty()) {
      // Seconds throughout; ops in id order.
      const nlohmann::json out{{"model", spec},
                               {"cluster", cl.name},
                               {"strategy", planned.strategy.family},
                               {"ranks", o->ranks},
                               {"threads", o->threads},
                               {"timed_iterations", doc.timed_iterations()},
                               {"iteration",
                                {{"predicted", c.predicted_iteration},
                                 {"measured", c.measured_iteration},
                                 {"measured_mean", doc.iteration_seconds().mean()},
                                 {"measured_min", c.measured_min},
                                 {"measured_max", c.measured_max}}},
                               {"ops", json_ops},
                               {"work_dir", dir.string()}};
      io::write_file_atomically(o->json, out.dump(1) + "\n");
      std::cout << fmt::format("predicted against measured written to {}\n", o->json);
    }
  });
}

} // namespace partita::cli
