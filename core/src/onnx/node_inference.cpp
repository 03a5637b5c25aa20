#include "onnx/node_inference.h"

#include "onnx/constant_folding.h"
#include "onnx/opset_adapter.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <onnx/defs/schema.h>
#include <onnx/defs/tensor_proto_util.h>
#include <onnx/shape_inference/implementation.h>

#include <deque>
#include <functional>
#include <memory>
#include <set>

namespace partita::onnx_import::detail {
namespace {

std::string node_label(const onnx::NodeProto& n, int index) {
  return fmt::format("node '{}' ({})", n.name().empty() ? fmt::format("{}_{}", n.op_type(), index) : n.name(),
                     n.op_type());
}

int rank_of(const onnx::TypeProto* t) {
  if (t == nullptr || !t->has_tensor_type() || !t->tensor_type().has_shape()) {
    return -1;
  }
  return t->tensor_type().shape().dim_size();
}

std::size_t ints_length(const onnx::NodeProto& n, const std::string& key) {
  for (const auto& a : n.attribute()) {
    if (a.name() == key) {
      return static_cast<std::size_t>(a.ints_size());
    }
  }
  return SIZE_MAX; // absent
}

std::vector<std::int64_t> ints_of(const onnx::NodeProto& n, const std::string& key) {
  for (const auto& a : n.attribute()) {
    if (a.name() == key) {
      return {a.ints().begin(), a.ints().end()};
    }
  }
  return {};
}

// What libonnx 1.12's inference functions take for granted. Returns a reason, or "" if fine.
std::string guard(const onnx::NodeProto& n, const std::vector<const onnx::TypeProto*>& inputs) {
  for (const auto* t : inputs) {
    if (t != nullptr && t->has_tensor_type() && t->tensor_type().has_shape()) {
      for (const auto& d : t->tensor_type().shape().dim()) {
        if (d.has_dim_value() && d.dim_value() < 0) {
          return "an input has a negative dimension";
        }
      }
    }
  }
  // libonnx 1.12's Gemm inference reads dims 0 and 1 of A and B once their shapes are known,
  // whatever their rank (the fuzzer found it reading past a rank-0 shape).
  if (n.op_type() == "Gemm") {
    for (std::size_t i = 0; i < 2 && i < inputs.size(); ++i) {
      const int rank = rank_of(inputs[i]);
      if (rank >= 0 && rank != 2) {
        return fmt::format("input {} ({}) has rank {}, not 2", i, i == 0 ? "A" : "B", rank);
      }
    }
  }
  // libonnx 1.12's inference of RNN, GRU and LSTM before opset 7 reads dims 0 and 1 of X whatever
  // its rank (the fuzzer found it copying a dimension past a rank-1 shape).
  if ((n.op_type() == "RNN" || n.op_type() == "GRU" || n.op_type() == "LSTM") && !inputs.empty()) {
    const int rank = rank_of(inputs[0]);
    if (rank >= 0 && rank != 3) {
      return fmt::format("input 0 (X) has rank {}, not 3 (sequence, batch, input)", rank);
    }
  }
  static const std::set<std::string> windowed = {"Conv",   "ConvTranspose", "MaxPool",     "AveragePool",
                                                 "LpPool", "ConvInteger",   "QLinearConv", "MaxUnpool"};
  if (windowed.count(n.op_type()) != 0 && !inputs.empty()) {
    const int rank = rank_of(inputs[0]);
    if (rank >= 0 && rank < 3) {
      return fmt::format("input 0 has rank {}, fewer than 3 (batch, channels, spatial)", rank);
    }
    if (rank >= 3) {
      const auto spatial = static_cast<std::size_t>(rank - 2);
      // The weight's input slot: its rank must match the input's.
      const std::size_t weight =
          n.op_type() == "QLinearConv"                                                                ? 3
          : (n.op_type() == "Conv" || n.op_type() == "ConvTranspose" || n.op_type() == "ConvInteger") ? 1
                                                                                                      : SIZE_MAX;
      if (weight < inputs.size()) {
        const int wrank = rank_of(inputs[weight]);
        if (wrank >= 0 && wrank != rank) {
          return fmt::format("the weight has rank {} but the input has rank {}", wrank, rank);
        }
      }
      // Window sizes, strides and dilations must be positive, pads not negative (libonnx divides
      // by them and indexes with them).
      for (const char* key : {"kernel_shape", "strides", "dilations"}) {
        for (auto v : ints_of(n, key)) {
          if (v < 1) {
            return fmt::format("attribute '{}' has the value {}, not positive", key, v);
          }
        }
      }
      for (const char* key : {"pads", "output_padding"}) {
        for (auto v : ints_of(n, key)) {
          if (v < 0) {
            return fmt::format("attribute '{}' has the value {}, negative", key, v);
          }
        }
      }
      for (const char* key : {"kernel_shape", "strides", "dilations", "output_padding", "output_shape"}) {
        const std::size_t len = ints_length(n, key);
        if (len != SIZE_MAX && len != spatial) {
          return fmt::format("attribute '{}' has {} values for {} spatial dimensions", key, len, spatial);
        }
      }
      const std::size_t pads = ints_length(n, "pads");
      if (pads != SIZE_MAX && pads != 2 * spatial) {
        return fmt::format("attribute 'pads' has {} values for {} spatial dimensions", pads, spatial);
      }
    }
  }
  return {};
}

// Every name the nodes of an If/Loop/Scan body read, at any depth: the values of the graphs around
// it among them, which the node holding the body depends on as much as on its inputs.
void names_read_in_bodies(const onnx::NodeProto& n, std::vector<std::string>& out) {
  for (const auto& a : n.attribute()) {
    std::vector<const onnx::GraphProto*> bodies;
    if (a.has_g()) {
      bodies.push_back(&a.g());
    }
    for (const auto& g : a.graphs()) {
      bodies.push_back(&g);
    }
    for (const auto* body : bodies) {
      for (const auto& inner : body->node()) {
        out.insert(out.end(), inner.input().begin(), inner.input().end());
        names_read_in_bodies(inner, out);
      }
      for (const auto& o : body->output()) {
        out.push_back(o.name());
      }
    }
  }
}

// Nodes in dataflow order (the file's order where it already is one).
std::vector<int> dataflow_order(const onnx::GraphProto& g) {
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i) {
    for (const auto& o : g.node(i).output()) {
      if (!o.empty()) {
        producer[o] = i;
      }
    }
  }
  std::vector<int> pending(static_cast<std::size_t>(g.node_size()), 0);
  std::vector<std::vector<int>> users(static_cast<std::size_t>(g.node_size()));
  for (int i = 0; i < g.node_size(); ++i) {
    std::set<int> deps;
    std::vector<std::string> reads(g.node(i).input().begin(), g.node(i).input().end());
    names_read_in_bodies(g.node(i), reads);
    for (const auto& in : reads) {
      auto it = producer.find(in);
      if (it != producer.end() && it->second != i) {
        deps.insert(it->second);
      }
    }
    pending[static_cast<std::size_t>(i)] = static_cast<int>(deps.size());
    for (int d : deps) {
      users[static_cast<std::size_t>(d)].push_back(i);
    }
  }
  std::deque<int> ready;
  for (int i = 0; i < g.node_size(); ++i) {
    if (pending[static_cast<std::size_t>(i)] == 0) {
      ready.push_back(i);
    }
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int i = ready.front();
    ready.pop_front();
    order.push_back(i);
    for (int u : users[static_cast<std::size_t>(i)]) {
      if (--pending[static_cast<std::size_t>(u)] == 0) {
        ready.push_back(u);
      }
    }
  }
  return order; // a cycle leaves nodes out; the importer reported cycles before this runs
}

onnx::TypeProto type_of(const ConstTensor& t) {
  onnx::TypeProto type;
  type.mutable_tensor_type()->set_elem_type(t.elem_type);
  auto* shape = type.mutable_tensor_type()->mutable_shape();
  for (auto d : t.dims) {
    shape->add_dim()->set_dim_value(d);
  }
  return type;
}

} // namespace

