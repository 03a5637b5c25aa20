#pragma once

// The constant folder: evaluates a node whose inputs are all known (initializers, Constant
// outputs, values folded before it, and shapes, which the user's symbolic dimension values make
// concrete), so that the Reshape, Resize, Expand, Range, Pad and ConstantOfShape targets that
// exporters compute with chains such as Shape -> Gather -> Unsqueeze -> Concat are known to
// shape inference. Each op's rule lives in one table, keyed by op type (constant_folding.cpp).

#include "onnx/const_tensor.h"

#include <onnx/onnx_pb.h>

#include <optional>
#include <vector>

namespace partita::onnx_import::detail {

// `values[i]` is input i's contents, or nullptr when unknown or absent; `types[i]` its type, or
// nullptr. Returns the node's (first) output, or nullopt when the op has no rule, an input it
// reads is unknown, or the result would be larger than max_fold_elements. Throws FoldError
// with the reason when the inputs are known but the op cannot be evaluated on them.
std::optional<ConstTensor> fold_node(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& values,
                                     const std::vector<const onnx::TypeProto*>& types);

// Whether the folder has a rule for this op type (default domain).
bool has_fold_rule(const std::string& op_type);

} // namespace partita::onnx_import::detail
