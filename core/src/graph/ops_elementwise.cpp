// Elementwise ops with numpy broadcasting: the iteration space is the output's shape, every dim
// splittable, inputs mapped right-aligned. The table gives each op's FLOPs per output element
// forward and, per input that needs one, backward.

#include "graph/op_helpers.h"

namespace partita::graph::detail {
namespace {

template <int Fwd, int Bwd> void describe_pointwise(const Op& op, const Graph& g, OpSemantics& s) {
  broadcast_space(op, g, s);
  pointwise_costs(op, g, s, Fwd, Bwd);
}

// Element-wise through a transcendental function (exp, erf, tanh, ...): a family of its own, and
// its gradient another (Erf's runs an exp, not an erf).
template <int Fwd, int Bwd> void describe_transcendental(const Op& op, const Graph& g, OpSemantics& s) {
  describe_pointwise<Fwd, Bwd>(op, g, s);
  s.forward_kernel = KernelClass::transcendental;
  s.backward_kernel = KernelClass::transcendental_backward;
}

// A piecewise-linear activation: its gradient masks or scales dy by where x lies, a kernel of its
// own (graph::KernelClass::activation_backward).
template <int Fwd, int Bwd> void describe_activation(const Op& op, const Graph& g, OpSemantics& s) {
  describe_pointwise<Fwd, Bwd>(op, g, s);
  s.backward_kernel = KernelClass::activation_backward;
}

// Linear in its inputs (a sum, a difference, a negation, a cast): the gradient is the output
// gradient passed through, without the saved inputs.
template <int Fwd, int Bwd> void describe_linear(const Op& op, const Graph& g, OpSemantics& s) {
  describe_pointwise<Fwd, Bwd>(op, g, s);
  s.backward_reads_inputs = false;
}

constexpr InputSlot D = InputSlot::data;
constexpr InputSlot I = InputSlot::index;

// FLOPs per element: transcendental functions count as several (as fvcore and DeepSpeed's
// profiler do); shape-preserving casts and selections as one.
const OpDescriptor table[] = {
    // binary arithmetic
    {"Add", OpClass::elementwise, {D}, describe_linear<1, 1>},
    {"Sub", OpClass::elementwise, {D}, describe_linear<1, 1>},
    {"Mul", OpClass::elementwise, {D}, describe_pointwise<1, 1>},
    {"Div", OpClass::elementwise, {D}, describe_pointwise<1, 2>},
    {"Pow", OpClass::elementwise, {D}, describe_transcendental<4, 4>},
    {"Mod", OpClass::elementwise, {D}, describe_pointwise<1, 1>},
    {"Max", OpClass::elementwise, {D}, describe_pointwise<1, 1>},
    {"Min", OpClass::elementwise, {D}, describe_pointwise<1, 1>},
    {"Mean", OpClass::elementwise, {D}, describe_pointwise<1, 1>},
    {"Sum", OpClass::elementwise, {D}, describe_pointwise<1, 1>},
    {"PRelu", OpClass::elementwise, {D, InputSlot::weight}, describe_pointwise<2, 2>},
    {"Equal", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"Greater", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"GreaterOrEqual", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"Less", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"LessOrEqual", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"And", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"Or", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"Xor", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"Where", OpClass::elementwise, {I, D, D}, describe_pointwise<1, 1>},
    // unary
    {"Relu", OpClass::elementwise, {D}, describe_activation<1, 1>},
    {"LeakyRelu", OpClass::elementwise, {D}, describe_activation<2, 2>},
    {"Elu", OpClass::elementwise, {D}, describe_transcendental<4, 2>},
    {"Selu", OpClass::elementwise, {D}, describe_transcendental<5, 2>},
    {"Celu", OpClass::elementwise, {D}, describe_transcendental<5, 2>},
    {"Gelu", OpClass::elementwise, {D}, describe_transcendental<8, 10>},
    {"Sigmoid", OpClass::elementwise, {D}, describe_transcendental<4, 2>},
    {"HardSigmoid", OpClass::elementwise, {D}, describe_activation<3, 1>},
    {"HardSwish", OpClass::elementwise, {D}, describe_activation<4, 2>},
    {"Tanh", OpClass::elementwise, {D}, describe_transcendental<4, 2>},
    {"Softplus", OpClass::elementwise, {D}, describe_transcendental<4, 4>},
    {"Softsign", OpClass::elementwise, {D}, describe_pointwise<3, 3>},
    {"Mish", OpClass::elementwise, {D}, describe_transcendental<8, 10>},
    {"Erf", OpClass::elementwise, {D}, describe_transcendental<4, 4>},
    {"Exp", OpClass::elementwise, {D}, describe_transcendental<4, 1>},
    {"Log", OpClass::elementwise, {D}, describe_transcendental<4, 1>},
    {"Sqrt", OpClass::elementwise, {D}, describe_pointwise<4, 2>},
    {"Reciprocal", OpClass::elementwise, {D}, describe_pointwise<1, 2>},
    {"Neg", OpClass::elementwise, {D}, describe_linear<1, 1>},
    {"Abs", OpClass::elementwise, {D}, describe_pointwise<1, 1>},
    {"Sign", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"Ceil", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"Floor", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"Round", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"Not", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"Sin", OpClass::elementwise, {D}, describe_transcendental<4, 4>},
    {"Cos", OpClass::elementwise, {D}, describe_transcendental<4, 4>},
    {"IsNaN", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"IsInf", OpClass::elementwise, {D}, describe_pointwise<1, 0>},
    {"Clip", OpClass::elementwise, {D, I, I}, describe_activation<2, 1>},
    {"Cast", OpClass::elementwise, {D}, describe_linear<1, 1>},
    {"CastLike", OpClass::elementwise, {D, I}, describe_pointwise<1, 1>},
    {"Dropout", OpClass::elementwise, {D, I, I}, describe_pointwise<2, 1>},
};

} // namespace

std::span<const OpDescriptor> elementwise_ops() {
  return table;
}

} // namespace partita::graph::detail