namespace {

// What inference knows of the values in scope: a graph's own, and inside an If branch also those
// of the graphs around it.
struct Scope {
  InferredValues r;
  std::unordered_map<std::string, const onnx::TensorProto*> data;
  // Contents known to the folder: what it folded, and initializers, read when a rule needs them
  // (most are weights, which no rule reads).
  std::unordered_map<std::string, ConstTensor> known;
  std::unordered_map<std::string, const onnx::TensorProto*> initializers;
  std::deque<onnx::TensorProto> folded_protos; // what `data` points at for folded values
  int depth = 0;                               // how many If branches this scope is inside
};

// Both branches of an If whose condition is unknown are inferred, and so on inside them: deeper
// than this, a body's outputs stay as libonnx infers them (nesting would cost 2^depth).
constexpr int max_if_depth = 6;

void infer_scope(onnx::GraphProto& g, const std::unordered_map<std::string, int>& opsets, std::string_view source,
                 std::vector<std::string>& warnings, Scope& s);

// The output types of the foreign-domain ops whose shapes follow from their inputs as ONNX
// Runtime defines them, where the file's value_info may leave them symbolic: com.microsoft's
// FastGelu, Gelu and QuickGelu (the input's shape), SkipLayerNormalization, FusedMatMul,
// and DynamicQuantizeLSTM (an LSTM on int8 weights W [dirs, input, 4 hidden] and R [dirs, hidden,
// 4 hidden]: Y [seq, dirs, batch, hidden], Y_h and Y_c [dirs, batch, hidden]). nullopt: no rule,
// or an input shape it needs is unknown.
std::optional<std::vector<std::int64_t>> known_dims(const onnx::TypeProto* t) {
  if (t == nullptr || rank_of(t) < 0) {
    return std::nullopt;
  }
  std::vector<std::int64_t> dims;
  for (const auto& d : t->tensor_type().shape().dim()) {
    if (!d.has_dim_value()) {
      return std::nullopt;
    }
    dims.push_back(d.dim_value());
  }
  return dims;
}

std::optional<std::vector<onnx::TypeProto>> contrib_output_types(const std::string& domain, const onnx::NodeProto& node,
                                                                 const std::vector<const onnx::TypeProto*>& inputs) {
  if (domain != "com.microsoft" || inputs.empty() || inputs[0] == nullptr) {
    return std::nullopt;
  }
  const auto x_dims = known_dims(inputs[0]);
  const auto typed_as = [&](const onnx::TypeProto& like, const std::vector<std::int64_t>& dims) {
    onnx::TypeProto t;
    t.mutable_tensor_type()->set_elem_type(like.tensor_type().elem_type());
    for (auto d : dims) {
      t.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    }
    return t;
  };
  const std::string& type = node.op_type();
  // Element-wise activations: the input's shape.
  if (type == "FastGelu" || type == "Gelu" || type == "QuickGelu") {
    return x_dims ? std::optional(std::vector<onnx::TypeProto>{*inputs[0]}) : std::nullopt;
  }
  // SkipLayerNormalization: the output and the input + skip (+ bias) sum as the input; mean and
  // inverse standard deviation with the last axis 1 (float).
  if (type == "SkipLayerNormalization" || type == "SkipSimplifiedLayerNormalization") {
    if (!x_dims || x_dims->empty()) {
      return std::nullopt;
    }
    auto stat = *x_dims;
    stat.back() = 1;
    onnx::TypeProto f;
    f.mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    return std::vector<onnx::TypeProto>{*inputs[0], typed_as(f, stat), typed_as(f, stat), *inputs[0]};
  }
  // FusedMatMul: alpha * op(A) op(B) with transA/transB on the last two axes, batch axes
  // broadcast.
  if (type == "FusedMatMul") {
    const auto b_dims = inputs.size() > 1 ? known_dims(inputs[1]) : std::nullopt;
    if (!x_dims || !b_dims || x_dims->size() < 2 || b_dims->size() < 2) {
      return std::nullopt;
    }
    bool trans_a = false, trans_b = false;
    for (const auto& a : node.attribute()) {
      trans_a = trans_a || (a.name() == "transA" && a.i() != 0);
      trans_b = trans_b || (a.name() == "transB" && a.i() != 0);
      if ((a.name() == "transBatchA" || a.name() == "transBatchB") && a.i() != 0) {
        return std::nullopt;
      }
    }
    const auto& a = *x_dims;
    const auto& b = *b_dims;
    const std::int64_t m = trans_a ? a[a.size() - 1] : a[a.size() - 2];
    const std::int64_t n = trans_b ? b[b.size() - 2] : b[b.size() - 1];
    const std::size_t batch_rank = std::max(a.size(), b.size()) - 2;
    std::vector<std::int64_t> out(batch_rank, 1);
    for (std::size_t i = 0; i < batch_rank; ++i) {
      const auto at = [&](const std::vector<std::int64_t>& d) -> std::int64_t {
        const std::size_t lead = batch_rank - (d.size() - 2); // axes d lacks on the left
        return i < lead ? 1 : d[i - lead];
      };
      const std::int64_t da = at(a), db = at(b);
      if (da != db && da != 1 && db != 1) {
        return std::nullopt;
      }
      out[i] = std::max(da, db);
    }
    out.push_back(m);
    out.push_back(n);
    return std::vector<onnx::TypeProto>{typed_as(*inputs[0], out)};
  }
  if (type != "DynamicQuantizeLSTM" || rank_of(inputs[0]) != 3) {
    return std::nullopt;
  }
  const auto& x = inputs[0]->tensor_type().shape();
  std::int64_t hidden = -1, dirs = 1;
  for (const auto& a : node.attribute()) {
    if (a.name() == "hidden_size") {
      hidden = a.i();
    } else if (a.name() == "direction" && a.s() == "bidirectional") {
      dirs = 2;
    }
  }
  if (hidden <= 0 || !x.dim(0).has_dim_value() || !x.dim(1).has_dim_value()) {
    return std::nullopt;
  }
  const auto typed = [&](std::vector<std::int64_t> dims) {
    onnx::TypeProto t;
    t.mutable_tensor_type()->set_elem_type(inputs[0]->tensor_type().elem_type());
    for (auto d : dims) {
      t.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    }
    return t;
  };
  const std::int64_t seq = x.dim(0).dim_value(), batch = x.dim(1).dim_value();
  return std::vector<onnx::TypeProto>{typed({seq, dirs, batch, hidden}), typed({dirs, batch, hidden}),
                                      typed({dirs, batch, hidden})};
}

using ConstantInts = std::function<std::optional<std::vector<std::int64_t>>(const std::string&)>;

// The nodes inside an If/Loop/Scan body rewritten to their opset-17 form, as the main graph's are,
// before libonnx infers the node that holds them (its inference of a body reads the body's
// ReduceMean with axes as an input as opset 17's, and fails). Constants a rewrite needs (the axes)
// come from the body's initializers and Constant nodes, else from around it; a node whose
// constants are computed stays as it is, for the body's own inference to name.
void adapt_bodies(onnx::NodeProto& node, const ConstantInts& outer) {
  for (auto& a : *node.mutable_attribute()) {
    std::vector<onnx::GraphProto*> bodies;
    if (a.has_g()) {
      bodies.push_back(a.mutable_g());
    }
    for (auto& body : *a.mutable_graphs()) {
      bodies.push_back(&body);
    }
    for (onnx::GraphProto* body : bodies) {
      std::unordered_map<std::string, std::vector<std::int64_t>> local;
      const auto keep = [&](const onnx::TensorProto& t, const std::string& name) {
        if (auto v = read_const(t); v && !v->is_float()) {
          local[name] = std::move(v->ints);
        }
      };
      for (const auto& init : body->initializer()) {
        keep(init, init.name());
      }
      for (const auto& n : body->node()) {
        if (n.op_type() == "Constant" && n.output_size() == 1) {
          for (const auto& attr : n.attribute()) {
            if (attr.name() == "value" && attr.has_t()) {
              keep(attr.t(), n.output(0));
            }
          }
        }
      }
      const ConstantInts lookup = [&](const std::string& name) -> std::optional<std::vector<std::int64_t>> {
        if (auto it = local.find(name); it != local.end()) {
          return it->second;
        }
        return outer(name);
      };
      for (auto& n : *body->mutable_node()) {
        if (n.domain().empty() || n.domain() == "ai.onnx") {
          onnx::NodeProto adapted = n;
          if (adapt_node(adapted, lookup).empty()) {
            n = std::move(adapted);
          }
        }
        adapt_bodies(n, lookup);
      }
    }
  }
}

// An If's outputs as its branches give them, each branch inferred node by node with the folder
// (libonnx infers branches without it, so a shape computed from shapes inside one stays unknown).
// Only the branch taken when the condition is known; else where both branches agree.
void refine_if_outputs(const onnx::NodeProto& node, const std::string& label,
                       const std::unordered_map<std::string, int>& opsets, std::string_view source, Scope& s) {
  if (s.depth >= max_if_depth) {
    return;
  }
  std::optional<bool> condition;
  auto it = s.known.find(node.input(0));
  if (it == s.known.end()) { // an initializer (a --value) as the condition itself
    if (auto init = s.initializers.find(node.input(0)); init != s.initializers.end()) {
      if (auto value = read_const(*init->second)) {
        it = s.known.emplace(node.input(0), *std::move(value)).first;
      }
    }
  }
  if (it != s.known.end() && !it->second.is_float() && it->second.ints.size() == 1) {
    condition = it->second.ints[0] != 0;
  }
  std::vector<std::vector<const onnx::TypeProto*>> branch_types; // [branch][output]
  std::vector<std::string> branch_names;
  std::deque<Scope> scopes;
  std::deque<onnx::GraphProto> bodies;
  for (const auto& a : node.attribute()) {
    const bool then_branch = a.name() == "then_branch";
    if (!a.has_g() || (!then_branch && a.name() != "else_branch") || (condition && *condition != then_branch)) {
      continue;
    }
    onnx::GraphProto& body = bodies.emplace_back(a.g());
    Scope& inner = scopes.emplace_back();
    inner.r.types = s.r.types;
    inner.r.generated = s.r.generated;
    inner.data = s.data;
    inner.known = s.known;
    inner.initializers = s.initializers;
    inner.depth = s.depth + 1;
    std::vector<std::string> ignored; // the If stays one opaque op: what its body warns of is not shown
    try {
      infer_scope(body, opsets, source, ignored, inner);
    } catch (const Error&) {
      return; // the If's outputs stay as libonnx inferred them; an unknown one is reported by name later
    }
    auto& types = branch_types.emplace_back();
    for (const auto& out : body.output()) {
      auto it = inner.r.types.find(out.name());
      types.push_back(it == inner.r.types.end() || rank_of(&it->second) < 0 ? nullptr : &it->second);
    }
    branch_names.push_back(a.name());
  }
  for (int i = 0; i < node.output_size(); ++i) {
    const std::string& out = node.output(i);
    const auto k = static_cast<std::size_t>(i);
    if (out.empty() || branch_types.empty()) {
      continue;
    }
    const onnx::TypeProto* first = k < branch_types[0].size() ? branch_types[0][k] : nullptr;
    if (first == nullptr) {
      continue;
    }
    auto existing = s.r.types.find(out);
    if (condition) {
      // The branch taken: its output is the If's, whatever libonnx made of the two branches
      // (it merges them even where they differ in rank, as an If around a Squeeze does).
      s.r.types[out] = *first;
      continue;
    }
    if (existing == s.r.types.end() || rank_of(&existing->second) < 0) {
      s.r.types[out] = *first;
      existing = s.r.types.find(out);
    }
    auto* shape = existing->second.mutable_tensor_type()->mutable_shape();
    for (int d = 0; d < shape->dim_size(); ++d) {
      if (shape->dim(d).has_dim_value()) {
        continue;
      }
      std::vector<std::int64_t> values;
      for (const auto& types : branch_types) {
        const onnx::TypeProto* t = k < types.size() ? types[k] : nullptr;
        if (t == nullptr || rank_of(t) != shape->dim_size() || !t->tensor_type().shape().dim(d).has_dim_value()) {
          values.clear();
          break;
        }
        values.push_back(t->tensor_type().shape().dim(d).dim_value());
      }
      if (values.empty()) {
        continue;
      }
      if (values.size() == 2 && values[0] != values[1]) {
        throw Error(fmt::format("{}: {}: dimension {} of output '{}' is {} in {} and {} in {}, and the condition "
                                "'{}' is known only at run time: Partita needs one shape for every value (when "
                                "the condition follows from an integer or boolean input, a setting such as a sample "
                                "rate or a flag, fix that input with --value INPUT=VALUE: the branch taken is then "
                                "inlined)",
                                source, label, d, out, values[0], branch_names[0], values[1], branch_names[1],
                                node.input(0)));
      }
      shape->mutable_dim(d)->set_dim_value(values[0]);
    }
  }
}

} // namespace

