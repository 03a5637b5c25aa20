#include "partita/onnx/import.h"

#include "onnx/const_tensor.h"
#include "onnx/interleave_projections.h"
#include "onnx/proto_reader.h"
#include "onnx/shape_resolution.h"
#include "partita/graph/error.h"
#include "partita/graph/op_semantics.h"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <unordered_map>

namespace partita::onnx_import {
namespace {

using graph::DType;
using graph::TensorRole;

DType to_dtype(int t) {
  switch (t) {
  case onnx::TensorProto::FLOAT: return DType::f32;
  case onnx::TensorProto::DOUBLE: return DType::f64;
  case onnx::TensorProto::FLOAT16: return DType::f16;
  case onnx::TensorProto::BFLOAT16: return DType::bf16;
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64: return DType::i64;
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32: return DType::i32;
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16: return DType::i16;
  case onnx::TensorProto::INT8: return DType::i8;
  case onnx::TensorProto::UINT8: return DType::u8;
  case onnx::TensorProto::BOOL: return DType::boolean;
  case onnx::TensorProto::STRING: return DType::string;
  default: return DType::unknown;
  }
}

bool is_integer(int t) {
  return t == onnx::TensorProto::INT64 || t == onnx::TensorProto::INT32 || t == onnx::TensorProto::INT16 ||
         t == onnx::TensorProto::INT8 || t == onnx::TensorProto::UINT8 || t == onnx::TensorProto::UINT16 ||
         t == onnx::TensorProto::UINT32 || t == onnx::TensorProto::UINT64;
}

// Integer contents of a small tensor, when they are stored inline.
std::optional<std::vector<std::int64_t>> int_values(const onnx::TensorProto& t, std::int64_t elements) {
  if (!is_integer(t.data_type()) || elements > 4096 || t.data_location() == onnx::TensorProto::EXTERNAL) {
    return std::nullopt;
  }
  std::vector<std::int64_t> v;
  if (t.int64_data_size() > 0) {
    v.assign(t.int64_data().begin(), t.int64_data().end());
  } else if (t.int32_data_size() > 0) {
    v.assign(t.int32_data().begin(), t.int32_data().end());
  } else if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    const auto width = static_cast<std::size_t>(graph::dtype_size(to_dtype(t.data_type())));
    if (width == 0 || raw.size() != width * static_cast<std::size_t>(elements)) {
      return std::nullopt;
    }
    const bool is_signed = t.data_type() != onnx::TensorProto::UINT8 && t.data_type() != onnx::TensorProto::UINT16 &&
                           t.data_type() != onnx::TensorProto::UINT32;
    for (std::size_t i = 0; i < raw.size(); i += width) {
      std::int64_t x = 0;
      if (width == 8) {
        std::memcpy(&x, raw.data() + i, 8);
      } else if (width == 4) {
        std::int32_t y = 0;
        std::uint32_t u = 0;
        std::memcpy(&y, raw.data() + i, 4);
        std::memcpy(&u, raw.data() + i, 4);
        x = is_signed ? y : static_cast<std::int64_t>(u);
      } else if (width == 2) {
        std::int16_t y = 0;
        std::uint16_t u = 0;
        std::memcpy(&y, raw.data() + i, 2);
        std::memcpy(&u, raw.data() + i, 2);
        x = is_signed ? y : u;
      } else {
        x = is_signed ? static_cast<std::int8_t>(raw[i]) : static_cast<std::uint8_t>(raw[i]);
      }
      v.push_back(x);
    }
  } else {
    return std::nullopt;
  }
  if (static_cast<std::int64_t>(v.size()) != elements) {
    return std::nullopt;
  }
  return v;
}

graph::Attribute to_attribute(const onnx::AttributeProto& a) {
  switch (a.type()) {
  case onnx::AttributeProto::INT: return a.i();
  case onnx::AttributeProto::FLOAT: return static_cast<double>(a.f());
  case onnx::AttributeProto::STRING: return a.s();
  case onnx::AttributeProto::INTS: return std::vector<std::int64_t>(a.ints().begin(), a.ints().end());
  case onnx::AttributeProto::FLOATS: return std::vector<double>(a.floats().begin(), a.floats().end());
  case onnx::AttributeProto::STRINGS: return std::vector<std::string>(a.strings().begin(), a.strings().end());
  default: return std::string("<") + onnx::AttributeProto::AttributeType_Name(a.type()) + ">";
  }
}

class Importer {
public:
  Importer(onnx::ModelProto& model, std::string_view source, const ImportOptions& options)
      : m_model(model), m_source(source), m_options(options) {}

