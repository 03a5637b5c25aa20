#pragma once

// What each operator means: its iteration space (named dimensions, which are reductions, which
// may be split), how every input and output tensor is indexed by that space (einsum notation, in
// effect), and the forward/backward FLOPs and bytes that follow. Every op type is described once,
// in core/src/graph/ops_*.cpp, and registered in a table; the cost model and the search read
// only these descriptions.

#include "partita/graph/graph.h"
#include "partita/graph/kernel_class.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace partita::graph {

enum class OpClass : std::uint8_t {
  contraction,   // MatMul, Gemm, Einsum: sum over shared dims
  convolution,   // Conv, ConvTranspose
  elementwise,   // Add, Relu, Cast, Where, Dropout, ...
  normalization, // BatchNorm, LayerNorm, InstanceNorm, GroupNorm
  softmax,       // Softmax, LogSoftmax
  pooling,       // MaxPool, AveragePool, GlobalAveragePool
  reduction,     // ReduceMean/Sum/Max
  recurrent,     // LSTM, GRU, RNN
  embedding,     // Gather on a weight
  data_movement, // Transpose, Concat, Split, Slice, Gather, Expand, Tile, Pad: copy bytes
  shape,         // Reshape, Flatten, Squeeze, Unsqueeze, Shape, Constant, Identity: no data moved
  opaque,        // not understood: conservative memory-bound cost, reported by name
};
std::string_view op_class_name(OpClass c);

// One dimension of an op's iteration space.
struct IterDim {
  std::string name;
  std::int64_t size = 1;
  bool reduction = false; // summed over: splitting it leaves partial sums
  bool splittable = true; // false for kernel extents, recurrences over time, softmax/norm axes
  // Per-channel statistics are taken over it (BatchNorm's batch and spatial dims) although it
  // indexes the output: a split of it all-reduces the statistics over that axis's group (sync-BN),
  // forward and backward, so that the sharded op computes what the unsharded one does.
  bool statistics = false;
};

// How an op uses one of its inputs.
enum class InputSlot : std::uint8_t {
  data,   // read as values; gets a gradient when it is an activation, a weight gradient when it is a parameter
  weight, // a trainable parameter slot (Conv W, Gemm B, LayerNorm scale)
  state,  // a non-trainable buffer (BatchNorm running mean/var)
  index,  // integers or shape data: no gradient (Reshape shape, Gather indices, Slice starts)
};

// For each dimension of a tensor, the iteration dimension that indexes it, or -1 when none does
// (a broadcast dimension, or a dimension read whole such as a convolution input's channels in a
// depthwise split, or a kernel's spatial extent).
struct TensorAccess {
  TensorId tensor = no_tensor;
  std::vector<int> dims;
  // Read by index (a gather's table): a kernel touches at most as many of its bytes as it writes
  // (the rows the indices pick), however large the tensor.
  bool read_by_index = false;
};

struct OpSemantics {
  OpClass op_class = OpClass::opaque;
  std::vector<IterDim> dims;
  std::vector<TensorAccess> inputs;  // one per op input, in order (tensor no_tensor when omitted)
  std::vector<TensorAccess> outputs; // one per op output
  std::vector<InputSlot> slots;      // one per op input

  // Forward multiply-accumulates (contractions, convolutions, recurrences), 0 otherwise.
  double macs = 0;
  double fwd_flops = 0;
  double bwd_data_flops = 0;   // gradients with respect to activation inputs
  double bwd_weight_flops = 0; // gradients with respect to parameters
  double fwd_bytes_read = 0;
  double fwd_bytes_written = 0;
  double bwd_bytes = 0; // read + written by the backward pass
  // Whether the backward pass reads the saved forward inputs: not when the gradient is the output
  // gradient moved (data movement: Transpose, Split, Concat, ...) or passed through a linear map
  // (Add, Sub, Neg, Cast); then it reads the output gradient and writes the input gradients only.
  bool backward_reads_inputs = true;
  // The memory-bound kernel family of each pass: set from op_class, refined by the description
  // (a transcendental function; an element-wise op whose broadcast input's gradient is a reduction).
  KernelClass forward_kernel = KernelClass::eltwise;
  KernelClass backward_kernel = KernelClass::eltwise;
  // The compute kernel family whose efficiency curve prices the FLOPs of both passes: set from
  // op_class (convolution and recurrent ops; every other op is priced as a GEMM).
  ComputeClass compute_class = ComputeClass::matmul;
  // Of bwd_bytes, those moved by reduction kernels (the gradient of a broadcast input: a bias);
  // the rest goes through backward_kernel.
  double backward_reduction_bytes = 0;

