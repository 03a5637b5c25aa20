#include "onnx/interleave_projections.h"

#include "partita/graph/op_semantics.h"

#include <fmt/format.h>

#include <optional>
#include <vector>

namespace partita::onnx_import {

namespace {

using graph::Graph;
using graph::OpClass;
using graph::OpId;
using graph::Tensor;
using graph::TensorId;
using graph::TensorRole;

// Whether dim `axis` of activation `t` can have its positions permuted for free: every value
// along it comes, column by column, from columns of parameters that only this chain reads (a
// product's output features, a bias added to them, an element-wise function of them), and the
// chain's tensors are read by nothing but the next op of the chain.
bool permutable(const Graph& g, TensorId t, std::size_t axis, int depth) {
  const Tensor& x = g.tensor(t);
  if (depth > 32 || x.role != TensorRole::activation || x.producer < 0 || x.consumers.size() != 1 ||
      g.is_graph_output(t)) {
    return false;
  }
  const graph::Op& op = g.op(x.producer);
  const graph::OpSemantics s = graph::describe(g, x.producer);
  if (!s.opaque_reason.empty() ||
      (s.op_class != OpClass::contraction && s.op_class != OpClass::elementwise && s.op_class != OpClass::shape)) {
    return false;
  }
  std::optional<std::size_t> out;
  for (std::size_t k = 0; k < op.outputs.size(); ++k) {
    if (op.outputs[k] == t) {
      out = k;
    }
  }
  if (!out || s.outputs[*out].dims.size() != x.shape.size()) {
    return false;
  }
  const int dim = s.outputs[*out].dims[axis];
  if (dim < 0 || s.dims[static_cast<std::size_t>(dim)].reduction || s.dims[static_cast<std::size_t>(dim)].statistics) {
    return false;
  }
  bool from_parameter = false;
  for (std::size_t j = 0; j < op.inputs.size() && j < s.inputs.size(); ++j) {
    const TensorId u = op.inputs[j];
    if (u == graph::no_tensor) {
      continue;
    }
    const auto& dims = s.inputs[j].dims;
    std::optional<std::size_t> at;
    for (std::size_t b = 0; b < dims.size(); ++b) {
      if (dims[b] == dim) {
        if (at) {
          return false; // the dim indexes the input twice (a diagonal)
        }
        at = b;
      }
    }
    if (!at) {
      continue; // broadcast along it: the same for every column
    }
    const Tensor& in = g.tensor(u);
    if (in.shape[*at] != x.shape[axis]) {
      return false;
    }
    if (in.role == TensorRole::parameter && in.consumers.size() == 1) {
      from_parameter = true;
    } else if (in.role == TensorRole::activation && permutable(g, u, *at, depth + 1)) {
      from_parameter = true;
    } else {
      return false; // data, a constant whose values are fixed, or a weight read elsewhere too
    }
  }
  return from_parameter;
}

struct Rewrite {
  std::size_t axis = 0;
  std::int64_t part = 0; // C, the columns of each part
  std::int64_t parts = 0;
};

// The Split's equal parts along its axis, when its input can be laid out part by part.
std::optional<Rewrite> rewrite_of(const Graph& g, OpId id) {
  const graph::Op& op = g.op(id);
  if (op.type != "Split" || !op.domain.empty() || op.inputs.empty() || op.inputs[0] == graph::no_tensor ||
      op.outputs.size() < 2) {
    return std::nullopt;
  }
  const Tensor& x = g.tensor(op.inputs[0]);
  std::int64_t axis = op.attr_int("axis", 0);
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  if (axis < -rank || axis >= rank) {
    return std::nullopt; // the op's description reports it
  }
  axis = axis < 0 ? axis + rank : axis;
  const auto a = static_cast<std::size_t>(axis);
  Rewrite r{a, 0, static_cast<std::int64_t>(op.outputs.size())};
  for (const TensorId o : op.outputs) {
    if (o == graph::no_tensor || g.tensor(o).shape.size() != x.shape.size()) {
      return std::nullopt;
    }
    const std::int64_t c = g.tensor(o).shape[a];
    if (r.part != 0 && c != r.part) {
      return std::nullopt; // unequal parts: no common column block
    }
    r.part = c;
  }
  if (r.part < 2 || r.part * r.parts != x.shape[a] || !permutable(g, op.inputs[0], a, 0)) {
    return std::nullopt;
  }
  return r;
}

std::string unused_name(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int i = 1; g.find_tensor(name) != graph::no_tensor; ++i) {
    name = fmt::format("{}.{}", base, i);
  }
  return name;
}

TensorId int_constant(Graph& g, const std::string& name, std::vector<std::int64_t> values) {
  Tensor t;
  t.name = unused_name(g, name);
  t.shape = {static_cast<std::int64_t>(values.size())};
  t.dtype = graph::DType::i64;
  t.role = TensorRole::constant;
  t.int_values = std::move(values);
  return g.add_tensor(std::move(t));
}

} // namespace

