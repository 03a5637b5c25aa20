// The zoo against published figures (through the importer and the per-layer summary), and its
// parameter parsing, errors and export.

#include "partita/graph/error.h"
#include "partita/graph/summary.h"
#include "partita/zoo/zoo.h"
#include "test_support.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <set>

namespace partita {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

graph::ModelSummary summary_of(const std::string& spec) {
  return graph::summarize(zoo::load("zoo:" + spec).graph);
}

// Within 1% of a published figure.
void expect_near_published(double measured, double published, const std::string& what) {
  EXPECT_NEAR(measured, published, 0.01 * published) << what << ": measured " << measured;
}

TEST(ZooPublished, ResNet50) {
  const auto s = summary_of("resnet50");
  expect_near_published(static_cast<double>(s.params), 25.557e6, "params");
  expect_near_published(s.macs, 4.09e9, "MACs");
}

// torchvision's densenet121/169/201: 7,978,856, 14,149,480 and 20,013,928 parameters, 2.83 GMACs for 121.
TEST(ZooPublished, DenseNets) {
  const auto s = summary_of("densenet");
  EXPECT_EQ(s.params, 7'978'856);
  expect_near_published(s.macs, 2.834e9, "MACs");
  EXPECT_EQ(summary_of("densenet?size=169").params, 14'149'480);
  EXPECT_EQ(summary_of("densenet?size=201").params, 20'013'928);
  // Every dense layer concatenates the block's input and every earlier layer's output.
  const auto g = zoo::load("zoo:densenet?layers=3&growth=8&image=32").graph;
  const auto cat = g.find_tensor("features.denseblock1.denselayer3.cat");
  ASSERT_NE(cat, graph::no_tensor);
  EXPECT_EQ(g.op(g.tensor(cat).producer).inputs.size(), 3U);
}

TEST(ZooPublished, Vgg16) {
  const auto s = summary_of("vgg16");
  expect_near_published(static_cast<double>(s.params), 138.36e6, "params");
  expect_near_published(s.macs, 15.47e9, "MACs");
}

TEST(ZooPublished, Gpt2SmallCountsTheTiedHeadOnce) {
  const auto result = zoo::load("zoo:gpt2");
  const auto s = graph::summarize(result.graph);
  expect_near_published(static_cast<double>(s.params), 124.44e6, "params");
  // The token embedding feeds the Gather and the head's Transpose; it is one parameter.
  const auto& g = result.graph;
  const auto wte = g.find_tensor("wte.weight");
  ASSERT_NE(wte, graph::no_tensor);
  EXPECT_EQ(g.tensor(wte).role, graph::TensorRole::parameter);
  std::set<std::string> readers;
  for (auto op : g.tensor(wte).consumers)
    readers.insert(g.op(op).type);
  EXPECT_EQ(readers, (std::set<std::string>{"Gather", "Transpose"}));
}

TEST(ZooPublished, BertLargeWithPooler) {
  const auto s = summary_of("bert?size=large");
  expect_near_published(static_cast<double>(s.params), 335.1e6, "params");
}

TEST(ZooPublished, BatchNormStatisticsAreStateNotParameters) {
  const auto result = zoo::load("zoo:resnet50?image=64");
  const auto& g = result.graph;
  EXPECT_EQ(g.tensor(g.find_tensor("layer1.0.bn1.running_mean")).role, graph::TensorRole::state);
  EXPECT_EQ(g.tensor(g.find_tensor("layer1.0.bn1.running_var")).role, graph::TensorRole::state);
  EXPECT_EQ(g.tensor(g.find_tensor("layer1.0.bn1.weight")).role, graph::TensorRole::parameter);
  // Parameters do not depend on the image size (global pooling before the classifier).
  expect_near_published(static_cast<double>(graph::summarize(g).params), 25.557e6, "params at 64x64");
}

TEST(ZooModels, ListsEveryModelWithABatchParameter) {
  std::set<std::string> names;
  for (const auto& m : zoo::models()) {
    names.insert(m.name);
    EXPECT_FALSE(m.description.empty()) << m.name;
    bool has_batch = false;
    for (const auto& p : m.params) {
      EXPECT_FALSE(p.help.empty()) << m.name << "." << p.name;
      has_batch = has_batch || (p.name == "batch" && p.default_value == "1");
    }
    EXPECT_TRUE(has_batch) << m.name;
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"mlp", "alexnet", "vgg16", "resnet50", "resnet101", "inception-v3", "densenet",
                                   "gnmt", "rnnlm", "transformer", "bert", "gpt2", "gpt3", "llama"}));
}

TEST(ZooBuild, PrefixIsOptionalAndParametersApply) {
  const auto a = zoo::build("zoo:gpt2?layers=2&hidden=128&heads=4&seq=32&batch=4");
  const auto b = zoo::build("gpt2?layers=2&hidden=128&heads=4&seq=32&batch=4");
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
  EXPECT_EQ(a.opset_import(0).version(), 17);
  EXPECT_EQ(a.ir_version(), 8);
  const auto& in = a.graph().input(0).type().tensor_type().shape();
  ASSERT_EQ(in.dim_size(), 2);
  EXPECT_EQ(in.dim(0).dim_value(), 4);
  EXPECT_EQ(in.dim(1).dim_value(), 32);
}

