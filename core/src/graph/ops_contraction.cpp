// Contractions: Y = sum over shared dims of products. MatMul and Gemm are einsums with a fixed
// equation; Einsum reads its own.

#include "graph/op_helpers.h"

namespace partita::graph::detail {
namespace {

// Y[..., m, n] = sum_k A[..., m, k] * B[..., k, n]; 1-D operands drop m or n (numpy matmul).
void describe_matmul(const Op& op, const Graph& g, OpSemantics& s) {
  const std::size_t ra = input(op, g, 0).shape.size();
  const std::size_t rb = input(op, g, 1).shape.size();
  if (ra == 0 || rb == 0) {
    fail(op, "MatMul operands must have rank >= 1");
  }
  const std::string a = ra == 1 ? "k" : "...mk";
  const std::string b = rb == 1 ? "k" : "...kn";
  std::string y = (ra == 1 && rb == 1) ? "" : "...";
  if (ra != 1) {
    y += "m";
  }
  if (rb != 1) {
    y += "n";
  }
  einsum_space(op, g, s, a + "," + b + "->" + y);
  contraction_costs(op, g, s);
}

// Y[m, n] = alpha * A'[m, k] B'[k, n] + beta * C, C broadcast to [m, n].
void describe_gemm(const Op& op, const Graph& g, OpSemantics& s) {
  const Tensor& a = input(op, g, 0);
  const Tensor& b = input(op, g, 1);
  if (a.shape.size() != 2 || b.shape.size() != 2) {
    fail(op, "Gemm operands must be matrices");
  }
  const bool ta = op.attr_int("transA", 0) != 0;
  const bool tb = op.attr_int("transB", 0) != 0;
  const std::int64_t m = ta ? a.shape[1] : a.shape[0];
  const std::int64_t k = ta ? a.shape[0] : a.shape[1];
  const std::int64_t n = tb ? b.shape[0] : b.shape[1];
  if ((tb ? b.shape[1] : b.shape[0]) != k) {
    fail(op, fmt::format("inner dimensions differ: A {} and B {}", shape_string(a.shape), shape_string(b.shape)));
  }
  const int dm = add_dim(s, "m", m);
  const int dn = add_dim(s, "n", n);
  const int dk = add_dim(s, "k", k, true);
  map_input(op, g, s, 0, ta ? std::vector<int>{dk, dm} : std::vector<int>{dm, dk});
  map_input(op, g, s, 1, tb ? std::vector<int>{dn, dk} : std::vector<int>{dk, dn});
  if (has_input(op, 2)) {
    const Tensor& c = input(op, g, 2);
    std::vector<int> dims(c.shape.size(), -1);
    const std::vector<int> out{dm, dn};
    const std::vector<std::int64_t> sizes{m, n};
    for (std::size_t j = 0; j < c.shape.size() && j < 2; ++j) {
      const std::size_t o = 2 - c.shape.size() + j;
      dims[j] = c.shape[j] == sizes[o] && sizes[o] != 1 ? out[o] : -1;
    }
    map_input(op, g, s, 2, dims);
  }
  map_output(op, g, s, 0, {dm, dn});
  contraction_costs(op, g, s, 2);
  if (has_input(op, 2)) {
    const double mn = static_cast<double>(m) * static_cast<double>(n);
    s.fwd_flops += mn;
    if (gets_gradient(input(op, g, 2))) {
      (input(op, g, 2).role == TensorRole::parameter ? s.bwd_weight_flops : s.bwd_data_flops) += mn;
    }
  }
}

void describe_einsum(const Op& op, const Graph& g, OpSemantics& s) {
  const std::string eq = op.attr_string("equation", "");
  if (eq.empty()) {
    fail(op, "attribute 'equation' is missing");
  }
  einsum_space(op, g, s, eq);
  contraction_costs(op, g, s);
}

const OpDescriptor table[] = {
    {"MatMul", OpClass::contraction, {InputSlot::data, InputSlot::data}, describe_matmul},
    {"Gemm", OpClass::contraction, {InputSlot::data, InputSlot::data, InputSlot::data}, describe_gemm},
    {"Einsum", OpClass::contraction, {InputSlot::data}, describe_einsum},
};

} // namespace

std::span<const OpDescriptor> contraction_ops() {
  return table;
}

} // namespace partita::graph::detail