int interleave_fused_projections(Graph& g) {
  std::vector<std::optional<Rewrite>> rewrites(g.ops().size());
  int count = 0;
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    rewrites[i] = rewrite_of(g, static_cast<OpId>(i));
    count += rewrites[i] ? 1 : 0;
  }
  if (count == 0) {
    return 0;
  }
  // Rebuilt with the same tensor ids (new tensors after the old ones), ops in the same order with
  // the rewritten ones' new ops around them.
  Graph out;
  out.name = g.name;
  for (const Tensor& t : g.tensors()) {
    Tensor copy = t;
    copy.producer = -1;
    copy.consumers.clear();
    out.add_tensor(std::move(copy));
  }
  out.graph_inputs = g.graph_inputs;
  out.graph_outputs = g.graph_outputs;
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    graph::Op op = g.op(static_cast<OpId>(i));
    if (!rewrites[i]) {
      out.add_op(std::move(op));
      continue;
    }
    const Rewrite& r = *rewrites[i];
    const Tensor& x = g.tensor(op.inputs[0]);
    const auto a = static_cast<std::ptrdiff_t>(r.axis);
    graph::Shape viewed = x.shape;
    viewed[r.axis] = r.parts;
    viewed.insert(viewed.begin() + a, r.part); // [.., C, P, ..]

    Tensor view;
    view.name = unused_name(out, x.name + ".part_interleaved");
    view.shape = viewed;
    view.dtype = x.dtype;
    const TensorId view_id = out.add_tensor(std::move(view));
    graph::Op reshape;
    reshape.name = op.name + ".interleave";
    reshape.type = "Reshape";
    reshape.inputs = {op.inputs[0], int_constant(out, op.name + ".interleave.shape", viewed)};
    reshape.outputs = {view_id};
    out.add_op(std::move(reshape));

    const TensorId axes = int_constant(out, op.name + ".part_axis", {static_cast<std::int64_t>(r.axis + 1)});
    graph::Op split = op;
    split.attrs.erase("split");
    split.attrs["axis"] = static_cast<std::int64_t>(r.axis + 1);
    split.inputs = {view_id, int_constant(out, op.name + ".parts", std::vector<std::int64_t>(op.outputs.size(), 1))};
    split.outputs.clear();
    std::vector<graph::Op> squeezes;
    for (std::size_t k = 0; k < op.outputs.size(); ++k) {
      const Tensor& o = g.tensor(op.outputs[k]);
      Tensor part;
      part.name = unused_name(out, o.name + ".part");
      part.shape = viewed;
      part.shape[r.axis + 1] = 1;
      part.dtype = o.dtype;
      split.outputs.push_back(out.add_tensor(std::move(part)));
      graph::Op squeeze;
      squeeze.name = fmt::format("{}.part{}", op.name, k);
      squeeze.type = "Squeeze";
      squeeze.inputs = {split.outputs.back(), axes};
      squeeze.outputs = {op.outputs[k]};
      squeezes.push_back(std::move(squeeze));
    }
    out.add_op(std::move(split));
    for (auto& s : squeezes) {
      out.add_op(std::move(s));
    }
  }
  g = std::move(out);
  return count;
}

} // namespace partita::onnx_import
