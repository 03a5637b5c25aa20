// Compute families: a contraction op's family (matmul, convolution, recurrent) follows from its
// description, op_cost prices its FLOPs with that family's curve (the GEMM curve when the device
// has none for it), and the curves round-trip through cluster files, old files without them
// still loading.

#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"
#include "partita/graph/op_semantics.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"

#include "test_support.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

namespace partita::cost {
namespace {

using graph::ComputeClass;
using graph::TensorRole;
using Ints = std::vector<std::int64_t>;

struct Ops {
  graph::Graph g;
  graph::OpId conv, conv_transpose, matmul, lstm, relu, matmul_of_relu, scores;

  Ops() {
    test::tensor(g, "x", {8, 64, 56, 56});
    test::tensor(g, "w", {64, 64, 3, 3}, TensorRole::parameter);
    test::tensor(g, "y", {8, 64, 56, 56});
    conv = test::op(g, "Conv", {"x", "w"}, {"y"}, {{"pads", Ints{1, 1, 1, 1}}});
    test::tensor(g, "wt", {64, 32, 2, 2}, TensorRole::parameter);
    test::tensor(g, "up", {8, 32, 112, 112});
    test::tensor(g, "y2", {8, 64, 56, 56});
    conv_transpose = test::op(g, "ConvTranspose", {"y2", "wt"}, {"up"}, {{"strides", Ints{2, 2}}});
    test::tensor(g, "a", {512, 1024});
    test::tensor(g, "b", {1024, 1024}, TensorRole::parameter);
    test::tensor(g, "c", {512, 1024});
    matmul = test::op(g, "MatMul", {"a", "b"}, {"c"});
    test::tensor(g, "seq", {16, 8, 64});
    test::tensor(g, "lw", {1, 4 * 128, 64}, TensorRole::parameter);
    test::tensor(g, "lr", {1, 4 * 128, 128}, TensorRole::parameter);
    test::tensor(g, "h", {16, 1, 8, 128});
    lstm = test::op(g, "LSTM", {"seq", "lw", "lr"}, {"h"}, {{"hidden_size", std::int64_t{128}}});
    test::tensor(g, "r", {8, 64, 56, 56});
    relu = test::op(g, "Relu", {"y"}, {"r"});
    test::tensor(g, "ra", {512, 1024});
    test::tensor(g, "rc", {512, 1024});
    test::op(g, "Relu", {"a"}, {"ra"});
    matmul_of_relu = test::op(g, "MatMul", {"ra", "b"}, {"rc"});
    test::tensor(g, "q", {8, 128, 64});
    test::tensor(g, "kt", {8, 64, 128});
    test::tensor(g, "qk", {8, 128, 128});
    scores = test::op(g, "MatMul", {"q", "kt"}, {"qk"}); // attention's scores: a batch of 8 products
  }
};

// A device whose convolutions reach a fifth of what its GEMMs reach at every size.
cluster::Cluster with_conv_curve() {
  auto c = cluster::load_cluster("localhost-cpu");
  c.device.kernel_launch_overhead = 0;
  c.device.compute_efficiency.points = {{1e5, 0.1}, {1e10, 0.9}};
  c.device.compute_efficiency_by_class[ComputeClass::convolution].points = {{1e5, 0.02}, {1e10, 0.18}};
  return c;
}

OpCost cost_of(const Ops& o, graph::OpId id, const cluster::Cluster& c) {
  const auto s = graph::describe(o.g, id);
  const std::vector<int> device{0};
  return op_cost(o.g, id, s, sharding::Config{std::vector<int>(s.dims.size(), 1)}, device, c, {});
}

TEST(ComputeFamily, FollowsFromTheDescription) {
  const Ops o;
  const auto family = [&](graph::OpId id) {
    const auto s = graph::describe(o.g, id);
    EXPECT_TRUE(s.opaque_reason.empty()) << o.g.op(id).type << ": " << s.opaque_reason;
    return s.compute_class;
  };
  EXPECT_EQ(family(o.conv), ComputeClass::convolution);
  EXPECT_EQ(family(o.conv_transpose), ComputeClass::convolution);
  EXPECT_EQ(family(o.matmul), ComputeClass::matmul);
  EXPECT_EQ(family(o.lstm), ComputeClass::recurrent);
  EXPECT_EQ(family(o.relu), ComputeClass::matmul); // not a contraction: the general curve
}

TEST(ComputeFamily, NamesParseBack) {
  for (const auto k : graph::all_compute_classes()) {
    EXPECT_EQ(graph::parse_compute_class(graph::compute_class_name(k)), k);
  }
  EXPECT_FALSE(graph::parse_compute_class("gemm").has_value());
  EXPECT_EQ(graph::compute_class_name(ComputeClass::convolution), "convolution");
}

TEST(ComputeFamily, AConvIsPricedWithTheConvolutionCurve) {
  const Ops o;
  const auto c = with_conv_curve();
  auto plain = c; // the same device without a convolution curve
  plain.device.compute_efficiency_by_class.clear();
  const auto s = graph::describe(o.g, o.conv);
  ASSERT_DOUBLE_EQ(s.fwd_flops, 2.0 * 8 * 64 * 64 * 9 * 56 * 56);
  const auto priced = cost_of(o, o.conv, c), flat = cost_of(o, o.conv, plain);
  // Compute-bound on this device: FLOPs / (peak x the family's fraction at those FLOPs).
  const double peak = c.device.peak_fp32;
  const double conv_fwd =
      s.fwd_flops / (peak * c.device.compute_efficiency_for(ComputeClass::convolution, s.fwd_flops));
  const double gemm_fwd = s.fwd_flops / (peak * c.device.compute_efficiency.at(s.fwd_flops));
  EXPECT_NEAR(priced.get(term::forward_compute), conv_fwd, 1e-9 * conv_fwd);
  EXPECT_NEAR(flat.get(term::forward_compute), gemm_fwd, 1e-9 * gemm_fwd);
  EXPECT_NEAR(priced.get(term::forward_compute) / flat.get(term::forward_compute), 5, 1e-6);
  // Backward: the data and the weight gradient, each a convolution of the forward's FLOPs, each
  // priced at its own size on the curve (not at their sum).
  const double bwd_flops = s.bwd_data_flops + s.bwd_weight_flops;
  ASSERT_DOUBLE_EQ(bwd_flops, 2 * s.fwd_flops);
  const double conv_bwd =
      bwd_flops / (peak * c.device.compute_efficiency_for(ComputeClass::convolution, bwd_flops / 2));
  EXPECT_NEAR(priced.get(term::backward_compute), conv_bwd, 1e-9 * conv_bwd);
  const double at_the_sum = bwd_flops / (peak * c.device.compute_efficiency_for(ComputeClass::convolution, bwd_flops));
  EXPECT_GT(std::abs(conv_bwd - at_the_sum), 1e-3 * conv_bwd); // the curve is not flat there: the test can tell
  EXPECT_NEAR(priced.get(term::backward_compute) / flat.get(term::backward_compute), 5, 1e-6);
  // The formulas say which curve priced the FLOPs.
  for (const auto& t : priced.time) {
    if (t.name == term::forward_compute || t.name == term::backward_compute) {
      EXPECT_THAT(t.formula, ::testing::HasSubstr("fp32 peak x convolution efficiency")) << t.formula;
    }
  }
  for (const auto& t : flat.time) {
    if (t.name == term::forward_compute) {
      EXPECT_THAT(t.formula, ::testing::HasSubstr("matmul efficiency (no convolution curve)")) << t.formula;
    }
  }
}

// A recurrent layer runs its steps one after the other: h_t's product with R waits for h_{t-1}.
// Each step is priced as a kernel of its own size (its launch, its place on the efficiency curve,
// R read again), and only the input projection and the weight gradients as one product; a split
// of the batch makes every step smaller but leaves as many of them.
TEST(ComputeFamily, ARecurrenceIsPricedStepByStep) {
  const Ops o;
  auto c = with_conv_curve();
  c.device.kernel_launch_overhead = 5e-6;
  const auto s = graph::describe(o.g, o.lstm);
  ASSERT_EQ(s.steps, 16);
  const double r_bytes = 4.0 * 4 * 128 * 128;
  const auto step = [&](double flops, double gate_bytes) {
    return kernel_time(flops / 16, r_bytes, c.device, cluster::Precision::fp32, graph::KernelClass::eltwise,
                       ComputeClass::recurrent, 0, std::nullopt, true) +
           kernel_time(0, gate_bytes / 16, c.device, cluster::Precision::fp32, graph::KernelClass::eltwise);
  };
  const auto whole = cost_of(o, o.lstm, c);
  const double fwd_rest =
      kernel_time(s.fwd_flops - s.step_fwd_flops, s.fwd_bytes_read + s.fwd_bytes_written, c.device,
                  cluster::Precision::fp32, s.forward_kernel, ComputeClass::recurrent, 0, std::nullopt, true);
  const double fwd = fwd_rest + 16 * step(s.step_fwd_flops, s.step_fwd_bytes);
  EXPECT_NEAR(whole.get(term::forward_compute), fwd, 1e-9 * fwd);
  EXPECT_GT(whole.get(term::forward_compute), 33 * c.device.kernel_launch_overhead); // 16 x 2 kernels + the projection
  // One product over all the FLOPs would be cheaper: the steps sit lower on the curve.
  const double as_one =
      kernel_time(s.fwd_flops, s.fwd_bytes_read + s.fwd_bytes_written, c.device, cluster::Precision::fp32,
                  s.forward_kernel, ComputeClass::recurrent, 0, std::nullopt, true);
  EXPECT_GT(whole.get(term::forward_compute), 1.2 * as_one);
  EXPECT_GT(whole.get(term::backward_compute), 16 * step(s.step_bwd_flops, s.step_bwd_bytes));
  for (const auto& t : whole.time) {
    if (t.name == term::forward_compute) {
      EXPECT_THAT(t.formula, ::testing::HasSubstr("16 dependent steps, each a product")) << t.formula;
    }
  }
  // The batch split 2 ways: each step does half the work, but there are still 16 of them, each
  // with its launch, so the time does not halve.
  const std::vector<int> two{0, 1};
  std::vector<int> splits(s.dims.size(), 1);
  splits[static_cast<std::size_t>(s.find_dim("b"))] = 2;
  const auto half = op_cost(o.g, o.lstm, s, sharding::Config{splits}, two, c, {});
  EXPECT_GT(half.get(term::forward_compute), 0.5 * whole.get(term::forward_compute));
  EXPECT_LT(half.get(term::forward_compute), whole.get(term::forward_compute));
  EXPECT_GT(half.get(term::forward_compute), 33 * c.device.kernel_launch_overhead);
}

TEST(ComputeFamily, OtherOpsKeepTheGemmCurve) {
  const Ops o;
  const auto c = with_conv_curve();
  auto plain = c;
  plain.device.compute_efficiency_by_class.clear();
  // A MatMul, and an LSTM (no recurrent curve: the GEMM one stands in), cost the same with or
  // without the convolution curve.
  for (const auto id : {o.matmul, o.lstm, o.relu}) {
    const auto priced = cost_of(o, id, c), flat = cost_of(o, id, plain);
    ASSERT_GT(priced.get(term::forward_compute), 0) << o.g.op(id).type;
    EXPECT_DOUBLE_EQ(priced.get(term::forward_compute), flat.get(term::forward_compute)) << o.g.op(id).type;
    EXPECT_DOUBLE_EQ(priced.get(term::backward_compute), flat.get(term::backward_compute)) << o.g.op(id).type;
  }
  const auto s = graph::describe(o.g, o.matmul);
  EXPECT_DOUBLE_EQ(cost_of(o, o.matmul, c).get(term::forward_compute),
                   s.fwd_flops / (c.device.peak_fp32 * c.device.compute_efficiency.at(s.fwd_flops)));
}

TEST(ComputeFamily, CurvesRoundTripThroughTheClusterFile) {
  const auto c = with_conv_curve();
  const auto dir = std::filesystem::path(test::scratch_dir());
  const auto file = dir / "conv.json";
  io::write_json_file(file, cluster::to_proto(c));
  const auto back = cluster::load_cluster(file.string());
  ASSERT_EQ(back.device.compute_efficiency_by_class.size(), 1U);
  EXPECT_DOUBLE_EQ(back.device.compute_efficiency_for(ComputeClass::convolution, 1e10), 0.18);
  EXPECT_DOUBLE_EQ(back.device.compute_efficiency_for(ComputeClass::matmul, 1e10), 0.9);
  EXPECT_DOUBLE_EQ(back.device.compute_efficiency_for(ComputeClass::recurrent, 1e10), 0.9);
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, ::testing::HasSubstr("\"compute_class\": \"convolution\""));
}

TEST(ComputeFamily, FilesWithoutTheCurvesStillLoad) {
  // The nominal presets have no such curves (the measured h100-measured has a convolution one); so
  // has a file written before the field existed.
  int without = 0;
  for (const auto& name : cluster::preset_names()) {
    const auto c = cluster::load_cluster(name);
    if (!c.device.compute_efficiency_by_class.empty()) {
      continue;
    }
    ++without;
    for (const double flops : {1e5, 1e9}) {
      EXPECT_DOUBLE_EQ(c.device.compute_efficiency_for(ComputeClass::convolution, flops),
                       c.device.compute_efficiency.at(flops))
          << name;
    }
  }
  EXPECT_GE(without, 5);
  auto p = cluster::to_proto(with_conv_curve());
  p.mutable_device()->clear_compute_classes();
  const auto file = std::filesystem::path(test::scratch_dir()) / "old.json";
  io::write_json_file(file, p);
  const auto old = cluster::load_cluster(file.string());
  EXPECT_TRUE(old.device.compute_efficiency_by_class.empty());
  EXPECT_DOUBLE_EQ(old.device.compute_efficiency_for(ComputeClass::convolution, 1e10), 0.9);
}

TEST(ComputeFamily, ABadEntryIsRefusedNamingTheField) {
  auto p = cluster::to_proto(with_conv_curve());
  p.mutable_device()->mutable_compute_classes(0)->set_compute_class("winograd");
  EXPECT_THAT(
      [&] { cluster::from_proto(p, "bad.json"); },
      ::testing::ThrowsMessage<Error>(::testing::AllOf(
          ::testing::HasSubstr("bad.json"), ::testing::HasSubstr("device.compute_classes[0].compute_class"),
          ::testing::HasSubstr(
              "'winograd' is not one of matmul, convolution, recurrent, matmul_backward, matmul_batched_backward"))));
  p = cluster::to_proto(with_conv_curve());
  p.mutable_device()->mutable_compute_classes(0)->mutable_compute_efficiency(0)->set_fraction(1.5);
  EXPECT_THAT([&] { cluster::from_proto(p, "bad.json"); },
              ::testing::ThrowsMessage<Error>(
                  ::testing::HasSubstr("device.compute_classes[0].compute_efficiency[0].fraction")));
  p = cluster::to_proto(with_conv_curve());
  *p.mutable_device()->add_compute_classes() = p.device().compute_classes(0);
  EXPECT_THAT([&] { cluster::from_proto(p, "bad.json"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("'convolution' is given twice")));
}

// A product's backward pass (dA = dY B^T, dB = A^T dY: each reads an operand transposed) runs on
// the backward products' curve where the device has one, a batched product's (both operands carry
// the batch) on the batched ones' where there is one, else on the backward products'; forward
// passes, convolutions and recurrences keep their curves. Without them, the GEMM curve prices both
// passes.
TEST(ComputeFamily, AProductsBackwardPassIsPricedWithItsOwnCurve) {
  const Ops o;
  auto c = with_conv_curve();
  const auto efficiency = [](const cluster::Cluster& x, ComputeClass k, double flops) {
    return x.device.peak_fp32 * x.device.compute_efficiency_for(k, flops);
  };
  auto own = c;
  own.device.compute_efficiency_by_class[ComputeClass::matmul_backward].points = {{1e5, 0.05}, {1e10, 0.6}};
  auto batched = own;
  batched.device.compute_efficiency_by_class[ComputeClass::matmul_batched_backward].points = {{1e5, 0.03}, {1e10, 0.3}};
  for (const auto id : {o.matmul, o.scores}) {
    const auto s = graph::describe(o.g, id);
    const double each = s.fwd_flops; // dA and dB: the forward's FLOPs each
    ASSERT_DOUBLE_EQ(s.bwd_data_flops + s.bwd_weight_flops, 2 * each);
    const auto gemm = cost_of(o, id, c), priced = cost_of(o, id, own), batch = cost_of(o, id, batched);
    EXPECT_DOUBLE_EQ(priced.get(term::forward_compute), gemm.get(term::forward_compute));
    EXPECT_DOUBLE_EQ(batch.get(term::forward_compute), gemm.get(term::forward_compute));
    EXPECT_DOUBLE_EQ(gemm.get(term::backward_compute), 2 * each / efficiency(c, ComputeClass::matmul, each));
    EXPECT_DOUBLE_EQ(priced.get(term::backward_compute),
                     2 * each / efficiency(own, ComputeClass::matmul_backward, each));
    const auto family = id == o.scores ? ComputeClass::matmul_batched_backward : ComputeClass::matmul_backward;
    EXPECT_DOUBLE_EQ(batch.get(term::backward_compute), 2 * each / efficiency(batched, family, each));
    EXPECT_THAT(batch.time[1].formula,
                ::testing::HasSubstr(fmt::format("{} efficiency", graph::compute_class_name(family))));
    EXPECT_THAT(gemm.time[1].formula, ::testing::Not(::testing::HasSubstr("backward efficiency")));
  }
  // Split so that each device holds one product of the batch: a single product.
  const auto s = graph::describe(o.g, o.scores);
  sharding::Config one{std::vector<int>(s.dims.size(), 1)};
  one.splits[static_cast<std::size_t>(s.inputs[0].dims[0])] = 8;
  const std::vector<int> devices{0, 1, 2, 3, 4, 5, 6, 7};
  const auto split = op_cost(o.g, o.scores, s, one, devices, batched, {});
  EXPECT_DOUBLE_EQ(split.get(term::backward_compute),
                   2 * s.fwd_flops / 8 / efficiency(batched, ComputeClass::matmul_backward, s.fwd_flops / 8));
  for (const auto id : {o.conv, o.lstm, o.relu}) {
    EXPECT_DOUBLE_EQ(cost_of(o, id, batched).time_total(), cost_of(o, id, c).time_total()) << o.g.op(id).type;
  }
}

TEST(ComputeFamily, AMatrixProductReadsItsOperandsOnTopOfItsArithmetic) {
  const Ops o;
  auto c = with_conv_curve();
  const auto roofline = cost_of(o, o.matmul, c);
  c.device.matmul_operand_bandwidth = 10e9;
  const auto packed = cost_of(o, o.matmul, c);
  const auto s = graph::describe(o.g, o.matmul);
  // Forward: 2 x 512 x 1024 x 1024 FLOPs at the GEMM curve, then the operands A (the graph's
  // input, in memory) and B (the weight) read at 10 GB/s, added, not overlapped; the output C
  // is written, not read.
  const double flops = 2.0 * 512 * 1024 * 1024;
  const double compute = flops / (c.device.peak_fp32 * c.device.compute_efficiency.at(flops));
  const double a = 4.0 * 512 * 1024, b = 4.0 * 1024 * 1024;
  EXPECT_NEAR(packed.get(term::forward_compute), compute + (a + b) / 10e9, 1e-12);
  EXPECT_NEAR(roofline.get(term::forward_compute), compute, 1e-12); // compute-bound: the max is the FLOPs
  EXPECT_THAT(packed.time.front().formula, ::testing::HasSubstr("10 GB/s matmul operand bandwidth"));
  EXPECT_THAT(roofline.time.front().formula, ::testing::HasSubstr("max("));
  // Backward: dA = dY B^T reads B and dB = A^T dY reads A from memory (dY is fresh from the
  // consumers' backward pass).
  // Two products (dA and dB), each of the forward's FLOPs, each at its own size on the curve.
  const double bwd_flops = s.bwd_data_flops + s.bwd_weight_flops;
  ASSERT_DOUBLE_EQ(bwd_flops, 2 * flops);
  const double bwd_compute = bwd_flops / (c.device.peak_fp32 * c.device.compute_efficiency.at(flops));
  EXPECT_NEAR(packed.get(term::backward_compute), bwd_compute + (a + b) / 10e9, 1e-12);
  EXPECT_THAT(packed.time[1].formula, ::testing::HasSubstr("operands read from memory at 10 GB/s"));
  EXPECT_THAT(packed.time[1].formula, ::testing::HasSubstr("2 products of 1.074 GFLOP"));
  // A product of an activation just written by an element-wise op reads only its weight. When A
  // gets no gradient (a frozen input), only dB = A^T dY runs, reading A.
  EXPECT_NEAR(cost_of(o, o.matmul_of_relu, c).get(term::forward_compute), compute + b / 10e9, 1e-12);
  auto frozen = o;
  frozen.g.tensor(frozen.g.find_tensor("a")).gradient = false;
  const double weight_flops = graph::describe(frozen.g, frozen.matmul).bwd_weight_flops;
  EXPECT_NEAR(cost_of(frozen, frozen.matmul, c).get(term::backward_compute),
              weight_flops / (c.device.peak_fp32 * c.device.compute_efficiency.at(weight_flops)) + a / 10e9, 1e-12);
  // Convolutions, recurrences and memory-bound ops keep their pricing.
  auto plain = c;
  plain.device.matmul_operand_bandwidth = 0;
  for (const auto id : {o.conv, o.lstm, o.relu}) {
    EXPECT_DOUBLE_EQ(cost_of(o, id, c).time_total(), cost_of(o, id, plain).time_total()) << o.g.op(id).type;
  }
  // Into the cluster file and back; a negative bandwidth is refused by its field.
  EXPECT_DOUBLE_EQ(cluster::from_proto(cluster::to_proto(c), "round trip").device.matmul_operand_bandwidth, 10e9);
  auto p = cluster::to_proto(c);
  p.mutable_device()->set_matmul_operand_bandwidth(-1);
  try {
    (void)cluster::from_proto(p, "bad");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("device.matmul_operand_bandwidth"));
  }
}

// The product an op runs on one device, as the runtime calls it: A's leading dims folded into m
// when B is a matrix, a batch when both have them; split dims give their pieces.
TEST(ComputeFamily, AProductsShapeIsTheRuntimesCall) {
  const Ops o;
  const auto shape_of = [&](graph::OpId id, const std::vector<std::pair<int, int>>& splits = {}) {
    const auto s = graph::describe(o.g, id);
    sharding::Config config{std::vector<int>(s.dims.size(), 1)};
    for (const auto& [input_axis, parts] : splits) {
      config.splits[static_cast<std::size_t>(s.inputs[0].dims[static_cast<std::size_t>(input_axis)])] = parts;
    }
    return product_shape(o.g, o.g.op(id), s, config);
  };
  const auto matmul = shape_of(o.matmul);
  ASSERT_TRUE(matmul.has_value());
  EXPECT_EQ(std::tie(matmul->batch, matmul->m, matmul->n, matmul->k), std::make_tuple(1, 512, 1024, 1024));
  const auto rows = shape_of(o.matmul, {{0, 4}}); // the rows over 4 devices
  EXPECT_EQ(std::tie(rows->batch, rows->m, rows->n, rows->k), std::make_tuple(1, 128, 1024, 1024));
  const auto sums = shape_of(o.matmul, {{1, 2}}); // the summed dim over 2: partial sums of half k
  EXPECT_EQ(std::tie(sums->batch, sums->m, sums->n, sums->k), std::make_tuple(1, 512, 1024, 512));
  const auto scores = shape_of(o.scores, {{0, 2}});
  EXPECT_EQ(std::tie(scores->batch, scores->m, scores->n, scores->k), std::make_tuple(4, 128, 128, 64));
  // A sequence of tokens times a matrix: the tokens fold into the rows.
  graph::Graph g;
  test::tensor(g, "x", {4, 32, 256});
  test::tensor(g, "w", {256, 512}, TensorRole::parameter);
  test::tensor(g, "y", {4, 32, 512});
  const auto folded = test::op(g, "MatMul", {"x", "w"}, {"y"});
  const auto fs = graph::describe(g, folded);
  const auto f = product_shape(g, g.op(folded), fs, sharding::Config{std::vector<int>(fs.dims.size(), 1)});
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(std::tie(f->batch, f->m, f->n, f->k), std::make_tuple(1, 128, 512, 256));
  // Not a plain product: a Gemm reading B transposed, a convolution, a recurrence, a ReLU.
  test::tensor(g, "bt", {512, 256}, TensorRole::parameter);
  test::tensor(g, "x2", {64, 256});
  test::tensor(g, "y2", {64, 512});
  const auto gemm = test::op(g, "Gemm", {"x2", "bt"}, {"y2"}, {{"transB", std::int64_t{1}}});
  const auto gs = graph::describe(g, gemm);
  EXPECT_FALSE(product_shape(g, g.op(gemm), gs, sharding::Config{std::vector<int>(gs.dims.size(), 1)}));
  EXPECT_FALSE(shape_of(o.conv));
  EXPECT_FALSE(shape_of(o.lstm));
  EXPECT_FALSE(shape_of(o.relu));
}

// A product calibrated at its very shape (partita calibrate --for-model) takes its measured times,
// forward and backward (the products of the inputs that take a gradient); other shapes, other ops
// and other precisions keep the curves.
TEST(ComputeFamily, AProductTimedAtItsShapeTakesItsMeasuredTimes) {
  const Ops o;
  auto c = with_conv_curve();
  c.device.matmul_operand_bandwidth = 10e9;
  const auto curve = cost_of(o, o.matmul, c);
  auto timed = c;
  timed.device.timed_products = {{1, 512, 1024, 1024, 7e-3, 8e-3, 9e-3}, {8, 128, 128, 64, 1e-4, 2e-4, 3e-4}};
  const auto priced = cost_of(o, o.matmul, timed);
  EXPECT_DOUBLE_EQ(priced.get(term::forward_compute), 7e-3);
  EXPECT_DOUBLE_EQ(priced.get(term::backward_compute), 8e-3 + 9e-3);
  EXPECT_NE(curve.get(term::forward_compute), 7e-3);
  EXPECT_THAT(priced.time[0].formula, ::testing::HasSubstr("a 1x512x1024x1024 product (batch x m x n x k)"));
  EXPECT_THAT(priced.time[0].formula, ::testing::HasSubstr("as calibration timed that shape"));
  // The rest of the op's terms (its optimizer step) are priced as before.
  EXPECT_NEAR(priced.time_total() - priced.get(term::forward_compute) - priced.get(term::backward_compute),
              curve.time_total() - curve.get(term::forward_compute) - curve.get(term::backward_compute), 1e-12);
  EXPECT_DOUBLE_EQ(cost_of(o, o.scores, timed).get(term::backward_compute), 2e-4 + 3e-4);
  // A frozen input takes no data gradient: the weight gradient's product alone.
  auto frozen = o;
  frozen.g.tensor(frozen.g.find_tensor("a")).gradient = false;
  EXPECT_DOUBLE_EQ(cost_of(frozen, frozen.matmul, timed).get(term::backward_compute), 9e-3);
  // Split over 2 devices, a 256-row product that was not timed: the curve.
  const auto s = graph::describe(o.g, o.matmul);
  sharding::Config rows{std::vector<int>(s.dims.size(), 1)};
  rows.splits[static_cast<std::size_t>(s.inputs[0].dims[0])] = 2;
  const std::vector<int> two{0, 1};
  EXPECT_DOUBLE_EQ(op_cost(o.g, o.matmul, s, rows, two, timed, {}).get(term::forward_compute),
                   op_cost(o.g, o.matmul, s, rows, two, c, {}).get(term::forward_compute));
  // Timed in fp32: a bf16 step keeps the curves.
  TrainingSetup bf16;
  bf16.precision = cluster::Precision::bf16;
  const std::vector<int> one{0};
  const sharding::Config whole{std::vector<int>(s.dims.size(), 1)};
  EXPECT_DOUBLE_EQ(op_cost(o.g, o.matmul, s, whole, one, timed, bf16).get(term::forward_compute),
                   op_cost(o.g, o.matmul, s, whole, one, c, bf16).get(term::forward_compute));
  for (const auto id : {o.conv, o.lstm, o.relu}) {
    EXPECT_DOUBLE_EQ(cost_of(o, id, timed).time_total(), cost_of(o, id, c).time_total()) << o.g.op(id).type;
  }
}

} // namespace
} // namespace partita::cost
