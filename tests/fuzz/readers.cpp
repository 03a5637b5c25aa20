#include "readers.h"

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/measured.h"
#include "partita/strategy/plan_file.h"
#include "partita/zoo/zoo.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace partita::fuzz {
namespace {

// The model every file is read against: small, so that an input runs in milliseconds.
const graph::Graph& mlp() {
  static const auto model = zoo::load("zoo:mlp?batch=8&input=16&hidden=32&layers=2&classes=4");
  return model.graph;
}

// A prediction must be numbers or an error, never NaN or an infinity passed off as a result.
void check_prediction(const strategy::Prediction& p, std::string_view what) {
  if (!std::isfinite(p.iteration_time) || p.iteration_time < 0) {
    throw std::logic_error(fmt::format("{}: an iteration time of {} was returned as a result", what, p.iteration_time));
  }
}

} // namespace

void cluster_file(std::string_view bytes) {
  proto::Cluster p;
  io::parse_json(bytes, "fuzz-cluster.json", p);
  const cluster::Cluster c = cluster::from_proto(p, "fuzz-cluster.json");
  search::Request r;
  r.graph = &mlp();
  r.cluster = &c;
  r.devices = std::min(c.device_count(), 8);
  const auto st = search::find_optimizer("dp").optimize(r);
  check_prediction(strategy::evaluate(mlp(), c, st, r.setup), "cluster");
}

void plan_file(std::string_view bytes) {
  proto::Plan plan;
  io::parse_json(bytes, "fuzz-plan.json", plan);
  const auto st = strategy::from_plan(plan, mlp(), "fuzz-plan.json");
  const auto setup = strategy::setup_from_proto(plan.setup(), "fuzz-plan.json");
  const cluster::Cluster c = plan.has_cluster() ? cluster::from_proto(plan.cluster(), "fuzz-plan.json: cluster")
                                                : cluster::load_cluster("dgx-a100");
  check_prediction(strategy::evaluate(mlp(), c, st, setup), "plan");
}

void measurements_file(std::string_view bytes) {
  proto::RunResult run;
  io::parse_json(bytes, "fuzz-measurements.json", run);
  strategy::validate(run, "fuzz-measurements.json");
  static const cluster::Cluster c = cluster::load_cluster("dgx-a100");
  static const strategy::Prediction p = [] {
    search::Request r;
    r.graph = &mlp();
    r.cluster = &c;
    r.devices = 2;
    return strategy::evaluate(mlp(), c, search::find_optimizer("dp").optimize(r), r.setup);
  }();
  const auto comparison = [&] {
    try {
      return strategy::compare(mlp(), p, run);
    } catch (const Error& e) {
      throw Error(fmt::format("fuzz-measurements.json: {}", e.what())); // as partita run names it
    }
  }();
  if (!std::isfinite(comparison.per_op_mape) || !std::isfinite(comparison.iteration_error())) {
    throw std::logic_error("measurements: a NaN or infinite error was returned as a result");
  }
}

} // namespace partita::fuzz
