#include "partita/graph/op_semantics.h"

#include "graph/op_helpers.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace partita::graph {

std::string_view op_class_name(OpClass c) {
  switch (c) {
  case OpClass::contraction: return "contraction";
  case OpClass::convolution: return "convolution";
  case OpClass::elementwise: return "elementwise";
  case OpClass::normalization: return "normalization";
  case OpClass::softmax: return "softmax";
  case OpClass::pooling: return "pooling";
  case OpClass::reduction: return "reduction";
  case OpClass::recurrent: return "recurrent";
  case OpClass::embedding: return "embedding";
  case OpClass::data_movement: return "data_movement";
  case OpClass::shape: return "shape";
  case OpClass::opaque: return "opaque";
  }
  return "opaque";
}

std::string_view kernel_class_name(KernelClass c) {
  switch (c) {
  case KernelClass::eltwise: return "eltwise";
  case KernelClass::transcendental: return "transcendental";
  case KernelClass::reduction: return "reduction";
  case KernelClass::normalization: return "normalization";
  case KernelClass::gather: return "gather";
  case KernelClass::copy: return "copy";
  case KernelClass::transpose: return "transpose";
  case KernelClass::optimizer: return "optimizer";
  case KernelClass::transcendental_backward: return "transcendental_backward";
  case KernelClass::normalization_backward: return "normalization_backward";
  case KernelClass::softmax: return "softmax";
  case KernelClass::accumulate: return "accumulate";
  case KernelClass::activation_backward: return "activation_backward";
  }
  return "eltwise";
}

KernelClass kernel_class_fallback(KernelClass c) {
  switch (c) {
  case KernelClass::transpose: return KernelClass::copy; // files from before it were timed as copies
  case KernelClass::transcendental_backward: return KernelClass::transcendental;
  case KernelClass::normalization_backward:
  case KernelClass::softmax: return KernelClass::normalization;
  case KernelClass::accumulate:
  case KernelClass::activation_backward: return KernelClass::eltwise;
  default: return c;
  }
}

std::vector<KernelClass> all_kernel_classes() {
  return {KernelClass::eltwise,
          KernelClass::transcendental,
          KernelClass::reduction,
          KernelClass::normalization,
          KernelClass::gather,
          KernelClass::copy,
          KernelClass::transpose,
          KernelClass::optimizer,
          KernelClass::transcendental_backward,
          KernelClass::normalization_backward,
          KernelClass::softmax,
          KernelClass::accumulate,
          KernelClass::activation_backward};
}

std::optional<KernelClass> parse_kernel_class(std::string_view name) {
  for (const auto c : all_kernel_classes()) {
    if (kernel_class_name(c) == name) {
      return c;
    }
  }
  return std::nullopt;
}

std::string_view compute_class_name(ComputeClass c) {
  switch (c) {
  case ComputeClass::matmul: return "matmul";
  case ComputeClass::convolution: return "convolution";
  case ComputeClass::recurrent: return "recurrent";
  case ComputeClass::matmul_backward: return "matmul_backward";
  case ComputeClass::matmul_batched_backward: return "matmul_batched_backward";
  }
  return "matmul";
}

std::vector<ComputeClass> all_compute_classes() {
  return {ComputeClass::matmul, ComputeClass::convolution, ComputeClass::recurrent, ComputeClass::matmul_backward,
          ComputeClass::matmul_batched_backward};
}

std::optional<ComputeClass> parse_compute_class(std::string_view name) {
  for (const auto c : all_compute_classes()) {
    if (compute_class_name(c) == name) {
      return c;
    }
  }
  return std::nullopt;
}

int OpSemantics::find_dim(std::string_view dim_name) const {
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i].name == dim_name) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

double OpSemantics::iteration_points() const {
  double p = 1;
  for (const IterDim& d : dims) {
    p *= static_cast<double>(d.size);
  }
  return p;
}

bool backward_reads_input(const Graph& g, const Op& op, const OpSemantics& s, std::size_t j) {
  if (!s.backward_reads_inputs || j >= op.inputs.size() || op.inputs[j] == no_tensor) {
    return false;
  }
  const auto carries = [&](std::size_t k) {
    return op.inputs[k] != no_tensor && gets_gradient(g.tensor(op.inputs[k]));
  };
  bool others = false, any = false;
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    others = others || (k != j && carries(k));
    any = any || carries(k);
  }
  if (s.op_class == OpClass::contraction || s.op_class == OpClass::convolution ||
      (s.op_class == OpClass::elementwise && op.type == "Mul")) {
    return others; // d(a b)/da = b: an operand is read for the other's gradient
  }
  if (s.op_class == OpClass::elementwise && op.type == "Div" && j == 0) {
    return others; // d(a/b)/da = 1/b: the numerator only for the denominator's gradient
  }
  return any;
}

