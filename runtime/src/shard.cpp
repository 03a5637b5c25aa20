#include "shard.h"

#include "host_movement.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>

namespace partita::runtime {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31U);
}

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// Calls visit(offset_in_a, offset_in_b, run_length) for every contiguous row of `region`, with
// offsets into row-major arrays holding blocks `a` and `b`.
void for_each_row(const sharding::Block& region, const sharding::Block& a, const sharding::Block& b,
                  const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& visit) {
  const std::size_t rank = region.begin.size();
  if (rank == 0) {
    visit(0, 0, 1);
    return;
  }
  const auto extent = [](const sharding::Block& blk, std::size_t d) { return blk.end[d] - blk.begin[d]; };
  for (std::size_t d = 0; d < rank; ++d) {
    if (extent(region, d) <= 0) {
      return;
    }
  }
  std::vector<std::int64_t> idx(region.begin.begin(), region.begin.end());
  const std::int64_t run = extent(region, rank - 1);
  while (true) {
    std::int64_t oa = 0, ob = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      oa = oa * extent(a, d) + (idx[d] - a.begin[d]);
      ob = ob * extent(b, d) + (idx[d] - b.begin[d]);
    }
    visit(oa, ob, run);
    // Advance the odometer over every dim but the last (the contiguous run).
    int d = static_cast<int>(rank) - 2;
    for (; d >= 0; --d) {
      const auto u = static_cast<std::size_t>(d);
      if (++idx[u] < region.end[u]) {
        break;
      }
      idx[u] = region.begin[u];
    }
    if (d < 0) {
      return;
    }
  }
}

// The span [first, last) of a shard's buffer that the rows of `region` lie in.
std::pair<std::int64_t, std::int64_t> row_span(const Shard& shard, const sharding::Block& region) {
  std::int64_t first = -1, last = 0;
  for_each_row(region, shard.block, shard.block, [&](std::int64_t offset, std::int64_t, std::int64_t run) {
    if (first < 0) {
      first = offset;
    }
    last = offset + run;
  });
  return {std::max<std::int64_t>(first, 0), std::max<std::int64_t>(last, 0)};
}

// What the host views of a region: the whole buffer where the host may touch it (no copy), else
// the rows' span.
std::pair<std::int64_t, std::int64_t> span_for_host(const Shard& shard, const sharding::Block& region) {
  if (host_accessible(shard.data)) {
    return {0, shard.elements()};
  }
  return row_span(shard, region);
}

} // namespace

Extents Shard::extents() const {
  Extents e(block.begin.size());
  for (std::size_t d = 0; d < e.size(); ++d) {
    e[d] = block.end[d] - block.begin[d];
  }
  return e;
}

Shard make_shard(const sharding::Block& block) {
  Shard s;
  s.block = block;
  std::int64_t n = 1;
  for (std::size_t d = 0; d < block.begin.size(); ++d) {
    n *= std::max<std::int64_t>(0, block.end[d] - block.begin[d]);
  }
  s.data = Floats(static_cast<std::size_t>(n)); // zeroed (through the memory, on a device)
  return s;
}

Shard make_host_shard(const sharding::Block& block) {
  const TensorMemoryScope heap(host_memory());
  return make_shard(block);
}

Shard host_copy_of(const Shard& shard) {
  Shard copy;
  copy.block = shard.block;
  {
    const TensorMemoryScope heap(host_memory());
    copy.data = uninitialized_floats(shard.data.size());
  }
  copy_floats(shard.data, 0, copy.data, 0, shard.data.size());
  return copy;
}

sharding::Block whole(const graph::Shape& shape) {
  sharding::Block b;
  b.begin.assign(shape.size(), 0);
  b.end.assign(shape.begin(), shape.end());
  return b;
}

void fill_deterministic(Shard& shard, const graph::Shape& shape, std::string_view seed, float scale) {
  const std::uint64_t h = fnv1a(seed);
  const sharding::Block all = whole(shape);
  HostView values(shard.data, HostView::write_only);
  // The global flat index of a row start is its offset in the whole tensor.
  for_each_row(shard.block, all, shard.block, [&](std::int64_t global, std::int64_t local, std::int64_t run) {
    for (std::int64_t i = 0; i < run; ++i) {
      const std::uint64_t r = splitmix64(h ^ splitmix64(static_cast<std::uint64_t>(global + i)));
      const double unit = static_cast<double>(r >> 11U) * 0x1.0p-53; // [0, 1)
      values[static_cast<std::size_t>(local + i)] = static_cast<float>((2.0 * unit - 1.0) * scale);
    }
  });
  values.commit();
}

