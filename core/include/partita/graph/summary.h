#pragma once

// The per-layer table `partita inspect` prints and the GUI shows: one row per op with its
// output shape, parameter count, FLOPs and activation bytes, and the model's totals.

#include "partita/graph/graph.h"
#include "partita/graph/op_semantics.h"

#include <cstdint>
#include <string>
#include <vector>

namespace partita::graph {

struct LayerRow {
  OpId op = -1;
  std::string name;
  std::string type;
  OpClass op_class = OpClass::opaque;
  Shape output_shape;
  std::int64_t params = 0; // parameters first read by this op (a shared weight counts once)
  double macs = 0;
  double fwd_flops = 0;
  double bwd_flops = 0;              // data + weight gradients
  std::int64_t activation_bytes = 0; // outputs of this op
  std::string opaque_reason;
};

struct ModelSummary {
  std::string model;
  std::vector<LayerRow> rows; // topological order
  std::int64_t params = 0;
  std::int64_t param_bytes = 0;
  double macs = 0;
  double fwd_flops = 0;
  double bwd_flops = 0;
  std::int64_t activation_bytes = 0;
  std::vector<std::string> opaque_ops; // "name (Type): reason"
};

ModelSummary summarize(const Graph& g);

} // namespace partita::graph
