#include "partita/graph/op_semantics.h"
#include "semantics_test_util.h"
#include "test_support.h"

#include <gtest/gtest.h>

namespace partita {
namespace {

using graph::DType;
using graph::InputSlot;
using graph::OpClass;
using graph::TensorRole;
using test::dims_of;
using test::expect_dim;

TEST(OpsRecurrent, LstmForward) {
  graph::Graph g;
  test::tensor(g, "x", {10, 4, 32}); // [seq, batch, input]
  test::tensor(g, "w", {1, 256, 32}, TensorRole::parameter);
  test::tensor(g, "r", {1, 256, 64}, TensorRole::parameter);
  test::tensor(g, "b", {1, 512}, TensorRole::parameter);
  test::tensor(g, "lens", {4}, TensorRole::input, DType::i32);
  test::tensor(g, "y", {10, 1, 4, 64});
  test::tensor(g, "y_h", {1, 4, 64});
  test::tensor(g, "y_c", {1, 4, 64});
  const auto s = graph::describe(
      g, test::op(g, "LSTM", {"x", "w", "r", "b", "lens"}, {"y", "y_h", "y_c"}, {{"hidden_size", std::int64_t{64}}}));
  EXPECT_EQ(s.op_class, OpClass::recurrent);
  EXPECT_TRUE(s.opaque_reason.empty()) << s.opaque_reason;
  EXPECT_EQ(test::dim_names(s), (std::vector<std::string>{"s", "d", "b", "g", "k"}));
  expect_dim(s, "s", 10, false, false);
  expect_dim(s, "d", 1, false, false);
  expect_dim(s, "b", 4, false, true);
  expect_dim(s, "g", 256, false, false);
  expect_dim(s, "k", 96, true, false);
  EXPECT_EQ(s.slots, (std::vector<InputSlot>{InputSlot::data, InputSlot::weight, InputSlot::weight, InputSlot::weight,
                                             InputSlot::index}));
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"s", "b", ""}));
  EXPECT_EQ(s.inputs[1].dims, dims_of(s, {"d", "g", ""}));
  EXPECT_EQ(s.inputs[4].dims, dims_of(s, {"b"}));
  EXPECT_EQ(s.outputs[0].dims, dims_of(s, {"s", "d", "b", "g"}));
  EXPECT_EQ(s.outputs[2].dims, dims_of(s, {"d", "b", "g"}));
  // 10 steps x 4 sequences x 4 gates x 64 units, each a dot product over 32 inputs + 64 hidden.
  const double gate_points = 10.0 * 4 * 256;
  const double macs = gate_points * (32 + 64);
  EXPECT_DOUBLE_EQ(s.macs, 983040);
  EXPECT_DOUBLE_EQ(s.macs, macs);
  EXPECT_DOUBLE_EQ(s.fwd_flops, 2 * macs + 6 * gate_points);
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 2 * gate_points * 32 + 2 * gate_points * 64 + 12 * gate_points);
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops, 2 * macs + 2 * gate_points);
  // Step by step: 10 steps, each h_{t-1}'s product with R (64 x 256) and the gates, forward and
  // through time; X's projection, dX, dW and dR take every step at once. R is read at each step.
  EXPECT_EQ(s.steps, 10);
  EXPECT_DOUBLE_EQ(s.step_fwd_flops, 2 * gate_points * 64 + 6 * gate_points);
  EXPECT_DOUBLE_EQ(s.step_bwd_flops, 2 * gate_points * 64 + 12 * gate_points);
  EXPECT_EQ(s.step_input, 2);
  EXPECT_DOUBLE_EQ(s.step_fwd_bytes, 4 * (2 * gate_points + 3 * gate_points / 4));
  EXPECT_DOUBLE_EQ(s.step_bwd_bytes, 4 * (2 * gate_points + 4 * gate_points / 4));
}

TEST(OpsRecurrent, BidirectionalBatchFirstGruOnGraphInput) {
  graph::Graph g;
  test::tensor(g, "x", {4, 10, 32}, TensorRole::input); // [batch, seq, input]
  test::tensor(g, "w", {2, 48, 32}, TensorRole::parameter);
  test::tensor(g, "r", {2, 48, 16}, TensorRole::parameter);
  test::tensor(g, "h0", {4, 2, 16});
  test::tensor(g, "y", {4, 10, 2, 16});
  test::tensor(g, "y_h", {4, 2, 16});
  const auto s = graph::describe(g, test::op(g, "GRU", {"x", "w", "r", "", "", "h0"}, {"y", "y_h"},
                                             {{"hidden_size", std::int64_t{16}},
                                              {"direction", std::string("bidirectional")},
                                              {"layout", std::int64_t{1}}}));
  EXPECT_TRUE(s.opaque_reason.empty()) << s.opaque_reason;
  expect_dim(s, "d", 2, false, true);
  expect_dim(s, "g", 48, false, false);
  EXPECT_EQ(s.inputs[0].dims, dims_of(s, {"b", "s", ""}));
  EXPECT_EQ(s.inputs[5].dims, dims_of(s, {"b", "d", "g"}));
  EXPECT_EQ(s.outputs[0].dims, dims_of(s, {"b", "s", "d", "g"}));
  const double gate_points = 10.0 * 2 * 4 * 48;
  EXPECT_DOUBLE_EQ(s.macs, gate_points * 48);
  // No data gradient: the backward recurrence is booked with the weight gradients.
  EXPECT_DOUBLE_EQ(s.bwd_data_flops, 0);
  EXPECT_DOUBLE_EQ(s.bwd_weight_flops,
                   2 * gate_points * 32 + 2 * gate_points * 16 + 2 * gate_points * 16 + 12 * gate_points);
}

TEST(OpsRecurrent, RnnWithWrongWeightShapeIsOpaque) {
  graph::Graph g;
  test::tensor(g, "x", {5, 2, 8});
  test::tensor(g, "w", {1, 16, 9}, TensorRole::parameter);
  test::tensor(g, "r", {1, 16, 16}, TensorRole::parameter);
  test::tensor(g, "y", {5, 1, 2, 16});
  const auto s = graph::describe(g, test::op(g, "RNN", {"x", "w", "r"}, {"y"}, {{"hidden_size", std::int64_t{16}}}));
  EXPECT_EQ(s.op_class, OpClass::opaque);
  EXPECT_NE(s.opaque_reason.find("'RNN_0'"), std::string::npos) << s.opaque_reason;
}

TEST(OpsRecurrent, RnnSingleGate) {
  graph::Graph g;
  test::tensor(g, "x", {5, 2, 8});
  test::tensor(g, "w", {1, 16, 8}, TensorRole::parameter);
  test::tensor(g, "r", {1, 16, 16}, TensorRole::parameter);
  test::tensor(g, "y", {5, 1, 2, 16});
  const auto s = graph::describe(g, test::op(g, "RNN", {"x", "w", "r"}, {"y"}, {{"hidden_size", std::int64_t{16}}}));
  expect_dim(s, "g", 16, false, false);
  EXPECT_DOUBLE_EQ(s.macs, 5.0 * 2 * 16 * 24);
}

} // namespace
} // namespace partita
