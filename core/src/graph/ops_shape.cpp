// Shape plumbing: views and metadata that move no data (0 FLOPs, no bytes). They still have an
// iteration space, so that a split passes through a Reshape instead of forcing a gather.

#include "graph/op_helpers.h"

namespace partita::graph::detail {
namespace {

std::vector<int> output_space(const Op& op, const Graph& g, OpSemantics& s) {
  std::vector<int> dims;
  const Shape& y = output(op, g, 0).shape;
  for (std::size_t i = 0; i < y.size(); ++i) {
    dims.push_back(add_dim(s, fmt::format("d{}", i), y[i]));
  }
  return dims;
}

// Groups input and output dims into runs with equal products (size-1 dims aside): [B, S, H*D] and
// [B, S, H, D] give runs {B}{B}, {S}{S}, {H*D}{H, D}. In each run the outermost input dim maps to
// the outermost output dim: a split of that dim that divides both is the same contiguous block of
// elements on either side, so a batch or head split passes through. Other dims are read whole.
std::vector<int> reshape_map(const Op& op, const Shape& in, const Shape& out, const std::vector<int>& dims) {
  std::vector<int> m(in.size(), -1);
  std::size_t i = 0;
  std::size_t j = 0;
  auto mismatch = [&] {
    fail(op, fmt::format("input shape {} and output shape {} have different element counts", shape_string(in),
                         shape_string(out)));
  };
  while (i < in.size() && j < out.size()) {
    if (in[i] == 1) {
      ++i;
      continue;
    }
    if (out[j] == 1) {
      ++j;
      continue;
    }
    const std::size_t i0 = i;
    const std::size_t j0 = j;
    std::int64_t pi = in[i];
    std::int64_t pj = out[j];
    while (pi != pj) {
      if (pi < pj) {
        if (++i == in.size()) {
          mismatch();
        }
        pi *= in[i];
      } else {
        if (++j == out.size()) {
          mismatch();
        }
        pj *= out[j];
      }
    }
    m[i0] = dims[j0];
    ++i;
    ++j;
  }
  for (; i < in.size(); ++i) {
    if (in[i] != 1) {
      mismatch();
    }
  }
  for (; j < out.size(); ++j) {
    if (out[j] != 1) {
      mismatch();
    }
  }
  return m;
}

// Reshape, Flatten, Squeeze, Unsqueeze.
void describe_view(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  map_input(op, g, s, 0, reshape_map(op, input(op, g, 0).shape, output(op, g, 0).shape, dims));
  map_output(op, g, s, 0, dims);
}

void describe_identity(const Op& op, const Graph& g, OpSemantics& s) {
  const std::vector<int> dims = output_space(op, g, s);
  map_input(op, g, s, 0, dims);
  map_output(op, g, s, 0, dims);
}

// ConstantOfShape, Range, EyeLike: the output is generated, so any part of it can be made anywhere.
void describe_generated(const Op& op, const Graph& g, OpSemantics& s) {
  map_output(op, g, s, 0, output_space(op, g, s));
}

// Shape, Size, Constant, NonZero: small metadata or data-dependent outputs, nothing to split.
void describe_metadata(const Op&, const Graph&, OpSemantics&) {}

constexpr InputSlot D = InputSlot::data;
constexpr InputSlot I = InputSlot::index;
constexpr OpClass S = OpClass::shape;

const OpDescriptor table[] = {
    {"Reshape", S, {D, I}, describe_view},   {"Flatten", S, {D}, describe_view},
    {"Squeeze", S, {D, I}, describe_view},   {"Unsqueeze", S, {D, I}, describe_view},
    {"Identity", S, {D}, describe_identity}, {"Shape", S, {I}, describe_metadata},
    {"Size", S, {I}, describe_metadata},     {"Constant", S, {}, describe_metadata},
    {"NonZero", S, {I}, describe_metadata},  {"ConstantOfShape", S, {I}, describe_generated},
    {"Range", S, {I}, describe_generated},   {"EyeLike", S, {I}, describe_generated},
};

} // namespace

std::span<const OpDescriptor> shape_ops() {
  return table;
}

} // namespace partita::graph::detail
