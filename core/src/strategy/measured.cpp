#include "partita/strategy/measured.h"

#include "partita/io/json_file.h"

#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace partita::strategy {

namespace {

double relative_error(double predicted, double measured) {
  return measured > 0 ? (predicted - measured) / measured : 0.0;
}

} // namespace

double OpComparison::error() const {
  return relative_error(predicted.total(), measured.total());
}

double RunComparison::iteration_error() const {
  return relative_error(predicted_iteration, measured_iteration);
}

namespace {

// A time, a size, a count: finite and at least 0.
void check_amount(double value, std::string_view source, const std::string& field, std::string_view what) {
  if (!std::isfinite(value) || value < 0) {
    throw Error(fmt::format("{}: field '{}': {} is not {} (a finite number, at least 0)", source, field, value, what));
  }
}

} // namespace

void validate(const proto::RunResult& run, std::string_view source) {
  if (!run.complete()) {
    throw Error(fmt::format("{}: field 'complete': false: these are the partial measurements of a run that failed "
                            "({}), not a run's result",
                            source, run.failure().empty() ? "no reason recorded" : run.failure()));
  }
  if (run.ranks() < 1) {
    throw Error(fmt::format("{}: field 'ranks': {} is not a rank count (at least 1)", source, run.ranks()));
  }
  if (run.timed_iterations() < 1) {
    throw Error(fmt::format("{}: field 'timed_iterations': {}: a run's result has at least one timed iteration", source,
                            run.timed_iterations()));
  }
  const auto& it = run.iteration_seconds();
  check_amount(it.mean(), source, "iteration_seconds.mean", "a time");
  check_amount(it.min(), source, "iteration_seconds.min", "a time");
  check_amount(it.max(), source, "iteration_seconds.max", "a time");
  check_amount(it.median(), source, "iteration_seconds.median", "a time");
  for (int i = 0; i < it.each_size(); ++i) {
    check_amount(it.each(i), source, fmt::format("iteration_seconds.each[{}]", i), "a time");
  }
  if (it.mean() <= 0 && it.median() <= 0) {
    throw Error(fmt::format("{}: field 'iteration_seconds': no iteration time (mean and median are 0)", source));
  }
  if (it.min() > it.max()) {
    throw Error(fmt::format("{}: field 'iteration_seconds': min {} is above max {}", source, it.min(), it.max()));
  }
  check_amount(run.predicted_iteration_seconds(), source, "predicted_iteration_seconds", "a time");
  for (int i = 0; i < run.ops_size(); ++i) {
    const auto& m = run.ops(i);
    const auto field = [&](const char* name) { return fmt::format("ops[{}].{}", i, name); };
    check_amount(m.forward_seconds(), source, field("forward_seconds"), "a time");
    check_amount(m.backward_seconds(), source, field("backward_seconds"), "a time");
    check_amount(m.forward_communication_seconds(), source, field("forward_communication_seconds"), "a time");
    check_amount(m.backward_communication_seconds(), source, field("backward_communication_seconds"), "a time");
    check_amount(m.gradient_sync_seconds(), source, field("gradient_sync_seconds"), "a time");
    check_amount(m.optimizer_seconds(), source, field("optimizer_seconds"), "a time");
    check_amount(m.pipeline_send_seconds(), source, field("pipeline_send_seconds"), "a time");
    check_amount(m.pipeline_wait_seconds(), source, field("pipeline_wait_seconds"), "a time");
    check_amount(m.collective_wait_seconds(), source, field("collective_wait_seconds"), "a time");
    check_amount(m.bytes_received(), source, field("bytes_received"), "a byte count");
  }
  for (int i = 0; i < run.memory_size(); ++i) {
    check_amount(run.memory(i).tensor_bytes(), source, fmt::format("memory[{}].tensor_bytes", i), "a byte count");
    check_amount(run.memory(i).peak_resident_bytes(), source, fmt::format("memory[{}].peak_resident_bytes", i),
                 "a byte count");
  }
  for (int i = 0; i < run.events_size(); ++i) {
    const auto& e = run.events(i);
    check_amount(e.start(), source, fmt::format("events[{}].start", i), "a time");
    check_amount(e.end(), source, fmt::format("events[{}].end", i), "a time");
    check_amount(e.bytes(), source, fmt::format("events[{}].bytes", i), "a byte count");
    if (e.end() < e.start()) {
      throw Error(
          fmt::format("{}: field 'events[{}]': ends at {} s, before it starts ({} s)", source, i, e.end(), e.start()));
    }
  }
}