namespace {

const std::map<std::string_view, const OpDescriptor*>& registry() {
  static const auto table = [] {
    std::map<std::string_view, const OpDescriptor*> m;
    for (auto family : {detail::contraction_ops(), detail::convolution_ops(), detail::elementwise_ops(),
                        detail::normalization_ops(), detail::pooling_ops(), detail::recurrent_ops(),
                        detail::movement_ops(), detail::shape_ops(), detail::quantized_ops()}) {
      for (const OpDescriptor& d : family) {
        m.emplace(d.type, &d);
      }
    }
    return m;
  }();
  return table;
}

double tensor_bytes(const Graph& g, TensorId id) {
  return id == no_tensor ? 0.0 : static_cast<double>(g.tensor(id).bytes());
}

void fill_bytes(const Op& op, const Graph& g, OpSemantics& s) {
  if (s.op_class == OpClass::shape) {
    return; // views and metadata: no data moves
  }
  // An input read by index (a gather's table) gives up at most as many bytes as the op writes.
  double written = 0;
  for (TensorId t : op.outputs) {
    written += tensor_bytes(g, t);
  }
  const auto read = [&](std::size_t i) {
    const double b = tensor_bytes(g, op.inputs[i]);
    return i < s.inputs.size() && s.inputs[i].read_by_index ? std::min(b, written) : b;
  };
  const bool described = s.fwd_bytes_read != 0 || s.fwd_bytes_written != 0; // by the op's own description
  if (!described) {
    s.fwd_bytes_written = written;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      s.fwd_bytes_read += read(i);
    }
  }
  if (s.bwd_bytes == 0) {
    // Backward reads the output gradient and the saved inputs its gradients need
    // (backward_reads_input), and writes input gradients.
    double grads = 0;
    for (TensorId t : op.inputs) {
      if (t != no_tensor && gets_gradient(g.tensor(t))) {
        grads += tensor_bytes(g, t);
      }
    }
    if (grads > 0) {
      double inputs = 0;
      if (s.backward_reads_inputs && s.op_class != OpClass::data_movement) {
        if (described) {
          inputs = s.fwd_bytes_read;
        } else {
          for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            inputs += backward_reads_input(g, op, s, i) ? read(i) : 0.0;
          }
        }
      }
      s.bwd_bytes = inputs + s.fwd_bytes_written + grads;
    }
  }
}

void describe_opaque(const Op& op, const Graph& g, OpSemantics& s, std::string reason) {
  s = OpSemantics{};
  s.op_class = OpClass::opaque;
  s.opaque_reason = std::move(reason);
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    TensorAccess a{op.inputs[i], {}};
    if (op.inputs[i] != no_tensor) {
      a.dims.assign(g.tensor(op.inputs[i]).shape.size(), -1);
    }
    s.inputs.push_back(std::move(a));
    s.slots.push_back(InputSlot::data);
  }
  double out_elems = 0;
  for (TensorId t : op.outputs) {
    if (t == no_tensor) {
      s.outputs.push_back(TensorAccess{});
      continue;
    }
    s.outputs.push_back(TensorAccess{t, std::vector<int>(g.tensor(t).shape.size(), -1)});
    out_elems += static_cast<double>(g.tensor(t).elements());
  }
  // An op of a foreign domain (com.microsoft, ai.onnx.ml) is named, not guessed at: 0 FLOPs.
  const bool foreign = !op.domain.empty() && op.domain != "ai.onnx";
  s.fwd_flops = foreign ? 0.0 : out_elems;
  bool any_grad = std::any_of(op.inputs.begin(), op.inputs.end(),
                              [&](TensorId t) { return t != no_tensor && gets_gradient(g.tensor(t)); });
  s.bwd_data_flops = any_grad && !foreign ? 2 * out_elems : 0;
  fill_bytes(op, g, s);
}