sharding::Block intersect(const sharding::Block& a, const sharding::Block& b) {
  if (a.begin.size() != b.begin.size()) {
    throw Error("intersect: blocks of different rank");
  }
  sharding::Block r;
  for (std::size_t d = 0; d < a.begin.size(); ++d) {
    r.begin.push_back(std::max(a.begin[d], b.begin[d]));
    r.end.push_back(std::min(a.end[d], b.end[d]));
  }
  return r;
}

bool is_empty(const sharding::Block& b) {
  for (std::size_t d = 0; d < b.begin.size(); ++d) {
    if (b.end[d] <= b.begin[d]) {
      return true;
    }
  }
  return false;
}

// On device memory, the span of the buffer the region's rows lie in goes through the host in one
// transfer each way (MPI's staging).
void pack(const Shard& from, const sharding::Block& region, float* out) {
  const auto [first, last] = span_for_host(from, region);
  const ConstHostView view(from.data, static_cast<std::size_t>(first), static_cast<std::size_t>(last - first));
  std::int64_t written = 0;
  for_each_row(region, from.block, from.block, [&](std::int64_t offset, std::int64_t, std::int64_t run) {
    std::copy_n(view.data() + (offset - first), run, out + written);
    written += run;
  });
}

void unpack(Shard& to, const sharding::Block& region, const float* in, bool accumulate) {
  const auto [first, last] = span_for_host(to, region);
  HostView view(to.data, static_cast<std::size_t>(first), static_cast<std::size_t>(last - first), HostView::read_write);
  std::int64_t read = 0;
  for_each_row(region, to.block, to.block, [&](std::int64_t offset, std::int64_t, std::int64_t run) {
    host::put_run(in + read, run, view.data() + (offset - first), accumulate);
    read += run;
  });
  view.commit();
}

void copy_region(const Shard& from, Shard& to, const sharding::Block& region, bool accumulate) {
  if (!host_accessible(from.data) || !host_accessible(to.data)) {
    std::vector<float> staged(static_cast<std::size_t>(region.elements()));
    pack(from, region, staged.data());
    unpack(to, region, staged.data(), accumulate);
    return;
  }
  for_each_row(region, from.block, to.block, [&](std::int64_t src, std::int64_t dst, std::int64_t run) {
    host::put_run(from.data.data() + src, run, to.data.data() + dst, accumulate);
  });
}

StridedCopy strided_copy(const Dims& extent, const Dims& src_stride, const Dims& dst_stride) {
  StridedCopy c;
  std::vector<std::array<std::int64_t, 3>> dims; // (extent, src stride, dst stride), outermost first
  for (std::size_t d = 0; d < extent.size(); ++d) {
    if (extent[d] == 0) {
      c.rank = 1; // nothing to copy
      return c;
    }
    if (extent[d] == 1) {
      continue;
    }
    if (!dims.empty() && dims.back()[1] == src_stride[d] * extent[d] && dims.back()[2] == dst_stride[d] * extent[d]) {
      dims.back() = {dims.back()[0] * extent[d], src_stride[d], dst_stride[d]}; // runs on in both: one longer dim
    } else {
      dims.push_back({extent[d], src_stride[d], dst_stride[d]});
    }
  }
  if (dims.size() > static_cast<std::size_t>(max_copy_rank)) {
    throw Error(fmt::format("a copy of a box of {} dims that do not merge (the backends take up to {})", dims.size(),
                            max_copy_rank));
  }
  c.rank = static_cast<int>(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    c.extent[d] = dims[d][0];
    c.src_stride[d] = dims[d][1];
    c.dst_stride[d] = dims[d][2];
  }
  return c;
}

StridedCopy contiguous_copy(std::int64_t n) {
  return strided_copy({n}, {1}, {1});
}

Dims row_major_strides(const Dims& extent) {
  Dims s(extent.size(), 1);
  for (std::size_t d = extent.size(); d-- > 1;) {
    s[d - 1] = s[d] * extent[d];
  }
  return s;
}

StridedCopy region_copy(const sharding::Block& from, const sharding::Block& to, const sharding::Block& region,
                        std::int64_t& from_offset, std::int64_t& to_offset) {
  const std::size_t rank = region.begin.size();
  Dims extent(rank), fe(rank), te(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    extent[d] = region.end[d] - region.begin[d];
    fe[d] = from.end[d] - from.begin[d];
    te[d] = to.end[d] - to.begin[d];
  }
  const Dims fs = row_major_strides(fe), ts = row_major_strides(te);
  from_offset = to_offset = 0;
  for (std::size_t d = 0; d < rank; ++d) {
    from_offset += (region.begin[d] - from.begin[d]) * fs[d];
    to_offset += (region.begin[d] - to.begin[d]) * ts[d];
  }
  return strided_copy(extent, fs, ts);
}

} // namespace partita::runtime