  ImportResult run() {
    ImportResult result;
    result.opset = default_opset();
    result.producer =
        m_model.producer_name() + (m_model.producer_version().empty() ? "" : " " + m_model.producer_version());
    check_references();
    detail::ShapeResolution shapes = detail::resolve_shapes(m_model, m_source, m_options, result.warnings);
    // An If whose condition folded is replaced by the branch it takes, and the shapes are resolved
    // again (the branch may hold Ifs of its own, whose conditions fold in turn). The dims and
    // values were applied to the model the first time.
    for (int round = 0; round < max_inline_rounds && inline_known_ifs(shapes, result); ++round) {
      check_references();
      std::vector<std::string> warnings;
      // The named dimensions' values again, for the value_info the branches brought; the inputs
      // already hold theirs.
      ImportOptions again;
      for (const auto& [name, value] : shapes.named_dims) {
        if (!axis_key(name)) {
          again.dims[name] = value;
        }
      }
      shapes = detail::resolve_shapes(m_model, m_source, again, warnings);
      for (auto& w : warnings) {
        if (w.rfind("--dim ", 0) != 0 &&
            std::find(result.warnings.begin(), result.warnings.end(), w) == result.warnings.end()) {
          result.warnings.push_back(std::move(w));
        }
      }
    }
    result.graph = build_graph(shapes);
    result.constant_node_params = m_constant_node_params;
    result.interleaved_ops = m_interleaved_ops;
    for (std::size_t i = 0; i < result.graph.ops().size(); ++i) {
      const auto s = graph::describe(result.graph, static_cast<graph::OpId>(i));
      if (s.op_class == graph::OpClass::opaque) {
        const auto& op = result.graph.op(static_cast<graph::OpId>(i));
        result.warnings.push_back(fmt::format("opaque op '{}' ({}): {}", op.name, op.type, s.opaque_reason));
      }
    }
    return result;
  }

private:
  [[noreturn]] void fail(const std::string& reason) const { throw Error(fmt::format("{}: {}", m_source, reason)); }

  // Rounds of If inlining: an If inside a branch becomes a main-graph If once its branch is
  // inlined, so each round goes one level deeper.
  static constexpr int max_inline_rounds = 8;

  // The value of an If's condition when it is known (1 true, 0 false): folded, or an initializer
  // (a --value), read as the folder reads constants; -1 when it is not known.
  static int condition_value(const std::string& name, const detail::ShapeResolution& shapes,
                             const onnx::GraphProto& gp) {
    if (auto it = shapes.values.find(name); it != shapes.values.end() && it->second.size() == 1) {
      return it->second.front() != 0 ? 1 : 0;
    }
    for (const auto& init : gp.initializer()) {
      if (init.name() == name) {
        if (const auto v = detail::read_const(init); v && !v->is_float() && v->ints.size() == 1) {
          return v->ints.front() != 0 ? 1 : 0;
        }
      }
    }
    return -1;
  }

  // Every name the main graph defines: its inputs, initializers and node outputs.
  static std::set<std::string> defined_names(const onnx::GraphProto& gp) {
    std::set<std::string> names;
    for (const auto& i : gp.input()) {
      names.insert(i.name());
    }
    for (const auto& i : gp.initializer()) {
      names.insert(i.name());
    }
    for (const auto& n : gp.node()) {
      names.insert(n.output().begin(), n.output().end());
    }
    return names;
  }

