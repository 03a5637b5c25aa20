// The hand-made families produce the structure their papers describe.

#include "partita/graph/error.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"
#include "simple_cluster.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

namespace partita {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Fixture {
  onnx_import::ImportResult model;
  cluster::Cluster cluster = test::simple_cluster(8);
  explicit Fixture(const std::string& spec) : model(zoo::load(spec)) {}

  strategy::Strategy run(const std::string& family, int devices, int tensor_parallel = 0) const {
    search::Request r;
    r.graph = &model.graph;
    r.cluster = &cluster;
    r.devices = devices;
    r.tensor_parallel = tensor_parallel;
    return search::find_optimizer(family).optimize(r);
  }
  graph::OpId op(const std::string& name) const {
    for (std::size_t i = 0; i < model.graph.ops().size(); ++i) {
      if (model.graph.ops()[i].name == name) {
        return static_cast<graph::OpId>(i);
      }
    }
    ADD_FAILURE() << "no op " << name;
    return 0;
  }
  // "n:4" style text of an op's configuration.
  std::string config(const strategy::Strategy& st, const std::string& name) const {
    const auto id = op(name);
    return sharding::to_string(st.ops[static_cast<std::size_t>(id)].config, graph::describe(model.graph, id));
  }
};

TEST(Families, DataParallelSplitsTheBatchOfEveryLayer) {
  Fixture f("zoo:resnet50?batch=16&image=64");
  const auto st = f.run("dp", 8);
  EXPECT_EQ(f.config(st, "conv1"), "n:8");
  EXPECT_EQ(f.config(st, "layer2.0.conv2"), "n:8");
  EXPECT_EQ(f.config(st, "fc"), "m:8");
  const auto p = strategy::evaluate(f.model.graph, f.cluster, st, {});
  EXPECT_GT(p.iteration[3].value, 0) << "weight gradients are synchronized";
}

TEST(Families, SayWhenTheBatchIsSmallerThanTheDevices) {
  Fixture one("zoo:resnet50?batch=1&image=32");
  const auto st = one.run("dp", 8);
  EXPECT_EQ(st.ops[static_cast<std::size_t>(one.op("conv1"))].copies(), 8);
  EXPECT_THAT(st.explanation, HasSubstr("the batch is 1, so no op can split it"));
  Fixture two("zoo:resnet50?batch=2&image=32");
  EXPECT_THAT(two.run("dp", 8).explanation, HasSubstr("the batch (2) is smaller than the 8 devices"));
  Fixture enough("zoo:resnet50?batch=8&image=32");
  EXPECT_THAT(enough.run("dp", 8).explanation, Not(HasSubstr("smaller than")));
}

TEST(Families, ModelParallelSplitsOutputFeatures) {
  Fixture f("zoo:resnet50?batch=16&image=64");
  const auto st = f.run("mp", 8);
  EXPECT_EQ(f.config(st, "conv1"), "co:8");
  EXPECT_EQ(f.config(st, "fc"), "n:8");
  const auto p = strategy::evaluate(f.model.graph, f.cluster, st, {});
  EXPECT_EQ(p.ops[static_cast<std::size_t>(f.op("conv1"))].cost.get(cost::term::gradient_sync), 0);
}

TEST(Families, OneWeirdTrickIsDataParallelConvolutionsAndModelParallelClassifier) {
  Fixture f("zoo:alexnet?batch=16");
  const auto st = f.run("owt", 8);
  EXPECT_EQ(f.config(st, "features.0"), "n:8");
  EXPECT_EQ(f.config(st, "classifier.1"), "n:8");
  EXPECT_THAT(st.explanation, HasSubstr("5 convolutions"));
}

TEST(Families, MegatronPairsColumnAndRowParallelProducts) {
  Fixture f("zoo:bert?layers=1&hidden=64&heads=4&seq=16&batch=4&vocab=100&positions=32");
  const auto st = f.run("megatron", 8, 4);
  EXPECT_THAT(f.config(st, "encoder.layer.0.attention.q"), HasSubstr("n:4"));
  EXPECT_THAT(f.config(st, "encoder.layer.0.attention.proj"), HasSubstr("k:4"));
  EXPECT_THAT(f.config(st, "encoder.layer.0.intermediate.dense"), HasSubstr("n:4"));
  EXPECT_THAT(f.config(st, "encoder.layer.0.output.dense"), HasSubstr("k:4"));
  EXPECT_THAT(st.explanation, HasSubstr("groups of 4 devices"));
  const auto p = strategy::evaluate(f.model.graph, f.cluster, st, {});
  // Row-parallel products leave partial sums that are all-reduced in the forward pass.
  EXPECT_GT(p.ops[static_cast<std::size_t>(f.op("encoder.layer.0.output.dense"))].cost.get(cost::term::forward_reduce),
            0);
}

TEST(Families, HybridExplainsItsGroupSize) {
  Fixture f("zoo:mlp?batch=8&input=1024&hidden=4096&layers=2&classes=16");
  const auto st = f.run("hybrid", 8);
  EXPECT_THAT(st.explanation, HasSubstr("g=1:"));
  EXPECT_THAT(st.explanation, HasSubstr("g=8:"));
  EXPECT_THAT(st.explanation, HasSubstr("fastest"));
}

TEST(Families, UnknownFamilyAndTooManyDevicesAreNamed) {
  try {
    (void)search::find_optimizer("dpp");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'dpp'"));
    EXPECT_THAT(e.what(), HasSubstr("megatron"));
  }
  Fixture f("zoo:mlp?batch=8");
  EXPECT_THROW(f.run("dp", 16), Error);
}

TEST(Families, CancellationStopsTheSearch) {
  Fixture f("zoo:mlp?batch=8");
  std::atomic<bool> cancel{true};
  search::Request r;
  r.graph = &f.model.graph;
  r.cluster = &f.cluster;
  r.devices = 8;
  r.cancel = &cancel;
  EXPECT_THROW(search::find_optimizer("dp").optimize(r), Cancelled);
}

} // namespace
} // namespace partita

