#include "zoo/onnx_builder.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <utility>

namespace partita::zoo::detail {

namespace {

constexpr std::int64_t opset_version = 17; // the highest opset libonnx 1.12 knows
constexpr std::int64_t ir_version = 8;

void set_shape(onnx::TypeProto_Tensor* t, const Dims& shape) {
  auto* s = t->mutable_shape();
  for (auto d : shape)
    s->add_dim()->set_dim_value(d);
}

std::string join_dims(const Dims& values) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i)
    out += (i ? "x" : "") + std::to_string(values[i]);
  return out;
}

} // namespace

onnx::AttributeProto attr(const std::string& name, std::int64_t value) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(value);
  return a;
}

onnx::AttributeProto attr(const std::string& name, float value) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(value);
  return a;
}

onnx::AttributeProto attr(const std::string& name, const std::string& value) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::STRING);
  a.set_s(value);
  return a;
}

onnx::AttributeProto attr(const std::string& name, const Dims& values) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INTS);
  for (auto v : values)
    a.add_ints(v);
  return a;
}

onnx::AttributeProto attr(const std::string& name, const onnx::TensorProto& value) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::TENSOR);
  *a.mutable_t() = value;
  return a;
}

OnnxBuilder::OnnxBuilder(std::string model_name, std::string doc) : m_model_name(std::move(model_name)) {
  m_model.set_ir_version(ir_version);
  m_model.set_producer_name("partita-zoo");
  m_model.set_producer_version("1");
  m_model.set_doc_string(std::move(doc));
  auto* opset = m_model.add_opset_import();
  opset->set_domain("");
  opset->set_version(opset_version);
  m_model.mutable_graph()->set_name(m_model_name);
}

void OnnxBuilder::claim_tensor(const std::string& name) {
  // A duplicate name would silently rewire the graph: a builder bug, not a user error.
  if (!m_tensor_names.insert(name).second)
    throw std::logic_error(fmt::format("zoo builder for {}: tensor '{}' defined twice", m_model_name, name));
}

std::string OnnxBuilder::input(const std::string& name, const Dims& shape, std::int32_t elem_type) {
  claim_tensor(name);
  auto* v = m_model.mutable_graph()->add_input();
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  set_shape(t, shape);
  return name;
}

std::string OnnxBuilder::weight(const std::string& name, const Dims& shape) {
  claim_tensor(name);
  auto* t = m_model.mutable_graph()->add_initializer();
  t->set_name(name);
  std::int64_t length = 4; // bytes of float32
  for (auto d : shape) {
    t->add_dims(d);
    if (__builtin_mul_overflow(length, d, &length))
      throw Error(fmt::format("zoo model {}: weight '{}' is too large", m_model_name, name));
  }
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  const std::pair<const char*, std::string> entries[] = {
      {"location", m_model_name + ".weights"},
      {"offset", std::to_string(m_weight_offset)},
      {"length", std::to_string(length)},
  };
  for (const auto& [key, value] : entries) {
    auto* e = t->add_external_data();
    e->set_key(key);
    e->set_value(value);
  }
  if (__builtin_add_overflow(m_weight_offset, length, &m_weight_offset))
    throw Error(fmt::format("zoo model {}: weights too large at '{}'", m_model_name, name));
  return name;
}

std::string OnnxBuilder::int_constant(const std::string& name, const Dims& values) {
  claim_tensor(name);
  auto* t = m_model.mutable_graph()->add_initializer();
  t->set_name(name);
  t->add_dims(static_cast<std::int64_t>(values.size()));
  t->set_data_type(onnx::TensorProto::INT64);
  for (auto v : values)
    t->add_int64_data(v);
  return name;
}

std::string OnnxBuilder::int_scalar(const std::string& name, std::int64_t value) {
  claim_tensor(name);
  auto* t = m_model.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_int64_data(value);
  return name;
}

std::string OnnxBuilder::shape(const Dims& values) {
  const std::string name = "const.shape." + join_dims(values);
  if (m_shared_constants.count(name) == 0)
    m_shared_constants[name] = int_constant(name, values);
  return name;
}

std::string OnnxBuilder::float_scalar(float value) {
  const std::string name = fmt::format("const.float.{}", value);
  if (m_shared_constants.count(name) == 0) {
    onnx::TensorProto t;
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.add_float_data(value);
    m_shared_constants[name] = op("Constant", {}, name, {attr("value", t)});
  }
  return name;
}