proto::RunResult read_run_result(const std::filesystem::path& path) {
  proto::RunResult run;
  io::read_json_file(path, run);
  validate(run, path.string());
  return run;
}

double measured_iteration_seconds(const proto::RunResult& run) {
  const auto& it = run.iteration_seconds();
  return it.median() > 0 ? it.median() : it.mean();
}

RunComparison compare(const graph::Graph& g, const Prediction& prediction, const proto::RunResult& run) {
  const auto n = g.ops().size();
  if (static_cast<std::size_t>(run.ops_size()) != n) {
    throw Error(
        fmt::format("the run measured {} ops but the model has {} (a run of another model?)", run.ops_size(), n));
  }
  if (prediction.ops.size() != n) {
    throw Error(fmt::format("the prediction has {} ops but the model has {}", prediction.ops.size(), n));
  }
  RunComparison out;
  out.ops.resize(n);
  double abs_error = 0;
  for (std::size_t id = 0; id < n; ++id) {
    const auto& m = run.ops(static_cast<int>(id));
    const auto& op = g.op(static_cast<graph::OpId>(id));
    if (m.name() != op.name) {
      throw Error(fmt::format("the run's op {} is '{}' but the model's is '{}' (a run of another model?)", id, m.name(),
                              op.name));
    }
    const auto& cost = prediction.ops[id].cost;
    auto& c = out.ops[id];
    c.op = static_cast<graph::OpId>(id);
    c.predicted.forward = cost.get(cost::term::forward_compute);
    c.predicted.backward = cost.get(cost::term::backward_compute) + cost.get(cost::term::recompute);
    c.predicted.communication = cost.communication_time();
    c.measured.forward = m.forward_seconds();
    c.measured.backward = m.backward_seconds();
    c.measured.communication = m.forward_communication_seconds() + m.backward_communication_seconds() +
                               m.gradient_sync_seconds() + m.pipeline_send_seconds();
    c.predicted.optimizer = cost.get(cost::term::optimizer_step);
    c.measured.optimizer = m.optimizer_seconds();
    c.measured_wait = m.pipeline_wait_seconds() + m.collective_wait_seconds();
    c.stand_in = m.stand_in();
    out.predicted_ops += c.predicted.total();
    out.measured_ops += c.measured.total();
    out.measured_optimizer += c.measured.optimizer;
    if (c.measured.total() > 0) {
      abs_error += std::fabs(c.error());
      ++out.ops_counted;
    }
  }
  out.per_op_mape = out.ops_counted > 0 ? abs_error / out.ops_counted : 0.0;
  out.predicted_iteration = prediction.iteration_time;
  out.measured_iteration = measured_iteration_seconds(run);
  out.measured_min = run.iteration_seconds().min();
  out.measured_max = run.iteration_seconds().max();
  return out;
}

double kendall_tau(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) {
    throw Error(fmt::format("kendall_tau needs two rankings of the same at least two items (got {} and {})", a.size(),
                            b.size()));
  }
  double concordant = 0, discordant = 0, ties_a = 0, ties_b = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (std::size_t j = i + 1; j < a.size(); ++j) {
      const double da = a[i] - a[j], db = b[i] - b[j];
      if (da == 0 && db == 0) {
        continue;
      }
      if (da == 0) {
        ties_a += 1;
      } else if (db == 0) {
        ties_b += 1;
      } else if ((da > 0) == (db > 0)) {
        concordant += 1;
      } else {
        discordant += 1;
      }
    }
  }
  const double denominator = std::sqrt((concordant + discordant + ties_a) * (concordant + discordant + ties_b));
  return denominator > 0 ? (concordant - discordant) / denominator : 0.0;
}

} // namespace partita::strategy
