#pragma once

// ONNX import: ModelProto (libonnx's protobufs) -> partita::graph::Graph. Reads shapes only:
// initializer bytes are never loaded, except small tensors needed for shape computation.
// Replaces symbolic dimensions with user-given values, then runs ONNX shape inference node by
// node with a constant folder that evaluates the shape computations exporters emit.

#include "partita/graph/graph.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace onnx {
class ModelProto;
}

namespace partita::onnx_import {

struct ImportOptions {
  // Values for dynamic dimensions of the graph inputs, by two kinds of key:
  // - a symbolic dimension's name (dim_param), e.g. {"batch", 32}, {"seq", 512};
  // - "INPUT:AXIS" for one axis of one input, named or not, e.g. {"X:0", 8} (an input named
  //   "x:0", as tf2onnx writes them, is "x:0:0").
  // "batch", when no input has a dimension of that name, sets axis 0 of every input whose axis 0
  // is dynamic (so that --batch works for any export).
  std::map<std::string, std::int64_t> dims;
};

// A key "INPUT:AXIS" split at its last ':' when what follows is a non-negative integer.
struct AxisKey {
  std::string input;
  std::int64_t axis = 0;
};
std::optional<AxisKey> axis_key(std::string_view key);

// "batch=32&seq=128&X:0=8" (also ',' or spaces between pairs) -> dynamic dimension values;
// throws partita::Error naming the pair that is not NAME=VALUE or INPUT:AXIS=VALUE with a
// positive integer value.
ImportOptions parse_dims(std::string_view text);
// The inverse: "batch=32&seq=128", names in order.
std::string format_dims(const ImportOptions& options);

struct ImportResult {
  graph::Graph graph;
  std::vector<std::string> warnings; // opaque ops by name, folded/ignored details
  std::int64_t opset = 0;            // default-domain opset
  std::string producer;              // producer_name + version
  // Parameters held in Constant nodes rather than initializers (Paddle2ONNX writes them so).
  std::int64_t constant_node_params = 0;
};

// Throws partita::Error naming the file, node or field and the reason.
ImportResult import_file(const std::filesystem::path& path, const ImportOptions& options = {});
ImportResult import_bytes(std::string_view bytes, std::string_view source, const ImportOptions& options = {});
// Takes the model by value: shape inference annotates it.
ImportResult import_model(onnx::ModelProto model, std::string_view source, const ImportOptions& options = {});

// Lowest and highest default-domain opset the importer accepts.
inline constexpr std::int64_t min_opset = 7;
inline constexpr std::int64_t max_opset = 21;

} // namespace partita::onnx_import
