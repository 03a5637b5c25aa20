// Plans written as partita.proto JSON read back into the same strategy and the same prediction.

#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/plan_file.h"
#include "partita/zoo/zoo.h"
#include "simple_cluster.h"
#include "test_support.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace partita {
namespace {

using ::testing::HasSubstr;

TEST(PlanFile, RoundTripGivesTheSamePrediction) {
  const auto model = zoo::load("zoo:gpt2?layers=1&hidden=64&heads=4&seq=16&batch=4&vocab=100&positions=32");
  const auto& g = model.graph;
  const auto c = test::simple_cluster(4);
  cost::TrainingSetup setup;
  setup.precision = cluster::Precision::bf16;
  setup.zero_stage = 1;
  search::Request r;
  r.graph = &g;
  r.cluster = &c;
  r.devices = 4;
  r.setup = setup;
  const auto st = search::find_optimizer("megatron").optimize(r);
  const auto p = strategy::evaluate(g, c, st, setup);
  const std::string path = test::scratch_dir() + "/plan.json";
  io::write_json_file(path, strategy::to_plan(g, c, st, p, setup, "zoo:gpt2"));

  proto::Plan plan;
  io::read_json_file(path, plan);
  EXPECT_EQ(plan.family(), "megatron");
  EXPECT_EQ(plan.ops_size(), static_cast<int>(g.ops().size()));
  const auto back = strategy::from_plan(plan, g, path);
  const auto setup_back = strategy::setup_from_proto(plan.setup(), path);
  EXPECT_EQ(setup_back.zero_stage, 1);
  EXPECT_EQ(setup_back.precision, cluster::Precision::bf16);
  ASSERT_EQ(back.ops.size(), st.ops.size());
  for (std::size_t i = 0; i < st.ops.size(); ++i) {
    EXPECT_EQ(back.ops[i].config, st.ops[i].config) << g.op(static_cast<graph::OpId>(i)).name;
    EXPECT_EQ(back.ops[i].devices, st.ops[i].devices);
  }
  const auto q = strategy::evaluate(g, cluster::from_proto(plan.cluster(), path), back, setup_back);
  EXPECT_DOUBLE_EQ(q.iteration_time, p.iteration_time);
}

TEST(PlanFile, MismatchesNameTheOpAndField) {
  const auto model = zoo::load("zoo:mlp?batch=4&input=8&hidden=8&layers=1&classes=2");
  const auto& g = model.graph;
  proto::Plan plan;
  for (const auto& op : g.ops()) {
    auto* p = plan.add_ops();
    p->set_name(op.name);
    p->add_devices(0);
  }
  plan.mutable_ops(1)->set_name("renamed");
  try {
    (void)strategy::from_plan(plan, g, "p.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("p.json: field 'ops[1].name'"));
  }
  plan.mutable_ops(1)->set_name(g.op(1).name);
  auto* split = plan.mutable_ops(0)->add_splits();
  split->set_dim("nope");
  split->set_factor(2);
  try {
    (void)strategy::from_plan(plan, g, "p.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("ops[0].splits"));
    EXPECT_THAT(e.what(), HasSubstr("nope"));
  }
  proto::TrainingSetup bad;
  bad.set_optimizer("adamw");
  try {
    (void)strategy::setup_from_proto(bad, "p.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("setup.optimizer"));
    EXPECT_THAT(e.what(), HasSubstr("adam"));
  }
}

// Each op's devices once each, and the plan's: partita-run crashed on a device listed twice.
TEST(PlanFile, DevicesListedTwiceOrOutsideThePlanNameTheField) {
  const auto model = zoo::load("zoo:mlp?batch=4&input=8&hidden=8&layers=1&classes=2");
  const auto& g = model.graph;
  proto::Plan plan;
  plan.set_devices(2);
  for (const auto& op : g.ops()) {
    auto* p = plan.add_ops();
    p->set_name(op.name);
    p->add_devices(0);
    p->add_devices(1);
  }
  EXPECT_NO_THROW((void)strategy::from_plan(plan, g, "p.json"));
  plan.mutable_ops(1)->set_devices(1, 0);
  EXPECT_THAT([&] { (void)strategy::from_plan(plan, g, "p.json"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("p.json: field 'ops[1].devices': device 0 is listed twice")));
  plan.mutable_ops(1)->set_devices(1, 2);
  EXPECT_THAT([&] { (void)strategy::from_plan(plan, g, "p.json"); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("p.json: field 'ops[1].devices': device 2 is not one of the plan's 2 devices (0..1)")));
  plan.mutable_ops(1)->set_devices(1, -1);
  EXPECT_THAT([&] { (void)strategy::from_plan(plan, g, "p.json"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("device -1 is not one of the plan's 2 devices")));
}

TEST(PlanFile, RecordsTheModelFilesChecksumAndRefusesAChangedFile) {
  const std::string onnx = test::scratch_dir() + "/checksum-model.onnx";
  zoo::export_onnx("mlp?batch=4&input=8&hidden=16&layers=1&classes=2", onnx);
  const auto model = zoo::load(onnx);
  const auto c = test::simple_cluster(2);
  search::Request r;
  r.graph = &model.graph;
  r.cluster = &c;
  r.devices = 2;
  const auto st = search::find_optimizer("dp").optimize(r);
  const auto p = strategy::evaluate(model.graph, c, st, r.setup);
  const proto::Plan plan = strategy::to_plan(model.graph, c, st, p, r.setup, onnx);
  EXPECT_THAT(plan.model_checksum(), ::testing::StartsWith("fnv1a64:"));
  EXPECT_NO_THROW(strategy::check_model_checksum(plan, "plan.json"));
  // A zoo model has no file: nothing recorded, nothing checked.
  EXPECT_EQ(strategy::to_plan(model.graph, c, st, p, r.setup, "zoo:mlp").model_checksum(), "");
  // The file replaced by another model: refused, naming the plan, the field and the file.
  zoo::export_onnx("mlp?batch=4&input=8&hidden=32&layers=1&classes=2", onnx);
  try {
    strategy::check_model_checksum(plan, "plan.json");
    FAIL() << "a changed model file was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("plan.json: field 'model_checksum': the model file '" + onnx +
                                    "' has changed since the plan was made"));
  }
}

} // namespace
} // namespace partita
