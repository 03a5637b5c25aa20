#pragma once

#include "partita/graph/types.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace partita::graph {

using TensorId = std::int32_t;
using OpId = std::int32_t;
inline constexpr TensorId no_tensor = -1; // an omitted optional input

struct Tensor {
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
  TensorRole role = TensorRole::activation;
  OpId producer = -1;
  std::vector<OpId> consumers;
  // Known integer contents (small int tensors needed for shape computation: Reshape targets,
  // Slice starts, ...). Empty when unknown or not an integer tensor.
  std::optional<std::vector<std::int64_t>> int_values;
  // Whether the backward pass computes a gradient for it (floating activations and parameters
  // only). mark_gradients (op_semantics.h; the importer calls it) clears it for values that
  // depend on no parameter: data, constants and what is computed from them alone (a causal mask).
  bool gradient = true;
  // The same in every micro-batch and iteration: a constant, a value known at import (int_values:
  // a Shape of the data), or computed from such alone (a causal mask, a scale made by a Constant
  // op, a mask built from the input's Shape). Set by mark_gradients; false until then.
  bool fixed = false;
  // An integer tensor holding quantized values (an 8-bit weight of ONNX Runtime's quantizer, the
  // output of a quantize op or of ConvInteger/MatMulInteger): training treats it as a floating
  // value at the set-up's precision (trains_as_float). Set by mark_gradients.
  bool quantized = false;

  std::int64_t elements() const;
  std::int64_t bytes() const;
};

using Attribute = std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>, std::vector<double>,
                               std::vector<std::string>>;

struct Op {
  std::string name;
  std::string type;              // ONNX op type, e.g. "Conv"
  std::string domain;            // "" for the default ONNX domain
  std::vector<TensorId> inputs;  // no_tensor for an omitted optional input
  std::vector<TensorId> outputs; // no_tensor for an omitted optional output
  std::map<std::string, Attribute> attrs;
  // Set when the importer kept the op without understanding it (unknown type, nested subgraph).
  std::string opaque_reason;

  std::int64_t attr_int(const std::string& key, std::int64_t fallback) const;
  double attr_float(const std::string& key, double fallback) const;
  std::string attr_string(const std::string& key, const std::string& fallback) const;
  std::vector<std::int64_t> attr_ints(const std::string& key, std::vector<std::int64_t> fallback = {}) const;
  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
};

// A plain, cheap-to-copy dataflow graph. Ops and tensors are addressed by index.
class Graph {
public:
  std::string name;

  TensorId add_tensor(Tensor t);
  OpId add_op(Op op);                                  // wires producer/consumer links of the op's tensors
  TensorId find_tensor(const std::string& name) const; // no_tensor if absent

  const std::vector<Tensor>& tensors() const { return m_tensors; }
  const std::vector<Op>& ops() const { return m_ops; }
  Tensor& tensor(TensorId id) { return m_tensors.at(static_cast<std::size_t>(id)); }
  const Tensor& tensor(TensorId id) const { return m_tensors.at(static_cast<std::size_t>(id)); }
  Op& op(OpId id) { return m_ops.at(static_cast<std::size_t>(id)); }
  const Op& op(OpId id) const { return m_ops.at(static_cast<std::size_t>(id)); }

  std::vector<TensorId> graph_inputs; // data inputs (role input)
  std::vector<TensorId> graph_outputs;
  bool is_graph_output(TensorId t) const;

  // Ops in a topological order (Boost.Graph). Throws partita::Error naming ops on a cycle.
  std::vector<OpId> topological_order() const;

  // Checks links, that every op input is produced or is an input/parameter/constant, and
  // shapes (no negative dims, no zero dims in float tensors, no int64 overflow). Throws partita::Error naming the
  // node and tensor.
  void validate() const;

private:
  std::vector<Tensor> m_tensors;
  std::vector<Op> m_ops;
  std::map<std::string, TensorId> m_by_name;
};

} // namespace partita::graph