InferredValues infer_node_by_node(onnx::GraphProto& g, const std::unordered_map<std::string, int>& opsets,
                                  std::string_view source, std::vector<std::string>& warnings) {
  Scope s;
  infer_scope(g, opsets, source, warnings, s);
  return std::move(s.r);
}

namespace {

void infer_scope(onnx::GraphProto& g, const std::unordered_map<std::string, int>& opsets, std::string_view source,
                 std::vector<std::string>& warnings, Scope& s) {
  InferredValues& r = s.r;
  auto& data = s.data;
  auto& known = s.known;
  auto& initializers = s.initializers;
  auto& folded_protos = s.folded_protos;
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
    // Only inline data can feed inference; payloads the reader dropped look empty, so they are
    // left out rather than read as zeros, and so are raw payloads of another size than their dims
    // (a truncated file: libonnx would read past them).
    if (init.data_location() != onnx::TensorProto::EXTERNAL && raw_payload_fits(init) &&
        (init.raw_data().size() > 0 || init.int64_data_size() > 0 || init.int32_data_size() > 0 ||
         init.float_data_size() > 0 || init.double_data_size() > 0)) {
      data[init.name()] = &init;
    }
    initializers[init.name()] = &init;
  }

  const auto* registry = onnx::OpSchemaRegistry::Instance();
  onnx::shape_inference::SymbolTableImpl symbols;
  std::unordered_map<std::string, onnx::TypeProto*> outer; // no outer scope at the top level
  onnx::shape_inference::GraphInferenceContext graph_context(outer, opsets, &symbols, {}, registry, &r.generated);