// Before the description runs (`defaults`): the families (memory-bound and compute) that follow
// from the op's class. After:
// an element-wise op that broadcasts a float input (a bias) reduces its gradient over the
// broadcast dims, so its backward pass is a reduction.
void set_kernel_classes(const Graph& g, const Op& op, OpSemantics& s, bool defaults) {
  if (defaults) {
    KernelClass k = KernelClass::eltwise;
    switch (s.op_class) {
    case OpClass::normalization: k = KernelClass::normalization; break;
    case OpClass::softmax: k = KernelClass::softmax; break;
    case OpClass::reduction: k = KernelClass::reduction; break;
    case OpClass::embedding: k = KernelClass::gather; break;
    case OpClass::data_movement:
      k = op.type.starts_with("Gather") || op.type.starts_with("Scatter") ? KernelClass::gather : KernelClass::copy;
      break;
    default: break;
    }
    s.forward_kernel = s.backward_kernel = k;
    if (k == KernelClass::normalization) { // the backward pass is a kernel of its own
      s.backward_kernel = KernelClass::normalization_backward;
    }
    s.compute_class = s.op_class == OpClass::convolution ? ComputeClass::convolution
                      : s.op_class == OpClass::recurrent ? ComputeClass::recurrent
                                                         : ComputeClass::matmul;
    return;
  }
  if (s.op_class != OpClass::elementwise || s.backward_kernel != KernelClass::eltwise) {
    return;
  }
  // Each broadcast input that gets a gradient is a reduction kernel of its own (read the output
  // gradient, write the input's); the rest of the backward pass (the full-size input gradients)
  // stays element-wise.
  double output_gradient = 0;
  for (const TensorId t : op.outputs) {
    output_gradient += tensor_bytes(g, t);
  }
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    const auto& a = s.inputs[i];
    if (a.tensor == no_tensor || (i < s.slots.size() && s.slots[i] == InputSlot::index)) {
      continue;
    }
    // Only an input that gets a gradient (a weight, or an activation computed from one) has its
    // broadcast summed in the backward pass; a broadcast constant (a scale, a causal mask) gets none.
    const Tensor& t = g.tensor(a.tensor);
    if (!gets_gradient(t)) {
      continue;
    }
    std::vector<bool> indexed(s.dims.size(), false);
    for (const int d : a.dims) {
      if (d >= 0) {
        indexed[static_cast<std::size_t>(d)] = true;
      }
    }
    for (std::size_t d = 0; d < s.dims.size(); ++d) {
      if (!indexed[d] && s.dims[d].size > 1) {
        s.backward_reduction_bytes += output_gradient + tensor_bytes(g, a.tensor);
        break;
      }
    }
  }
  s.backward_reduction_bytes = std::min(s.backward_reduction_bytes, s.bwd_bytes);
  if (s.backward_reduction_bytes > 0 && s.backward_reduction_bytes >= s.bwd_bytes) {
    s.backward_kernel = KernelClass::reduction; // the whole backward pass reduces
    s.backward_reduction_bytes = 0;
  }
}

} // namespace

const OpDescriptor* find_descriptor(std::string_view type) {
  // Hashed: the searches look up every op's descriptor many times over.
  static const std::unordered_map<std::string_view, const OpDescriptor*> hashed(registry().begin(), registry().end());
  auto it = hashed.find(type);
  return it == hashed.end() ? nullptr : it->second;
}

std::vector<std::string_view> known_op_types() {
  std::vector<std::string_view> out;
  for (const auto& [name, d] : registry()) {
    out.push_back(name);
  }
  return out;
}

InputSlot input_slot(const Op& op, std::size_t i) {
  const OpDescriptor* d = op.domain.empty() || op.domain == "ai.onnx" ? find_descriptor(op.type) : nullptr;
  if (d == nullptr || d->slots.empty()) {
    return InputSlot::data;
  }
  return i < d->slots.size() ? d->slots[i] : d->slots.back();
}

bool gets_gradient(const Tensor& t) {
  return trains_as_float(t) && (t.role == TensorRole::activation || t.role == TensorRole::parameter) && t.gradient;
}

bool trains_as_float(const Tensor& t) {
  return is_floating(t.dtype) || t.quantized;
}

