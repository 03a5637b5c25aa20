// partita run MODEL --cluster C --strategy NAME -np P: plans (as `partita plan` does), runs the
// plan for real with `mpirun -np P partita-run`, and lays what was measured against what was
// predicted, per op and per iteration (DESIGN.md section 5).

#include "commands.h"
#include "launch.h"
#include "model_options.h"
#include "table.h"

#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/plan_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

namespace partita::cli {

cluster::Cluster cluster_for(const std::string& spec, int devices); // plan_command.cpp

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
  int top = 15;
  int timeout = 600;
  std::string work_dir;
  std::string mpirun = "mpirun";
  std::string json;
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

struct Measured {
  double forward = 0, backward = 0, communication = 0, optimizer = 0;
  double total() const { return forward + backward + communication; }
};

Measured measured_op(const nlohmann::json& op) {
  Measured m;
  m.forward = op.at("forward_seconds").get<double>();
  m.backward = op.at("backward_seconds").get<double>();
  m.communication = op.at("forward_communication_seconds").get<double>() +
                    op.at("backward_communication_seconds").get<double>() +
                    op.at("gradient_sync_seconds").get<double>();
  m.optimizer = op.at("optimizer_seconds").get<double>();
  return m;
}

} // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  o->setup.cluster = "localhost-cpu";
  o->setup.optimizer = "sgd"; // what partita-run steps with
  auto* cmd = app.add_subcommand(
      "run", "Plan a strategy, run it for real over MPI (mpirun + partita-run), and compare measured with predicted");
  o->model.add_to(*cmd);
  o->setup.add_to(*cmd);
  cmd->add_option("--strategy", o->family, "strategy family (see partita compare --help)")->capture_default_str();
  cmd->add_option("-n,--np", o->ranks, "MPI ranks = devices of the plan (-np P also works)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--iterations", o->iterations, "timed iterations")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "untimed iterations first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "compute threads per rank")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--top", o->top, "ops shown in the per-op table (by measured time)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout, "seconds before mpirun ends a run that hangs")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--work-dir", o->work_dir,
                  "where the plan, trace and measurements go (default: a new temporary directory)");
  cmd->add_option("--mpirun", o->mpirun, "the MPI launcher")->capture_default_str();
  cmd->add_option("--json", o->json,
                  "also write predicted against measured, per op and per iteration, as JSON to this file");
  cmd->callback([o] {
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
    const auto planned = make_plan(g, cl, o->ranks, o->setup, o->family, o->model.spec());
    const auto& p = planned.prediction;
    const auto& plan = planned.plan;
    const std::string spec = o->model.spec();
    const auto& family = search::find_optimizer(planned.strategy.family);
    // 2. Launch.
    const fs::path runner = find_runtime_program("partita-run", "PARTITA_RUN");
    require_launcher(o->mpirun);
    const fs::path dir = make_work_dir(o->work_dir, "partita-run");
    const fs::path plan_file = dir / "plan.json", trace = dir / "trace.json", measurements = dir / "measurements.json";
    io::write_json_file(plan_file, plan);
    const std::string launch =
        mpirun_prefix(o->mpirun, o->timeout, o->ranks, o->threads) +
        fmt::format(" {} {} --warmup {} --iterations {} --threads {} --trace {} --measurements {}",
                    shell_quoted(runner.string()), shell_quoted(plan_file.string()), o->warmup, o->iterations,
                    o->threads, shell_quoted(trace.string()), shell_quoted(measurements.string()));
    std::cout << fmt::format("plan {} on {} ({} of {} devices), {}: predicted iteration {} ms\n", spec, cl.name,
                             o->ranks, cl.device_count(), family.name(), ms(p.iteration_time));
    std::cout << fmt::format("running: {}\n", launch) << std::flush;
    const auto [status, output] = run_streaming(launch);
    if (status != 0) {
      throw Error(
          fmt::format("the run failed (exit status {}); its output is above; plan in {}", status, plan_file.string()));
    }
    if (!fs::exists(measurements)) {
      throw Error(fmt::format("the run ended without writing {}", measurements.string()));
    }

    // 3. Predicted against measured.
    std::ifstream in(measurements);
    const auto doc = nlohmann::json::parse(in);
    const auto& ops = doc.at("ops");
    if (ops.size() != g.ops().size()) {
      throw Error(
          fmt::format("{}: {} ops measured, the model has {}", measurements.string(), ops.size(), g.ops().size()));
    }
    std::vector<std::pair<double, std::size_t>> order;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      order.emplace_back(measured_op(ops[i]).total(), i);
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
             {"total pred"},
             {"total meas"},
             {"error"}});
    double pred_sum = 0, meas_sum = 0, abs_err = 0, optimizer = 0;
    int counted = 0;
    nlohmann::json json_ops = nlohmann::json::array();
    for (std::size_t row = 0; row < order.size(); ++row) {
      const std::size_t id = order[row].second;
      const auto& op = g.op(static_cast<graph::OpId>(id));
      const auto& cost = p.ops[id].cost;
      const Measured m = measured_op(ops[id]);
      optimizer += m.optimizer;
      const double fwd = cost.get(cost::term::forward_compute);
      const double bwd = cost.get(cost::term::backward_compute) + cost.get(cost::term::recompute);
      const double comm = cost.communication_time();
      const double total = fwd + bwd + comm;
      pred_sum += total;
      meas_sum += m.total();
      if (m.total() > 0) {
        abs_err += std::fabs(total - m.total()) / m.total();
        ++counted;
      }
      json_ops.push_back({{"id", id},
                          {"name", op.name},
                          {"type", op.type},
                          {"predicted", {{"forward", fwd}, {"backward", bwd}, {"communication", comm}, {"total", total}}},
                          {"measured",
                           {{"forward", m.forward},
                            {"backward", m.backward},
                            {"communication", m.communication},
                            {"optimizer", m.optimizer},
                            {"total", m.total()}}},
                          {"stand_in", ops[id].value("stand_in", false)}});
      if (row < static_cast<std::size_t>(o->top)) {
        t.add_row({std::to_string(id), op.type, op.name.size() > 32 ? op.name.substr(0, 29) + "..." : op.name, ms(fwd),
                   ms(m.forward), ms(bwd), ms(m.backward), ms(comm), ms(m.communication), ms(total), ms(m.total()),
                   error_percent(total, m.total())});
      }
    }
    t.add_rule();
    t.add_row({"", "", fmt::format("all {} ops", order.size()), "", "", "", "", "", "", ms(pred_sum), ms(meas_sum),
               error_percent(pred_sum, meas_sum)});
    const auto& it = doc.at("iteration_seconds");
    const double mean = it.at("mean").get<double>();
    std::cout << fmt::format("\npredicted vs measured per op, ms per iteration (measured: mean over {} timed "
                             "iterations of the slowest rank; error = (predicted - measured) / measured)\n",
                             doc.at("timed_iterations").get<int>());
    std::cout << t.render();
    std::cout << fmt::format("per-op mean absolute error {:.0f}% over {} ops\n",
                             counted > 0 ? 100 * abs_err / counted : 0.0, counted);
    std::cout << fmt::format("\niteration: predicted {} ms, measured mean {} ms (min {}, max {}, optimizer step {} "
                             "ms), error {}\n",
                             ms(p.iteration_time), ms(mean), ms(it.at("min").get<double>()),
                             ms(it.at("max").get<double>()), ms(optimizer), error_percent(p.iteration_time, mean));
    std::cout << fmt::format("plan, trace (Perfetto) and measurements in {}\n", dir.string());
    if (!o->json.empty()) {
      // Seconds throughout; ops in id order.
      std::sort(json_ops.begin(), json_ops.end(),
                [](const nlohmann::json& a, const nlohmann::json& b) { return a.at("id") < b.at("id"); });
      const nlohmann::json out{{"model", spec},
                               {"cluster", cl.name},
                               {"strategy", planned.strategy.family},
                               {"ranks", o->ranks},
                               {"threads", o->threads},
                               {"timed_iterations", doc.at("timed_iterations")},
                               {"iteration",
                                {{"predicted", p.iteration_time},
                                 {"measured_mean", mean},
                                 {"measured_min", it.at("min").get<double>()},
                                 {"measured_max", it.at("max").get<double>()}}},
                               {"ops", json_ops},
                               {"work_dir", dir.string()}};
      io::write_file_atomically(o->json, out.dump(1) + "\n");
      std::cout << fmt::format("predicted against measured written to {}\n", o->json);
    }
  });
}

} // namespace partita::cli
