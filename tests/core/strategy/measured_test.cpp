// Predicted against measured (strategy/measured.h): the grouping of terms, the errors and the rank
// correlation that `partita run`, the GUI and bench/ all report.

#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"
#include "partita/graph/statistics.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/measured.h"
#include "partita/zoo/zoo.h"
#include "simple_cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace partita {
namespace {

struct Planned {
  onnx_import::ImportResult model = zoo::load("zoo:mlp?batch=8&input=16&hidden=32&layers=2&classes=4");
  cluster::Cluster cluster = test::simple_cluster(4);
  strategy::Prediction prediction;
  Planned() {
    search::Request r;
    r.graph = &model.graph;
    r.cluster = &cluster;
    r.devices = 2;
    prediction = strategy::evaluate(model.graph, cluster, search::find_optimizer("dp").optimize(r), {});
  }
  // A run that measured every op `factor` times its predicted time, split as predicted.
  proto::RunResult run(double factor) const {
    proto::RunResult out;
    for (std::size_t id = 0; id < model.graph.ops().size(); ++id) {
      const auto& cost = prediction.ops[id].cost;
      auto& m = *out.add_ops();
      m.set_id(static_cast<int>(id));
      m.set_name(model.graph.op(static_cast<graph::OpId>(id)).name);
      m.set_forward_seconds(factor * cost.get(cost::term::forward_compute));
      m.set_backward_seconds(factor * cost.get(cost::term::backward_compute));
      m.set_gradient_sync_seconds(factor * cost.communication_time());
      m.set_optimizer_seconds(factor * cost.get(cost::term::optimizer_step));
    }
    out.mutable_iteration_seconds()->set_mean(factor * prediction.iteration_time);
    return out;
  }
};

TEST(Measured, ErrorsAreRelativeToTheMeasurement) {
  const Planned p;
  const auto c = strategy::compare(p.model.graph, p.prediction, p.run(2.0));
  ASSERT_EQ(c.ops.size(), p.model.graph.ops().size());
  EXPECT_GT(c.ops_counted, 0);
  for (const auto& op : c.ops) {
    if (op.measured.total() > 0) {
      EXPECT_NEAR(op.error(), -0.5, 1e-12) << p.model.graph.op(op.op).name;
    }
  }
  EXPECT_NEAR(c.per_op_mape, 0.5, 1e-12);
  EXPECT_NEAR(c.iteration_error(), -0.5, 1e-12);
  EXPECT_NEAR(c.measured_ops, 2 * c.predicted_ops, 1e-15);
  double steps = 0;
  for (const auto& op : p.prediction.ops) {
    steps += op.cost.get(cost::term::optimizer_step);
  }
  EXPECT_GT(steps, 0); // Adam steps the weights
  EXPECT_NEAR(c.measured_optimizer, 2 * steps, 1e-15);
  EXPECT_EQ(strategy::compare(p.model.graph, p.prediction, p.run(1.0)).per_op_mape, 0.0);
}

TEST(Measured, IterationIsTheMedianWhenTheRunRecordedOne) {
  const Planned p;
  auto run = p.run(1.0);
  // One slow iteration (the OS took the core) moves the mean, not the median.
  run.mutable_iteration_seconds()->set_mean(2 * p.prediction.iteration_time);
  run.mutable_iteration_seconds()->set_median(p.prediction.iteration_time);
  EXPECT_DOUBLE_EQ(strategy::measured_iteration_seconds(run), p.prediction.iteration_time);
  EXPECT_NEAR(strategy::compare(p.model.graph, p.prediction, run).iteration_error(), 0.0, 1e-12);
  // A file written before the median was recorded: the mean.
  run.mutable_iteration_seconds()->set_median(0);
  EXPECT_DOUBLE_EQ(strategy::measured_iteration_seconds(run), 2 * p.prediction.iteration_time);
}

TEST(Statistics, Median) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({3.0}), 3.0);
  EXPECT_EQ(median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(median({4.0, 1.0, 100.0, 2.0}), 3.0);
}

