#pragma once

// A small helper for writing ONNX graphs by hand: declares inputs, weight initializers (shape
// only, data declared external and never written), small integer constants, nodes and outputs,
// plus the building blocks several zoo models share (conv+bn+relu, linear, layer norm, GELU,
// multi-head attention, LSTM layers).

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace partita::zoo::detail {

using Dims = std::vector<std::int64_t>;

onnx::AttributeProto attr(const std::string& name, std::int64_t value);
onnx::AttributeProto attr(const std::string& name, float value);
onnx::AttributeProto attr(const std::string& name, const std::string& value);
onnx::AttributeProto attr(const std::string& name, const Dims& values);
onnx::AttributeProto attr(const std::string& name, const onnx::TensorProto& value);

class OnnxBuilder {
public:
  // `model_name` names the model and its (never written) external weight file.
  OnnxBuilder(std::string model_name, std::string doc);

  const std::string& model_name() const { return m_model_name; }

  std::string input(const std::string& name, const Dims& shape, std::int32_t elem_type = onnx::TensorProto::FLOAT);
  // A float weight declared with external data: dims and type only, no bytes.
  std::string weight(const std::string& name, const Dims& shape);
  // A 1-D int64 initializer stored inline (Reshape targets, Split sizes, axes, indices).
  std::string int_constant(const std::string& name, const Dims& values);
  // A 0-D int64 initializer stored inline (a Gather index that drops the axis).
  std::string int_scalar(const std::string& name, std::int64_t value);
  // A shared 1-D int64 constant named after its values ("shape.1x128x768").
  std::string shape(const Dims& values);
  // A shared float scalar from a Constant node: not a parameter, so not an initializer.
  std::string float_scalar(float value);

  // Adds a node named `name`; its outputs are named `name` (one output) or `name:i`.
  std::vector<std::string> node(const std::string& op_type, const std::vector<std::string>& inputs,
                                const std::vector<onnx::AttributeProto>& attributes, int n_outputs,
                                const std::string& name);
  // The single-output case.
  std::string op(const std::string& op_type, const std::vector<std::string>& inputs, const std::string& name,
                 const std::vector<onnx::AttributeProto>& attributes = {});

  // Declares a graph output with its element type; shape inference fills its shape.
  void output(const std::string& name, std::int32_t elem_type = onnx::TensorProto::FLOAT);

  // Opset 17, IR version 8. The builder is left empty.
  onnx::ModelProto finish();

private:
  void claim_tensor(const std::string& name);

  std::string m_model_name;
  onnx::ModelProto m_model;
  std::int64_t m_weight_offset = 0;
  std::set<std::string> m_tensor_names;
  std::set<std::string> m_node_names;
  std::map<std::string, std::string> m_shared_constants;
};

// Conv without bias (the BN that follows has one), BatchNormalization, Relu: the block
// torchvision's ResNet and Inception are made of. Node names: `conv`, `bn`, `relu`.
struct ConvSpec {
  std::int64_t in = 0, out = 0;
  std::int64_t kh = 1, kw = 1;
  std::int64_t stride = 1;
  std::int64_t ph = 0, pw = 0;
  bool bias = false;
};
std::string conv(OnnxBuilder& b, const std::string& name, const std::string& x, const ConvSpec& s);
std::string batch_norm(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t channels,
                       float epsilon);
std::string conv_bn_relu(OnnxBuilder& b, const std::string& conv_name, const std::string& bn_name,
                         const std::string& relu_name, const std::string& x, const ConvSpec& s, float epsilon);

// y = x W + b with W [in, out] as MatMul + Add (what exporters emit for inputs of rank > 2).
std::string linear(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t in, std::int64_t out,
                   bool bias = true);
// Gemm with W [out, in], transB = 1: torchvision's classifier layers as exported.
std::string gemm(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t in, std::int64_t out);
std::string layer_norm(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t d, float epsilon);
// x * 0.5 * (1 + erf(x / sqrt(2))): Gelu is only an operator from opset 20.
std::string gelu(OnnxBuilder& b, const std::string& name, const std::string& x);

// Multi-head scaled dot-product attention over [batch, len, d] inputs.
struct AttentionSpec {
  std::int64_t batch = 1;
  std::int64_t q_len = 1;
  std::int64_t kv_len = 1;
  std::int64_t d = 1;
  std::int64_t heads = 1;
  bool fused_qkv = false; // one [d, 3d] projection (GPT-2) instead of three (needs self-attention)
};
// `kv` empty means self-attention; `mask` (optional) is added to the scores ([q_len, kv_len]).
// Projections are `name.qkv` or `name.q/.k/.v`, and `name.proj` for the output.
std::string attention(OnnxBuilder& b, const std::string& name, const std::string& x, const std::string& kv,
                      const std::string& mask, const AttentionSpec& s);
// The additive causal mask [len, len]: 0 on and below the diagonal, -1e4 above, from `positions`
// (an int64 constant 0..len-1), without any float constant tensor.
std::string causal_mask(OnnxBuilder& b, const std::string& name, const std::string& positions);

// One ONNX LSTM layer over time-major input [seq, batch, in]. Returns [seq, batch, dirs * hidden]
// (a bidirectional layer's two directions concatenated per step, as PyTorch's LSTM returns them).
std::string lstm(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t seq, std::int64_t batch,
                 std::int64_t in, std::int64_t hidden, bool bidirectional);

// Consecutive 0, 1, ..., n-1.
Dims iota(std::int64_t n);

} // namespace partita::zoo::detail
