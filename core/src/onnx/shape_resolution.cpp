#include "onnx/shape_resolution.h"

#include "onnx/const_tensor.h"
#include "onnx/node_inference.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <climits>
#include <cstdint>
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

// The user's --value contents: each named graph input becomes an initializer holding them, so
// that what is computed from it folds. Only integer and boolean inputs: settings (a sample rate,
// a flag, a length), never data a network computes on.
void apply_values(onnx::GraphProto& g, std::string_view source, const ImportOptions& options) {
  if (options.values.empty()) {
    return;
  }
  std::set<std::string> initializers;
  for (const auto& i : g.initializer()) {
    initializers.insert(i.name());
  }
  std::vector<std::string> names;
  for (const auto& in : g.input()) {
    if (initializers.count(in.name()) == 0) {
      names.push_back(fmt::format("'{}'", in.name()));
    }
  }
  struct Range {
    int type;
    const char* name;
    std::int64_t lo, hi;
  };
  static const Range ranges[] = {
      {onnx::TensorProto::BOOL, "bool", 0, 1},
      {onnx::TensorProto::INT8, "int8", -128, 127},
      {onnx::TensorProto::UINT8, "uint8", 0, 255},
      {onnx::TensorProto::INT16, "int16", -32768, 32767},
      {onnx::TensorProto::UINT16, "uint16", 0, 65535},
      {onnx::TensorProto::INT32, "int32", INT32_MIN, INT32_MAX},
      {onnx::TensorProto::UINT32, "uint32", 0, UINT32_MAX},
      {onnx::TensorProto::INT64, "int64", INT64_MIN, INT64_MAX},
      {onnx::TensorProto::UINT64, "uint64", 0, INT64_MAX},
  };
  for (const auto& [name, values] : options.values) {
    const std::string flag = "--value " + format_value(name, values);
    const onnx::ValueInfoProto* in = nullptr;
    for (const auto& i : g.input()) {
      if (i.name() == name && initializers.count(name) == 0) {
        in = &i;
      }
    }
    if (in == nullptr) {
      throw Error(fmt::format("{}: {}: the model has no input '{}'{} (its inputs: {})", source, flag, name,
                              initializers.count(name) != 0 ? " that is not an initializer" : "",
                              fmt::join(names, ", ")));
    }
    if (!in->type().has_tensor_type() || !in->type().tensor_type().has_shape()) {
      throw Error(fmt::format("{}: {}: input '{}' is not a tensor with a shape", source, flag, name));
    }
    const auto& tt = in->type().tensor_type();
    const Range* range = nullptr;
    for (const auto& r : ranges) {
      if (r.type == tt.elem_type()) {
        range = &r;
      }
    }
    if (range == nullptr) {
      throw Error(fmt::format("{}: {}: input '{}' holds {}; --value fixes integer and boolean inputs (settings such "
                              "as a sample rate, a flag or a length), not data the network computes on",
                              source, flag, name, onnx::TensorProto::DataType_Name(tt.elem_type())));
    }
    const auto& shape = tt.shape();
    std::vector<std::int64_t> dims;
    std::int64_t count = 1;
    for (int d = 0; d < shape.dim_size(); ++d) {
      std::int64_t size = shape.dim(d).has_dim_value() ? shape.dim(d).dim_value() : -1;
      if (size < 0 && shape.dim_size() == 1) {
        size = static_cast<std::int64_t>(values.size()); // a list of dynamic length: as long as given
      }
      if (size < 0) {
        throw Error(fmt::format("{}: {}: input '{}' axis {} is dynamic; --value takes inputs of fixed shape, or of "
                                "rank 1",
                                source, flag, name, d));
      }
      dims.push_back(size);
      count *= size;
    }
    if (count != static_cast<std::int64_t>(values.size())) {
      throw Error(fmt::format("{}: {}: input '{}' of shape [{}] holds {} value(s), {} given", source, flag, name,
                              fmt::join(dims, ", "), count, values.size()));
    }
    for (const auto v : values) {
      if (v < range->lo || v > range->hi) {
        throw Error(fmt::format("{}: {}: {} does not fit input '{}', which is {} ({} to {})", source, flag, v, name,
                                range->name, range->lo, range->hi));
      }
    }
    ConstTensor contents;
    contents.elem_type = tt.elem_type();
    contents.dims = dims;
    contents.ints = values;
    *g.add_initializer() = to_proto(contents, name);
    initializers.insert(name);
  }
}

} // namespace

ShapeResolution resolve_shapes(onnx::ModelProto& model, std::string_view source, const ImportOptions& options,
                               std::vector<std::string>& warnings) {
  onnx::GraphProto& g = *model.mutable_graph();
  apply_values(g, source, options);
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
  r.named_dims = named;
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
