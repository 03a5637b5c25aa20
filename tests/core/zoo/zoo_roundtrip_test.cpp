// Every zoo model, small: ONNX's own shape inference types every value, an exported file imports
// to the same graph as the built model, and MACs scale with the batch.

#include "partita/graph/summary.h"
#include "partita/zoo/zoo.h"
#include "test_support.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <set>

namespace partita {
namespace {

// Without "batch": the tests add it.
const char* const small_specs[] = {
    "mlp?input=32&hidden=16&layers=2&classes=5",
    "alexnet?image=64",
    "vgg16?image=32",
    "resnet50?image=64",
    "resnet101?image=64",
    "inception-v3?image=75",
    "densenet?layers=2&growth=8&image=32&classes=10",
    "gnmt?seq=6&layers=3&hidden=32&vocab=100",
    "rnnlm?seq=5&hidden=32&vocab=100",
    "transformer?layers=2&hidden=64&heads=4&ff=128&seq=8&vocab=100",
    "bert?layers=2&hidden=64&heads=4&seq=16&vocab=100",
    "gpt2?layers=2&hidden=128&heads=4&seq=32",
    "gpt3?layers=2&hidden=64&heads=4&seq=16",
    "llama?layers=2&hidden=64&heads=4&kv_heads=2&ffn=96&vocab=100&seq=16",
};

std::string with_batch(const std::string& spec, int batch) {
  return spec + "&batch=" + std::to_string(batch);
}

class ZooSmall : public ::testing::TestWithParam<const char*> {};

TEST_P(ZooSmall, ShapeInferenceTypesEveryValue) {
  auto model = zoo::build(with_batch(GetParam(), 2));
  onnx::shape_inference::InferShapes(model);
  std::set<std::string> typed;
  for (const auto& v : model.graph().value_info())
    if (v.type().tensor_type().has_shape())
      typed.insert(v.name());
  for (const auto& v : model.graph().output())
    if (v.type().tensor_type().has_shape())
      typed.insert(v.name());
  for (const auto& n : model.graph().node())
    for (const auto& out : n.output())
      EXPECT_TRUE(typed.count(out)) << n.op_type() << " " << n.name() << ": no shape for " << out;
}

TEST_P(ZooSmall, ExportedFileImportsToTheSameGraph) {
  const auto spec = with_batch(GetParam(), 2);
  const auto built = zoo::load("zoo:" + spec);
  const auto path = test::scratch_dir() + "/model.onnx";
  zoo::export_onnx(spec, path);
  const auto imported = zoo::load(path);
  EXPECT_EQ(imported.graph.ops().size(), built.graph.ops().size());
  const auto a = graph::summarize(built.graph);
  const auto b = graph::summarize(imported.graph);
  EXPECT_GT(a.params, 0);
  EXPECT_GT(a.macs, 0);
  EXPECT_EQ(b.params, a.params);
  EXPECT_DOUBLE_EQ(b.macs, a.macs);
  EXPECT_TRUE(a.opaque_ops.empty()) << a.opaque_ops.front();
}

TEST_P(ZooSmall, MacsScaleLinearlyWithBatch) {
  const auto one = graph::summarize(zoo::load("zoo:" + with_batch(GetParam(), 1)).graph);
  const auto three = graph::summarize(zoo::load("zoo:" + with_batch(GetParam(), 3)).graph);
  EXPECT_EQ(three.params, one.params);
  EXPECT_NEAR(three.macs, 3 * one.macs, 1e-9 * three.macs);
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooSmall, ::testing::ValuesIn(small_specs),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           name = name.substr(0, name.find('?'));
                           std::erase(name, '-');
                           return name;
                         });

TEST(ZooSmallCoverage, EveryModelHasASmallSpec) {
  std::set<std::string> covered;
  for (const std::string spec : small_specs)
    covered.insert(spec.substr(0, spec.find('?')));
  for (const auto& m : zoo::models())
    EXPECT_TRUE(covered.count(m.name)) << m.name;
}

} // namespace
} // namespace partita
