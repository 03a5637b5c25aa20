#pragma once

// A shard: the block of a tensor one rank holds (sharding::block_of decides which), stored
// densely in row-major order over the block's extents. Values are generated from the tensor's
// name and each element's global index, so that any rank can generate any block and the
// unsharded reference sees exactly the same numbers.

#include "kernel_shapes.h"
#include "tensor_memory.h"

#include "partita/graph/types.h"
#include "partita/sharding/config.h"

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace partita::runtime {

using Extents = std::vector<std::int64_t>;

struct Shard {
  sharding::Block block; // global [begin, end) per tensor dim
  Floats data;           // row-major over extents(), from tensor_memory()

  Shard() = default;
  Shard(sharding::Block b, Floats d) : block(std::move(b)), data(std::move(d)) {}
  // No implicit copies: a copy of device memory is made where it lives (copy_of, host_copy_of).
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
  Shard(Shard&&) noexcept = default;
  Shard& operator=(Shard&&) noexcept = default;
  ~Shard() = default;

  Extents extents() const;
  std::int64_t elements() const { return static_cast<std::int64_t>(data.size()); }
};

// A zero-filled shard holding `block`.
Shard make_shard(const sharding::Block& block);
// A zero-filled shard in host memory (the heap), whatever the tensor memory: staging, and what
// --verify compares.
Shard make_host_shard(const sharding::Block& block);
// A copy of `shard` in host memory.
Shard host_copy_of(const Shard& shard);
// The whole tensor as one block.
sharding::Block whole(const graph::Shape& shape);

// Fills `shard` with values in [-scale, scale) that depend only on `seed` and the global flat
// index of each element in a tensor of `shape`.
void fill_deterministic(Shard& shard, const graph::Shape& shape, std::string_view seed, float scale);

// The overlap of two blocks of the same tensor (empty() when they do not meet).
sharding::Block intersect(const sharding::Block& a, const sharding::Block& b);
bool is_empty(const sharding::Block& b);

// Copies `region` (global coordinates, inside the shard's block) into `out`, row-major.
void pack(const Shard& from, const sharding::Block& region, float* out);
// Writes (or adds, with `accumulate`) a packed `region` into the shard.
void unpack(Shard& to, const sharding::Block& region, const float* in, bool accumulate);
// Writes (or adds) `region` of `from` into `to` row by row, without staging it (both blocks must
// contain the region).
void copy_region(const Shard& from, Shard& to, const sharding::Block& region, bool accumulate);
// The box of `extent` (row-major dims) read with `src_stride` and written with `dst_stride`, as a
// StridedCopy (a Backend::copy): dims of extent 1 dropped, neighbours that run on in both buffers
// merged. Throws partita::Error when more than max_copy_rank dims remain.
StridedCopy strided_copy(const Dims& extent, const Dims& src_stride, const Dims& dst_stride);
// A dense copy of n elements.
StridedCopy contiguous_copy(std::int64_t n);
// Row-major strides of a buffer of `extent`.
Dims row_major_strides(const Dims& extent);
// The same copy as a backend's box copy: `region` of a buffer holding block `from` (read from
// `from_offset` on) into one holding block `to` (written from `to_offset` on). Throws
// partita::Error when the box has more dims than a backend takes.
StridedCopy region_copy(const sharding::Block& from, const sharding::Block& to, const sharding::Block& region,
                        std::int64_t& from_offset, std::int64_t& to_offset);

} // namespace partita::runtime