  // Replaces every main-graph If whose condition is known by the nodes of the branch it takes,
  // with an Identity from each branch output to the If's output; the branch's initializers and
  // value_info join the graph's. A branch value whose name the main graph already uses is renamed
  // "<If>/<name>" in the branch. Returns whether any If was replaced.
  bool inline_known_ifs(const detail::ShapeResolution& shapes, ImportResult& result) {
    onnx::GraphProto& gp = *m_model.mutable_graph();
    std::set<std::string> taken = defined_names(gp);
    const auto names = node_names(gp);
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    bool any = false;
    for (int i = 0; i < gp.node_size(); ++i) {
      const onnx::NodeProto& node = gp.node(i);
      const bool is_if = node.op_type() == "If" && (node.domain().empty() || node.domain() == "ai.onnx") &&
                         node.input_size() == 1 && !node.input(0).empty();
      const int known = is_if ? condition_value(node.input(0), shapes, gp) : -1;
      const bool then_taken = known == 1;
      const onnx::GraphProto* body = nullptr;
      for (const auto& a : node.attribute()) {
        if (known >= 0 && a.has_g() && a.name() == (then_taken ? "then_branch" : "else_branch")) {
          body = &a.g();
        }
      }
      if (body == nullptr) {
        *nodes.Add() = node;
        continue;
      }
      const std::string& label = names[static_cast<std::size_t>(i)];
      std::unordered_map<std::string, std::string> renamed;
      const auto name_in_main = [&](const std::string& n) {
        auto it = renamed.find(n);
        return it == renamed.end() ? n : it->second;
      };
      for (const auto& init : body->initializer()) {
        if (taken.count(init.name()) != 0) {
          renamed[init.name()] = label + "/" + init.name();
        }
      }
      for (const auto& n : body->node()) {
        for (const auto& out : n.output()) {
          if (!out.empty() && taken.count(out) != 0) {
            renamed[out] = label + "/" + out;
          }
        }
      }
      for (const auto& init : body->initializer()) {
        onnx::TensorProto& t = *gp.add_initializer();
        t = init;
        t.set_name(name_in_main(init.name()));
        taken.insert(t.name());
      }
      for (const auto& v : body->value_info()) {
        onnx::ValueInfoProto& info = *gp.add_value_info();
        info = v;
        info.set_name(name_in_main(v.name()));
      }
      for (const auto& n : body->node()) {
        onnx::NodeProto& copy = *nodes.Add();
        copy = n;
        for (auto& in : *copy.mutable_input()) {
          in = name_in_main(in);
        }
        for (auto& out : *copy.mutable_output()) {
          out = name_in_main(out);
          taken.insert(out);
        }
        if (!copy.name().empty()) {
          copy.set_name(label + "/" + copy.name());
        }
      }
      for (int k = 0; k < node.output_size() && k < body->output_size(); ++k) {
        if (node.output(k).empty()) {
          continue;
        }
        // What the file declares for the If's output covers both branches (Optimum's merged
        // decoders declare the cache's shape where the branch without it returns an empty
        // placeholder): the branch taken decides, so the declared shape is dropped.
        for (auto* list : {gp.mutable_output(), gp.mutable_value_info()}) {
          for (auto& v : *list) {
            if (v.name() == node.output(k) && v.type().has_tensor_type()) {
              v.mutable_type()->mutable_tensor_type()->clear_shape();
            }
          }
        }
        onnx::NodeProto& id = *nodes.Add();
        id.set_op_type("Identity");
        id.set_name(fmt::format("{}/{}:{}", label, then_taken ? "then" : "else", k));
        id.add_input(name_in_main(body->output(k).name()));
        id.add_output(node.output(k));
      }
      result.inlined.push_back({label, node.output_size() > 0 ? node.output(0) : std::string(),
                                then_taken ? "then_branch" : "else_branch", node.input(0), body->node_size()});
      result.warnings.push_back(fmt::format("If '{}' replaced by its {} ({} nodes): its condition '{}' is {}", label,
                                            then_taken ? "then_branch" : "else_branch", body->node_size(),
                                            node.input(0), then_taken ? "true" : "false"));
      any = true;
    }
    if (any) {
      gp.mutable_node()->Swap(&nodes);
    }
    return any;
  }

