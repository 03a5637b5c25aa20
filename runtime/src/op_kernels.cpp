#include "op_kernels.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <map>
#include <numeric>
#include <optional>

namespace partita::runtime {
namespace {

std::optional<Eltwise> eltwise_of(const std::string& type) {
  static const std::map<std::string, Eltwise, std::less<>> table{
      {"Relu", Eltwise::relu}, {"Tanh", Eltwise::tanh}, {"Sigmoid", Eltwise::sigmoid}, {"Gelu", Eltwise::gelu}};
  const auto it = table.find(type);
  return it == table.end() ? std::nullopt : std::optional<Eltwise>(it->second);
}

std::optional<Binary> binary_of(const std::string& type) {
  static const std::map<std::string, Binary, std::less<>> table{
      {"Add", Binary::add}, {"Sub", Binary::sub}, {"Mul", Binary::mul}, {"Div", Binary::div}};
  const auto it = table.find(type);
  return it == table.end() ? std::nullopt : std::optional<Binary>(it->second);
}

std::int64_t product(const Dims& d, std::size_t from = 0, std::size_t to = std::string::npos) {
  std::int64_t p = 1;
  for (std::size_t i = from; i < d.size() && i < to; ++i) {
    p *= d[i];
  }
  return p;
}

// Right-aligned to `rank` dims with leading 1s (numpy broadcasting).
Dims aligned(const Dims& d, std::size_t rank) {
  Dims r(rank - d.size(), 1);
  r.insert(r.end(), d.begin(), d.end());
  return r;
}

int softmax_axis(const graph::Op& op, std::size_t rank) {
  auto axis = op.attr_int("axis", -1);
  if (axis < 0) {
    axis += static_cast<std::int64_t>(rank);
  }
  return static_cast<int>(axis);
}

// A MatMul on shards: A [..., m, k] and B [..., k, n] with equal batch dims, or B a matrix
// (then A's batch folds into m).
struct MatmulPlan {
  MatmulShape shape;
  bool fold = false; // B is a matrix shared by A's whole batch
};

MatmulPlan matmul_plan(const graph::Op& op, const Dims& a, const Dims& b) {
  if (a.size() < 2 || b.size() < 2) {
    throw Error(fmt::format("op '{}': MatMul of rank-1 operands has no kernel", op.name));
  }
  MatmulPlan p;
  p.shape.m = a[a.size() - 2];
  p.shape.k = a.back();
  p.shape.n = b.back();
  if (b[b.size() - 2] != p.shape.k) {
    throw Error(fmt::format("op '{}': local shards disagree on the contracted extent ({} vs {})", op.name, p.shape.k,
                            b[b.size() - 2]));
  }
  if (b.size() == 2) {
    p.fold = true;
    p.shape.m *= product(a, 0, a.size() - 2);
  } else {
    if (Dims(a.begin(), a.end() - 2) != Dims(b.begin(), b.end() - 2)) {
      throw Error(fmt::format("op '{}': MatMul with broadcast batch dims has no kernel", op.name));
    }
    p.shape.batch = product(a, 0, a.size() - 2);
  }
  return p;
}

} // namespace

std::string missing_kernel(const graph::Graph& g, graph::OpId id) {
  const graph::Op& op = g.op(id);
  for (const auto t : op.inputs) {
    if (t != graph::no_tensor && g.tensor(t).dtype != graph::DType::f32) {
      return fmt::format("input '{}' is {}, kernels are fp32", g.tensor(t).name, graph::dtype_name(g.tensor(t).dtype));
    }
  }
  if (op.type == "MatMul") {
    const auto ra = g.tensor(op.inputs[0]).shape.size(), rb = g.tensor(op.inputs[1]).shape.size();
    if (ra < 2 || rb < 2) {
      return "MatMul of rank-1 operands";
    }
    if (rb > 2 && ra != rb) {
      return "MatMul with broadcast batch dims";
    }
    return {};
  }
  if (eltwise_of(op.type) || binary_of(op.type)) {
    return {};
  }
  if (op.type == "Softmax") {
    return {};
  }
  return fmt::format("no kernel for {} yet", op.type);
}

void run_forward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buf) {
  const graph::Op& op = g.op(id);
  if (op.type == "MatMul") {
    const auto p = matmul_plan(op, buf.inputs[0]->extents(), buf.inputs[1]->extents());
    backend.matmul(p.shape, buf.inputs[0]->data.data(), false, buf.inputs[1]->data.data(), false,
                   buf.outputs[0]->data.data());
  } else if (const auto e = eltwise_of(op.type)) {
    backend.eltwise_forward(*e, buf.inputs[0]->elements(), buf.inputs[0]->data.data(), buf.outputs[0]->data.data());
  } else if (const auto b = binary_of(op.type)) {
    const Dims c = buf.outputs[0]->extents();
    backend.binary(*b, aligned(buf.inputs[0]->extents(), c.size()), buf.inputs[0]->data.data(),
                   aligned(buf.inputs[1]->extents(), c.size()), buf.inputs[1]->data.data(), c,
                   buf.outputs[0]->data.data());
  } else if (op.type == "Softmax") {
    const Dims d = buf.inputs[0]->extents();
    backend.softmax_forward(d, softmax_axis(op, d.size()), buf.inputs[0]->data.data(), buf.outputs[0]->data.data());
  } else {
    std::int64_t bytes = 0;
    for (const auto* s : buf.inputs) {
      bytes += s != nullptr ? s->elements() * 4 : 0;
    }
    for (const auto* s : buf.outputs) {
      bytes += s != nullptr ? s->elements() * 4 : 0;
    }
    backend.memory_bound(bytes);
  }
}

