#include "onnx/shape_resolution.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

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

bool fully_known(const onnx::TypeProto& t) {
  if (!t.has_tensor_type() || !t.tensor_type().has_shape()) {
    return false;
  }
  for (const auto& d : t.tensor_type().shape().dim()) {
    if (!d.has_dim_value()) {
      return false;
    }
  }
  return true;
}

} // namespace

ShapeResolution resolve_shapes(onnx::ModelProto& model, std::string_view source, const ImportOptions& options,
                               std::vector<std::string>& warnings) {
  onnx::GraphProto& g = *model.mutable_graph();
  std::set<std::string> initializers;
  for (const auto& i : g.initializer()) {
    initializers.insert(i.name());
  }

  // Symbolic dimensions of the graph inputs must all have values.
  std::vector<Unresolved> unresolved;
  std::set<std::string> used;
  for (auto& in : *g.mutable_input()) {
    if (initializers.count(in.name()) != 0) {
      continue;
    }
    if (!in.type().has_tensor_type()) {
      throw Error(fmt::format("{}: graph input '{}' is not a tensor (sequences and maps are not supported)", source, in.name()));
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
  const auto* registry = onnx::OpSchemaRegistry::Instance();
  // Each round infers what it can; ops ONNX has no schema for then get their first input's type
  // and the next round continues past them.
  for (int round = 0; round < 16; ++round) {
    std::unordered_map<std::string, onnx::TensorShapeProto> generated;
    try {
      onnx::shape_inference::InferShapes(model, registry, onnx::ShapeInferenceOptions(false, 0, true), &generated);
    } catch (const std::exception& e) {
      throw Error(fmt::format("{}: shape inference failed: {}", source, e.what()));
    }
    r.types.clear();
    for (const auto* list : {&g.input(), &g.value_info(), &g.output()}) {
      for (const auto& v : *list) {
        if (v.has_type()) {
          r.types[v.name()] = v.type();
        }
      }
    }
    for (const auto& init : g.initializer()) {
      onnx::TypeProto t;
      t.mutable_tensor_type()->set_elem_type(init.data_type());
      auto* shape = t.mutable_tensor_type()->mutable_shape();
      for (auto d : init.dims()) {
        shape->add_dim()->set_dim_value(d);
      }
      r.types[init.name()] = t;
    }
    for (const auto& [name, shape] : generated) {
      std::vector<std::int64_t> values;
      for (const auto& d : shape.dim()) {
        if (!d.has_dim_value()) {
          values.clear();
          break;
        }
        values.push_back(d.dim_value());
      }
      if (static_cast<int>(values.size()) == shape.dim_size()) {
        r.values[name] = std::move(values);
      }
    }
    bool progressed = false;
    for (const auto& node : g.node()) {
      const auto domain_it = opsets.find(node.domain() == "ai.onnx" ? "" : node.domain());
      const int version = domain_it == opsets.end() ? 1 : domain_it->second;
      if (registry->GetSchema(node.op_type(), version, node.domain() == "ai.onnx" ? "" : node.domain()) != nullptr) {
        continue;
      }
      if (node.input_size() == 0 || node.input(0).empty()) {
        continue;
      }
      auto in = r.types.find(node.input(0));
      if (in == r.types.end() || !fully_known(in->second)) {
        continue;
      }
      for (const auto& out : node.output()) {
        if (out.empty()) {
          continue;
        }
        auto known = r.types.find(out);
        if (known != r.types.end() && fully_known(known->second)) {
          continue;
        }
        auto* v = g.add_value_info();
        v->set_name(out);
        *v->mutable_type() = in->second;
        r.types[out] = in->second;
        progressed = true;
        warnings.push_back(fmt::format("node '{}' ({}{}) is unknown to ONNX shape inference: output '{}' is assumed to "
                                       "have the shape of input '{}'",
                                       node.name(), node.domain().empty() ? "" : node.domain() + ".", node.op_type(),
                                       out, node.input(0)));
      }
    }
    if (!progressed) {
      break;
    }
  }
  return r;
}

} // namespace partita::onnx_import::detail
