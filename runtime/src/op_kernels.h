#pragma once

// Graph ops onto backend kernels, on the local shards of one rank. Because every op is described
// by its iteration space (graph/op_semantics.h), the kernel on a shard is the op itself on the
// shard's extents: a split reduction dim leaves a partial sum, a replicated input a partial
// gradient, and the executor reduces those over the groups the core names.

#include "backend.h"
#include "shard.h"

#include "partita/graph/graph.h"

#include <string>
#include <vector>

namespace partita::runtime {

// Empty when partita-run has a kernel for the op; otherwise why not (the op then runs a
// memory-bound stand-in of its byte count, reported as such).
std::string missing_kernel(const graph::Graph& g, graph::OpId id);

struct OpBuffers {
  std::vector<const Shard*> inputs; // nullptr for an omitted input
  std::vector<Shard*> outputs;
};

void run_forward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buffers);

// `d_outputs` hold the gradients of the outputs (same blocks); `d_inputs[i]` receives the (local,
// possibly partial) gradient of input i, or is nullptr when input i needs none.
void run_backward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buffers,
                  const std::vector<const Shard*>& d_outputs, const std::vector<Shard*>& d_inputs);

} // namespace partita::runtime
