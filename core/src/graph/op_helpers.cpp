#include "graph/op_helpers.h"

#include <algorithm>
#include <map>

namespace partita::graph::detail {

bool has_input(const Op& op, std::size_t i) {
  return i < op.inputs.size() && op.inputs[i] != no_tensor;
}

const Tensor& input(const Op& op, const Graph& g, std::size_t i) {
  if (!has_input(op, i)) {
    fail(op, fmt::format("input {} is missing", i));
  }
  return g.tensor(op.inputs[i]);
}

bool has_output(const Op& op, std::size_t i) {
  return i < op.outputs.size() && op.outputs[i] != no_tensor;
}

const Tensor& output(const Op& op, const Graph& g, std::size_t i) {
  if (!has_output(op, i)) {
    fail(op, fmt::format("output {} is missing", i));
  }
  return g.tensor(op.outputs[i]);
}

int add_dim(OpSemantics& s, std::string name, std::int64_t size, bool reduction, bool splittable) {
  s.dims.push_back(IterDim{std::move(name), size, reduction, splittable && size > 1});
  return static_cast<int>(s.dims.size()) - 1;
}

namespace {
void check_map(const Op& op, const Tensor& t, const OpSemantics& s, const std::vector<int>& dims) {
  if (dims.size() != t.shape.size()) {
    fail(op, fmt::format("tensor '{}' has rank {}, the description expects {}", t.name, t.shape.size(), dims.size()));
  }
  for (int d : dims) {
    if (d < -1 || d >= static_cast<int>(s.dims.size())) {
      fail(op, fmt::format("tensor '{}' maps to iteration dimension {} which does not exist", t.name, d));
    }
  }
}
} // namespace

void map_input(const Op& op, const Graph& g, OpSemantics& s, std::size_t i, std::vector<int> dims) {
  if (!has_input(op, i)) {
    return;
  }
  check_map(op, g.tensor(op.inputs[i]), s, dims);
  s.inputs.at(i).dims = std::move(dims);
}

void map_output(const Op& op, const Graph& g, OpSemantics& s, std::size_t i, std::vector<int> dims) {
  if (!has_output(op, i)) {
    return;
  }
  check_map(op, output(op, g, i), s, dims);
  s.outputs.at(i).dims = std::move(dims);
}

void broadcast_space(const Op& op, const Graph& g, OpSemantics& s, std::span<const std::string> names) {
  const Tensor& out = output(op, g, 0);
  const std::size_t rank = out.shape.size();
  std::vector<int> out_dims;
  for (std::size_t i = 0; i < rank; ++i) {
    std::string name = i < names.size() ? names[i] : fmt::format("d{}", i);
    out_dims.push_back(add_dim(s, std::move(name), out.shape[i]));
  }
  for (std::size_t k = 0; k < op.outputs.size(); ++k) {
    if (has_output(op, k) && output(op, g, k).shape.size() == rank) {
      map_output(op, g, s, k, out_dims);
    }
  }
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    if (!has_input(op, i)) {
      continue;
    }
    const Tensor& t = g.tensor(op.inputs[i]);
    if (t.shape.size() > rank) {
      fail(op, fmt::format("input '{}' of rank {} does not broadcast to the output's rank {}", t.name, t.shape.size(),
                           rank));
    }
    std::vector<int> dims(t.shape.size(), -1);
    const std::size_t offset = rank - t.shape.size();
    for (std::size_t j = 0; j < t.shape.size(); ++j) {
      const std::int64_t od = out.shape[offset + j];
      if (t.shape[j] == od) {
        dims[j] = out_dims[offset + j];
      } else if (t.shape[j] != 1) {
        fail(op, fmt::format("input '{}' of shape {} does not broadcast to {}", t.name, shape_string(t.shape),
                             shape_string(out.shape)));
      }
    }
    s.inputs.at(i).dims = std::move(dims);
  }
}

namespace {
void split_grad_costs(const Op& op, const Graph& g, OpSemantics& s, double per_input, std::size_t operands = SIZE_MAX) {
  for (std::size_t i = 0; i < std::min(op.inputs.size(), operands); ++i) {
    if (!has_input(op, i)) {
      continue;
    }
    const Tensor& t = g.tensor(op.inputs[i]);
    const InputSlot slot = i < s.slots.size() ? s.slots[i] : InputSlot::data;
    if (slot == InputSlot::index || slot == InputSlot::state || !gets_gradient(t)) {
      continue;
    }
    if (t.role == TensorRole::parameter) {
      s.bwd_weight_flops += per_input;
    } else {
      s.bwd_data_flops += per_input;
    }
  }
}
} // namespace

void contraction_costs(const Op& op, const Graph& g, OpSemantics& s, std::size_t operands) {
  s.macs = s.iteration_points();
  s.fwd_flops = 2 * s.macs;
  split_grad_costs(op, g, s, 2 * s.macs, operands);
}

void pointwise_costs(const Op& op, const Graph& g, OpSemantics& s, double fwd_per_point, double bwd_per_point) {
  const double points = s.iteration_points();
  s.fwd_flops = fwd_per_point * points;
  split_grad_costs(op, g, s, bwd_per_point * points);
}

void add_grad_flops(const Op& op, const Graph& g, OpSemantics& s, std::size_t i, double flops) {
  if (!has_input(op, i)) {
    return;
  }
  const InputSlot slot = i < s.slots.size() ? s.slots[i] : InputSlot::data;
  const Tensor& t = g.tensor(op.inputs[i]);
  if (slot == InputSlot::index || slot == InputSlot::state || !gets_gradient(t)) {
    return;
  }
  (t.role == TensorRole::parameter ? s.bwd_weight_flops : s.bwd_data_flops) += flops;
}

