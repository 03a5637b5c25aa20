// The Llama zoo models against their published parameter counts, and what sets them apart from
// GPT: grouped-query attention, no biases, an untied LM head, rotary tables that are not weights.

#include "partita/graph/error.h"
#include "partita/graph/summary.h"
#include "partita/zoo/zoo.h"
#include "test_support.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

namespace partita {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::int64_t params_of(const std::string& spec) {
  return graph::summarize(zoo::load("zoo:" + spec).graph).params;
}

struct Published {
  const char* size;
  std::int64_t params; // as the model cards and the HF checkpoints count them
};

// Every layer of the full model (the graph holds shapes only, so 126 layers build quickly); the
// counts by hand at the top of core/src/zoo/llama.cpp match these exactly.
TEST(ZooLlama, ParameterCountsMatchThePublishedOnes) {
  const std::vector<Published> sizes{{"2-7b", 6'738'415'616}, {"2-13b", 13'015'864'320}, {"2-70b", 68'976'648'192},
                                     {"3-8b", 8'030'261'248}, {"3-70b", 70'553'706'496}, {"3-405b", 405'853'388'800}};
  for (const auto& s : sizes) {
    const auto measured = params_of(std::string("llama?seq=8&size=") + s.size);
    EXPECT_NEAR(static_cast<double>(measured), static_cast<double>(s.params), 0.01 * static_cast<double>(s.params))
        << s.size;
    EXPECT_EQ(measured, s.params) << s.size;
  }
}

TEST(ZooLlama, GroupedQueryAttentionHasFewerKeyValueParameters) {
  const std::string base = "llama?layers=2&hidden=64&heads=8&ffn=96&vocab=100&seq=8";
  const auto full = params_of(base + "&kv_heads=8");
  const auto grouped = params_of(base + "&kv_heads=2");
  // k and v shrink from 8 heads of 8 to 2 heads of 8, in each of the 2 layers.
  EXPECT_EQ(full - grouped, 2 * 2 * 64 * (8 - 2) * 8);

  const auto result = zoo::load("zoo:" + base + "&kv_heads=2");
  const auto& g = result.graph;
  for (const char* name : {"layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight"}) {
    const auto t = g.find_tensor(name);
    ASSERT_NE(t, graph::no_tensor) << name;
    EXPECT_EQ(g.tensor(t).role, graph::TensorRole::parameter) << name;
    EXPECT_EQ(g.tensor(t).shape.size(), 2u) << name;
  }
  const auto q = g.find_tensor("layers.0.self_attn.q_proj.weight");
  const auto k = g.find_tensor("layers.0.self_attn.k_proj.weight");
  ASSERT_NE(q, graph::no_tensor);
  EXPECT_EQ(graph::summarize(g).params, grouped);
  EXPECT_EQ(g.tensor(q).shape.back(), 64);
  EXPECT_EQ(g.tensor(k).shape.back(), 16);
}

TEST(ZooLlama, NoBiasesAndAnUntiedHead) {
  const auto result = zoo::load("zoo:llama?size=3-8b&layers=1&seq=8");
  const auto& g = result.graph;
  const auto embed = g.find_tensor("embed_tokens.weight");
  const auto head = g.find_tensor("lm_head.weight");
  ASSERT_NE(embed, graph::no_tensor);
  ASSERT_NE(head, graph::no_tensor);
  EXPECT_EQ(g.tensor(embed).role, graph::TensorRole::parameter);
  EXPECT_EQ(g.tensor(head).role, graph::TensorRole::parameter);
  for (graph::TensorId t = 0; t < static_cast<graph::TensorId>(g.tensors().size()); ++t)
    EXPECT_THAT(g.tensor(t).name, ::testing::Not(HasSubstr("bias")));
}

TEST(ZooLlama, RotaryTablesAreNotParameters) {
  // Parameters do not depend on the sequence length: no position embedding, no stored table.
  EXPECT_EQ(params_of("llama?layers=1&hidden=64&heads=4&kv_heads=2&ffn=96&vocab=100&seq=8"),
            params_of("llama?layers=1&hidden=64&heads=4&kv_heads=2&ffn=96&vocab=100&seq=64"));
}

TEST(ZooLlama, BadHeadCountsAreRefusedByName) {
  EXPECT_THAT([] { zoo::build("llama?size=3-8b&kv_heads=5&layers=1&seq=8"); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("llama"), HasSubstr("kv_heads (5)"),
                                                    HasSubstr("does not divide"), HasSubstr("heads (32)"))));
  EXPECT_THAT([] { zoo::build("llama?kv_heads=64&layers=1&seq=8"); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("kv_heads (64)"), HasSubstr("heads (32)"))));
  EXPECT_THAT([] { zoo::build("llama?hidden=96&heads=32&kv_heads=8&layers=1&seq=8"); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("odd"), HasSubstr("rotary"))));
  EXPECT_THAT([] { zoo::build("llama?hidden=100&layers=1&seq=8"); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("hidden (100)"), HasSubstr("heads (32)"))));
  EXPECT_THAT([] { zoo::build("llama?size=4-8b"); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("size"), HasSubstr("3-405b"))));
}

} // namespace
} // namespace partita
