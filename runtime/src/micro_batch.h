#pragma once

// Micro-batches of a pipeline: the model built at the micro-batch size is a slice of the
// full-batch model along its batch dimension. Micro-batch i of a tensor is the slice
// [i * extent, (i + 1) * extent) of the full tensor along the one dim whose size differs; a tensor
// of the same shape in both (weights, masks, position tables) is the same whole tensor in every
// micro-batch. Generated data and the loss gradient are drawn from the full tensor, so that the
// micro-batches together see exactly the numbers of the single full-batch reference.

#include "shard.h"

#include "partita/graph/types.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace partita::runtime {

struct BatchSlice {
  int dim = -1;            // -1: not batched, the whole tensor in every micro-batch
  std::int64_t extent = 0; // the micro-batch's size along dim
  graph::Shape full;       // the full-batch tensor's shape
};

// Throws partita::Error naming `tensor` when the shapes differ other than in one dim of
// micro_batches times the size.
BatchSlice batch_slice(const graph::Shape& micro, const graph::Shape& full, int micro_batches,
                       const std::string& tensor);

// `block` (coordinates in the micro-batch tensor) in coordinates of the full tensor.
sharding::Block to_full(const sharding::Block& block, const BatchSlice& slice, int micro_batch);

// fill_deterministic for micro-batch `micro_batch`'s block: the values the full tensor has there.
void fill_slice(Shard& shard, const BatchSlice& slice, int micro_batch, std::string_view seed, float scale);

// A zoo spec with its batch parameter set to `batch` (replaced, or added). Throws for a model
// that is not a zoo spec: an ONNX file's batch cannot be changed after planning.
std::string with_batch(const std::string& spec, int batch);

} // namespace partita::runtime