std::vector<std::string> OnnxBuilder::node(const std::string& op_type, const std::vector<std::string>& inputs,
                                           const std::vector<onnx::AttributeProto>& attributes, int n_outputs,
                                           const std::string& name) {
  if (!m_node_names.insert(name).second)
    throw std::logic_error(fmt::format("zoo builder for {}: node '{}' defined twice", m_model_name, name));
  auto* n = m_model.mutable_graph()->add_node();
  n->set_name(name);
  n->set_op_type(op_type);
  for (const auto& in : inputs)
    n->add_input(in);
  for (const auto& a : attributes)
    *n->add_attribute() = a;
  std::vector<std::string> outputs;
  for (int i = 0; i < n_outputs; ++i) {
    outputs.push_back(n_outputs == 1 ? name : fmt::format("{}:{}", name, i));
    claim_tensor(outputs.back());
    n->add_output(outputs.back());
  }
  return outputs;
}

std::string OnnxBuilder::op(const std::string& op_type, const std::vector<std::string>& inputs, const std::string& name,
                            const std::vector<onnx::AttributeProto>& attributes) {
  return node(op_type, inputs, attributes, 1, name).front();
}

void OnnxBuilder::output(const std::string& name, std::int32_t elem_type) {
  auto* v = m_model.mutable_graph()->add_output();
  v->set_name(name);
  v->mutable_type()->mutable_tensor_type()->set_elem_type(elem_type);
}

onnx::ModelProto OnnxBuilder::finish() {
  onnx::ModelProto out = std::move(m_model);
  m_model.Clear();
  m_tensor_names.clear();
  m_node_names.clear();
  m_shared_constants.clear();
  m_weight_offset = 0;
  return out;
}

std::string conv(OnnxBuilder& b, const std::string& name, const std::string& x, const ConvSpec& s) {
  std::vector<std::string> inputs{x, b.weight(name + ".weight", {s.out, s.in, s.kh, s.kw})};
  if (s.bias)
    inputs.push_back(b.weight(name + ".bias", {s.out}));
  return b.op("Conv", inputs, name,
              {attr("kernel_shape", Dims{s.kh, s.kw}), attr("strides", Dims{s.stride, s.stride}),
               attr("pads", Dims{s.ph, s.pw, s.ph, s.pw})});
}

std::string batch_norm(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t channels,
                       float epsilon) {
  // Running mean and variance feed BatchNormalization's state slots: buffers, not parameters.
  return b.op("BatchNormalization",
              {x, b.weight(name + ".weight", {channels}), b.weight(name + ".bias", {channels}),
               b.weight(name + ".running_mean", {channels}), b.weight(name + ".running_var", {channels})},
              name, {attr("epsilon", epsilon)});
}

std::string conv_bn_relu(OnnxBuilder& b, const std::string& conv_name, const std::string& bn_name,
                         const std::string& relu_name, const std::string& x, const ConvSpec& s, float epsilon) {
  const auto c = conv(b, conv_name, x, s);
  const auto n = batch_norm(b, bn_name, c, s.out, epsilon);
  return b.op("Relu", {n}, relu_name);
}

std::string linear(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t in, std::int64_t out,
                   bool bias) {
  const auto y = b.op("MatMul", {x, b.weight(name + ".weight", {in, out})}, name);
  if (!bias)
    return y;
  return b.op("Add", {y, b.weight(name + ".bias", {out})}, name + ".add_bias");
}

std::string gemm(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t in, std::int64_t out) {
  return b.op("Gemm", {x, b.weight(name + ".weight", {out, in}), b.weight(name + ".bias", {out})}, name,
              {attr("transB", std::int64_t{1})});
}

std::string layer_norm(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t d, float epsilon) {
  return b.op("LayerNormalization", {x, b.weight(name + ".weight", {d}), b.weight(name + ".bias", {d})}, name,
              {attr("axis", std::int64_t{-1}), attr("epsilon", epsilon)});
}

std::string gelu(OnnxBuilder& b, const std::string& name, const std::string& x) {
  const auto scaled = b.op("Div", {x, b.float_scalar(std::sqrt(2.0f))}, name + ".div");
  const auto erf = b.op("Erf", {scaled}, name + ".erf");
  const auto plus_one = b.op("Add", {erf, b.float_scalar(1.0f)}, name + ".add");
  const auto times_x = b.op("Mul", {x, plus_one}, name + ".mul");
  return b.op("Mul", {times_x, b.float_scalar(0.5f)}, name);
}

