// Kernel families: an op's family follows from its description, and op_cost prices the op's
// memory traffic with that family's curve (the default curve when the device has none for it).

#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"
#include "partita/graph/op_semantics.h"
#include "partita/proto/partita.pb.h"

#include "test_support.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace partita::cost {
namespace {

using graph::KernelClass;
using graph::TensorRole;

struct Ops {
  graph::Graph g;
  graph::OpId erf, add_bias, add_same, transpose, heads, gather, softmax, reduce, reshape, div_scale, mul_const,
      relu_of_erf, relu_of_matmul, relu_far, erf_of_relu;

  Ops() {
    test::tensor(g, "x", {64, 128, 256});
    test::tensor(g, "x2", {64, 128, 256});
    test::tensor(g, "b", {256}, TensorRole::parameter);
    test::tensor(g, "e", {64, 128, 256});
    test::tensor(g, "y", {64, 128, 256});
    test::tensor(g, "z", {64, 128, 256});
    test::tensor(g, "t", {64, 256, 128});
    test::tensor(g, "table", {1000, 256}, TensorRole::parameter);
    test::tensor(g, "ids", {64, 128}, TensorRole::activation, graph::DType::i64);
    test::tensor(g, "rows", {64, 128, 256});
    test::tensor(g, "p", {64, 128, 256});
    test::tensor(g, "s", {64, 128, 1});
    test::tensor(g, "shape", {2}, TensorRole::activation, graph::DType::i64);
    g.tensor(g.find_tensor("shape")).int_values = std::vector<std::int64_t>{8192, 256};
    test::tensor(g, "r", {8192, 256});
    erf = test::op(g, "Erf", {"x"}, {"e"});
    add_bias = test::op(g, "Add", {"x", "b"}, {"y"});
    add_same = test::op(g, "Add", {"x", "x2"}, {"z"});
    transpose = test::op(g, "Transpose", {"x"}, {"t"}, {{"perm", std::vector<std::int64_t>{0, 2, 1}}});
    // Attention's heads transpose keeps the last dim: rows move whole.
    test::tensor(g, "bshd", {8, 128, 4, 64});
    test::tensor(g, "bhsd", {8, 4, 128, 64});
    heads = test::op(g, "Transpose", {"bshd"}, {"bhsd"}, {{"perm", std::vector<std::int64_t>{0, 2, 1, 3}}});
    gather = test::op(g, "Gather", {"table", "ids"}, {"rows"}, {{"axis", std::int64_t{0}}});
    softmax = test::op(g, "Softmax", {"x"}, {"p"}, {{"axis", std::int64_t{-1}}});
    reduce = test::op(g, "ReduceSum", {"x"}, {"s"}, {{"axes", std::vector<std::int64_t>{-1}}});
    reshape = test::op(g, "Reshape", {"x", "shape"}, {"r"});
    // Broadcast constants get no gradient: attention's 1/sqrt(d) scale, a Constant op's value.
    test::tensor(g, "scale", {1}, TensorRole::constant);
    test::tensor(g, "q", {64, 128, 256});
    div_scale = test::op(g, "Div", {"x", "scale"}, {"q"});
    test::tensor(g, "half", {1});
    test::op(g, "Constant", {}, {"half"}, {{"value_float", 0.5}});
    test::tensor(g, "m", {64, 128, 256});
    mul_const = test::op(g, "Mul", {"x", "half"}, {"m"});
    // Reads of what the op just before wrote (fresh), in the graph's order: an Erf's output read
    // by the next op; a MatMul's output, which its blocked kernel leaves mostly in memory; the
    // Erf's output again, four ops later; and a Relu's output read by an Erf, which computes on
    // its bytes. The Relu's gradient comes from the Erf's backward pass just before its own.
    test::tensor(g, "e2", {64, 128, 256});
    test::tensor(g, "re", {64, 128, 256});
    test::op(g, "Erf", {"x"}, {"e2"});
    relu_of_erf = test::op(g, "Relu", {"e2"}, {"re"});
    test::tensor(g, "w", {256, 256}, TensorRole::parameter);
    test::tensor(g, "mo", {64, 128, 256});
    test::tensor(g, "rm", {64, 128, 256});
    test::op(g, "MatMul", {"x", "w"}, {"mo"});
    relu_of_matmul = test::op(g, "Relu", {"mo"}, {"rm"});
    test::tensor(g, "rf", {64, 128, 256});
    relu_far = test::op(g, "Relu", {"e2"}, {"rf"});
    test::tensor(g, "rr", {64, 128, 256});
    test::tensor(g, "er", {64, 128, 256});
    test::op(g, "Relu", {"x"}, {"rr"});
    erf_of_relu = test::op(g, "Erf", {"rr"}, {"er"});
    graph::mark_gradients(g); // as the importer does
  }
};

TEST(KernelFamily, FollowsFromTheDescription) {
  const Ops o;
  const auto classes = [&](graph::OpId id) {
    const auto s = graph::describe(o.g, id);
    EXPECT_TRUE(s.opaque_reason.empty()) << s.opaque_reason;
    return std::pair{s.forward_kernel, s.backward_kernel};
  };
  // Erf's gradient is another kernel (an exp), a family of its own.
  EXPECT_EQ(classes(o.erf), std::pair(KernelClass::transcendental, KernelClass::transcendental_backward));
  // A broadcast bias: its gradient sums dY over the rows (a reduction kernel: read dY, write dB);
  // the full-size input gradient is element-wise.
  EXPECT_EQ(classes(o.add_bias), std::pair(KernelClass::eltwise, KernelClass::eltwise));
  const auto bias = graph::describe(o.g, o.add_bias);
  EXPECT_DOUBLE_EQ(bias.backward_reduction_bytes, 4.0 * (64 * 128 * 256 + 256));
  EXPECT_LT(bias.backward_reduction_bytes, bias.bwd_bytes);
  for (const auto id : {o.add_same, o.div_scale, o.mul_const, o.erf}) {
    EXPECT_EQ(graph::describe(o.g, id).backward_reduction_bytes, 0) << o.g.op(id).type;
  }
  EXPECT_EQ(classes(o.add_same), std::pair(KernelClass::eltwise, KernelClass::eltwise));
  EXPECT_EQ(classes(o.div_scale), std::pair(KernelClass::eltwise, KernelClass::eltwise));
  EXPECT_EQ(classes(o.mul_const), std::pair(KernelClass::eltwise, KernelClass::eltwise));
  EXPECT_EQ(classes(o.transpose), std::pair(KernelClass::transpose, KernelClass::transpose));
  EXPECT_EQ(classes(o.heads), std::pair(KernelClass::copy, KernelClass::copy));
  EXPECT_EQ(classes(o.gather), std::pair(KernelClass::gather, KernelClass::gather));
  // Softmax's backward pass streams y and dy without a transcendental: element-wise.
  EXPECT_EQ(classes(o.softmax), std::pair(KernelClass::softmax, KernelClass::eltwise));
  EXPECT_EQ(classes(o.reduce).first, KernelClass::reduction);
}

cluster::Cluster with_families() {
  auto c = cluster::load_cluster("localhost-cpu");
  c.device.kernel_launch_overhead = 0;
  c.device.memory_efficiency.points = {{1e3, 0.2}, {1e9, 0.8}};
  c.device.memory_efficiency_by_class[KernelClass::transcendental].points = {{1e3, 0.01}, {1e9, 0.05}};
  c.device.memory_efficiency_by_class[KernelClass::reduction].points = {{1e3, 0.002}, {1e9, 0.02}};
  c.device.memory_efficiency_by_class[KernelClass::copy].points = {{1e3, 0.03}, {1e9, 0.1}};
  c.device.memory_efficiency_by_class[KernelClass::transpose].points = {{1e3, 0.01}, {1e9, 0.04}};
  c.device.memory_efficiency_by_class[KernelClass::gather].points = {{1e3, 0.04}, {1e9, 0.3}};
  c.device.memory_efficiency_by_class[KernelClass::normalization].points = {{1e3, 0.1}, {1e9, 0.4}};
  return c;
}

OpCost cost_of(const Ops& o, graph::OpId id, const cluster::Cluster& c) {
  const auto s = graph::describe(o.g, id);
  const std::vector<int> device{0};
  return op_cost(o.g, id, s, sharding::Config{std::vector<int>(s.dims.size(), 1)}, device, c, {});
}

TEST(KernelFamily, ABiasGradientIsAReductionBesideAnElementwiseCopy) {
  const Ops o;
  const auto c = with_families();
  const auto s = graph::describe(o.g, o.add_bias);
  const double reduction = s.backward_reduction_bytes, rest = s.bwd_bytes - reduction;
  const double expected = kernel_time(0, rest, c.device, cluster::Precision::fp32, KernelClass::eltwise) +
                          kernel_time(0, reduction, c.device, cluster::Precision::fp32, KernelClass::reduction);
  EXPECT_NEAR(cost_of(o, o.add_bias, c).get(term::backward_compute), expected, 1e-12 * expected);
  // Priced wholly as a reduction it would cost more: the reduction curve is the slowest here.
  EXPECT_LT(expected, kernel_time(0, s.bwd_bytes, c.device, cluster::Precision::fp32, KernelClass::reduction));
}

TEST(KernelFamily, EachOpIsPricedWithItsFamilysCurve) {
  const Ops o;
  const auto c = with_families();
  auto plain = c; // the same device without family curves
  plain.device.memory_efficiency_by_class.clear();
  for (const auto id : {o.erf, o.add_bias, o.transpose, o.heads, o.gather, o.softmax, o.reduce}) {
    const auto s = graph::describe(o.g, id);
    const auto priced = cost_of(o, id, c), flat = cost_of(o, id, plain);
    const double fwd = priced.get(term::forward_compute), bwd = priced.get(term::backward_compute);
    // Memory-bound on this device: bytes / (bandwidth x the family's fraction).
    const double fwd_bytes = fwd * c.device.memory_bandwidth * c.device.memory_efficiency_for(s.forward_kernel, 1e6);
    ASSERT_GT(fwd, 0) << o.g.op(id).type;
    // The family's curve is several times below the default one at every size here.
    if (s.forward_kernel != KernelClass::eltwise) {
      EXPECT_GT(fwd, 1.9 * flat.get(term::forward_compute)) << o.g.op(id).type;
    } else {
      EXPECT_DOUBLE_EQ(fwd, flat.get(term::forward_compute)) << o.g.op(id).type;
    }
    if (s.backward_kernel != KernelClass::eltwise) {
      EXPECT_GT(bwd, 1.9 * flat.get(term::backward_compute)) << o.g.op(id).type;
    }
    EXPECT_GT(fwd_bytes, 0);
  }
  // Same-shape Add keeps the default (eltwise) curve both ways.
  EXPECT_DOUBLE_EQ(cost_of(o, o.add_same, c).time_total(), cost_of(o, o.add_same, plain).time_total());
  // The forward time is exactly kernel_time with the family.
  const auto s = graph::describe(o.g, o.erf);
  const double bytes = 2.0 * 64 * 128 * 256 * 4;
  EXPECT_DOUBLE_EQ(cost_of(o, o.erf, c).get(term::forward_compute),
                   kernel_time(s.fwd_flops, bytes, c.device, cluster::Precision::fp32, KernelClass::transcendental));
}

TEST(KernelFamily, ATransposeThatMovesTheLastDimCostsMoreThanACopyOfRows) {
  const Ops o;
  auto c = with_families();
  const auto per_byte = [&](graph::OpId id) {
    const auto s = graph::describe(o.g, id);
    return cost_of(o, id, c).get(term::forward_compute) / (s.fwd_bytes_read + s.fwd_bytes_written);
  };
  EXPECT_GT(per_byte(o.transpose), 2 * per_byte(o.heads));
  // A cluster file calibrated before transposes had a curve of their own prices them as copies.
  c.device.memory_efficiency_by_class.erase(KernelClass::transpose);
  EXPECT_DOUBLE_EQ(c.device.memory_efficiency_for(KernelClass::transpose, 1e9), 0.1);
  EXPECT_NEAR(per_byte(o.transpose), per_byte(o.heads), 0.2 * per_byte(o.heads));
  c.device.memory_efficiency_by_class.clear(); // and without either: the default curve
  EXPECT_DOUBLE_EQ(c.device.memory_efficiency_for(KernelClass::transpose, 1e9), 0.8);
}

TEST(KernelFamily, ViewsStayFree) {
  const Ops o;
  const auto c = with_families();
  EXPECT_EQ(cost_of(o, o.reshape, c).compute_time(), 0);
}

// A memory-bound kernel's reads of what another op has just written (an activation with a
// producer; in the backward pass, the output's gradient) cost the device's fresh_read fraction of
// a read from memory; weights and the batch are read from memory.
TEST(KernelFamily, ReadsOfWhatWasJustWrittenCostTheFreshReadFraction) {
  const Ops o;
  auto c = with_families();
  const auto before = cost_of(o, o.relu_of_erf, c);
  c.device.fresh_read.points = {{1e3, 0.5}, {1e9, 0.5}};
  const auto after = cost_of(o, o.relu_of_erf, c);
  const double n = 64.0 * 128 * 256 * 4; // one tensor's bytes
  const double eff = c.device.memory_bandwidth * c.device.memory_efficiency.at(2 * n);
  // Forward: reads e2 (fresh), writes re: 2n bytes, of which n cost half.
  EXPECT_NEAR(before.get(term::forward_compute), 2 * n / eff, 1e-12);
  EXPECT_NEAR(after.get(term::forward_compute), 1.5 * n / eff, 1e-12);
  EXPECT_THAT(after.time.front().formula, ::testing::HasSubstr("just written"));
  EXPECT_THAT(before.time.front().formula, ::testing::Not(::testing::HasSubstr("just written")));
  // Backward: the output's gradient (n bytes of the description's) is read fresh.
  const auto s = graph::describe(o.g, o.relu_of_erf);
  const double bwd_eff = c.device.memory_bandwidth * c.device.memory_efficiency.at(s.bwd_bytes);
  EXPECT_NEAR(before.get(term::backward_compute) - after.get(term::backward_compute), 0.5 * n / bwd_eff, 1e-12);
  // Not fresh: what a MatMul wrote, what was written four ops before; and an Erf, which computes
  // on what it reads, gains nothing from a fresh input.
  auto plain = c;
  plain.device.fresh_read.points.clear();
  for (const auto id : {o.relu_of_matmul, o.relu_far, o.erf_of_relu}) {
    EXPECT_DOUBLE_EQ(cost_of(o, id, c).get(term::forward_compute), cost_of(o, id, plain).get(term::forward_compute))
        << o.g.op(id).name;
  }
  // The Relu's output gradient was written by the Erf's backward pass, just before: fresh.
  const auto rr = o.g.tensor(o.g.find_tensor("rr")).producer;
  EXPECT_LT(cost_of(o, rr, c).get(term::backward_compute), cost_of(o, rr, plain).get(term::backward_compute));
  // Erf reads the graph's input x, which nothing has just written: its forward pass is unchanged.
  EXPECT_DOUBLE_EQ(cost_of(o, o.erf, c).get(term::forward_compute),
                   cost_of(o, o.erf, plain).get(term::forward_compute));
  // The gather's table is a weight: read from memory.
  EXPECT_DOUBLE_EQ(cost_of(o, o.gather, c).get(term::forward_compute),
                   cost_of(o, o.gather, plain).get(term::forward_compute));
  // The curve goes into the cluster file and back; a fraction above 1 is refused, by its field.
  const auto back = cluster::from_proto(cluster::to_proto(c), "round trip");
  EXPECT_EQ(back.device.fresh_read.points, c.device.fresh_read.points);
  auto p = cluster::to_proto(c);
  p.mutable_device()->mutable_fresh_read(0)->set_fraction(1.5);
  try {
    (void)cluster::from_proto(p, "bad");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("device.fresh_read[0].fraction"));
  }
}