  // Every node input names a graph input, an initializer or some node's output (in any order:
  // validation later reports cycles by name).
  void check_references() const {
    const onnx::GraphProto& gp = m_model.graph();
    const std::set<std::string> known = defined_names(gp);
    const auto names = node_names(gp);
    // A shapeless skeleton of the dataflow, so that a cycle is reported before shape inference
    // trips over it.
    graph::Graph skeleton;
    skeleton.name = gp.name();
    for (const auto& name : known) {
      skeleton.add_tensor(graph::Tensor{name, {}, DType::f32, TensorRole::input, -1, {}, std::nullopt});
    }
    for (int i = 0; i < gp.node_size(); ++i) {
      graph::Op op;
      op.name = names[static_cast<std::size_t>(i)];
      op.type = gp.node(i).op_type();
      for (const auto& in : gp.node(i).input()) {
        if (!in.empty() && known.count(in) == 0) {
          fail(fmt::format("node '{}' ({}): input '{}' is produced by no node and is not a graph input or initializer",
                           op.name, op.type, in));
        }
        op.inputs.push_back(in.empty() ? graph::no_tensor : skeleton.find_tensor(in));
      }
      for (const auto& out : gp.node(i).output()) {
        if (!out.empty()) {
          op.outputs.push_back(skeleton.find_tensor(out));
        }
      }
      try {
        skeleton.add_op(std::move(op));
      } catch (const Error& e) {
        fail(e.what());
      }
    }
    try {
      (void)skeleton.topological_order();
    } catch (const Error& e) {
      fail(e.what());
    }
  }

  std::int64_t default_opset() const {
    for (const auto& o : m_model.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") {
        if (o.version() < min_opset || o.version() > max_opset) {
          fail(fmt::format("opset {} is not supported (Partita reads opsets {} to {})", o.version(), min_opset,
                           max_opset));
        }
        return o.version();
      }
    }
    fail("opset_import names no opset for the default ONNX domain");
  }

  // Why a node's output has a dimension that inference could not give, when its shape follows
  // the values of an input (NonZero's data; a Range's bounds, a Reshape's or an Expand's target,
  // TopK's k, ...) that are computed at run time: that input, the model inputs it is computed
  // from, and what the user can do. Empty when no such input is found.
  std::string data_dependence(const onnx::NodeProto& node, const detail::ShapeResolution& shapes) const {
    const onnx::GraphProto& gp = m_model.graph();
    std::set<std::string> constants;
    for (const auto& init : gp.initializer()) {
      constants.insert(init.name());
    }
    std::unordered_map<std::string, const onnx::NodeProto*> producer;
    for (const auto& n : gp.node()) {
      for (const auto& o : n.output()) {
        producer[o] = &n;
      }
    }
    const auto rank = [&](const std::string& name) -> int {
      const auto t = shapes.types.find(name);
      if (t == shapes.types.end() || !t->second.has_tensor_type() || !t->second.tensor_type().has_shape()) {
        return -1;
      }
      return t->second.tensor_type().shape().dim_size();
    };
    std::vector<int> deciding; // the inputs whose values decide the shape
    for (int i = 0; i < node.input_size(); ++i) {
      const std::string& in = node.input(i);
      if (in.empty() || constants.count(in) != 0 || shapes.values.count(in) != 0) {
        continue;
      }
      // NonZero's length follows its input's contents, whatever their rank; elsewhere a value
      // that decides a shape is a scalar or a vector (a shape, a bound, a count).
      const bool shape_like =
          (i > 0 || node.input_size() == 1 || node.op_type() == "Range") && rank(in) >= 0 && rank(in) <= 1;
      if (node.op_type() == "NonZero" || shape_like) {
        deciding.push_back(i);
      }
    }
    std::vector<std::string> parts;
    for (int i : deciding) {
      std::set<std::string> sources;
      std::set<std::string> seen;
      std::vector<std::string> todo{node.input(i)};
      while (!todo.empty() && seen.size() < 100000) {
        const std::string t = todo.back();
        todo.pop_back();
        if (t.empty() || !seen.insert(t).second || constants.count(t) != 0) {
          continue;
        }
        const auto p = producer.find(t);
        if (p == producer.end()) {
          sources.insert(t); // a graph input
          continue;
        }
        for (const auto& in : p->second->input()) {
          todo.push_back(in);
        }
      }
      if (sources.empty()) {
        continue;
      }
      std::vector<std::string> settings;
      std::string names;
      for (const auto& src : sources) {
        names += fmt::format("{}'{}'", names.empty() ? "" : ", ", src);
        for (const auto& gi : gp.input()) {
          if (gi.name() == src && gi.type().has_tensor_type() &&
              (is_integer(gi.type().tensor_type().elem_type()) ||
               gi.type().tensor_type().elem_type() == onnx::TensorProto::BOOL) &&
              rank(src) >= 0 && rank(src) <= 1) {
            settings.push_back(src);
          }
        }
      }
      std::string fix;
      if (!settings.empty() && settings.size() == sources.size()) {
        std::string flags;
        for (const auto& name : settings) {
          flags += fmt::format(" --value {}=...", name);
        }
        fix = fmt::format("; if {} a setting rather than data, fix {} with{}",
                          settings.size() == 1 ? "it is" : "they are", settings.size() == 1 ? "it" : "them", flags);
      } else {
        fix = "; Partita needs shapes that do not depend on the data (export with static shapes, or fold the "
              "computation away)";
      }
      parts.push_back(fmt::format("its shape depends on the values of input {} ('{}'), which are known only at run "
                                  "time: they are computed from the model's input{} {}{}",
                                  i, node.input(i), sources.size() == 1 ? "" : "s", names, fix));
    }
    std::string out;
    for (const auto& p : parts) {
      out += ": " + p;
    }
    return out;
  }