std::string spatial_name(std::string_view prefix, std::size_t i, std::size_t count) {
  static constexpr std::string_view dhw = "dhw";
  if (count == 1) {
    return fmt::format("{}l", prefix);
  }
  if (count <= 3) {
    return fmt::format("{}{}", prefix, dhw[3 - count + i]);
  }
  return fmt::format("{}{}", prefix, i);
}

int normalize_axis(const Op& op, std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  // Every caller indexes the op's dims with the result: a scalar (rank 0) has no axis to name.
  if (axis < -r || axis >= r) {
    fail(op, r == 0 ? fmt::format("axis {} names a dimension of a scalar, which has none", axis)
                    : fmt::format("axis {} is out of range for rank {}", axis, rank));
  }
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

void einsum_space(const Op& op, const Graph& g, OpSemantics& s, std::string_view equation) {
  std::string eq;
  for (char c : equation) {
    if (c != ' ') {
      eq += c;
    }
  }
  const auto arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (std::size_t start = 0;;) {
    const auto comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) {
      break;
    }
    start = comma + 1;
  }
  if (terms.size() != op.inputs.size()) {
    fail(op, fmt::format("equation '{}' has {} operands but the node has {} inputs", equation, terms.size(),
                         op.inputs.size()));
  }
  // Expand "..." into upper-case-free placeholder letters, right-aligned per operand.
  const std::string ellipsis_letters = "0123456789"; // never valid einsum letters
  std::size_t ellipsis_rank = 0;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const auto pos = terms[i].find("...");
    if (pos != std::string::npos) {
      const std::size_t explicit_letters = terms[i].size() - 3;
      const std::size_t rank = input(op, g, i).shape.size();
      if (rank < explicit_letters) {
        fail(op, fmt::format("operand {} of '{}' has rank {} < {} letters", i, equation, rank, explicit_letters));
      }
      ellipsis_rank = std::max(ellipsis_rank, rank - explicit_letters);
    }
  }
  if (ellipsis_rank > ellipsis_letters.size()) {
    fail(op, "too many broadcast dimensions in the equation");
  }
  auto expand = [&](const std::string& term, std::size_t rank) {
    const auto pos = term.find("...");
    if (pos == std::string::npos) {
      return term;
    }
    const std::size_t n = rank - (term.size() - 3);
    return term.substr(0, pos) + ellipsis_letters.substr(ellipsis_rank - n, n) + term.substr(pos + 3);
  };
  for (std::size_t i = 0; i < terms.size(); ++i) {
    terms[i] = expand(terms[i], input(op, g, i).shape.size());
  }
  std::string out_term;
  if (arrow == std::string::npos) {
    // Implicit output: broadcast dims, then letters used once, alphabetically.
    std::map<char, int> count;
    for (const auto& t : terms) {
      for (char c : t) {
        ++count[c];
      }
    }
    out_term = ellipsis_letters.substr(0, ellipsis_rank);
    for (auto [c, n] : count) {
      if (n == 1 && std::isalpha(static_cast<unsigned char>(c))) {
        out_term += c;
      }
    }
  } else {
    out_term = expand(eq.substr(arrow + 2), output(op, g, 0).shape.size());
  }
  // One iteration dim per letter; sizes from operands (broadcast size-1 allowed).
  std::map<char, int> dim_of;
  std::map<char, std::int64_t> size_of;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const Tensor& t = input(op, g, i);
    if (terms[i].size() != t.shape.size()) {
      fail(op, fmt::format("operand {} '{}' has rank {} but '{}' names {} dims", i, t.name, t.shape.size(), terms[i],
                           terms[i].size()));
    }
    for (std::size_t j = 0; j < terms[i].size(); ++j) {
      auto& sz = size_of[terms[i][j]];
      if (sz <= 1) {
        sz = t.shape[j];
      } else if (t.shape[j] != 1 && t.shape[j] != sz) {
        fail(op, fmt::format("letter '{}' has sizes {} and {}", terms[i][j], sz, t.shape[j]));
      }
    }
  }
  auto dim_for = [&](char c) {
    auto it = dim_of.find(c);
    if (it != dim_of.end()) {
      return it->second;
    }
    const bool reduction = out_term.find(c) == std::string::npos;
    std::string name = std::isdigit(static_cast<unsigned char>(c)) ? fmt::format("b{}", c) : std::string(1, c);
    const int d = add_dim(s, name, size_of[c], reduction);
    dim_of[c] = d;
    return d;
  };
  for (char c : out_term) {
    dim_for(c);
  }
  for (const auto& t : terms) {
    for (char c : t) {
      dim_for(c);
    }
  }
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const Tensor& t = input(op, g, i);
    std::vector<int> dims;
    for (std::size_t j = 0; j < terms[i].size(); ++j) {
      dims.push_back(t.shape[j] == 1 && size_of[terms[i][j]] != 1 ? -1 : dim_of[terms[i][j]]);
    }
    map_input(op, g, s, i, dims);
  }
  std::vector<int> out_dims;
  for (char c : out_term) {
    out_dims.push_back(dim_of[c]);
  }
  map_output(op, g, s, 0, out_dims);
}

} // namespace partita::graph::detail
