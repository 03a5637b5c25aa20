#pragma once

// Shared building blocks for the op descriptions in ops_*.cpp. Internal to core.

#include "partita/graph/error.h"
#include "partita/graph/op_semantics.h"

#include <fmt/format.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace partita::graph::detail {

// Tables of descriptors, one per op family file.
std::span<const OpDescriptor> contraction_ops();   // ops_contraction.cpp
std::span<const OpDescriptor> convolution_ops();   // ops_convolution.cpp
std::span<const OpDescriptor> elementwise_ops();   // ops_elementwise.cpp
std::span<const OpDescriptor> normalization_ops(); // ops_normalization.cpp (norms, softmax)
std::span<const OpDescriptor> pooling_ops();       // ops_pooling.cpp (pools, reductions)
std::span<const OpDescriptor> recurrent_ops();     // ops_recurrent.cpp
std::span<const OpDescriptor> movement_ops();      // ops_movement.cpp (data movement, embedding)
std::span<const OpDescriptor> shape_ops();         // ops_shape.cpp (views and metadata)
std::span<const OpDescriptor> quantized_ops();     // ops_quantized.cpp (ONNX Runtime's quantizer)

// Errors name the node.
[[noreturn]] inline void fail(const Op& op, std::string_view reason) {
  throw Error(fmt::format("node '{}' ({}): {}", op.name, op.type, reason));
}

const Tensor& input(const Op& op, const Graph& g, std::size_t i);  // fails if absent
const Tensor& output(const Op& op, const Graph& g, std::size_t i); // fails if absent
bool has_input(const Op& op, std::size_t i);
bool has_output(const Op& op, std::size_t i); // false for an omitted optional output

// Adds a dimension and returns its index.
int add_dim(OpSemantics& s, std::string name, std::int64_t size, bool reduction = false, bool splittable = true);

// Records how input/output `i` is indexed; dims.size() must equal the tensor's rank. Omitted
// optional tensors are skipped.
void map_input(const Op& op, const Graph& g, OpSemantics& s, std::size_t i, std::vector<int> dims);
void map_output(const Op& op, const Graph& g, OpSemantics& s, std::size_t i, std::vector<int> dims);

// Numpy-style broadcast: maps each input's dims right-aligned onto the output's dims
// (size-1 input dims that broadcast are unmapped). The iteration space is the output's dims,
// named d0, d1, ... unless `names` gives names for them.
void broadcast_space(const Op& op, const Graph& g, OpSemantics& s, std::span<const std::string> names = {});

// For a contraction (Gemm, MatMul, Conv, Einsum): macs = product of dims, forward 2 FLOPs per
// point, and 2 FLOPs per point for each data input and each parameter that needs a gradient.
// Only the first `operands` inputs are multiplied; later ones (a bias) are added by the caller.
void contraction_costs(const Op& op, const Graph& g, OpSemantics& s, std::size_t operands = SIZE_MAX);

// For pointwise-shaped work: `fwd_per_point` FLOPs per iteration point forward, and
// `bwd_per_point` per point for each input that needs a gradient (split into data and
// weight gradients by the input's role).
void pointwise_costs(const Op& op, const Graph& g, OpSemantics& s, double fwd_per_point, double bwd_per_point);

// Adds `flops` to the backward cost of input `i` when it is present and needs a gradient: to
// bwd_weight_flops for a parameter, to bwd_data_flops otherwise. Index and state slots get none.
void add_grad_flops(const Op& op, const Graph& g, OpSemantics& s, std::size_t i, double flops);

// Name of spatial dimension `i` of `count` (1-D: l; 2-D: h, w; 3-D: d, h, w; else 0, 1, ...)
// behind a prefix: spatial_name("o", 0, 2) == "oh".
std::string spatial_name(std::string_view prefix, std::size_t i, std::size_t count);

// Parses an ONNX Einsum equation ("bij,bjk->bik", with "..." for broadcast dims) into the
// iteration space: one dim per letter, reductions = letters absent from the output.
void einsum_space(const Op& op, const Graph& g, OpSemantics& s, std::string_view equation);

// Normalizes a possibly negative axis against `rank`; fails naming the node when out of range.
int normalize_axis(const Op& op, std::int64_t axis, std::size_t rank);

} // namespace partita::graph::detail
