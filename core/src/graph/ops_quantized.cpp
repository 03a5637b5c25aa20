// The ops of ONNX Runtime's quantizer. Dynamic quantization: DynamicQuantizeLinear, then
// ConvInteger / MatMulInteger on int8 or uint8 operands; static: QLinearConv / QLinearMatMul, and
// QuantizeLinear / DequantizeLinear pairs around float ops (the QDQ format). The integer
// contractions are the float ones with other operand positions: they are described by running
// Conv's and MatMul's descriptions on the operands (so their iteration space, MACs and halos are
// the same), the scales and zero points read whole as index data. An int8 weight is a parameter
// of 1-byte elements (the importer's roles), so parameter counts and bytes follow the file.

#include "graph/op_helpers.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace partita::graph::detail {
namespace {

// Describes `op` as the op `type` applied to the operands at `positions` (an absent position,
// e.g. QLinearConv's optional bias, is passed as omitted): dims, costs and the operands' access
// come from that description; the other inputs (scales, zero points) are read whole.
template <std::size_t N>
void describe_as(const Op& op, const Graph& g, OpSemantics& s, std::string_view type,
                 const std::array<std::size_t, N>& positions) {
  const OpDescriptor* d = find_descriptor(type);
  Op view = op;
  view.type = std::string(type);
  view.inputs.clear();
  for (const std::size_t p : positions) {
    view.inputs.push_back(p < op.inputs.size() ? op.inputs[p] : no_tensor);
  }
  while (!view.inputs.empty() && view.inputs.back() == no_tensor) {
    view.inputs.pop_back();
  }
  OpSemantics inner;
  inner.op_class = d->op_class;
  inner.inputs.resize(view.inputs.size());
  inner.outputs.resize(view.outputs.size());
  for (std::size_t i = 0; i < view.inputs.size(); ++i) {
    inner.inputs[i].tensor = view.inputs[i];
    inner.slots.push_back(i < d->slots.size() ? d->slots[i] : d->slots.back());
  }
  for (std::size_t i = 0; i < view.outputs.size(); ++i) {
    inner.outputs[i].tensor = view.outputs[i];
  }
  try {
    d->describe(view, g, inner);
  } catch (const Error& e) {
    // The inner description names the node and Conv/MatMul; say which op it is.
    fail(op, fmt::format("as {}: {}", type, e.what()));
  }
  s.dims = std::move(inner.dims);
  s.outputs = std::move(inner.outputs);
  for (std::size_t i = 0; i < view.inputs.size(); ++i) {
    s.inputs[positions[i]] = std::move(inner.inputs[i]);
  }
  s.macs = inner.macs;
  s.fwd_flops = inner.fwd_flops;
  s.bwd_data_flops = inner.bwd_data_flops;
  s.bwd_weight_flops = inner.bwd_weight_flops;
}

void describe_conv_integer(const Op& op, const Graph& g, OpSemantics& s) {
  describe_as<2>(op, g, s, "Conv", {0, 1});
}
void describe_qlinear_conv(const Op& op, const Graph& g, OpSemantics& s) {
  describe_as<3>(op, g, s, "Conv", {0, 3, 8});
}
void describe_matmul_integer(const Op& op, const Graph& g, OpSemantics& s) {
  describe_as<2>(op, g, s, "MatMul", {0, 1});
}
void describe_qlinear_matmul(const Op& op, const Graph& g, OpSemantics& s) {
  describe_as<2>(op, g, s, "MatMul", {0, 3});
}

// Y = saturate(round(X / scale) + zero_point) or its inverse, element by element over X (the
// scale and zero point, per tensor or per axis, are read whole). DynamicQuantizeLinear first
// finds X's range: a reduction, counted as 2 more FLOPs per element; its scale and zero point
// outputs are scalars.
template <int Fwd> void describe_quantize(const Op& op, const Graph& g, OpSemantics& s) {
  const Tensor& x = input(op, g, 0);
  std::vector<int> dims;
  for (std::size_t i = 0; i < x.shape.size(); ++i) {
    dims.push_back(add_dim(s, fmt::format("d{}", i), x.shape[i]));
  }
  map_input(op, g, s, 0, dims);
  map_output(op, g, s, 0, dims);
  pointwise_costs(op, g, s, Fwd, 1);
}

constexpr InputSlot D = InputSlot::data;
constexpr InputSlot W = InputSlot::weight;
constexpr InputSlot I = InputSlot::index;

const OpDescriptor table[] = {
    {"QuantizeLinear", OpClass::elementwise, {D, I, I}, describe_quantize<2>},
    {"DequantizeLinear", OpClass::elementwise, {D, I, I}, describe_quantize<2>},
    {"DynamicQuantizeLinear", OpClass::elementwise, {D}, describe_quantize<4>},
    {"ConvInteger", OpClass::convolution, {D, W, I, I}, describe_conv_integer},
    {"QLinearConv", OpClass::convolution, {D, I, I, W, I, I, I, I, W}, describe_qlinear_conv},
    {"MatMulInteger", OpClass::contraction, {D, D, I, I}, describe_matmul_integer},
    {"QLinearMatMul", OpClass::contraction, {D, I, I, D, I, I, I, I}, describe_qlinear_matmul},
};

} // namespace

std::span<const OpDescriptor> quantized_ops() {
  return table;
}

} // namespace partita::graph::detail

namespace partita::graph {

bool quantizes_output(const Op& op) {
  static constexpr std::string_view types[] = {"QuantizeLinear", "DynamicQuantizeLinear", "ConvInteger",
                                               "MatMulInteger",  "QLinearConv",           "QLinearMatMul"};
  return (op.domain.empty() || op.domain == "ai.onnx") &&
         std::find(std::begin(types), std::end(types), op.type) != std::end(types);
}

} // namespace partita::graph