  // A recurrence (LSTM, GRU, RNN): the part of each pass's FLOPs that runs as `steps` dependent
  // steps, each waiting for the one before (the hidden state's product with the recurrent
  // weights and the gate functions), so that each step is a kernel of its own at its own size;
  // every step reads input `step_input` (the recurrent weights) again. The rest of the FLOPs (the input
  // projection, the weight gradients) are independent across steps and run as one large product.
  // steps 1: no recurrence.
  std::int64_t steps = 1;
  double step_fwd_flops = 0; // over all steps
  double step_bwd_flops = 0; // over all steps
  int step_input = -1;       // the input every step reads again (the recurrent weights), -1 none
  // The bytes of each step's gate functions, a kernel of their own after the product (the
  // pre-activations read, the states written; backward, their gradients), at 4 bytes a value,
  // over all steps.
  double step_fwd_bytes = 0;
  double step_bwd_bytes = 0;

  // Non-empty when the op was described conservatively (unknown type, subgraph, unsupported
  // attribute); the text says why.
  std::string opaque_reason;

  int find_dim(std::string_view name) const; // -1 if absent
  double iteration_points() const;           // product of all dims
};

// The declarative description of one op type: how its inputs are used, and how to lay out its
// iteration space from the op's attributes and tensor shapes.
struct OpDescriptor {
  std::string_view type;
  OpClass op_class;
  // Slot of each input by position; the last entry repeats for variadic ops (Concat, Sum, Max).
  std::vector<InputSlot> slots;
  // Fills dims, inputs, outputs and the FLOP counts. May throw partita::Error naming the node.
  void (*describe)(const Op& op, const Graph& g, OpSemantics& s);
};

// The descriptor for an ONNX op type (default domain), or nullptr when unknown.
const OpDescriptor* find_descriptor(std::string_view type);
std::vector<std::string_view> known_op_types();

// The slot of input `i` of `op` (data for unknown ops).
InputSlot input_slot(const Op& op, std::size_t i);

// Which values carry a gradient in the backward pass: a parameter does, and an activation does
// when some input it is computed from through a differentiable slot (not an index or a state)
// does. Sets Tensor::gradient on every tensor, and first Tensor::quantized: an 8-bit integer
// parameter, and the first output of a quantizing op (quantizes_output) when it is an integer;
// and Tensor::fixed: constants and what understood ops compute from them alone.
void mark_gradients(Graph& g);

// Whether an op's first output holds quantized values: QuantizeLinear, DynamicQuantizeLinear,
// ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul (ops_quantized.cpp).
bool quantizes_output(const Op& op);

// Floating values, and quantized ones (Tensor::quantized): what training differentiates, and
// what travels and is stored at the set-up's precision. A quantized model is costed as if it
// were trained at that precision (quantization-aware training's straight-through view).
bool trains_as_float(const Tensor& t);

// Whether `t` gets a gradient: a floating activation or parameter that mark_gradients left marked.
bool gets_gradient(const Tensor& t);

// Whether the backward pass of `op` (described by `s`) reads its input j to form the gradients
// its inputs take: a product's operand only for the other operand's gradient (d(a b)/da = b), a
// quotient's numerator only for the denominator's, other ops' every input where any takes one,
// none where the op only adds, moves or views (OpSemantics::backward_reads_inputs false). The one
// rule for the bytes a backward kernel reads and the activations training keeps for it.
bool backward_reads_input(const Graph& g, const Op& op, const OpSemantics& s, std::size_t j);

// The op's semantics. Unknown types, ops the importer marked opaque and ops whose description
// fails get an opaque description: every tensor dim unmapped, forward FLOPs = output elements,
// backward = 2x forward, bytes = inputs + outputs, and opaque_reason set.
OpSemantics describe(const Graph& g, OpId id);

} // namespace partita::graph