TEST(ZooBuild, WeightsAreExternalAndNeverWritten) {
  const auto m = zoo::build("resnet50?image=64");
  std::int64_t expected_offset = 0;
  int weights = 0;
  for (const auto& t : m.graph().initializer()) {
    if (t.data_type() != onnx::TensorProto::FLOAT)
      continue;
    ++weights;
    EXPECT_EQ(t.data_location(), onnx::TensorProto::EXTERNAL) << t.name();
    EXPECT_TRUE(t.raw_data().empty() && t.float_data_size() == 0) << t.name();
    std::map<std::string, std::string> entries;
    for (const auto& e : t.external_data())
      entries[e.key()] = e.value();
    EXPECT_EQ(entries["location"], "resnet50.weights");
    std::int64_t bytes = 4;
    for (auto d : t.dims())
      bytes *= d;
    EXPECT_EQ(entries["offset"], std::to_string(expected_offset)) << t.name();
    EXPECT_EQ(entries["length"], std::to_string(bytes)) << t.name();
    expected_offset += bytes;
  }
  // 53 convolutions, 53 batch norms with 4 tensors each, fc weight and bias.
  EXPECT_EQ(weights, 53 + 53 * 4 + 2);
}

TEST(ZooBuild, EveryPresetSizeBuilds) {
  for (const auto* spec :
       {"gpt2?size=medium&seq=8", "gpt2?size=large&seq=8", "gpt2?size=xl&seq=8", "gpt3?size=medium&seq=8",
        "gpt3?size=large&seq=8", "gpt3?size=xl&seq=8", "gpt3?size=2.7b&seq=8", "gpt3?size=6.7b&seq=8",
        "gpt3?size=13b&seq=8", "gpt3?size=175b&seq=8", "transformer?size=big&seq=8", "bert?size=large&seq=8",
        "llama?size=2-70b&seq=8&layers=2", "llama?size=3-405b&seq=8&layers=2"}) {
    EXPECT_GT(zoo::build(spec).graph().node_size(), 0) << spec;
  }
}

TEST(ZooErrors, UnknownModelIsNamedWithTheKnownOnes) {
  EXPECT_THAT([] { zoo::build("zoo:resnet51"); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("resnet51"), HasSubstr("resnet50"), HasSubstr("gpt2"))));
}

TEST(ZooErrors, UnknownParameterIsNamedWithTheModelsParameters) {
  EXPECT_THAT([] { zoo::build("gpt2?depth=3"); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("depth"), HasSubstr("gpt2"), HasSubstr("layers"),
                                                    HasSubstr("heads"), HasSubstr("batch"))));
  EXPECT_THAT([] { zoo::build("resnet50?seq=3"); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("seq"), HasSubstr("image"))));
}

TEST(ZooErrors, BadValuesAreNamed) {
  for (const auto* value : {"abc", "0", "-3", "1.5", "", "12x"}) {
    const std::string spec = std::string("resnet50?batch=") + value;
    EXPECT_THAT([&] { zoo::build(spec); },
                ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("batch"), HasSubstr("positive integer"),
                                                      HasSubstr(std::string("'") + value + "'"))))
        << spec;
  }
  EXPECT_THAT([] { zoo::build("gpt2?hidden=100&heads=3"); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("hidden (100)"), HasSubstr("heads (3)"))));
  // The size preset's heads must divide an overridden width too.
  EXPECT_THAT([] { zoo::build("bert?hidden=100"); }, ::testing::ThrowsMessage<Error>(HasSubstr("heads (12)")));
  EXPECT_THAT([] { zoo::build("gpt3?size=huge"); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("size"), HasSubstr("huge"), HasSubstr("175b"))));
  EXPECT_THAT([] { zoo::build("gpt2?batch=2&batch=3"); }, ::testing::ThrowsMessage<Error>(HasSubstr("twice")));
  EXPECT_THAT([] { zoo::build("gpt2?batch"); }, ::testing::ThrowsMessage<Error>(HasSubstr("key=value")));
  EXPECT_THAT([] { zoo::build("gpt2?seq=2048"); }, ::testing::ThrowsMessage<Error>(HasSubstr("1024")));
  EXPECT_THAT([] { zoo::build("alexnet?image=32"); }, ::testing::ThrowsMessage<Error>(HasSubstr("too small")));
  EXPECT_THAT([] { zoo::build("mlp?layers=100000"); }, ::testing::ThrowsMessage<Error>(HasSubstr("largest")));
}

TEST(ZooExport, WritesAtomicallyAndNamesAFailingPath) {
  const auto dir = test::scratch_dir();
  const auto path = dir + "/mlp.onnx";
  zoo::export_onnx("mlp?layers=1", path);
  zoo::export_onnx("mlp?layers=2", path); // replaces
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const auto s = graph::summarize(zoo::load(path).graph);
  EXPECT_EQ(s.params, graph::summarize(zoo::load("zoo:mlp?layers=2").graph).params);

  const auto bad = dir + "/no/such/dir/model.onnx";
  EXPECT_THAT([&] { zoo::export_onnx("mlp", bad); }, ::testing::ThrowsMessage<Error>(HasSubstr(bad)));
}

} // namespace
} // namespace partita
