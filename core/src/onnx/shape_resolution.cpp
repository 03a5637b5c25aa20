#include "onnx/shape_resolution.h"

#include "onnx/node_inference.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <map>
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

  // Symbolic dimensions of the graph inputs must all have values.
  std::vector<Unresolved> unresolved;
  std::set<std::string> used;
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
    int index = 0;
    for (auto& d : *in.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      if (d.has_dim_param()) {
        auto it = options.dims.find(d.dim_param());
        if (it != options.dims.end()) {
          used.insert(d.dim_param());
          d.set_dim_value(it->second);
        } else {
          unresolved.push_back({d.dim_param(), in.name(), index});
        }
      } else if (!d.has_dim_value()) {
        unresolved.push_back({"?", in.name(), index});
      } else if (d.dim_value() < 0 || (d.dim_value() == 0 && is_float(in.type().tensor_type().elem_type()))) {
        throw Error(fmt::format("{}: graph input '{}': dimension {} is {}, not positive", source, in.name(), index,
                                d.dim_value()));
      }
      ++index;
    }
  }
  if (!unresolved.empty()) {
    std::vector<std::string> parts;
    for (const auto& u : unresolved) {
      parts.push_back(u.param == "?" ? fmt::format("an unnamed dimension (input '{}' dim {})", u.value, u.dim)
                                     : fmt::format("{} (input '{}' dim {})", u.param, u.value, u.dim));
    }
    throw Error(fmt::format("{}: symbolic dimensions without a value: {}; give each with --dim NAME=VALUE", source,
                            fmt::join(parts, ", ")));
  }
  for (const auto& [name, value] : options.dims) {
    if (value <= 0) {
      throw Error(fmt::format("{}: --dim {}={} is not positive", source, name, value));
    }
    if (used.count(name) == 0) {
      warnings.push_back(fmt::format("--dim {} names no symbolic dimension of the model's inputs", name));
    }
  }
  for (auto& v : *g.mutable_value_info()) {
    substitute(v, options.dims);
  }
  for (auto& v : *g.mutable_output()) {
    substitute(v, options.dims);
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