  static bool has_unknown_dim(const onnx::TypeProto& type) {
    if (!type.has_tensor_type()) {
      return false;
    }
    if (!type.tensor_type().has_shape()) {
      return true;
    }
    for (const auto& d : type.tensor_type().shape().dim()) {
      if (!d.has_dim_value()) {
        return true;
      }
    }
    return false;
  }

  graph::Shape shape_of(const onnx::TypeProto& type, const std::string& name, const std::string& where,
                        const std::string& why = {}) const {
    if (!type.has_tensor_type()) {
      fail(fmt::format("{}: '{}' is not a tensor (sequences and maps are not supported)", where, name));
    }
    if (!type.tensor_type().has_shape()) {
      fail(fmt::format("{}: the shape of '{}' is unknown after shape inference{}", where, name, why));
    }
    graph::Shape s;
    for (const auto& d : type.tensor_type().shape().dim()) {
      if (!d.has_dim_value()) {
        fail(fmt::format("{}: dimension {} of '{}' is unknown{} after shape inference{}", where, s.size(), name,
                         d.has_dim_param() ? fmt::format(" ('{}')", d.dim_param()) : std::string(), why));
      }
      s.push_back(d.dim_value());
    }
    return s;
  }

  graph::Graph build_graph(const detail::ShapeResolution& shapes) {
    const onnx::GraphProto& gp = m_model.graph();
    graph::Graph g;
    g.name = gp.name().empty() ? std::string(m_source) : gp.name();
    std::set<std::string> initializer_names;
    for (const auto& init : gp.initializer()) {
      graph::Tensor t;
      t.name = init.name();
      if (t.name.empty()) {
        fail("an initializer has no name");
      }
      for (auto d : init.dims()) {
        if (d < 0) {
          fail(fmt::format("initializer '{}': dimension {} is negative", t.name, d));
        }
        t.shape.push_back(d);
      }
      t.dtype = to_dtype(init.data_type());
      t.role = TensorRole::parameter; // settled below from how ops use it
      const std::int64_t elements = graph::element_count(t.shape, fmt::format("initializer '{}'", t.name));
      t.int_values = int_values(init, elements);
      add_tensor(g, std::move(t), "initializer");
      initializer_names.insert(init.name());
    }
    for (const auto& in : gp.input()) {
      if (initializer_names.count(in.name()) != 0) {
        continue; // IR < 4 lists initializers as inputs too
      }
      graph::Tensor t;
      t.name = in.name();
      t.shape = shape_of(in.type(), in.name(), "graph input");
      t.dtype = to_dtype(in.type().tensor_type().elem_type());
      t.role = TensorRole::input;
      g.graph_inputs.push_back(add_tensor(g, std::move(t), "graph input"));
    }
    // Outputs of every node first, so that a node may name a tensor produced later (a cycle,
    // which validation then reports by name, or a file whose nodes are out of order).
    std::vector<std::string> names = node_names(gp);
    for (int i = 0; i < gp.node_size(); ++i) {
      const auto& node = gp.node(i);
      const std::string where = fmt::format("node '{}' ({})", names[static_cast<std::size_t>(i)], node.op_type());
      for (const auto& out : node.output()) {
        if (out.empty()) {
          continue;
        }
        auto it = shapes.types.find(out);
        const auto cause = shapes.unknown_because.find(out);
        if (cause != shapes.unknown_because.end() &&
            (it == shapes.types.end() || !it->second.has_tensor_type() || !it->second.tensor_type().has_shape())) {
          fail(fmt::format("{}: the shape of output '{}' is unknown: it comes from {}, an op of a domain Partita does "
                           "not model, and the model's value_info does not give the shape of its outputs (add a "
                           "value_info entry for them, e.g. by running ONNX Runtime's symbolic shape inference on "
                           "the file)",
                           where, out, cause->second));
        }
        if (it == shapes.types.end()) {
          fail(fmt::format("{}: the shape of output '{}' is unknown after shape inference{}", where, out,
                           data_dependence(node, shapes)));
        }
        graph::Tensor t;
        t.name = out;
        t.shape = shape_of(it->second, out, where,
                           has_unknown_dim(it->second) ? data_dependence(node, shapes) : std::string());
        t.dtype = to_dtype(it->second.tensor_type().elem_type());
        auto known = shapes.values.find(out);
        if (known != shapes.values.end()) {
          t.int_values = known->second;
        }
        if (node.op_type() == "Constant") {
          t.role = TensorRole::constant;
        }
        if (g.find_tensor(out) != graph::no_tensor) {
          fail(fmt::format("{}: output '{}' is also {}", where, out,
                           initializer_names.count(out) != 0 ? "an initializer"
                                                             : "produced by another node or a graph input"));
        }
        add_tensor(g, std::move(t), where);
      }
    }
    for (int i = 0; i < gp.node_size(); ++i) {
      g.add_op(convert_node(g, gp.node(i), names[static_cast<std::size_t>(i)]));
    }
    // Weights held in Constant nodes (as Paddle2ONNX writes them) are parameters by the same
    // rule as initializers. A one-element Constant is an operand (an epsilon, a scale), not a
    // weight: exporters write those as Constant nodes by the hundred.
    std::set<std::string> held_weights;
    for (const auto& node : gp.node()) {
      if (node.op_type() == "Constant" && node.output_size() == 1 && !node.output(0).empty()) {
        const graph::Tensor& t = g.tensor(g.find_tensor(node.output(0)));
        if (graph::is_floating(t.dtype) && t.elements() > 1) {
          held_weights.insert(t.name);
        }
      }
    }
    settle_roles(g, initializer_names);
    settle_roles(g, held_weights);
    for (const auto& name : held_weights) {
      const graph::Tensor& t = g.tensor(g.find_tensor(name));
      if (t.role == TensorRole::parameter) {
        m_constant_node_params += t.elements();
      }
    }
    for (const auto& out : gp.output()) {
      const graph::TensorId id = g.find_tensor(out.name());
      if (id == graph::no_tensor) {
        fail(fmt::format("graph output '{}' is produced by no node", out.name()));
      }
      g.graph_outputs.push_back(id);
    }
    try {
      const std::size_t before = g.ops().size();
      interleave_fused_projections(g);
      m_interleaved_ops = static_cast<int>(g.ops().size() - before);
      g.validate();
      graph::mark_gradients(g);
    } catch (const Error& e) {
      fail(e.what());
    }
    return g;
  }