// A backward family without a curve of its own (a file calibrated before it was timed apart) is
// priced on its forward family's curve; with one, on its own.
TEST(KernelFamily, ABackwardFamilyFallsBackToItsForwardFamilysCurve) {
  const Ops o;
  auto c = with_families();
  const auto s = graph::describe(o.g, o.erf);
  const double bwd = cost_of(o, o.erf, c).get(term::backward_compute);
  EXPECT_DOUBLE_EQ(c.device.memory_efficiency_for(KernelClass::transcendental_backward, 1e6),
                   c.device.memory_efficiency_for(KernelClass::transcendental, 1e6));
  EXPECT_DOUBLE_EQ(c.device.memory_efficiency_for(KernelClass::normalization_backward, 1e6),
                   c.device.memory_efficiency_for(KernelClass::normalization, 1e6));
  EXPECT_NEAR(
      bwd, kernel_time(s.bwd_data_flops, s.bwd_bytes, c.device, cluster::Precision::fp32, KernelClass::transcendental),
      1e-12 * bwd);
  // Its own curve, five times the forward family's rate: a fifth of the time.
  c.device.memory_efficiency_by_class[KernelClass::transcendental_backward].points = {{1e3, 0.05}, {1e9, 0.25}};
  EXPECT_NEAR(cost_of(o, o.erf, c).get(term::backward_compute), bwd / 5, 1e-9 * bwd);
  // The forward pass keeps its family's curve.
  EXPECT_DOUBLE_EQ(cost_of(o, o.erf, c).get(term::forward_compute),
                   cost_of(o, o.erf, with_families()).get(term::forward_compute));
}