TEST(Measured, RefusesARunOfAnotherModel) {
  const Planned p;
  auto fewer = p.run(1.0);
  fewer.mutable_ops()->RemoveLast();
  EXPECT_THAT([&] { strategy::compare(p.model.graph, p.prediction, fewer); },
              testing::ThrowsMessage<Error>(testing::HasSubstr("the run measured 7 ops but the model has 8")));
  auto renamed = p.run(1.0);
  renamed.mutable_ops(3)->set_name("something_else");
  EXPECT_THAT([&] { strategy::compare(p.model.graph, p.prediction, renamed); },
              testing::ThrowsMessage<Error>(testing::HasSubstr("op 3 is 'something_else'")));
}

TEST(Measured, KendallTau) {
  EXPECT_DOUBLE_EQ(strategy::kendall_tau({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(strategy::kendall_tau({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
  // One swapped pair of six: (5 - 1) / 6.
  EXPECT_DOUBLE_EQ(strategy::kendall_tau({1, 2, 3, 4}, {1, 3, 2, 4}), 4.0 / 6.0);
  // tau-b with a tie in b: concordant 2, discordant 0, one pair tied in b -> 2 / sqrt(3 * 2).
  EXPECT_NEAR(strategy::kendall_tau({1, 2, 3}, {1, 2, 2}), 2.0 / std::sqrt(6.0), 1e-12);
  EXPECT_THROW(strategy::kendall_tau({1}, {1}), Error);
}

// What partita run, the GUI's Run tab and sessions read goes through one validation, which names
// the field: a failed run's partial file, no timed iteration, and figures that are not amounts.
TEST(Measured, ValidationRefusesWhatIsNotAFinishedRunsResult) {
  const Planned p;
  const auto finished = [&] {
    auto run = p.run(1.0);
    run.set_complete(true);
    run.set_ranks(2);
    run.set_timed_iterations(3);
    run.mutable_iteration_seconds()->set_min(0.9 * p.prediction.iteration_time);
    run.mutable_iteration_seconds()->set_max(1.1 * p.prediction.iteration_time);
    return run;
  };
  EXPECT_NO_THROW(strategy::validate(finished(), "m.json"));
  const auto refused = [&](const proto::RunResult& run, const std::string& message) {
    try {
      strategy::validate(run, "m.json");
      ADD_FAILURE() << "accepted; expected: " << message;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(message));
    }
  };
  auto run = finished();
  run.set_complete(false);
  run.set_failure("rank 1: no progress for 300 s");
  refused(run, "m.json: field 'complete': false: these are the partial measurements of a run that failed (rank 1: "
               "no progress for 300 s)");
  run = finished();
  run.set_timed_iterations(0);
  refused(run, "m.json: field 'timed_iterations': 0");
  run = finished();
  run.mutable_ops(1)->set_forward_seconds(-1);
  refused(run, "m.json: field 'ops[1].forward_seconds': -1 is not a time");
  run = finished();
  run.mutable_ops(2)->set_backward_seconds(std::nan(""));
  refused(run, "m.json: field 'ops[2].backward_seconds': nan is not a time");
  run = finished();
  run.mutable_iteration_seconds()->set_median(std::numeric_limits<double>::infinity());
  refused(run, "m.json: field 'iteration_seconds.median': inf is not a time");
  run = finished();
  run.mutable_iteration_seconds()->set_mean(0);
  run.mutable_iteration_seconds()->set_median(0);
  refused(run, "m.json: field 'iteration_seconds': no iteration time");
  run = finished();
  auto* e = run.add_events();
  e->set_start(2);
  e->set_end(1);
  refused(run, "m.json: field 'events[0]': ends at 1 s, before it starts (2 s)");
}

} // namespace
} // namespace partita