  graph::TensorId add_tensor(graph::Graph& g, graph::Tensor t, const std::string& where) {
    try {
      return g.add_tensor(std::move(t));
    } catch (const Error& e) {
      fail(fmt::format("{}: {}", where, e.what()));
    }
  }

  static std::vector<std::string> node_names(const onnx::GraphProto& gp) {
    std::vector<std::string> names;
    std::set<std::string> used;
    for (int i = 0; i < gp.node_size(); ++i) {
      std::string name = gp.node(i).name().empty() ? fmt::format("{}_{}", gp.node(i).op_type(), i) : gp.node(i).name();
      if (!used.insert(name).second) {
        name = fmt::format("{}#{}", name, i);
        used.insert(name);
      }
      names.push_back(std::move(name));
    }
    return names;
  }

  graph::Op convert_node(graph::Graph& g, const onnx::NodeProto& node, const std::string& name) {
    graph::Op op;
    op.name = name;
    op.type = node.op_type();
    op.domain = node.domain() == "ai.onnx" ? "" : node.domain();
    const std::string where = fmt::format("node '{}' ({})", name, node.op_type());
    if (op.type.empty()) {
      fail(fmt::format("{}: the node has no op_type", where));
    }
    for (const auto& in : node.input()) {
      if (in.empty()) {
        op.inputs.push_back(graph::no_tensor);
        continue;
      }
      const graph::TensorId id = g.find_tensor(in);
      if (id == graph::no_tensor) {
        fail(fmt::format("{}: input '{}' is produced by no node and is not a graph input or initializer", where, in));
      }
      op.inputs.push_back(id);
    }
    for (const auto& out : node.output()) {
      op.outputs.push_back(out.empty() ? graph::no_tensor : g.find_tensor(out));
    }
    std::vector<std::string> subgraphs;
    for (const auto& a : node.attribute()) {
      if (a.type() == onnx::AttributeProto::GRAPH || a.type() == onnx::AttributeProto::GRAPHS) {
        subgraphs.push_back(a.name());
        continue;
      }
      if (a.type() == onnx::AttributeProto::TENSOR && op.type == "Constant" && !op.outputs.empty() &&
          op.outputs.front() != graph::no_tensor) {
        graph::Tensor& out = g.tensor(op.outputs.front());
        if (!out.int_values) {
          out.int_values = int_values(a.t(), out.elements());
        }
      }
      op.attrs.emplace(a.name(), to_attribute(a));
    }
    if (!op.domain.empty() && op.domain != "ai.onnx.preview.training") {
      op.opaque_reason =
          fmt::format("{}.{}: an op of a domain Partita does not model; counted with 0 FLOPs, its "
                      "outputs' shapes from the model's value_info, else assumed to be its first input's",
                      op.domain, op.type);
    } else if (!subgraphs.empty()) {
      op.opaque_reason =
          fmt::format("holds nested subgraph(s) {}: kept whole, not analysed", fmt::join(subgraphs, ", "));
    }
    return op;
  }

