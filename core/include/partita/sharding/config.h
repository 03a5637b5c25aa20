#pragma once

// Configurations and tensor layouts: a configuration gives each iteration dim of
// an op a split factor; the split dims form a logical device grid laid onto the op's devices;
// from it follow what block of every tensor each device holds, which devices hold replicas (and
// so reduce gradients together) and which hold partial sums. No notion of time here.

#include "partita/graph/op_semantics.h"

#include <compare>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace partita::sharding {

struct Config {
  std::vector<int> splits; // one per OpSemantics::dims; 1 = not split

  int devices() const; // product of splits
  bool operator==(const Config&) const = default;
  auto operator<=>(const Config&) const = default;
};

// "n:2 co:4" (unsplit dims omitted; "replicated" when nothing is split).
std::string to_string(const Config& c, const graph::OpSemantics& s);

// A config that splits the named dims; dims absent from `splits` stay whole. Throws
// partita::Error naming a dim that does not exist, is not splittable, or is smaller than its factor.
Config make_config(const graph::OpSemantics& s, std::span<const std::pair<std::string, int>> splits);

struct EnumerateOptions {
  int max_devices = 1;
  bool powers_of_two = true; // factors 1, 2, 4, ... (PaSE's choice; keeps the space small)
  bool exact = false;        // only configs using exactly max_devices
};
// Every config of splittable dims with product <= max_devices, each factor <= its dim's size.
std::vector<Config> enumerate_configs(const graph::OpSemantics& s, const EnumerateOptions& options);

// The grid: position i of an op's device list has, for each split dim (in dim order, the LAST
// split dim varying fastest, so it lands on neighbouring devices), coordinate unravel(i).
std::vector<int> grid_coordinates(const Config& c, int position); // one per dim (0 for unsplit dims)

// Device groups along `axes` (iteration dims): devices whose coordinates differ only in those
// axes. `devices` has config.devices() entries. Every device is in exactly one group.
std::vector<std::vector<int>> groups_along(const Config& c, std::span<const int> devices, std::span<const int> axes);

// How one tensor is laid out under a config.
struct TensorLayout {
  graph::Shape shape;
  std::int64_t element_size = 4;
  std::vector<int> dim_axis;     // per tensor dim: the iteration dim splitting it, or -1
  std::vector<int> parts;        // per tensor dim: number of parts (1 = whole)
  std::vector<int> replica_axes; // split iteration dims that do not index this tensor
  std::vector<int> partial_axes; // outputs: split reduction dims (values are partial sums over them)

  double shard_bytes() const; // bytes one device holds (ceil division per dim)
};

TensorLayout input_layout(const graph::Graph& g, const graph::OpSemantics& s, const Config& c, std::size_t input);
TensorLayout output_layout(const graph::Graph& g, const graph::OpSemantics& s, const Config& c, std::size_t output);
// The same into `out`, reusing its buffers (for callers that compute millions).
void input_layout_into(const graph::Graph& g, const graph::OpSemantics& s, const Config& c, std::size_t input,
                       TensorLayout& out);
void output_layout_into(const graph::Graph& g, const graph::OpSemantics& s, const Config& c, std::size_t output,
                        TensorLayout& out);

// The block of the tensor the device at `position` holds: per tensor dim [begin, end).
struct Block {
  std::vector<std::int64_t> begin, end;
  std::int64_t elements() const;
};
Block block_of(const TensorLayout& layout, const Config& c, int position);
// Whether `parts`, in their order, are consecutive ranges of `whole`'s elements in row-major
// order (each part one contiguous run, each starting where the one before ends, the last ending
// where `whole` does): then a collective over them reads and writes `whole`'s buffer in place;
// otherwise each part is a strided region that has to be packed first.
bool tiles_in_order(const Block& whole, std::span<const Block> parts);

// Which block each position of a device list holds, as numbers: per tensor dim its number of
// parts and the stride of its grid axis in the position index (0 when whole). On the same device
// list, two layouts hold the same blocks on every device exactly when their signatures are equal,
// whatever their grids' sizes (a replicated tensor and one replicated over a split axis alike).
std::vector<std::int64_t> block_signature(const TensorLayout& layout, const Config& c);
// block_signature(a, ca) == block_signature(b, cb), without building either.
bool same_block_signature(const TensorLayout& a, const Config& ca, const TensorLayout& b, const Config& cb);

} // namespace partita::sharding