  for (int index : dataflow_order(g)) {
    onnx::NodeProto& node = *g.mutable_node(index);
    const std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
    const auto opset = opsets.find(domain);
    const auto* schema = opset == opsets.end() ? nullptr : registry->GetSchema(node.op_type(), opset->second, domain);

    std::unordered_map<std::string, onnx::TypeProto*> types;
    std::vector<const onnx::TypeProto*> input_types;
    for (const auto& in : node.input()) {
      auto it = r.types.find(in);
      input_types.push_back(it == r.types.end() ? nullptr : &it->second);
      if (it != r.types.end()) {
        types[in] = &it->second;
      }
    }

    // Which foreign op, if any, an input's unknown shape comes from.
    std::string because;
    for (const auto& in : node.input()) {
      if (auto it = r.unknown_because.find(in); it != r.unknown_because.end() && because.empty()) {
        because = it->second;
      }
    }
    const auto pass_on_cause = [&] {
      for (const auto& out : node.output()) {
        auto t = r.types.find(out);
        if (!because.empty() && !out.empty() && (t == r.types.end() || rank_of(&t->second) < 0)) {
          r.unknown_because[out] = because;
        }
      }
    };
    const std::string cause_text =
        because.empty() ? std::string()
                        : fmt::format(" (an input's shape is not known for sure: it comes from {}, an op of a domain "
                                      "Partita does not model, whose outputs the model's value_info does not "
                                      "describe)",
                                      because);
    if (!domain.empty() && domain != "ai.onnx.preview.training") {
      // A foreign domain (com.microsoft, ai.onnx.ml, ONNX Runtime extensions): kept as an opaque
      // op; its outputs' shapes are what the file's value_info says, else assumed to be its first
      // input's (most such ops are fused element-wise kernels) and, when that is wrong, the error of
      // the op it misleads names this one as the cause.
      const std::string label = fmt::format(
          "node '{}' ({}.{})", node.name().empty() ? fmt::format("{}_{}", node.op_type(), index) : node.name(), domain,
          node.op_type());
      std::vector<std::string> assumed, unknown;
      // The file's value_info, when it gives every output's dims; else the op's definition.
      bool complete = true;
      for (const auto& out : node.output()) {
        auto t = r.types.find(out);
        complete = complete && (out.empty() || (t != r.types.end() && known_dims(&t->second).has_value()));
      }
      if (auto shapes = complete ? std::nullopt : contrib_output_types(domain, node, input_types)) {
        for (int k = 0; k < node.output_size() && k < static_cast<int>(shapes->size()); ++k) {
          if (!node.output(k).empty()) {
            r.types[node.output(k)] = (*shapes)[static_cast<std::size_t>(k)];
          }
        }
        warnings.push_back(fmt::format("{}: an op of the domain '{}', which Partita does not model: counted with 0 "
                                       "FLOPs; its outputs' shapes from its definition in ONNX Runtime",
                                       label, domain));
        continue;
      }
      for (const auto& out : node.output()) {
        auto known = r.types.find(out);
        if (!out.empty() && (known == r.types.end() || rank_of(&known->second) < 0)) {
          r.unknown_because[out] = label;
          if (!input_types.empty() && input_types[0] != nullptr) {
            r.types[out] = *input_types[0];
            assumed.push_back(fmt::format("'{}'", out));
          } else {
            unknown.push_back(fmt::format("'{}'", out));
          }
        }
      }
      std::string shapes = "are from the model's value_info";
      if (!assumed.empty()) {
        shapes = fmt::format("are not in the model's value_info: {} assumed to have the shape of input '{}'",
                             fmt::join(assumed, ", "), node.input(0));
      }
      if (!unknown.empty()) {
        shapes = fmt::format("are unknown ({} not in the model's value_info)", fmt::join(unknown, ", "));
      }
      warnings.push_back(fmt::format(
          "{}: an op of the domain '{}', which Partita does not model: counted with 0 FLOPs; its outputs' shapes {}",
          label, domain, shapes));
      continue;
    }
    if (schema == nullptr) {
      // Unknown to ONNX: outputs take the first input's type, so inference goes on past it.
      if (!input_types.empty() && input_types[0] != nullptr) {
        for (const auto& out : node.output()) {
          auto known = r.types.find(out);
          if (!out.empty() && (known == r.types.end() || rank_of(&known->second) < 0)) {
            r.types[out] = *input_types[0];
            warnings.push_back(fmt::format("{} is unknown to ONNX shape inference: output '{}' is assumed to have "
                                           "the shape of input '{}'",
                                           node_label(node, index), out, node.input(0)));
          }
        }
      }
      pass_on_cause();
      continue;
    }

    if (opset->second > libonnx_max_opset && domain.empty()) {
      auto constant_ints = [&](const std::string& name) -> std::optional<std::vector<std::int64_t>> {
        if (auto it = known.find(name); it != known.end() && !it->second.is_float()) {
          return it->second.ints;
        }
        if (auto it = data.find(name); it != data.end() && (it->second->data_type() == onnx::TensorProto::INT64 ||
                                                            it->second->data_type() == onnx::TensorProto::INT32)) {
          const auto* t = it->second;
          return t->data_type() == onnx::TensorProto::INT64 ? onnx::ParseData<std::int64_t>(t) : [&] {
            auto v = onnx::ParseData<std::int32_t>(t);
            return std::vector<std::int64_t>(v.begin(), v.end());
          }();
        }
        if (auto it = r.generated.find(name); it != r.generated.end()) {
          std::vector<std::int64_t> v;
          for (const auto& d : it->second.dim()) {
            if (!d.has_dim_value()) {
              return std::nullopt;
            }
            v.push_back(d.dim_value());
          }
          return v;
        }
        return std::nullopt;
      };
      if (const std::string reason = adapt_node(node, constant_ints); !reason.empty()) {
        throw Error(fmt::format("{}: {}: {}", source, node_label(node, index), reason));
      }
      adapt_bodies(node, constant_ints);
      input_types.resize(static_cast<std::size_t>(node.input_size()));
    }
    try {
      schema->Verify(node);
    } catch (const std::exception& e) {
      throw Error(fmt::format("{}: {}: {}", source, node_label(node, index), e.what()));
    }
    if (const std::string reason = guard(node, input_types); !reason.empty()) {
      throw Error(fmt::format("{}: {}: {}{}", source, node_label(node, index), reason, cause_text));
    }

    std::optional<ConstTensor> folded;
    {
      std::vector<const ConstTensor*> values;
      for (const auto& in : node.input()) {
        auto it = known.find(in);
        if (it == known.end() && has_fold_rule(node.op_type())) {
          if (auto init = initializers.find(in); init != initializers.end()) {
            if (auto value = read_const(*init->second)) {
              it = known.emplace(in, *std::move(value)).first;
            }
          }
        }
        values.push_back(it == known.end() ? nullptr : &it->second);
      }
      try {
        folded = fold_node(node, values, input_types);
      } catch (const FoldError& e) {
        throw Error(
            fmt::format("{}: {}: cannot evaluate its constant inputs: {}", source, node_label(node, index), e.what()));
      }
    }
    if (folded && node.output_size() > 0 && !node.output(0).empty()) {
      // Known before inference runs, so that inference checks its result against the value.
      const std::string& out = node.output(0);
      const onnx::TypeProto type = type_of(*folded);
      if (auto existing = r.types.find(out); existing == r.types.end()) {
        r.types[out] = type;
      } else {
        try {
          onnx::shape_inference::checkShapesAndTypes(type, existing->second);
          onnx::shape_inference::mergeShapesAndTypes(type, &existing->second);
        } catch (const std::exception& e) {
          throw Error(fmt::format("{}: {}: its evaluated output '{}' (shape {}) disagrees with the file: {}", source,
                                  node_label(node, index), out, dims_text(folded->dims), e.what()));
        }
      }
      const bool half = folded->elem_type == onnx::TensorProto::FLOAT16 ||
                        folded->elem_type == onnx::TensorProto::BFLOAT16; // no inference rule reads those
      if (!half && data.find(out) == data.end()) {
        data[out] = &folded_protos.emplace_back(to_proto(*folded, out));
      }
    } else {
      folded.reset();
    }

    try {
      onnx::shape_inference::InferenceContextImpl ctx(node, types, data, {}, &r.generated, &graph_context);
      if (schema->has_type_and_shape_inference_function()) {
        schema->GetTypeAndShapeInferenceFunction()(ctx);
      } else if (schema->HasFunction()) {
        onnx::shape_inference::InferShapeForFunctionNode(*schema->GetFunction(), registry, ctx);
      }
      for (int i = 0; i < node.output_size(); ++i) {
        const std::string& out = node.output(i);
        const onnx::TypeProto* inferred = ctx.getOutputType(static_cast<std::size_t>(i));
        if (out.empty() || inferred->value_case() == onnx::TypeProto::VALUE_NOT_SET) {
          continue;
        }
        auto existing = r.types.find(out);
        if (existing == r.types.end()) {
          r.types[out] = *inferred;
        } else {
          onnx::shape_inference::checkShapesAndTypes(*inferred, existing->second);
          onnx::shape_inference::mergeShapesAndTypes(*inferred, &existing->second);
        }
      }
      // libonnx's data propagation is what the folder does, less completely; where the folder
      // evaluated the node it is skipped (it also misreads an empty folded value as rank 0).
      if (!folded && schema->has_data_propagation_function()) {
        // libonnx's propagation functions read every input's type without checking that there is
        // one: a node with an input of unknown type is left to the folder.
        std::unordered_map<std::string, onnx::TypeProto*> now;
        bool typed = true;
        for (const auto& in : node.input()) {
          auto it = r.types.find(in);
          if (it != r.types.end()) {
            now[in] = &it->second;
          } else {
            typed = typed && in.empty();
          }
        }
        if (typed) {
          onnx::shape_inference::DataPropagationContextImpl dctx(node, now, data, r.generated);
          schema->GetDataPropagationFunction()(dctx);
        }
      }
    } catch (const std::exception& e) {
      throw Error(
          fmt::format("{}: {}: shape inference failed: {}{}", source, node_label(node, index), e.what(), cause_text));
    }
    if (domain.empty() && node.op_type() == "If" && node.input_size() == 1) {
      refine_if_outputs(node, node_label(node, index), opsets, source, s);
    }
    pass_on_cause();
    // A Constant's value feeds the inference of its users (Reshape targets, Slice starts...).
    if (node.op_type() == "Constant" && node.output_size() == 1) {
      for (const auto& a : node.attribute()) {
        if (a.name() == "value" && a.has_t()) {
          data.emplace(node.output(0), &a.t());
        }
      }
    }
    if (folded) {
      const std::string& out = node.output(0);
      // What libonnx's own data propagation reads: 1-D integer contents, as a shape. Not an
      // empty one: Concat's propagation takes the length of its first input's data for a rank
      // and rejects axis 0 of "rank 0".
      if (!folded->is_float() && folded->dims.size() <= 1 && folded->size() > 0) {
        onnx::TensorShapeProto as_shape;
        for (auto v : folded->ints) {
          as_shape.add_dim()->set_dim_value(v);
        }
        r.generated[out] = std::move(as_shape);
      }
      if (!folded->is_float()) {
        r.folded[out] = *folded;
      }
      known[out] = *std::move(folded);
    }
    // Split has several outputs, which the folder (one output a node) does not give: once
    // inference has their shapes, a known input is cut along the axis into them (tf2onnx computes
    // Pad amounts as a Concat of a Split of a constant).
    if (domain.empty() && node.op_type() == "Split" && node.input_size() >= 1 && !node.input(0).empty()) {
      auto it = known.find(node.input(0));
      if (it == known.end()) {
        if (auto init = initializers.find(node.input(0)); init != initializers.end()) {
          if (auto value = read_const(*init->second)) {
            it = known.emplace(node.input(0), *std::move(value)).first;
          }
        }
      }
      if (it != known.end()) {
        const ConstTensor& x = it->second;
        const auto rank = static_cast<std::int64_t>(x.dims.size());
        std::int64_t axis = 0;
        for (const auto& a : node.attribute()) {
          if (a.name() == "axis") {
            axis = a.i();
          }
        }
        axis = axis < 0 ? axis + rank : axis;
        // Every output's shape, as inferred: the parts' lengths along the axis.
        std::vector<Dims> parts;
        for (const auto& out : node.output()) {
          auto t = r.types.find(out);
          if (out.empty() || t == r.types.end() || rank_of(&t->second) != rank) {
            parts.clear();
            break;
          }
          Dims d;
          for (const auto& dim : t->second.tensor_type().shape().dim()) {
            d.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
          }
          parts.push_back(std::move(d));
        }
        std::int64_t total = 0;
        bool consistent = axis >= 0 && axis < rank && !parts.empty();
        for (const auto& d : parts) {
          for (std::int64_t k = 0; consistent && k < rank; ++k) {
            consistent = k == axis ? d[static_cast<std::size_t>(k)] >= 0
                                   : d[static_cast<std::size_t>(k)] == x.dims[static_cast<std::size_t>(k)];
          }
          total += consistent ? d[static_cast<std::size_t>(axis)] : 0;
        }
        if (consistent && total == x.dims[static_cast<std::size_t>(axis)]) {
          std::int64_t outer = 1, inner = 1;
          for (std::int64_t k = 0; k < rank; ++k) {
            if (k < axis) {
              outer *= x.dims[static_cast<std::size_t>(k)];
            } else if (k > axis) {
              inner *= x.dims[static_cast<std::size_t>(k)];
            }
          }
          std::int64_t offset = 0;
          for (int k = 0; k < node.output_size(); ++k) {
            const Dims& d = parts[static_cast<std::size_t>(k)];
            const std::int64_t len = d[static_cast<std::size_t>(axis)];
            std::vector<std::int64_t> indices;
            indices.reserve(static_cast<std::size_t>(outer * len * inner));
            for (std::int64_t o = 0; o < outer; ++o) {
              for (std::int64_t j = offset; j < offset + len; ++j) {
                for (std::int64_t i = 0; i < inner; ++i) {
                  indices.push_back((o * total + j) * inner + i);
                }
              }
            }
            offset += len;
            ConstTensor part = x.take(indices, d);
            const std::string& out = node.output(k);
            if (!part.is_float() && part.dims.size() <= 1 && part.size() > 0) {
              onnx::TensorShapeProto as_shape;
              for (auto v : part.ints) {
                as_shape.add_dim()->set_dim_value(v);
              }
              r.generated[out] = std::move(as_shape);
            }
            const bool half =
                part.elem_type == onnx::TensorProto::FLOAT16 || part.elem_type == onnx::TensorProto::BFLOAT16;
            if (!half && data.find(out) == data.end()) {
              data[out] = &folded_protos.emplace_back(to_proto(part, out));
            }
            if (!part.is_float()) {
              r.folded[out] = part;
            }
            known[out] = std::move(part);
          }
        }
      }
    }
  }
}

} // namespace

} // namespace partita::onnx_import::detail