  // A float initializer (or Constant-held weight) read as data or weight is a trainable
  // parameter; one read only as state (BatchNorm running statistics) is a buffer; the rest are
  // constants.
  static void settle_roles(graph::Graph& g, const std::set<std::string>& names) {
    for (const auto& name : names) {
      graph::Tensor& t = g.tensor(g.find_tensor(name));
      bool trainable = false;
      bool state = false;
      for (graph::OpId c : t.consumers) {
        const graph::Op& op = g.op(c);
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
          if (op.inputs[i] != g.find_tensor(name)) {
            continue;
          }
          switch (graph::input_slot(op, i)) {
          case graph::InputSlot::data:
          case graph::InputSlot::weight: trainable = true; break;
          case graph::InputSlot::state: state = true; break;
          case graph::InputSlot::index: break;
          }
        }
      }
      // An 8-bit integer weight (ONNX Runtime's quantizer: ConvInteger's W, a DequantizeLinear
      // input in the QDQ format) is a parameter of 1-byte elements.
      const bool quantized = t.dtype == DType::i8 || t.dtype == DType::u8;
      if ((!graph::is_floating(t.dtype) && !(quantized && trainable)) || (!trainable && !state)) {
        t.role = TensorRole::constant;
      } else {
        t.role = trainable ? TensorRole::parameter : TensorRole::state;
      }
    }
  }

  onnx::ModelProto& m_model;
  std::string_view m_source;
  int m_interleaved_ops = 0;
  const ImportOptions& m_options;
  std::int64_t m_constant_node_params = 0;
};

} // namespace

ImportResult import_model(onnx::ModelProto model, std::string_view source, const ImportOptions& options) {
  try {
    return Importer(model, source, options).run();
  } catch (const Error& e) {
    if (std::string_view(e.what()).substr(0, source.size()) == source) {
      throw;
    }
    throw Error(fmt::format("{}: {}", source, e.what()));
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
}

ImportResult import_file(const std::filesystem::path& path, const ImportOptions& options) {
  return import_model(detail::read_model_file(path), path.string(), options);
}

ImportResult import_bytes(std::string_view bytes, std::string_view source, const ImportOptions& options) {
  return import_model(detail::read_model_bytes(bytes, source), source, options);
}

} // namespace partita::onnx_import