// A piecewise-linear activation's gradient (Relu's: dy masked by x) is a kernel family of its own:
// without a curve it is priced on the element-wise curve as before, with one on its own; its
// forward pass stays element-wise.
TEST(KernelFamily, AnActivationsGradientIsAFamilyOfItsOwn) {
  const Ops o;
  auto c = with_families();
  const auto s = graph::describe(o.g, o.relu_far);
  EXPECT_EQ(s.forward_kernel, KernelClass::eltwise);
  EXPECT_EQ(s.backward_kernel, KernelClass::activation_backward);
  EXPECT_EQ(graph::describe(o.g, o.add_same).backward_kernel, KernelClass::eltwise) << "an Add is no activation";
  const double bwd = cost_of(o, o.relu_far, c).get(term::backward_compute);
  EXPECT_NEAR(bwd, kernel_time(s.bwd_data_flops, s.bwd_bytes, c.device, cluster::Precision::fp32, KernelClass::eltwise),
              1e-12 * bwd);
  // Its own curve, half the element-wise rate: twice the time; the forward pass unchanged.
  c.device.memory_efficiency_by_class[KernelClass::activation_backward].points = {{1e3, 0.1}, {1e9, 0.4}};
  EXPECT_NEAR(cost_of(o, o.relu_far, c).get(term::backward_compute), 2 * bwd, 1e-9 * bwd);
  EXPECT_DOUBLE_EQ(cost_of(o, o.relu_far, c).get(term::forward_compute),
                   cost_of(o, o.relu_far, with_families()).get(term::forward_compute));
}

