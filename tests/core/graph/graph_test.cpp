#include "partita/graph/error.h"
#include "partita/graph/graph.h"
#include "partita/graph/op_semantics.h"
#include "test_support.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace partita {
namespace {

using graph::TensorRole;
using ::testing::HasSubstr;

TEST(Graph, TopologicalOrderFollowsDataflow) {
  graph::Graph g;
  test::tensor(g, "x", {2, 3}, TensorRole::input);
  test::tensor(g, "a", {2, 3});
  test::tensor(g, "b", {2, 3});
  test::tensor(g, "c", {2, 3});
  // Added out of order on purpose.
  const auto add = test::op(g, "Add", {"a", "b"}, {"c"});
  const auto relu = test::op(g, "Relu", {"x"}, {"a"});
  const auto tanh = test::op(g, "Tanh", {"a"}, {"b"});
  EXPECT_EQ(g.topological_order(), (std::vector<graph::OpId>{relu, tanh, add}));
  EXPECT_NO_THROW(g.validate());
}

// What the backward pass differentiates: values computed from a weight, not the data, constants
// or what is computed from them alone (GPT-2's causal mask), nor a value read only as an index.
TEST(Graph, GradientsFlowFromParametersOnly) {
  graph::Graph g;
  test::tensor(g, "x", {2, 4, 8}, TensorRole::input);
  test::tensor(g, "w", {8, 8}, TensorRole::parameter);
  test::tensor(g, "h", {2, 4, 8});
  test::tensor(g, "x2", {2, 4, 8});
  test::tensor(g, "tril", {4, 8});
  test::tensor(g, "big", {1});
  test::tensor(g, "mask", {4, 8});
  test::tensor(g, "y", {2, 4, 8});
  test::tensor(g, "ids", {2, 4}, TensorRole::input, graph::DType::i64);
  test::tensor(g, "table", {10, 8}, TensorRole::parameter);
  test::tensor(g, "rows", {2, 4, 8});
  test::op(g, "Relu", {"x"}, {"x2"}); // from the data alone
  test::op(g, "MatMul", {"x2", "w"}, {"h"});
  test::op(g, "Constant", {}, {"tril"}, {{"value_float", 1.0}});
  test::op(g, "Constant", {}, {"big"}, {{"value_float", -1e4}});
  test::op(g, "Mul", {"tril", "big"}, {"mask"});
  test::op(g, "Add", {"h", "mask"}, {"y"});
  test::op(g, "Gather", {"table", "ids"}, {"rows"}, {{"axis", std::int64_t{0}}});
  graph::mark_gradients(g);
  const auto gets = [&](const char* name) { return graph::gets_gradient(g.tensor(g.find_tensor(name))); };
  EXPECT_FALSE(gets("x"));
  EXPECT_FALSE(gets("x2"));
  EXPECT_TRUE(gets("w"));
  EXPECT_TRUE(gets("h"));
  EXPECT_FALSE(gets("tril"));
  EXPECT_FALSE(gets("mask"));
  EXPECT_TRUE(gets("y"));
  EXPECT_FALSE(gets("ids"));
  EXPECT_TRUE(gets("rows")); // an embedding's rows carry its weight's gradient
  // Fixed (the same in every micro-batch): the constants and what is computed from them alone.
  const auto fixed = [&](const char* name) { return g.tensor(g.find_tensor(name)).fixed; };
  EXPECT_TRUE(fixed("tril"));
  EXPECT_TRUE(fixed("big"));
  EXPECT_TRUE(fixed("mask"));
  for (const char* name : {"x", "x2", "w", "h", "y", "ids", "table", "rows"}) {
    EXPECT_FALSE(fixed(name)) << name;
  }
  // A Shape of the data (its values known at import, as the importer records them) and what is
  // computed from it and constants alone are the same in every micro-batch too (a mask built from
  // the input's length, as exporters write it); what also reads the data is not.
  test::tensor(g, "len", {3}, TensorRole::activation, graph::DType::i64);
  test::tensor(g, "len2", {3}, TensorRole::activation, graph::DType::i64);
  test::tensor(g, "both", {2, 4}, TensorRole::activation, graph::DType::i64);
  test::op(g, "Shape", {"x"}, {"len"});
  test::op(g, "Mul", {"len", "big"}, {"len2"});
  test::op(g, "Add", {"ids", "ids"}, {"both"});
  g.tensor(g.find_tensor("len")).int_values = std::vector<std::int64_t>{2, 4, 8};
  graph::mark_gradients(g);
  EXPECT_TRUE(fixed("len"));
  EXPECT_TRUE(fixed("len2"));
  EXPECT_FALSE(fixed("both"));
  EXPECT_FALSE(fixed("x"));
  // The Add's backward sums no broadcast for the mask, and MatMul's computes no data gradient.
  const auto add = graph::describe(g, 5);
  EXPECT_EQ(add.backward_reduction_bytes, 0);
  const auto matmul = graph::describe(g, 1);
  EXPECT_EQ(matmul.bwd_data_flops, 0);
  EXPECT_GT(matmul.bwd_weight_flops, 0);
}

TEST(Graph, CycleIsReportedWithOpNames) {
  graph::Graph g;
  g.name = "loop";
  test::tensor(g, "a", {4});
  test::tensor(g, "b", {4});
  test::op(g, "Relu", {"a"}, {"b"});
  test::op(g, "Tanh", {"b"}, {"a"});
  try {
    (void)g.topological_order();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cycle"));
    EXPECT_THAT(e.what(), HasSubstr("'Relu_0'"));
    EXPECT_THAT(e.what(), HasSubstr("'Tanh_1'"));
  }
}

TEST(Graph, ValidateRejectsNonPositiveDimensions) {
  graph::Graph g;
  test::tensor(g, "x", {2, 0}, TensorRole::input);
  EXPECT_THROW(g.validate(), Error);
  graph::Graph h;
  test::tensor(h, "x", {2, -3}, TensorRole::input);
  try {
    h.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'x'"));
  }
}

TEST(Graph, ValidateRejectsOverflowingElementCount) {
  graph::Graph g;
  test::tensor(g, "huge", {1LL << 32, 1LL << 32}, TensorRole::input);
  try {
    g.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("overflows int64"));
    EXPECT_THAT(e.what(), HasSubstr("'huge'"));
  }
}

TEST(Graph, ValidateRejectsMissingProducer) {
  graph::Graph g;
  test::tensor(g, "dangling", {4});
  test::tensor(g, "y", {4});
  test::op(g, "Relu", {"dangling"}, {"y"});
  try {
    g.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'dangling'"));
    EXPECT_THAT(e.what(), HasSubstr("Relu_0"));
  }
}

TEST(Graph, TensorDefinedTwiceIsAnError) {
  graph::Graph g;
  test::tensor(g, "x", {1});
  EXPECT_THROW(test::tensor(g, "x", {1}), Error);
}

} // namespace
} // namespace partita

namespace partita {
namespace {

TEST(Graph, OutputListedTwiceIsRefusedAndLeavesTheGraphUnchanged) {
  graph::Graph g;
  test::tensor(g, "x", {2}, graph::TensorRole::input);
  test::tensor(g, "y", {2});
  EXPECT_THROW(test::op(g, "Split", {"x"}, {"y", "y"}), Error);
  EXPECT_TRUE(g.ops().empty());
  EXPECT_EQ(g.tensor(g.find_tensor("y")).producer, -1);
  EXPECT_TRUE(g.tensor(g.find_tensor("x")).consumers.empty());
}

} // namespace
} // namespace partita
