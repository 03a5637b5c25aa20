#pragma once

// ONNX shape inference run one node at a time, in dataflow order, through libonnx's own
// per-op inference and data-propagation functions. Doing the loop ourselves lets every failure
// name its node, lets ops unknown to ONNX pass on their first input's type, and lets a guard
// check what libonnx 1.12's inference functions assume but do not check (they read out of
// bounds on some inconsistent inputs, which the fuzzer found).
//
// The constant folder (constant_folding.h) evaluates each node whose inputs are known just
// before its inference runs, and what it computes (a Reshape target, a Resize size) is data to
// the inference of the nodes after it. Inferring and folding node by node in dataflow order
// reaches in one pass the fixed point of "infer all, fold what became known, repeat": every node
// is visited once everything its inputs can ever be known as is known.

#include "onnx/const_tensor.h"

#include <onnx/onnx_pb.h>

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace partita::onnx_import::detail {

struct InferredValues {
  std::unordered_map<std::string, onnx::TypeProto> types;            // every value's type
  std::unordered_map<std::string, onnx::TensorShapeProto> generated; // integer contents, by data propagation
  std::unordered_map<std::string, ConstTensor> folded;               // integer node outputs the folder evaluated
  // Values whose shape is unknown because they are computed from the output of an op of a foreign
  // domain (com.microsoft, ai.onnx.ml, ...) that the file gives no value_info for: that op's label.
  std::unordered_map<std::string, std::string> unknown_because;
};

// `graph` must have been checked for dangling references and cycles. Throws partita::Error
// naming `source` and the node.
InferredValues infer_node_by_node(onnx::GraphProto& graph, const std::unordered_map<std::string, int>& opsets,
                                  std::string_view source, std::vector<std::string>& warnings);

} // namespace partita::onnx_import::detail
