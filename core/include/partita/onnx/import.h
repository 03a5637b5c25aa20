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
#include <utility>
#include <vector>

namespace onnx {
class ModelProto;
}

namespace partita::onnx_import {

struct ImportOptions {
  ImportOptions() = default;
  ImportOptions(std::map<std::string, std::int64_t> dims_, // NOLINT: {{"batch", 8}} reads as the dims
                std::map<std::string, std::vector<std::int64_t>> values_ = {})
      : dims(std::move(dims_)), values(std::move(values_)) {}

  // Values for dynamic dimensions of the graph inputs, by two kinds of key:
  // - a symbolic dimension's name (dim_param), e.g. {"batch", 32}, {"seq", 512};
  // - "INPUT:AXIS" for one axis of one input, named or not, e.g. {"X:0", 8} (an input named
  //   "x:0", as tf2onnx writes them, is "x:0:0").
  // "batch", when no input has a dimension of that name, sets axis 0 of every input whose axis 0
  // is dynamic (so that --batch works for any export).
  std::map<std::string, std::int64_t> dims;
  // Contents for graph inputs that are settings rather than data (a sample rate, a flag such as
  // Optimum's use_cache_branch, a length), by input name: an integer or boolean input is fixed to
  // these values, row-major (a scalar takes one; a rank-1 input of dynamic length takes as many
  // as are given). What is computed from them folds, and an If whose condition folds is replaced
  // by the branch it takes.
  std::map<std::string, std::vector<std::int64_t>> values;
};

// "NAME=VALUE" or "NAME=[V1,V2,...]" (integers, or true/false) -> one input's contents; throws
// partita::Error naming the text when it is not that.
std::pair<std::string, std::vector<std::int64_t>> parse_value(std::string_view text);
// The inverse: "NAME=VALUE" for one value, "NAME=[V1,V2]" for several.
std::string format_value(const std::string& name, const std::vector<std::int64_t>& values);
// Adds one INPUT=VALUE (parse_value) to options.values; partita::Error when the input is given twice.
void add_value(ImportOptions& options, std::string_view text);
// Several values in one line, "sr=16000 use_cache_branch=false m=[1, 2]" (separated by spaces,
// '&' or ';' outside brackets), each added with add_value.
void parse_values(std::string_view text, ImportOptions& options);
// The inverse: options.values as "a=1 b=[1,2]", names in order.
std::string format_values(const ImportOptions& options);

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
  // The If nodes of the main graph replaced by the branch their condition takes, once it folded
  // (from initializers, shapes or --value), in the order they were replaced: a branch's nodes
  // join the graph, with an Identity from each branch output to the If's output.
  struct InlinedIf {
    std::string node;   // the If's name (its first output's when it has none)
    std::string output; // its first output, which names it in the file
    std::string branch; // then_branch or else_branch
    std::string condition;
    int nodes = 0; // the branch's nodes
  };
  std::vector<InlinedIf> inlined;
  // Ops the interleaving of fused projections added (interleave_projections.h): a Reshape before,
  // and a Squeeze per part after, each Split it rewrote.
  int interleaved_ops = 0;
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
