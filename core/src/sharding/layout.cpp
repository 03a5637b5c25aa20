// Tensor layouts under a config: which iteration dim cuts each tensor dim, over which grid axes a
// tensor is replicated (and so has its gradient reduced) and over which it holds
// partial sums, and the block each grid position holds.

#include "partita/graph/error.h"
#include "partita/sharding/config.h"
#include "sharding/grid.h"

#include <fmt/format.h>

namespace partita::sharding {
namespace {

enum class Side { input, output };

void layout_of(const graph::Graph& g, const graph::OpSemantics& s, const Config& c, std::size_t index, Side side,
               TensorLayout& l) {
  const char* what = side == Side::input ? "input" : "output";
  const auto& accesses = side == Side::input ? s.inputs : s.outputs;
  if (index >= accesses.size()) {
    throw Error(fmt::format("layout: the op has no {} {} (it has {})", what, index, accesses.size()));
  }
  if (c.splits.size() != s.dims.size()) {
    throw Error(fmt::format("layout: config has {} splits for an op with {} dims", c.splits.size(), s.dims.size()));
  }
  const graph::TensorAccess& access = accesses[index];
  if (access.tensor == graph::no_tensor) {
    throw Error(fmt::format("layout: {} {} of the op is omitted", what, index));
  }
  const graph::Tensor& t = g.tensor(access.tensor);
  if (access.dims.size() != t.shape.size()) {
    throw Error(fmt::format("layout: {} '{}' has rank {} but its access maps {} dims", what, t.name, t.shape.size(),
                            access.dims.size()));
  }

  l.shape.assign(t.shape.begin(), t.shape.end());
  l.replica_axes.clear();
  l.partial_axes.clear();
  // Strings and unknown types have no size; count them as 4 bytes rather than as free.
  const std::int64_t es = graph::dtype_size(t.dtype);
  l.element_size = es > 0 ? es : 4;
  l.dim_axis.assign(t.shape.size(), -1);
  l.parts.assign(t.shape.size(), 1);

  thread_local std::vector<char> indexes; // iteration dims that index some tensor dim
  indexes.assign(s.dims.size(), 0);
  for (std::size_t j = 0; j < access.dims.size(); ++j) {
    const int a = access.dims[j];
    if (a < 0) {
      continue;
    }
    if (static_cast<std::size_t>(a) >= s.dims.size()) {
      throw Error(
          fmt::format("layout: {} '{}' dim {} maps to iteration dim {} of {}", what, t.name, j, a, s.dims.size()));
    }
    // A dim indexing several tensor dims (a diagonal or broadcast pattern) can cut only one of
    // them without splitting the tensor more ways than the grid has positions: cut the first.
    if (!indexes[static_cast<std::size_t>(a)] && c.splits[static_cast<std::size_t>(a)] > 1) {
      l.dim_axis[j] = a;
      // The tensor dim may differ in size from the iteration dim (strided conv input, reshape
      // runs, LSTM hidden vs gates): it is cut into as many parts, proportionally (block_of).
      l.parts[j] = c.splits[static_cast<std::size_t>(a)];
    }
    indexes[static_cast<std::size_t>(a)] = 1;
  }
  for (std::size_t a = 0; a < s.dims.size(); ++a) {
    if (c.splits[a] <= 1 || indexes[a]) {
      continue;
    }
    // For an output, a split reduction dim leaves partial sums, not copies.
    const bool partial = side == Side::output && s.dims[a].reduction;
    (partial ? l.partial_axes : l.replica_axes).push_back(static_cast<int>(a));
  }
}

} // namespace

double TensorLayout::shard_bytes() const {
  double bytes = static_cast<double>(element_size);
  for (std::size_t j = 0; j < shape.size(); ++j) {
    const int p = j < parts.size() ? parts[j] : 1;
    bytes *= static_cast<double>(detail::part_size(shape[j], p));
  }
  return bytes;
}

TensorLayout input_layout(const graph::Graph& g, const graph::OpSemantics& s, const Config& c, std::size_t input) {
  TensorLayout l;
  layout_of(g, s, c, input, Side::input, l);
  return l;
}

TensorLayout output_layout(const graph::Graph& g, const graph::OpSemantics& s, const Config& c, std::size_t output) {
  TensorLayout l;
  layout_of(g, s, c, output, Side::output, l);
  return l;
}

void input_layout_into(const graph::Graph& g, const graph::OpSemantics& s, const Config& c, std::size_t input,
                       TensorLayout& out) {
  layout_of(g, s, c, input, Side::input, out);
}

void output_layout_into(const graph::Graph& g, const graph::OpSemantics& s, const Config& c, std::size_t output,
                        TensorLayout& out) {
  layout_of(g, s, c, output, Side::output, out);
}

std::int64_t Block::elements() const {
  std::int64_t n = 1;
  for (std::size_t j = 0; j < begin.size(); ++j) {
    n *= std::max<std::int64_t>(0, end[j] - begin[j]);
  }
  return n;
}

bool tiles_in_order(const Block& whole, std::span<const Block> parts) {
  const std::size_t rank = whole.begin.size();
  std::int64_t next = 0; // the row-major offset in `whole` where the next part must start
  for (const auto& part : parts) {
    if (part.begin.size() != rank || part.end.size() != rank) {
      return false;
    }
    // Contiguous: every dim after the first cut one whole, every dim before it of extent 1.
    std::int64_t offset = 0, stride = 1;
    bool cut = false;
    for (std::size_t d = rank; d-- > 0;) {
      const std::int64_t w = whole.end[d] - whole.begin[d], e = part.end[d] - part.begin[d];
      if (part.begin[d] < whole.begin[d] || part.end[d] > whole.end[d] || e <= 0) {
        return false;
      }
      if (cut && e != 1) {
        return false;
      }
      cut = cut || e != w;
      offset += (part.begin[d] - whole.begin[d]) * stride;
      stride *= w;
    }
    if (offset != next) {
      return false;
    }
    next += part.elements();
  }
  return next == whole.elements();
}

Block block_of(const TensorLayout& layout, const Config& c, int position) {
  const std::vector<int> coords = grid_coordinates(c, position);
  Block b;
  b.begin.resize(layout.shape.size());
  b.end.resize(layout.shape.size());
  for (std::size_t j = 0; j < layout.shape.size(); ++j) {
    const int a = layout.dim_axis[j];
    if (a < 0) {
      b.begin[j] = 0;
      b.end[j] = layout.shape[j];
      continue;
    }
    if (static_cast<std::size_t>(a) >= coords.size() || c.splits[static_cast<std::size_t>(a)] != layout.parts[j]) {
      throw Error(fmt::format("block_of: the layout cuts tensor dim {} in {} parts but the config does not", j,
                              layout.parts[j]));
    }
    detail::part_range(layout.shape[j], layout.parts[j], coords[static_cast<std::size_t>(a)], b.begin[j], b.end[j]);
  }
  return b;
}

std::vector<std::int64_t> block_signature(const TensorLayout& layout, const Config& c) {
  std::vector<std::int64_t> axis_stride(c.splits.size(), 0);
  std::int64_t stride = 1;
  for (std::size_t a = c.splits.size(); a-- > 0;) {
    if (c.splits[a] > 1) {
      axis_stride[a] = stride;
      stride *= c.splits[a];
    }
  }
  // The grid's size is left out: a device at list index i sits at grid position i % size, and an
  // axis of stride s and f parts gives it part (i % size) / s % f = i / s % f (s f divides the
  // size), so two grids of different sizes that cut a tensor alike hold the same blocks.
  std::vector<std::int64_t> out;
  for (std::size_t j = 0; j < layout.parts.size(); ++j) {
    const int axis = layout.dim_axis[j];
    out.push_back(layout.parts[j]);
    out.push_back(axis >= 0 && layout.parts[j] > 1 ? axis_stride[static_cast<std::size_t>(axis)] : 0);
  }
  return out;
}

bool same_block_signature(const TensorLayout& a, const Config& ca, const TensorLayout& b, const Config& cb) {
  if (a.parts.size() != b.parts.size()) {
    return false;
  }
  // The stride of axis `axis` of `c` in the position index (as block_signature() computes it).
  const auto stride = [](const Config& c, int axis) {
    std::int64_t s = 1;
    for (std::size_t i = static_cast<std::size_t>(axis) + 1; i < c.splits.size(); ++i) {
      s *= c.splits[i] > 1 ? c.splits[i] : 1;
    }
    return s;
  };
  // Per dim, what block_signature() puts second: the stride of a cutting axis, else 0.
  const auto signature = [&stride](const TensorLayout& l, const Config& c, std::size_t j) {
    return l.dim_axis[j] >= 0 && l.parts[j] > 1 ? stride(c, l.dim_axis[j]) : std::int64_t{0};
  };
  for (std::size_t j = 0; j < a.parts.size(); ++j) {
    if (a.parts[j] != b.parts[j] || signature(a, ca, j) != signature(b, cb, j)) {
      return false;
    }
  }
  return true;
}

} // namespace partita::sharding