void mark_gradients(Graph& g) {
  for (TensorId t = 0; t < static_cast<TensorId>(g.tensors().size()); ++t) {
    auto& tensor = g.tensor(t);
    tensor.quantized = tensor.role == TensorRole::parameter && (tensor.dtype == DType::i8 || tensor.dtype == DType::u8);
  }
  for (const Op& op : g.ops()) {
    if (quantizes_output(op) && !op.outputs.empty() && op.outputs.front() != no_tensor) {
      auto& out = g.tensor(op.outputs.front());
      out.quantized = !is_floating(out.dtype);
    }
  }
  // Fixed: constants; values the importer computed (int_values: a Shape of the data, and what is
  // computed from shapes, are the same in every micro-batch); and outputs of understood ops whose
  // inputs are all fixed (a Constant op has none). Outputs start fixed and lose it below when an
  // input is not; no op draws random values.
  for (TensorId t = 0; t < static_cast<TensorId>(g.tensors().size()); ++t) {
    auto& tensor = g.tensor(t);
    const bool known = tensor.int_values.has_value();
    tensor.fixed = tensor.producer < 0 ? tensor.role == TensorRole::constant || known
                                       : g.op(tensor.producer).opaque_reason.empty() || known;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (const Op& op : g.ops()) {
      bool fixed = true;
      for (const TensorId in : op.inputs) {
        fixed = fixed && (in == no_tensor || g.tensor(in).fixed);
      }
      for (const TensorId out : op.outputs) {
        if (!fixed && out != no_tensor && g.tensor(out).fixed && !g.tensor(out).int_values) {
          g.tensor(out).fixed = false;
          changed = true;
        }
      }
    }
  }
  for (TensorId t = 0; t < static_cast<TensorId>(g.tensors().size()); ++t) {
    auto& tensor = g.tensor(t);
    // A produced activation starts without and gains one from its producer's inputs below.
    tensor.gradient =
        tensor.role == TensorRole::parameter || (tensor.role == TensorRole::activation && tensor.producer < 0);
  }
  // Gradients only ever get switched on, so passes over the ops until nothing changes reach the
  // same answer as one pass in topological order (and take one pass when the file is in order, as
  // ONNX requires): no sort on every import.
  for (bool changed = true; changed;) {
    changed = false;
    for (const Op& op : g.ops()) {
      bool flows = false;
      for (std::size_t i = 0; i < op.inputs.size() && !flows; ++i) {
        const InputSlot slot = input_slot(op, i);
        flows = op.inputs[i] != no_tensor && slot != InputSlot::index && slot != InputSlot::state &&
                gets_gradient(g.tensor(op.inputs[i]));
      }
      for (const TensorId out : op.outputs) {
        if (flows && out != no_tensor && !g.tensor(out).gradient) {
          g.tensor(out).gradient = true;
          changed = true;
        }
      }
    }
  }
}

OpSemantics describe(const Graph& g, OpId id) {
  const Op& op = g.op(id);
  OpSemantics s;
  if (!op.opaque_reason.empty()) {
    describe_opaque(op, g, s, op.opaque_reason);
    return s;
  }
  const OpDescriptor* d = op.domain.empty() || op.domain == "ai.onnx" ? find_descriptor(op.type) : nullptr;
  if (d == nullptr) {
    describe_opaque(op, g, s,
                    op.domain.empty()
                        ? fmt::format("unknown op type '{}'", op.type)
                        : fmt::format("op type '{}' of domain '{}' is not described", op.type, op.domain));
    return s;
  }
  try {
    s.op_class = d->op_class;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      s.slots.push_back(input_slot(op, i));
    }
    s.inputs.resize(op.inputs.size());
    s.outputs.resize(op.outputs.size());
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      s.inputs[i].tensor = op.inputs[i];
    }
    for (std::size_t i = 0; i < op.outputs.size(); ++i) {
      s.outputs[i].tensor = op.outputs[i];
    }
    set_kernel_classes(g, op, s, true);
    d->describe(op, g, s);
    // Anything the description left unmapped is read whole.
    for (auto* list : {&s.inputs, &s.outputs}) {
      for (TensorAccess& a : *list) {
        if (a.tensor != no_tensor && a.dims.size() != g.tensor(a.tensor).shape.size()) {
          a.dims.assign(g.tensor(a.tensor).shape.size(), -1);
        }
      }
    }
    fill_bytes(op, g, s);
    set_kernel_classes(g, op, s, false);
  } catch (const Error& e) {
    describe_opaque(op, g, s, e.what());
  }
  return s;
}

} // namespace partita::graph