std::string attention(OnnxBuilder& b, const std::string& name, const std::string& x, const std::string& kv,
                      const std::string& mask, const AttentionSpec& s) {
  const std::int64_t head_dim = s.d / s.heads;
  std::string q, k, v;
  if (s.fused_qkv) {
    const auto qkv = linear(b, name + ".qkv", x, s.d, 3 * s.d);
    const auto parts =
        b.node("Split", {qkv, b.shape({s.d, s.d, s.d})}, {attr("axis", std::int64_t{-1})}, 3, name + ".split");
    q = parts[0];
    k = parts[1];
    v = parts[2];
  } else {
    const auto& source = kv.empty() ? x : kv;
    q = linear(b, name + ".q", x, s.d, s.d);
    k = linear(b, name + ".k", source, s.d, s.d);
    v = linear(b, name + ".v", source, s.d, s.d);
  }
  // [batch, len, d] -> [batch, heads, len, head_dim]; keys transposed once to [.., head_dim, len].
  const auto heads = [&](const std::string& t, std::int64_t len, const std::string& tag, const Dims& perm) {
    const auto r = b.op("Reshape", {t, b.shape({s.batch, len, s.heads, head_dim})}, name + "." + tag + ".split_heads");
    return b.op("Transpose", {r}, name + "." + tag + ".transpose", {attr("perm", perm)});
  };
  const auto qh = heads(q, s.q_len, "q", {0, 2, 1, 3});
  const auto kh = heads(k, s.kv_len, "k", {0, 2, 3, 1});
  const auto vh = heads(v, s.kv_len, "v", {0, 2, 1, 3});
  auto scores = b.op("MatMul", {qh, kh}, name + ".scores");
  scores = b.op("Mul", {scores, b.float_scalar(1.0f / std::sqrt(static_cast<float>(head_dim)))}, name + ".scale");
  if (!mask.empty())
    scores = b.op("Add", {scores, mask}, name + ".mask");
  const auto probs = b.op("Softmax", {scores}, name + ".softmax", {attr("axis", std::int64_t{-1})});
  const auto context = b.op("MatMul", {probs, vh}, name + ".context");
  const auto merged = b.op("Transpose", {context}, name + ".context.transpose", {attr("perm", Dims{0, 2, 1, 3})});
  const auto flat = b.op("Reshape", {merged, b.shape({s.batch, s.q_len, s.d})}, name + ".merge_heads");
  return linear(b, name + ".proj", flat, s.d, s.d);
}

std::string causal_mask(OnnxBuilder& b, const std::string& name, const std::string& positions) {
  const auto column = b.op("Unsqueeze", {positions, b.shape({1})}, name + ".column");
  const auto future = b.op("Greater", {positions, column}, name + ".future"); // key j > query i
  const auto as_float =
      b.op("Cast", {future}, name + ".cast", {attr("to", static_cast<std::int64_t>(onnx::TensorProto::FLOAT))});
  return b.op("Mul", {as_float, b.float_scalar(-10000.0f)}, name);
}

std::string lstm(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t seq, std::int64_t batch,
                 std::int64_t in, std::int64_t hidden, bool bidirectional) {
  const std::int64_t dirs = bidirectional ? 2 : 1;
  // ONNX gate order iofc; B holds the input and the recurrent biases (as PyTorch's b_ih, b_hh).
  const auto w = b.weight(name + ".W", {dirs, 4 * hidden, in});
  const auto r = b.weight(name + ".R", {dirs, 4 * hidden, hidden});
  const auto bias = b.weight(name + ".B", {dirs, 8 * hidden});
  std::vector<onnx::AttributeProto> attributes{attr("hidden_size", hidden)};
  if (bidirectional)
    attributes.push_back(attr("direction", std::string("bidirectional")));
  const auto y = b.node("LSTM", {x, w, r, bias}, attributes, 1, name).front(); // Y [seq, dirs, batch, hidden]
  if (!bidirectional)
    return b.op("Squeeze", {y, b.shape({1})}, name + ".squeeze");
  const auto t = b.op("Transpose", {y}, name + ".transpose", {attr("perm", Dims{0, 2, 1, 3})});
  return b.op("Reshape", {t, b.shape({seq, batch, dirs * hidden})}, name + ".concat_directions");
}

Dims iota(std::int64_t n) {
  Dims v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = i;
  return v;
}

} // namespace partita::zoo::detail
