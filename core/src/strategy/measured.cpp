#include "partita/strategy/measured.h"

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
