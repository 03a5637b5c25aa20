// The constant folder: each rule on its own (fold_node), then the chains exporters write, imported
// whole.

#include "onnx/constant_folding.h"
#include "onnx_models.h"
#include "partita/graph/error.h"
#include "partita/graph/summary.h"
#include "partita/onnx/import.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

namespace partita {
namespace {

using onnx_import::detail::ConstTensor;
using onnx_import::detail::Dims;
using onnx_import::detail::fold_node;
using onnx_import::detail::FoldError;
using ::testing::HasSubstr;
using TP = onnx::TensorProto;
using B = test::ModelBuilder;

ConstTensor i64(Dims dims, std::vector<std::int64_t> v) {
  ConstTensor t;
  t.elem_type = TP::INT64;
  t.dims = std::move(dims);
  t.ints = std::move(v);
  return t;
}

ConstTensor f32(Dims dims, std::vector<double> v) {
  ConstTensor t;
  t.elem_type = TP::FLOAT;
  t.dims = std::move(dims);
  t.floats = std::move(v);
  return t;
}

ConstTensor boolean(Dims dims, std::vector<std::int64_t> v) {
  ConstTensor t = i64(std::move(dims), std::move(v));
  t.elem_type = TP::BOOL;
  return t;
}

onnx::NodeProto op(const std::string& type, int inputs) {
  onnx::NodeProto n;
  n.set_op_type(type);
  for (int i = 0; i < inputs; ++i) {
    n.add_input("in" + std::to_string(i));
  }
  n.add_output("out");
  return n;
}

ConstTensor fold(const onnx::NodeProto& n, const std::vector<ConstTensor>& inputs) {
  std::vector<const ConstTensor*> values;
  std::vector<const onnx::TypeProto*> types;
  for (const auto& t : inputs) {
    values.push_back(&t);
    types.push_back(nullptr);
  }
  auto r = fold_node(n, values, types);
  if (!r) {
    throw std::runtime_error("not folded");
  }
  return *r;
}

template <typename F> std::string fold_error(F&& f) {
  try {
    f();
  } catch (const FoldError& e) {
    return e.what();
  }
  return "no FoldError";
}

// ---- Each rule ----------------------------------------------------------------------

TEST(ConstantFolding, ShapeWithStartAndEndAndSize) {
  onnx::TypeProto type;
  type.mutable_tensor_type()->set_elem_type(TP::FLOAT);
  for (auto d : {2, 3, 5, 7}) {
    type.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  }
  auto shape = op("Shape", 1);
  B::attr(shape, "start", std::int64_t{1});
  B::attr(shape, "end", std::int64_t{-1});
  const std::vector<const ConstTensor*> none = {nullptr};
  const std::vector<const onnx::TypeProto*> types = {&type};
  auto s = fold_node(shape, none, types);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->ints, (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(s->dims, (Dims{2}));
  auto size = fold_node(op("Size", 1), none, types);
  ASSERT_TRUE(size);
  EXPECT_EQ(size->ints, (std::vector<std::int64_t>{210}));
  EXPECT_TRUE(size->dims.empty());
  // An unknown dimension leaves the shape unknown: nothing is folded.
  type.mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("batch");
  EXPECT_FALSE(fold_node(op("Shape", 1), none, types));
}

TEST(ConstantFolding, GatherScalarAndVectorIndices) {
  auto g = op("Gather", 2);
  EXPECT_EQ(fold(g, {i64({3}, {7, 8, 9}), i64({}, {-1})}).ints, (std::vector<std::int64_t>{9}));
  EXPECT_TRUE(fold(g, {i64({3}, {7, 8, 9}), i64({}, {0})}).dims.empty());
  B::attr(g, "axis", std::int64_t{1});
  const auto r = fold(g, {i64({2, 3}, {1, 2, 3, 4, 5, 6}), i64({2}, {2, 0})});
  EXPECT_EQ(r.dims, (Dims{2, 2}));
  EXPECT_EQ(r.ints, (std::vector<std::int64_t>{3, 1, 6, 4}));
  EXPECT_THAT(fold_error([&] {
                fold(g, {i64({2, 3}, {1, 2, 3, 4, 5, 6}), i64({1}, {3})});
              }),
              HasSubstr("index 3 is out of range for axis 1 of size 3"));
}

TEST(ConstantFolding, SliceInputFormWithStepsAndClamping) {
  auto s = op("Slice", 5);
  const auto big = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(fold(s, {i64({5}, {0, 1, 2, 3, 4}), i64({1}, {1}), i64({1}, {big}), i64({1}, {0}), i64({1}, {2})}).ints,
            (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(fold(s, {i64({5}, {0, 1, 2, 3, 4}), i64({1}, {-1}), i64({1}, {-big}), i64({1}, {0}), i64({1}, {-2})}).ints,
            (std::vector<std::int64_t>{4, 2, 0}));
  auto three = op("Slice", 3);
  const auto m = fold(three, {i64({2, 3}, {1, 2, 3, 4, 5, 6}), i64({2}, {1, 1}), i64({2}, {2, 3})});
  EXPECT_EQ(m.dims, (Dims{1, 2}));
  EXPECT_EQ(m.ints, (std::vector<std::int64_t>{5, 6}));
  EXPECT_THAT(fold_error([&] {
                fold(s, {i64({5}, {0, 1, 2, 3, 4}), i64({1}, {0}), i64({1}, {5}), i64({1}, {0}), i64({1}, {0})});
              }),
              HasSubstr("step"));
}

TEST(ConstantFolding, SliceAttributeForm) {
  auto s = op("Slice", 1);
  B::attr(s, "starts", std::vector<std::int64_t>{-2});
  B::attr(s, "ends", std::vector<std::int64_t>{1000});
  EXPECT_EQ(fold(s, {i64({4}, {1, 2, 3, 4})}).ints, (std::vector<std::int64_t>{3, 4}));
}

TEST(ConstantFolding, CastTruncatesAndWraps) {
  auto to_int = op("Cast", 1);
  B::attr(to_int, "to", std::int64_t{TP::INT64});
  EXPECT_EQ(fold(to_int, {f32({3}, {2.9, -2.9, 0.0})}).ints, (std::vector<std::int64_t>{2, -2, 0}));
  auto to_float = op("Cast", 1);
  B::attr(to_float, "to", std::int64_t{TP::FLOAT});
  const auto f = fold(to_float, {i64({2}, {3, -4})});
  EXPECT_EQ(f.elem_type, TP::FLOAT);
  EXPECT_EQ(f.floats, (std::vector<double>{3.0, -4.0}));
  auto to_bool = op("Cast", 1);
  B::attr(to_bool, "to", std::int64_t{TP::BOOL});
  EXPECT_EQ(fold(to_bool, {i64({3}, {0, 5, -1})}).ints, (std::vector<std::int64_t>{0, 1, 1}));
}

TEST(ConstantFolding, ConcatAndItsMismatches) {
  auto c = op("Concat", 3);
  B::attr(c, "axis", std::int64_t{0});
  EXPECT_EQ(fold(c, {i64({1}, {4}), i64({2}, {5, 6}), i64({1}, {-1})}).ints, (std::vector<std::int64_t>{4, 5, 6, -1}));
  auto c2 = op("Concat", 2);
  B::attr(c2, "axis", std::int64_t{-1});
  const auto m = fold(c2, {i64({2, 1}, {1, 2}), i64({2, 2}, {3, 4, 5, 6})});
  EXPECT_EQ(m.dims, (Dims{2, 3}));
  EXPECT_EQ(m.ints, (std::vector<std::int64_t>{1, 3, 4, 2, 5, 6}));
  EXPECT_THAT(fold_error([&] {
                fold(c2, {i64({2, 1}, {1, 2}), i64({3, 1}, {3, 4, 5})});
              }),
              HasSubstr("does not match"));
  EXPECT_THAT(fold_error([&] { fold(c2, {i64({1}, {1}), f32({1}, {2.0})}); }), HasSubstr("FLOAT"));
}

TEST(ConstantFolding, UnsqueezeAndSqueezeInBothForms) {
  auto u_attr = op("Unsqueeze", 1); // opset 1-12
  B::attr(u_attr, "axes", std::vector<std::int64_t>{0, -1});
  EXPECT_EQ(fold(u_attr, {i64({2}, {1, 2})}).dims, (Dims{1, 2, 1}));
  auto u_input = op("Unsqueeze", 2); // opset 13+
  EXPECT_EQ(fold(u_input, {i64({}, {7}), i64({1}, {0})}).dims, (Dims{1}));
  auto s_attr = op("Squeeze", 1);
  B::attr(s_attr, "axes", std::vector<std::int64_t>{2});
  EXPECT_EQ(fold(s_attr, {i64({1, 2, 1}, {1, 2})}).dims, (Dims{1, 2}));
  EXPECT_EQ(fold(op("Squeeze", 1), {i64({1, 2, 1}, {1, 2})}).dims, (Dims{2}));
  auto s_input = op("Squeeze", 2);
  EXPECT_EQ(fold(s_input, {i64({1, 2, 1}, {1, 2}), i64({1}, {0})}).dims, (Dims{2, 1}));
  EXPECT_THAT(fold_error([&] {
                fold(s_input, {i64({1, 2, 1}, {1, 2}), i64({1}, {1})});
              }),
              HasSubstr("has size 2, not 1"));
}

TEST(ConstantFolding, ReshapeFlattenTransposeIdentity) {
  const auto x = i64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(fold(op("Reshape", 2), {x, i64({2}, {0, -1})}).dims, (Dims{2, 3}));
  EXPECT_EQ(fold(op("Reshape", 2), {x, i64({1}, {-1})}).dims, (Dims{6}));
  EXPECT_THAT(fold_error([&] {
                fold(op("Reshape", 2), {x, i64({2}, {4, -1})});
              }),
              HasSubstr("cannot reshape 6 elements"));
  auto flatten = op("Flatten", 1);
  B::attr(flatten, "axis", std::int64_t{0});
  EXPECT_EQ(fold(flatten, {x}).dims, (Dims{1, 6}));
  const auto t = fold(op("Transpose", 1), {x});
  EXPECT_EQ(t.dims, (Dims{3, 2}));
  EXPECT_EQ(t.ints, (std::vector<std::int64_t>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(fold(op("Identity", 1), {x}).ints, x.ints);
}

TEST(ConstantFolding, ArithmeticBroadcastsAndChecks) {
  EXPECT_EQ(fold(op("Add", 2), {i64({2}, {1, 2}), i64({}, {10})}).ints, (std::vector<std::int64_t>{11, 12}));
  EXPECT_EQ(fold(op("Sub", 2), {i64({2, 1}, {10, 20}), i64({2}, {1, 2})}).ints,
            (std::vector<std::int64_t>{9, 8, 19, 18}));
  EXPECT_EQ(fold(op("Mul", 2), {f32({2}, {1.5, 2.0}), f32({}, {2.0})}).floats, (std::vector<double>{3.0, 4.0}));
  EXPECT_EQ(fold(op("Div", 2), {i64({2}, {7, -7}), i64({}, {2})}).ints, (std::vector<std::int64_t>{3, -3}));
  EXPECT_EQ(fold(op("Mod", 2), {i64({2}, {7, -7}), i64({}, {3})}).ints, (std::vector<std::int64_t>{1, 2}));
  auto c_mod = op("Mod", 2);
  B::attr(c_mod, "fmod", std::int64_t{1});
  EXPECT_EQ(fold(c_mod, {i64({2}, {7, -7}), i64({}, {3})}).ints, (std::vector<std::int64_t>{1, -1}));
  EXPECT_EQ(fold(op("Min", 3), {i64({2}, {5, 1}), i64({}, {3}), i64({2}, {4, 0})}).ints,
            (std::vector<std::int64_t>{3, 0}));
  EXPECT_EQ(fold(op("Max", 2), {i64({2}, {5, 1}), i64({}, {3})}).ints, (std::vector<std::int64_t>{5, 3}));
  EXPECT_THAT(fold_error([&] { fold(op("Div", 2), {i64({1}, {4}), i64({1}, {0})}); }), HasSubstr("by zero"));
  EXPECT_THAT(fold_error([&] {
                fold(op("Add", 2), {i64({1}, {std::numeric_limits<std::int64_t>::max()}), i64({1}, {1})});
              }),
              HasSubstr("overflows"));
  EXPECT_THAT(fold_error([&] {
                fold(op("Add", 2), {i64({2}, {1, 2}), i64({3}, {1, 2, 3})});
              }),
              HasSubstr("do not broadcast"));
}

TEST(ConstantFolding, ComparisonLogicAndWhere) {
  const auto a = i64({3}, {1, 2, 3});
  const auto two = i64({}, {2});
  EXPECT_EQ(fold(op("Equal", 2), {a, two}).ints, (std::vector<std::int64_t>{0, 1, 0}));
  EXPECT_EQ(fold(op("Equal", 2), {a, two}).elem_type, TP::BOOL);
  EXPECT_EQ(fold(op("Less", 2), {a, two}).ints, (std::vector<std::int64_t>{1, 0, 0}));
  EXPECT_EQ(fold(op("Greater", 2), {a, two}).ints, (std::vector<std::int64_t>{0, 0, 1}));
  EXPECT_EQ(fold(op("Not", 1), {boolean({2}, {1, 0})}).ints, (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(fold(op("And", 2), {boolean({2}, {1, 1}), boolean({2}, {1, 0})}).ints, (std::vector<std::int64_t>{1, 0}));
  // The pattern torch.onnx writes for a dimension that may be 0 or -1: Where(Equal(s, -1), 1, s).
  const auto s = i64({3}, {4, -1, 5});
  const auto is_minus = fold(op("Equal", 2), {s, i64({}, {-1})});
  EXPECT_EQ(fold(op("Where", 3), {is_minus, i64({}, {1}), s}).ints, (std::vector<std::int64_t>{4, 1, 5}));
  EXPECT_THAT(fold_error([&] { fold(op("Not", 1), {a}); }), HasSubstr("not BOOL"));
}

TEST(ConstantFolding, RangeConstantOfShapeExpandTile) {
  EXPECT_EQ(fold(op("Range", 3), {i64({}, {0}), i64({}, {7}), i64({}, {3})}).ints,
            (std::vector<std::int64_t>{0, 3, 6}));
  EXPECT_EQ(fold(op("Range", 3), {i64({}, {5}), i64({}, {0}), i64({}, {-2})}).ints,
            (std::vector<std::int64_t>{5, 3, 1}));
  EXPECT_EQ(fold(op("Range", 3), {f32({}, {0.0}), f32({}, {1.0}), f32({}, {0.25})}).floats,
            (std::vector<double>{0.0, 0.25, 0.5, 0.75}));
  EXPECT_THAT(fold_error([&] {
                fold(op("Range", 3), {i64({}, {0}), i64({}, {7}), i64({}, {0})});
              }),
              HasSubstr("delta is 0"));
  auto ones = op("ConstantOfShape", 1);
  B::tensor_attr(ones, "value", B::int_tensor("v", {1}, {1}));
  const auto c = fold(ones, {i64({2}, {2, 3})});
  EXPECT_EQ(c.dims, (Dims{2, 3}));
  EXPECT_EQ(c.ints, (std::vector<std::int64_t>(6, 1)));
  EXPECT_EQ(fold(op("ConstantOfShape", 1), {i64({1}, {2})}).floats, (std::vector<double>{0.0, 0.0}));
  const auto e = fold(op("Expand", 2), {i64({2, 1}, {1, 2}), i64({2}, {1, 3})});
  EXPECT_EQ(e.dims, (Dims{2, 3}));
  EXPECT_EQ(e.ints, (std::vector<std::int64_t>{1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(fold(op("Tile", 2), {i64({2}, {1, 2}), i64({1}, {2})}).ints, (std::vector<std::int64_t>{1, 2, 1, 2}));
}

TEST(ConstantFolding, UnaryMathAndTheRestOfTheComparisonsAndLogic) {
  EXPECT_EQ(fold(op("Neg", 1), {i64({3}, {1, -2, 0})}).ints, (std::vector<std::int64_t>{-1, 2, 0}));
  EXPECT_EQ(fold(op("Abs", 1), {i64({2}, {-5, 5})}).ints, (std::vector<std::int64_t>{5, 5}));
  EXPECT_EQ(fold(op("Abs", 1), {f32({2}, {-0.5, 2.0})}).floats, (std::vector<double>{0.5, 2.0}));
  EXPECT_THAT(fold_error([&] { fold(op("Neg", 1), {i64({}, {std::numeric_limits<std::int64_t>::min()})}); }),
              HasSubstr("overflows int64"));
  EXPECT_EQ(fold(op("Floor", 1), {f32({2}, {1.5, -1.5})}).floats, (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(fold(op("Ceil", 1), {f32({2}, {1.5, -1.5})}).floats, (std::vector<double>{2.0, -1.0}));
  EXPECT_EQ(fold(op("Sqrt", 1), {f32({2}, {16.0, 2.25})}).floats, (std::vector<double>{4.0, 1.5}));
  EXPECT_THAT(fold_error([&] { fold(op("Sqrt", 1), {i64({1}, {4})}); }), HasSubstr("not a floating type"));
  const auto a = i64({3}, {1, 2, 3});
  const auto two = i64({}, {2});
  EXPECT_EQ(fold(op("LessOrEqual", 2), {a, two}).ints, (std::vector<std::int64_t>{1, 1, 0}));
  EXPECT_EQ(fold(op("GreaterOrEqual", 2), {a, two}).ints, (std::vector<std::int64_t>{0, 1, 1}));
  const auto p = boolean({4}, {0, 0, 1, 1});
  const auto q = boolean({4}, {0, 1, 0, 1});
  EXPECT_EQ(fold(op("Or", 2), {p, q}).ints, (std::vector<std::int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(fold(op("Xor", 2), {p, q}).ints, (std::vector<std::int64_t>{0, 1, 1, 0}));
  auto rmin = op("ReduceMin", 1);
  B::attr(rmin, "keepdims", std::int64_t{0});
  EXPECT_EQ(fold(rmin, {i64({2, 2}, {4, -1, 3, 7})}).ints, (std::vector<std::int64_t>{-1}));
}

TEST(ConstantFolding, ConstantInEveryValueForm) {
  auto ints = op("Constant", 0);
  B::attr(ints, "value_ints", std::vector<std::int64_t>{3, 4});
  EXPECT_EQ(fold(ints, {}).dims, (Dims{2}));
  EXPECT_EQ(fold(ints, {}).ints, (std::vector<std::int64_t>{3, 4}));
  auto one = op("Constant", 0);
  B::attr(one, "value_int", std::int64_t{7});
  EXPECT_EQ(fold(one, {}).dims, (Dims{}));
  EXPECT_EQ(fold(one, {}).ints, (std::vector<std::int64_t>{7}));
  auto tensor = op("Constant", 0);
  B::tensor_attr(tensor, "value", B::int_tensor("v", {2, 1}, {5, 6}));
  EXPECT_EQ(fold(tensor, {}).dims, (Dims{2, 1}));
  auto text = op("Constant", 0);
  B::attr(text, "value_string", std::string("hello"));
  EXPECT_THROW(fold(text, {}), std::runtime_error) << "a string constant stays unknown";
}

TEST(ConstantFolding, NonZeroOfAKnownTensorListsItsIndicesRowMajor) {
  // [[1, 0, 2], [0, 0, 3]]: non-zero at (0,0), (0,2), (1,2); one row of indices per axis.
  const auto nz = fold(op("NonZero", 1), {i64({2, 3}, {1, 0, 2, 0, 0, 3})});
  EXPECT_EQ(nz.elem_type, TP::INT64);
  EXPECT_EQ(nz.dims, (Dims{2, 3}));
  EXPECT_EQ(nz.ints, (std::vector<std::int64_t>{0, 0, 1, 0, 2, 2}));
  const auto mask = fold(op("NonZero", 1), {boolean({4}, {0, 1, 1, 0})});
  EXPECT_EQ(mask.dims, (Dims{1, 2}));
  EXPECT_EQ(mask.ints, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(fold(op("NonZero", 1), {f32({3}, {0.0, -0.5, 0.0})}).ints, (std::vector<std::int64_t>{1}));
  // Nothing non-zero: a [rank, 0] tensor, not an error.
  EXPECT_EQ(fold(op("NonZero", 1), {i64({2, 2}, {0, 0, 0, 0})}).dims, (Dims{2, 0}));
}

TEST(ConstantFolding, ReductionsOnSmallIntTensors) {
  auto prod = op("ReduceProd", 1);
  B::attr(prod, "keepdims", std::int64_t{0});
  const auto p = fold(prod, {i64({3}, {2, 3, 4})});
  EXPECT_TRUE(p.dims.empty());
  EXPECT_EQ(p.ints, (std::vector<std::int64_t>{24}));
  auto sum = op("ReduceSum", 2); // opset 13: axes as an input
  const auto s = fold(sum, {i64({2, 3}, {1, 2, 3, 4, 5, 6}), i64({1}, {1})});
  EXPECT_EQ(s.dims, (Dims{2, 1}));
  EXPECT_EQ(s.ints, (std::vector<std::int64_t>{6, 15}));
  auto max = op("ReduceMax", 1);
  B::attr(max, "axes", std::vector<std::int64_t>{0});
  EXPECT_EQ(fold(max, {i64({2, 2}, {1, 9, 5, 2})}).ints, (std::vector<std::int64_t>{5, 9}));
}

TEST(ConstantFolding, LargeResultsAreLeftUnknownNotAllocated) {
  // A billion-element Range is declined (the value stays unknown), not an error.
  std::vector<const ConstTensor*> values;
  const auto start = i64({}, {0});
  const auto limit = i64({}, {1'000'000'000});
  const auto delta = i64({}, {1});
  values = {&start, &limit, &delta};
  const std::vector<const onnx::TypeProto*> types(3, nullptr);
  EXPECT_FALSE(fold_node(op("Range", 3), values, types));
  // An op without a rule, or an input that is not known, is not folded either.
  EXPECT_FALSE(fold_node(op("Relu", 1), {&start}, {nullptr}));
  EXPECT_FALSE(fold_node(op("Add", 2), {&start, nullptr}, {nullptr, nullptr}));
}

// ---- Chains that exporters write, imported whole ------------------------------------------

const graph::Tensor& tensor(const onnx_import::ImportResult& r, const std::string& name) {
  return r.graph.tensor(r.graph.find_tensor(name));
}

// Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): x[batch, 4, 5] -> [batch, 20], with
// Unsqueeze's axes as an attribute (opset 11) or an input (opset 13).
class GatherUnsqueezeConcat : public ::testing::TestWithParam<int> {};

TEST_P(GatherUnsqueezeConcat, ReshapeTargetIsFolded) {
  const int opset = GetParam();
  B b(opset);
  b.input("x", {"batch", 4, 5});
  b.output("y");
  b.constant_ints("zero", {}, {0});
  b.constant_ints("minus_one", {1}, {-1});
  b.node("Shape", {"x"}, {"shape"}, "shape");
  b.node("Gather", {"shape", "zero"}, {"n"}, "gather");
  if (opset >= 13) {
    b.constant_ints("axes0", {1}, {0});
    b.node("Unsqueeze", {"n", "axes0"}, {"n1"}, "unsqueeze");
  } else {
    B::attr(b.node("Unsqueeze", {"n"}, {"n1"}, "unsqueeze"), "axes", std::vector<std::int64_t>{0});
  }
  B::attr(b.node("Concat", {"n1", "minus_one"}, {"target"}, "concat"), "axis", std::int64_t{0});
  b.node("Reshape", {"x", "target"}, {"y"}, "reshape");
  const auto r = onnx_import::import_model(b.model(), "chain.onnx", {{{"batch", 3}}});
  EXPECT_EQ(tensor(r, "y").shape, (graph::Shape{3, 20}));
  ASSERT_TRUE(tensor(r, "n1").int_values);
  EXPECT_EQ(*tensor(r, "n1").int_values, (std::vector<std::int64_t>{3}));
  ASSERT_TRUE(tensor(r, "target").int_values);
  EXPECT_EQ(*tensor(r, "target").int_values, (std::vector<std::int64_t>{3, -1}));
  EXPECT_EQ(r.graph.ops().size(), static_cast<std::size_t>(b.model().graph().node_size())) << "every node kept";
}

INSTANTIATE_TEST_SUITE_P(Opsets, GatherUnsqueezeConcat, ::testing::Values(11, 13, 17));

TEST(ConstantFoldingImport, ResizeSizesFromShapeCastSliceCastConcat) {
  // Upsample x2 as tf2onnx and Paddle2ONNX write it: sizes = Concat(Shape(x)[0:2],
  // Cast<int64>(Cast<float>(Shape(x))[2:4] * 2)).
  B b(13);
  b.input("x", {"batch", 3, 8, 6});
  b.output("y");
  b.ints("s0", {1}, {0}).ints("s2", {1}, {2}).ints("s4", {1}, {4});
  b.node("Shape", {"x"}, {"shape"}, "shape");
  b.node("Slice", {"shape", "s0", "s2"}, {"nc"}, "slice_nc");
  B::attr(b.node("Cast", {"shape"}, {"shape_f"}, "to_float"), "to", std::int64_t{TP::FLOAT});
  b.node("Slice", {"shape_f", "s2", "s4"}, {"hw_f"}, "slice_hw");
  b.constant_floats("two", {}, 2.0F);
  b.node("Mul", {"hw_f", "two"}, {"hw2_f"}, "double");
  B::attr(b.node("Cast", {"hw2_f"}, {"hw2"}, "to_int"), "to", std::int64_t{TP::INT64});
  B::attr(b.node("Concat", {"nc", "hw2"}, {"sizes"}, "concat"), "axis", std::int64_t{0});
  auto& resize = b.node("Resize", {"x", "", "", "sizes"}, {"y"}, "resize");
  B::attr(resize, "mode", std::string("nearest"));
  const auto r = onnx_import::import_model(b.model(), "resize.onnx", {{{"batch", 2}}});
  EXPECT_EQ(tensor(r, "y").shape, (graph::Shape{2, 3, 16, 12}));
  ASSERT_TRUE(tensor(r, "sizes").int_values);
  EXPECT_EQ(*tensor(r, "sizes").int_values, (std::vector<std::int64_t>{2, 3, 16, 12}));
}

TEST(ConstantFoldingImport, RangeConstantOfShapeExpandAndPadTakeComputedShapes) {
  // Positions for a sequence: Range(0, seq, 1); a mask ConstantOfShape([batch, seq]); the
  // positions expanded to [batch, seq]; the input padded on the right up to 16 steps.
  B b(13);
  b.input("x", {"batch", "seq"});
  b.output("pos", TP::INT64).output("mask").output("padded");
  b.ints("one_idx", {}, {1}).ints("zero_i", {}, {0}).ints("step", {}, {1}).ints("axes0", {1}, {0});
  b.ints("target_len", {1}, {16}).ints("zeros3", {3}, {0, 0, 0});
  b.node("Shape", {"x"}, {"shape"}, "shape");
  b.node("Gather", {"shape", "one_idx"}, {"seq_len"}, "seq_len");
  b.node("Range", {"zero_i", "seq_len", "step"}, {"positions"}, "range");
  b.node("ConstantOfShape", {"shape"}, {"mask"}, "mask");
  b.node("Expand", {"positions", "shape"}, {"pos"}, "expand");
  b.node("Unsqueeze", {"seq_len", "axes0"}, {"seq1"}, "unsqueeze");
  b.node("Sub", {"target_len", "seq1"}, {"missing"}, "missing");
  B::attr(b.node("Concat", {"zeros3", "missing"}, {"pads"}, "pads"), "axis", std::int64_t{0});
  b.node("Pad", {"x", "pads"}, {"padded"}, "pad");
  const auto r = onnx_import::import_model(b.model(), "gen.onnx", {{{"batch", 2}, {"seq", 5}}});
  EXPECT_EQ(tensor(r, "positions").shape, (graph::Shape{5}));
  ASSERT_TRUE(tensor(r, "positions").int_values);
  EXPECT_EQ(*tensor(r, "positions").int_values, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(tensor(r, "mask").shape, (graph::Shape{2, 5}));
  EXPECT_EQ(tensor(r, "pos").shape, (graph::Shape{2, 5}));
  EXPECT_EQ(*tensor(r, "pads").int_values, (std::vector<std::int64_t>{0, 0, 0, 11}));
  EXPECT_EQ(tensor(r, "padded").shape, (graph::Shape{2, 16}));
}

// A Split of a constant, whose parts become a Reshape's target and a Pad's amounts (tf2onnx's
// Pad: a Concat of a Split of a constant): each part is known once inference has its shape.
TEST(ConstantFoldingImport, TheOutputsOfASplitOfAConstantAreKnown) {
  using B = test::ModelBuilder;
  B b(13);
  b.input("x", {12});
  b.input("img", {1, 1, 4, 4});
  b.ints("c", {3, 4, 0, 0, 1, 1, 0, 0, 1, 1});
  b.ints("sizes", {2, 8});
  B::attr(b.node("Split", {"c", "sizes"}, {"s1", "s2"}, "split"), "axis", std::int64_t{0});
  b.node("Reshape", {"x", "s1"}, {"y"}, "reshape");
  b.node("Pad", {"img", "s2"}, {"padded"}, "pad");
  b.output("y");
  b.output("padded");
  const auto r = onnx_import::import_model(b.model(), "split.onnx");
  EXPECT_EQ(tensor(r, "y").shape, (graph::Shape{3, 4}));
  EXPECT_EQ(tensor(r, "padded").shape, (graph::Shape{1, 1, 6, 6}));
  ASSERT_TRUE(tensor(r, "s2").int_values);
  EXPECT_EQ(*tensor(r, "s2").int_values, (std::vector<std::int64_t>{0, 0, 1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(r.graph.ops().size(), 3u) << "every node kept";
}

TEST(ConstantFoldingImport, SliceAttributeFormAtOpset9) {
  B b(9);
  b.input("x", {"batch", 4, 5});
  b.output("y");
  b.ints("minus_one", {1}, {-1});
  b.node("Shape", {"x"}, {"shape"}, "shape");
  auto& slice = b.node("Slice", {"shape"}, {"first"}, "slice");
  B::attr(slice, "starts", std::vector<std::int64_t>{0});
  B::attr(slice, "ends", std::vector<std::int64_t>{1});
  B::attr(b.node("Concat", {"first", "minus_one"}, {"target"}, "concat"), "axis", std::int64_t{0});
  b.node("Reshape", {"x", "target"}, {"y"}, "reshape");
  const auto r = onnx_import::import_model(b.model(), "o9.onnx", {{{"batch", 7}}});
  EXPECT_EQ(tensor(r, "y").shape, (graph::Shape{7, 20}));
}

// Moonshine's attention as Optimum exports it: a mask built from a shape (Less(Range(0, n), n)),
// NonZero of it as GatherND's indices into the data. The mask is known, so NonZero's length is
// too, and the gathered tensor's shape follows.
TEST(ConstantFoldingImport, NonZeroOfAMaskBuiltFromAShapeIsKnown) {
  B b(14);
  b.input("x", {"batch", 6, 4});
  b.output("y");
  b.ints("zero", {}, {0}).ints("step", {}, {1}).ints("one_idx", {}, {1}).ints("four", {}, {4});
  b.node("Shape", {"x"}, {"shape"}, "shape");
  b.node("Gather", {"shape", "one_idx"}, {"n"}, "n");
  b.node("Range", {"zero", "n", "step"}, {"positions"}, "range");
  b.node("Less", {"positions", "four"}, {"keep"}, "less");
  b.node("NonZero", {"keep"}, {"nz"}, "nonzero");
  B::attr(b.node("Transpose", {"nz"}, {"idx"}, "transpose"), "perm", std::vector<std::int64_t>{1, 0});
  auto& t = b.node("Transpose", {"x"}, {"xt"}, "to_seq_first");
  B::attr(t, "perm", std::vector<std::int64_t>{1, 0, 2});
  b.node("GatherND", {"xt", "idx"}, {"y"}, "gather_nd");
  const auto r = onnx_import::import_model(b.model(), "moonshine_mask.onnx", {{{"batch", 2}}});
  ASSERT_TRUE(tensor(r, "nz").int_values);
  EXPECT_EQ(*tensor(r, "nz").int_values, (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(tensor(r, "nz").shape, (graph::Shape{1, 4}));
  EXPECT_EQ(tensor(r, "y").shape, (graph::Shape{4, 2, 4}));
  EXPECT_EQ(r.graph.ops().size(), static_cast<std::size_t>(b.model().graph().node_size())) << "every node kept";
}

TEST(ConstantFoldingImport, ConstantHeldWeightsAreParameters) {
  // Paddle2ONNX style: weights in Constant nodes, not initializers.
  B b(13);
  b.input("x", {"batch", 3, 8, 8});
  b.output("y");
  b.constant_floats("conv_w", {4, 3, 3, 3});
  b.constant_floats("fc_w", {256, 10});
  b.constant_floats("fc_b", {10});
  b.constant_floats("scale", {}, 0.125F); // an operand, not a weight
  b.ints("flat", {2}, {0, -1});
  auto& conv = b.node("Conv", {"x", "conv_w"}, {"c"}, "conv");
  B::attr(conv, "pads", std::vector<std::int64_t>{1, 1, 1, 1});
  b.node("Reshape", {"c", "flat"}, {"f"}, "flatten");
  b.node("MatMul", {"f", "fc_w"}, {"m"}, "fc");
  b.node("Add", {"m", "fc_b"}, {"a"}, "fc_bias");
  b.node("Mul", {"a", "scale"}, {"y"}, "scale");
  const auto r = onnx_import::import_model(b.model(), "paddle.onnx", {{{"batch", 2}}});
  EXPECT_EQ(tensor(r, "conv_w").role, graph::TensorRole::parameter);
  EXPECT_EQ(tensor(r, "fc_w").role, graph::TensorRole::parameter);
  EXPECT_EQ(tensor(r, "fc_b").role, graph::TensorRole::parameter);
  EXPECT_EQ(tensor(r, "scale").role, graph::TensorRole::constant);
  const std::int64_t expected = 4 * 3 * 3 * 3 + 256 * 10 + 10;
  EXPECT_EQ(graph::summarize(r.graph).params, expected);
  EXPECT_EQ(r.constant_node_params, expected);
  EXPECT_EQ(tensor(r, "y").shape, (graph::Shape{2, 10}));
}

// Runs `f`, expecting a partita::Error whose message contains every one of `parts`.
template <typename F> void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error was raised";
  } catch (const Error& e) {
    for (const auto& p : parts) {
      EXPECT_THAT(e.what(), HasSubstr(p));
    }
  }
}

TEST(ConstantFoldingImport, AFailingFoldNamesTheNodeItsOpAndTheReason) {
  B b(13);
  b.input("x", {"batch", 4});
  b.output("y");
  b.ints("bad", {}, {5});
  b.ints("minus_one", {1}, {-1});
  b.node("Shape", {"x"}, {"shape"}, "shape");
  b.node("Gather", {"shape", "bad"}, {"n"}, "take_dim");
  b.node("Reshape", {"x", "n"}, {"y"}, "reshape");
  expect_error(
      [&] {
        onnx_import::import_model(b.model(), "bad.onnx", {{{"batch", 2}}});
      },
      {"bad.onnx", "node 'take_dim' (Gather)", "index 5 is out of range for axis 0 of size 2"});

  B c(13);
  c.input("x", {2, 6});
  c.output("y");
  c.ints("target", {2}, {4, -1});
  c.ints("values", {2}, {1, 2});
  c.ints("other", {3}, {1, 2, 3});
  c.node("Add", {"values", "other"}, {"sum"}, "mismatch");
  c.node("Reshape", {"x", "sum"}, {"y"}, "reshape");
  expect_error([&] { onnx_import::import_model(c.model(), "shapes.onnx"); },
               {"shapes.onnx", "node 'mismatch' (Add)", "[2] and [3] do not broadcast"});
}

// A shape that follows values known only at run time is refused naming the node, the input whose
// values decide it and the model inputs it is computed from; where those are integer settings,
// the message says how to fix them with --value.
TEST(ConstantFoldingImport, ADataDependentShapeNamesTheInputItFollowsAndTheFix) {
  B b(13);
  b.input("x", {"batch", 4});
  b.output("idx", TP::INT64);
  b.node("NonZero", {"x"}, {"idx"}, "where_nonzero");
  expect_error(
      [&] {
        onnx_import::import_model(b.model(), "nz.onnx", {{{"batch", 2}}});
      },
      {"nz.onnx", "node 'where_nonzero' (NonZero)", "input 0 ('x')", "computed from the model's input 'x'",
       "do not depend on the data"});

  B c(13);
  c.input("n", {1}, TP::INT64);
  c.output("r", TP::INT64);
  c.ints("zero", {}, {0}).ints("one", {}, {1}).ints("first", {}, {0});
  c.node("Gather", {"n", "first"}, {"limit"}, "limit");
  c.node("Range", {"zero", "limit", "one"}, {"r"}, "steps");
  expect_error([&] { onnx_import::import_model(c.model(), "range.onnx"); },
               {"node 'steps' (Range)", "input 1 ('limit')", "model's input 'n'", "--value n=..."});
  const auto r = onnx_import::import_model(c.model(), "range.onnx", {{}, {{"n", {3}}}});
  EXPECT_EQ(tensor(r, "r").shape, (graph::Shape{3}));
}

} // namespace
} // namespace partita
