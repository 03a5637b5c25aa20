#pragma once

// Graph ops onto backend kernels, on the local shards of one rank. Because every op is described
// by its iteration space (graph/op_semantics.h), the kernel on a shard is the op itself on the
// shard's extents: a split reduction dim leaves a partial sum, a replicated input a partial
// gradient, and the executor reduces those over the groups the core names.

#include "backend.h"
#include "shard.h"

#include "partita/graph/graph.h"

#include <functional>
#include <string>
#include <vector>

namespace partita::runtime {

// Empty when partita-run has a kernel for the op; otherwise why not (the op then runs a
// memory-bound stand-in of its byte count, reported as such).
std::string missing_kernel(const graph::Graph& g, graph::OpId id);

struct OpBuffers {
  std::vector<const Shard*> inputs; // nullptr for an omitted input
  std::vector<Shard*> outputs;
  // Kept from an op's forward pass to its backward pass (BatchNorm's statistics); nullptr when
  // the caller keeps nothing.
  Floats* saved = nullptr;
  // Sums values in place over the ranks that share the op's statistics (cost::statistics_axes);
  // empty when no statistics dim is split.
  std::function<void(float* values, std::int64_t count)> sum_statistics;
};

// Window ops (Conv, MaxPool, AveragePool): the region of input 0 (global coordinates) that the
// output block `y_block` reads, given the input block `x_block` the layout assigns. Its rows reach
// beyond `x_block` when a spatial dim is split: the halo (halo.h). Other ops: `x_block`.
sharding::Block window_input_region(const graph::Graph& g, graph::OpId id, const sharding::Block& x_block,
                                    const sharding::Block& y_block);

// A view (Reshape, Flatten, Squeeze, Unsqueeze, Identity) whose input and output blocks hold the
// same run of the tensor's row-major elements: the output is the input's buffer as it is, so the
// executor hands the buffer over instead of copying it (a framework's view; core prices it 0).
bool is_buffer_view(const graph::Graph& g, graph::OpId id, const Shard& in, const Shard& out);

void run_forward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buffers);

// `d_outputs` hold the gradients of the outputs (same blocks); `d_inputs[i]` receives the (local,
// possibly partial) gradient of input i, or is nullptr when input i needs none.
void run_backward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buffers,
                  const std::vector<const Shard*>& d_outputs, const std::vector<Shard*>& d_inputs);

} // namespace partita::runtime
