#include "onnx/shape_resolution.h"

#include "onnx/node_inference.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>

namespace partita::onnx_import::detail {
namespace {

// The highest default-domain opset libonnx 1.12's schemas describe.
constexpr std::int64_t inference_max_opset = 17;

struct Unresolved {
  std::string param;
  std::string value;
  int dim;
};

void substitute(onnx::ValueInfoProto& v, const std::map<std::string, std::int64_t>& dims) {
  if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) {
    return;
  }
  for (auto& d : *v.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
    if (d.has_dim_param()) {
      auto it = dims.find(d.dim_param());
      if (it != dims.end()) {
        d.set_dim_value(it->second);
      }
    }
  }
}

bool is_float(int elem) {
  return elem == onnx::TensorProto::FLOAT || elem == onnx::TensorProto::DOUBLE || elem == onnx::TensorProto::FLOAT16 ||
         elem == onnx::TensorProto::BFLOAT16;
}

} // namespace

ShapeResolution resolve_shapes(onnx::ModelProto& model, std::string_view source, const ImportOptions& options,
                               std::vector<std::string>& warnings) {
  onnx::GraphProto& g = *model.mutable_graph();
  std::set<std::string> initializers;
  for (const auto& i : g.initializer()) {
    initializers.insert(i.name());
    for (auto d : i.dims()) {
      if (d < 0) {
        throw Error(fmt::format("{}: initializer '{}': dimension {} is negative", source, i.name(), d));
      }
    }
  }

  // Dynamic dimensions of the graph inputs must all have values: by name (dim_param), by
  // INPUT:AXIS, or through "batch" for axis 0.
  std::map<std::string, onnx::ValueInfoProto*> inputs;
  std::set<std::string> params;
  std::vector<std::string> input_names;
  for (auto& in : *g.mutable_input()) {
    if (initializers.count(in.name()) != 0) {
      continue;
    }
    if (!in.type().has_tensor_type()) {
      throw Error(fmt::format("{}: graph input '{}' is not a tensor (sequences and maps are not supported)", source,
                              in.name()));
    }
    if (!in.type().tensor_type().has_shape()) {
      throw Error(fmt::format("{}: graph input '{}' has no shape", source, in.name()));
    }
    inputs[in.name()] = &in;
    input_names.push_back(fmt::format("'{}'", in.name()));
    for (const auto& d : in.type().tensor_type().shape().dim()) {
      if (d.has_dim_param()) {
        params.insert(d.dim_param());
      }
    }
  }
  std::map<std::string, std::int64_t> named; // dim_param -> value, for value_info and outputs too
  std::map<std::pair<std::string, int>, std::int64_t> by_axis;
  std::set<std::string> used;
  for (const auto& [key, value] : options.dims) {
    if (value <= 0) {
      throw Error(fmt::format("{}: --dim {}={} is not positive", source, key, value));
    }
    const auto axis = params.count(key) != 0 ? std::nullopt : axis_key(key);
    if (!axis) {
      named[key] = value;
      continue;
    }
    auto in = inputs.find(axis->input);
    if (in == inputs.end()) {
      throw Error(fmt::format("{}: --dim {}={}: the model has no input '{}' (its inputs: {})", source, key, value,
                              axis->input, fmt::join(input_names, ", ")));
    }
    const auto& shape = in->second->type().tensor_type().shape();
    if (axis->axis >= shape.dim_size()) {
      throw Error(fmt::format("{}: --dim {}={}: input '{}' has rank {}, so axis {} does not exist", source, key, value,
                              axis->input, shape.dim_size(), axis->axis));
    }
    const auto& d = shape.dim(static_cast<int>(axis->axis));
    if (d.has_dim_value()) {
      throw Error(fmt::format("{}: --dim {}={}: input '{}' axis {} is fixed at {} in the model, not dynamic", source,
                              key, value, axis->input, axis->axis, d.dim_value()));
    }
    by_axis[{axis->input, static_cast<int>(axis->axis)}] = value;
    used.insert(key);
  }
  // --batch for an export whose batch dimension is not called "batch": axis 0 of every input
  // whose axis 0 is dynamic.
  std::optional<std::int64_t> batch;
  if (auto it = named.find("batch"); it != named.end() && params.count("batch") == 0) {
    batch = it->second;
    named.erase(it);
  }
  std::vector<Unresolved> unresolved;
  for (auto& in : *g.mutable_input()) {
    if (inputs.count(in.name()) == 0) {
      continue;
    }
    int index = 0;
    for (auto& d : *in.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      const bool dynamic = d.has_dim_param() || !d.has_dim_value();
      if (auto it = by_axis.find({in.name(), index}); it != by_axis.end()) {
        d.set_dim_value(it->second);
      } else if (auto p = d.has_dim_param() ? named.find(d.dim_param()) : named.end(); p != named.end()) {
        used.insert(d.dim_param());
        d.set_dim_value(p->second);
      } else if (dynamic && index == 0 && batch) {
        used.insert("batch");
        if (d.has_dim_param()) {
          named[d.dim_param()] = *batch; // the same dimension elsewhere (value_info, outputs)
        }
        d.set_dim_value(*batch);
      } else if (dynamic) {
        unresolved.push_back({d.has_dim_param() ? d.dim_param() : "?", in.name(), index});
      } else if (d.dim_value() < 0 || (d.dim_value() == 0 && is_float(in.type().tensor_type().elem_type()))) {
        throw Error(fmt::format("{}: graph input '{}': dimension {} is {}, not positive", source, in.name(), index,
                                d.dim_value()));
      }
      ++index;
    }
  }
  if (!unresolved.empty()) {
    std::vector<std::string> parts;
    std::vector<std::string> flags;
    std::set<std::string> flagged;
    for (const auto& u : unresolved) {
      parts.push_back(u.param == "?" ? fmt::format("an unnamed dimension (input '{}' axis {})", u.value, u.dim)
                                     : fmt::format("{} (input '{}' axis {})", u.param, u.value, u.dim));
      const std::string flag =
          u.param == "?" ? fmt::format("--dim {}:{}=VALUE", u.value, u.dim) : fmt::format("--dim {}=VALUE", u.param);
      if (flagged.insert(flag).second) {
        flags.push_back(flag);
      }
    }
    throw Error(fmt::format("{}: symbolic dimensions without a value: {}; give each a value with {}", source,
                            fmt::join(parts, ", "), fmt::join(flags, " ")));
  }
  for (const auto& [name, value] : options.dims) {
    if (used.count(name) == 0) {
      warnings.push_back(fmt::format("--dim {} names no dynamic dimension of the model's inputs", name));
    }
  }
  for (auto& v : *g.mutable_value_info()) {
    substitute(v, named);
  }
  for (auto& v : *g.mutable_output()) {
    substitute(v, named);
  }

  std::int64_t opset = 0;
  std::unordered_map<std::string, int> opsets;
  for (const auto& o : model.opset_import()) {
    opsets[o.domain()] = static_cast<int>(o.version());
    if (o.domain().empty() || o.domain() == "ai.onnx") {
      opset = o.version();
    }
  }
  if (opset > inference_max_opset) {
    warnings.push_back(fmt::format("opset {} is newer than the shape inference of libonnx 1.12 (opset {}): shapes are "
                                   "inferred with the newest rules it has",
                                   opset, inference_max_opset));
  }

  ShapeResolution r;
  InferredValues inferred = infer_node_by_node(g, opsets, source, warnings);
  r.types = std::move(inferred.types);
  r.unknown_because = std::move(inferred.unknown_because);
  for (const auto& [name, shape] : inferred.generated) {
    std::vector<std::int64_t> values;
    for (const auto& d : shape.dim()) {
      if (!d.has_dim_value()) {
        break;
      }
      values.push_back(d.dim_value());
    }
    if (static_cast<int>(values.size()) == shape.dim_size()) {
      r.values[name] = std::move(values);
    }
  }
  for (auto& [name, value] : inferred.folded) {
    if (!value.is_float()) {
      r.values[name] = std::move(value.ints);
    }
  }
  return r;
}

} // namespace partita::onnx_import::detail