// A family timed on fresh inputs (Erf after the Div that wrote its input) has a fresh-read curve
// of its own: its reads of what the op before wrote cost that fraction, where without one they
// cost a read from memory; the element-wise curve does not apply to it, nor its curve to them.
TEST(KernelFamily, AFamilysOwnFreshReadCurvePricesItsFreshInputs) {
  const Ops o;
  auto c = with_families();
  const auto plain = c;
  c.device.fresh_read_by_class[KernelClass::transcendental].points = {{1e3, 0.5}, {1e9, 0.5}};
  const double n = 64.0 * 128 * 256 * 4; // one tensor's bytes
  const double eff = c.device.memory_bandwidth * c.device.memory_efficiency_for(KernelClass::transcendental, 2 * n);
  // erf_of_relu reads rr, which the Relu just wrote: n of its 2n bytes at half cost.
  EXPECT_NEAR(cost_of(o, o.erf_of_relu, plain).get(term::forward_compute), 2 * n / eff, 1e-12);
  EXPECT_NEAR(cost_of(o, o.erf_of_relu, c).get(term::forward_compute), 1.5 * n / eff, 1e-12);
  EXPECT_THAT(cost_of(o, o.erf_of_relu, c).time.front().formula, ::testing::HasSubstr("just written"));
  // Its backward family has no curve of its own: it takes the forward family's (dy is fresh).
  EXPECT_LT(cost_of(o, o.erf_of_relu, c).get(term::backward_compute),
            cost_of(o, o.erf_of_relu, plain).get(term::backward_compute));
  EXPECT_DOUBLE_EQ(c.device.fresh_read_for(KernelClass::transcendental_backward, 1e6), 0.5);
  // Element-wise kernels keep theirs (none here: a read from memory), and other families too.
  EXPECT_DOUBLE_EQ(cost_of(o, o.relu_of_erf, c).get(term::forward_compute),
                   cost_of(o, o.relu_of_erf, plain).get(term::forward_compute));
  EXPECT_DOUBLE_EQ(c.device.fresh_read_for(KernelClass::eltwise, 1e6), 1.0);
  EXPECT_DOUBLE_EQ(c.device.fresh_read_for(KernelClass::reduction, 1e6), 1.0);
  // It goes into the cluster file beside its family's curve and back; a bad fraction names its field.
  const auto back = cluster::from_proto(cluster::to_proto(c), "round trip");
  EXPECT_EQ(back.device.fresh_read_by_class.at(KernelClass::transcendental).points,
            c.device.fresh_read_by_class.at(KernelClass::transcendental).points);
  EXPECT_EQ(back.device.fresh_read_by_class.size(), 1U);
  auto p = cluster::to_proto(c);
  int entry = -1;
  for (int i = 0; i < p.device().kernel_classes_size(); ++i) {
    if (p.device().kernel_classes(i).kernel_class() == "transcendental") {
      entry = i;
    }
  }
  ASSERT_GE(entry, 0);
  p.mutable_device()->mutable_kernel_classes(entry)->mutable_fresh_read(1)->set_fraction(0);
  try {
    (void)cluster::from_proto(p, "bad");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(fmt::format("device.kernel_classes[{}].fresh_read[1].fraction", entry)));
  }
}

TEST(KernelFamily, FamilyCurvesRoundTripThroughTheClusterFile) {
  const auto c = with_families();
  const auto back = cluster::from_proto(cluster::to_proto(c), "round trip");
  ASSERT_EQ(back.device.memory_efficiency_by_class.size(), 6U);
  EXPECT_DOUBLE_EQ(back.device.memory_efficiency_for(KernelClass::transpose, 1e9), 0.04);
  EXPECT_DOUBLE_EQ(back.device.memory_efficiency_for(KernelClass::reduction, 1e9), 0.02);
  EXPECT_DOUBLE_EQ(back.device.memory_efficiency_for(KernelClass::eltwise, 1e9), 0.8);
  auto p = cluster::to_proto(c);
  p.mutable_device()->mutable_kernel_classes(0)->set_kernel_class("blas");
  try {
    (void)cluster::from_proto(p, "bad");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) { // the message lists the families there are
    EXPECT_THAT(e.what(), ::testing::HasSubstr("'blas' is not one of eltwise"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("normalization_backward"));
  }
}

} // namespace
} // namespace partita::cost
