#pragma once

// Predicted against measured: what `partita run`, the GUI's Run panel and bench/ lay side by side.
// The prediction is strategy::evaluate's; the measurement is what partita-run wrote (partita.proto
// RunResult). The grouping of terms into forward / backward / communication, the errors and the
// rank correlation are defined here once.

#include "partita/graph/graph.h"
#include "partita/proto/partita.pb.h"
#include "partita/strategy/strategy.h"

#include <filesystem>
#include <string_view>
#include <vector>

namespace partita::strategy {

struct OpTimes {
  double forward = 0, backward = 0, communication = 0; // seconds per iteration
  double optimizer = 0;                                // the step of the op's weights
  double total() const { return forward + backward + communication + optimizer; }
};

struct OpComparison {
  graph::OpId op = -1;
  OpTimes predicted; // backward includes recomputation; communication every communication term
  OpTimes measured;  // communication: collectives, redistributions, gradient sync, pipeline sends
  // Waiting for a pipeline neighbour (the bubble) or for a collective's last rank; not in measured.
  double measured_wait = 0;
  bool stand_in = false; // the run had no kernel for this op
  // (predicted - measured) / measured of the totals; 0 when nothing was measured.
  double error() const;
};

struct RunComparison {
  std::vector<OpComparison> ops; // by op id
  double predicted_ops = 0, measured_ops = 0;
  double predicted_iteration = 0;
  double measured_iteration = 0;             // measured_iteration_seconds(run)
  double measured_min = 0, measured_max = 0; // over timed iterations
  double measured_optimizer = 0;
  double per_op_mape = 0; // mean |error| over the ops whose measured time is > 0
  int ops_counted = 0;
  double iteration_error() const; // (predicted - measured) / measured
};

// Throws partita::Error naming `source` and the field when the measurements are not a finished
// run's: a partial result (complete false: written by a rank that failed, with its reason), no
// timed iteration, or a time, size or count that is negative, NaN or infinite.
void validate(const proto::RunResult& run, std::string_view source);
// A measurements file (partita-run --measurements), read and validated: what every reader uses.
proto::RunResult read_run_result(const std::filesystem::path& path);

// The run's iteration time that predictions are compared with: the median over timed iterations of
// the slowest rank (the mean in files written before the median was recorded).
double measured_iteration_seconds(const proto::RunResult& run);

// Throws partita::Error when the run is not of this graph (op count or names differ).
RunComparison compare(const graph::Graph& g, const Prediction& prediction, const proto::RunResult& run);

// Kendall's tau-b between two rankings of the same items (ties counted as neither); 1 when the two
// order every pair the same way, -1 when every pair is reversed. Needs at least two items.
double kendall_tau(const std::vector<double>& a, const std::vector<double>& b);

} // namespace partita::strategy