namespace partita {
namespace {

TEST(Families, GroupHybridPicksLayerGroupsWhenGradientsDominate) {
  // Big weights, tiny batch, slow links: data parallelism drowns in gradient traffic, so
  // splitting the layers over a group (each worker syncing 1/g of the weights) wins.
  const auto model = zoo::load("zoo:mlp?batch=8&input=4096&hidden=4096&layers=4&classes=16");
  const auto slow = test::simple_cluster(8, 1e8);
  search::Request r;
  r.graph = &model.graph;
  r.cluster = &slow;
  r.devices = 8;
  const auto st = search::find_optimizer("ghp").optimize(r);
  EXPECT_EQ(st.family, "ghp");
  EXPECT_THAT(st.explanation, HasSubstr("g=1:"));
  EXPECT_THAT(st.explanation, Not(HasSubstr("g=1 is fastest")));
  ASSERT_TRUE(st.pipeline.has_value());
  EXPECT_EQ(st.pipeline->micro_batches, 1) << "one batch in flight: model parallelism, not a pipeline";
  // On fast links with a big batch, plain data parallelism wins.
  const auto wide = zoo::load("zoo:mlp?batch=1024&input=64&hidden=64&layers=2&classes=16");
  const auto fast = test::simple_cluster(8, 1e12);
  r.graph = &wide.graph;
  r.cluster = &fast;
  EXPECT_THAT(search::find_optimizer("ghp").optimize(r).explanation, HasSubstr("g=1 is fastest"));
}

// A device count that is not a power of two is used whole: 12 or 24 devices split a batch 12 or 24
// ways, not 8 or 16 with the rest idle (the explanation says "over 12 devices"), and a pipeline's
// 24 data-parallel replicas per stage are all used.
TEST(Families, EveryDeviceOfACountThatIsNotAPowerOfTwoIsUsed) {
  Fixture f("zoo:mlp?batch=96");
  f.cluster = test::simple_cluster(24);
  for (const int devices : {6, 12, 24}) {
    const auto st = f.run("dp", devices);
    for (std::size_t i = 0; i < st.ops.size(); ++i) {
      EXPECT_EQ(st.ops[i].config.devices(), devices) << f.model.graph.ops()[i].name << " on " << devices;
      EXPECT_EQ(st.ops[i].devices.size(), static_cast<std::size_t>(devices));
    }
    EXPECT_THAT(st.explanation, HasSubstr(fmt::format("over {} devices", devices)));
  }
  // A dim smaller than the devices takes the largest factor of them it can: batch 10 on 12 devices
  // splits 6 ways in 2 copies (every device busy), not 8 ways with 4 idle.
  Fixture small("zoo:mlp?batch=10");
  small.cluster = test::simple_cluster(24);
  const auto st = small.run("dp", 12);
  EXPECT_EQ(small.config(st, "layers.0"), "m:6");
  EXPECT_EQ(st.ops[0].devices.size(), 12U);

  Fixture gpt("zoo:gpt2?layers=2&hidden=64&heads=4&seq=16&batch=48&vocab=100&positions=32");
  gpt.cluster = test::simple_cluster(24);
  search::Request r;
  r.graph = &gpt.model.graph;
  r.cluster = &gpt.cluster;
  r.devices = 24;
  r.stages = 2;
  r.micro_batches = 4;
  r.tensor_parallel = 2;
  const auto pipe = search::find_optimizer("pipeline").optimize(r);
  for (std::size_t i = 0; i < pipe.ops.size(); ++i) {
    EXPECT_EQ(pipe.ops[i].devices.size(), 12U) << gpt.model.graph.ops()[i].name; // one stage's 12 devices
  }
  EXPECT_EQ(gpt.config(pipe, "h.0.mlp.fc"), "b0:6 n:2");
}

// A search hands the families the model's facts derived once (search::ModelFacts); a family asked
// alone derives them itself. The plans must not depend on which: the same configuration on the same
// devices for every op, and the same explanation (which names the group sizes' predicted times).
TEST(Families, PlansAreTheSameWithTheModelsFactsGivenOrDerived) {
  for (const char* spec : {"zoo:bert?layers=2&hidden=256&heads=4&seq=64&batch=8&vocab=1000&positions=64",
                           "zoo:resnet50?batch=16", "zoo:gpt2?layers=2&hidden=256&heads=4&seq=64&batch=8"}) {
    Fixture f(spec);
    search::Request r;
    r.graph = &f.model.graph;
    r.cluster = &f.cluster;
    r.devices = 8;
    search::Request with = r;
    with.facts = search::ModelFacts::of(f.model.graph);
    for (const char* family : {"dp", "mp", "owt", "megatron", "hybrid", "ghp", "gholami"}) {
      SCOPED_TRACE(fmt::format("{} {}", spec, family));
      const auto alone = search::find_optimizer(family).optimize(r);
      const auto given = search::find_optimizer(family).optimize(with);
      ASSERT_EQ(alone.ops.size(), given.ops.size());
      for (std::size_t i = 0; i < alone.ops.size(); ++i) {
        EXPECT_EQ(alone.ops[i].config, given.ops[i].config) << f.model.graph.ops()[i].name;
        EXPECT_EQ(alone.ops[i].devices, given.ops[i].devices) << f.model.graph.ops()[i].name;
      }
      EXPECT_EQ(alone.explanation, given.explanation);
    }
  }
}

} // namespace
} // namespace partita
