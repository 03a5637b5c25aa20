#pragma once

// Gives every value of an ONNX graph a concrete shape: symbolic dimensions replaced by the
// user's values, then ONNX shape inference with the constant folder (which evaluates the Shape ->
// Gather -> Concat -> Reshape chains exporters emit). Ops ONNX does not know get their first
// input's type, with a warning, so that inference can go on past them.

#include "partita/onnx/import.h"

#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace partita::onnx_import::detail {

struct ShapeResolution {
  std::unordered_map<std::string, onnx::TypeProto> types;            // every value's type
  std::unordered_map<std::string, std::vector<std::int64_t>> values; // integer contents, folded or propagated
  std::unordered_map<std::string, std::string> unknown_because;      // see InferredValues
  // The symbolic dimensions given values (by name, --batch's included): what a later resolution
  // of the same model, after If inlining, substitutes in the value_info the branches bring.
  std::map<std::string, std::int64_t> named_dims;
};

// Throws partita::Error naming every unresolved symbolic dimension, or the node whose shape
// inference failed.
ShapeResolution resolve_shapes(onnx::ModelProto& model, std::string_view source, const ImportOptions& options,
                               std::vector<std::string>& warnings);

} // namespace partita::onnx_import::detail