void run_backward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buf,
                  const std::vector<const Shard*>& d_out, const std::vector<Shard*>& d_in) {
  const graph::Op& op = g.op(id);
  const auto wants = [&](std::size_t i) { return i < d_in.size() && d_in[i] != nullptr; };
  if (op.type == "MatMul") {
    const Shard& a = *buf.inputs[0];
    const Shard& b = *buf.inputs[1];
    const Shard& dy = *d_out[0];
    const auto p = matmul_plan(op, a.extents(), b.extents());
    const auto& s = p.shape;
    if (wants(0)) { // dA[m, k] = dY[m, n] . B^T
      backend.matmul({s.batch, s.m, s.k, s.n}, dy.data.data(), false, b.data.data(), true, d_in[0]->data.data());
    }
    if (wants(1)) { // dB[k, n] = A^T . dY; a folded batch is summed by the contraction over m
      backend.matmul({s.batch, s.k, s.n, s.m}, a.data.data(), true, dy.data.data(), false, d_in[1]->data.data());
    }
  } else if (const auto e = eltwise_of(op.type)) {
    if (wants(0)) {
      backend.eltwise_backward(*e, buf.inputs[0]->elements(), buf.inputs[0]->data.data(), d_out[0]->data.data(),
                               d_in[0]->data.data());
    }
  } else if (const auto b = binary_of(op.type)) {
    const Dims c = d_out[0]->extents();
    const Dims ad = aligned(buf.inputs[0]->extents(), c.size());
    const Dims bd = aligned(buf.inputs[1]->extents(), c.size());
    const float* dy = d_out[0]->data.data();
    std::vector<float> full(static_cast<std::size_t>(product(c)));
    if (wants(0)) { // dA = reduce(dY (op) ...)
      switch (*b) {
      case Binary::add:
      case Binary::sub: backend.reduce_sum(c, dy, ad, d_in[0]->data.data()); break;
      case Binary::mul:
        backend.binary(Binary::mul, c, dy, bd, buf.inputs[1]->data.data(), c, full.data());
        backend.reduce_sum(c, full.data(), ad, d_in[0]->data.data());
        break;
      case Binary::div:
        backend.binary(Binary::div, c, dy, bd, buf.inputs[1]->data.data(), c, full.data());
        backend.reduce_sum(c, full.data(), ad, d_in[0]->data.data());
        break;
      }
    }
    if (wants(1)) {
      float* db = d_in[1]->data.data();
      switch (*b) {
      case Binary::add: backend.reduce_sum(c, dy, bd, db); break;
      case Binary::sub:
        backend.reduce_sum(c, dy, bd, db);
        for (auto& v : d_in[1]->data) {
          v = -v;
        }
        break;
      case Binary::mul:
        backend.binary(Binary::mul, c, dy, ad, buf.inputs[0]->data.data(), c, full.data());
        backend.reduce_sum(c, full.data(), bd, db);
        break;
      case Binary::div: { // dB = -dY * A / B^2 = -(dY * Y) / B
        backend.binary(Binary::mul, c, dy, c, buf.outputs[0]->data.data(), c, full.data());
        backend.binary(Binary::div, c, full.data(), bd, buf.inputs[1]->data.data(), c, full.data());
        backend.reduce_sum(c, full.data(), bd, db);
        for (auto& v : d_in[1]->data) {
          v = -v;
        }
        break;
      }
      }
    }
  } else if (op.type == "Softmax") {
    if (wants(0)) {
      const Dims d = buf.outputs[0]->extents();
      backend.softmax_backward(d, softmax_axis(op, d.size()), buf.outputs[0]->data.data(), d_out[0]->data.data(),
                               d_in[0]->data.data());
    }
  } else {
    std::int64_t bytes = 0;
    for (const auto* s : d_out) {
      bytes += s != nullptr ? 2 * s->elements() * 4 : 0;
    }
    for (const auto* s : d_in) {
      bytes += s != nullptr ? s->elements() * 4 : 0;
    }
    backend.memory_bound(bytes);
  }
}

} // namespace partita::runtime
