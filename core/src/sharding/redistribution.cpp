// Redistribution between two layouts of one tensor, computed from the geometry alone.
//
// The producer's layout cuts the tensor into "cells" (the product of its per-dim parts); every
// producer device holds exactly one cell, and the devices holding the same cell are its replicas.
// A consumer device d needs one block; it receives |block| minus what it holds itself.
//
// Cost: bytes and pattern take O((P_from + P_to) * r) for r tensor dims and P devices per side
// (per-dim interval arithmetic, no pairwise device loop). Groups follow each needed cell to the
// holder of the consumer's own replica (replica_base: the producer position that differs from the
// consumer's only in the coordinates that cut the tensor), found by arithmetic: O(sum over
// receiving consumers of the cells their block overlaps), bounded in practice by O(P * G) for
// exchange groups of G devices. Two shortcuts keep the common large cases linear: with one holder
// per cell, consumers needing the same block share one walk; once every device is in one group
// and every producer sends (an all-to-all, a gather onto everyone), the remaining walks cannot
// change anything and stop.
//
// A producer output with partial_axes is taken as already reduced (all-reduced over those axes,
// which the cost model charges to the producing op): its devices hold full values of their block.

#include "partita/sharding/redistribution.h"

#include "partita/graph/error.h"
#include "sharding/grid.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <numeric>
#include <unordered_map>

namespace partita::sharding {

std::string_view pattern_name(Pattern p) {
  switch (p) {
  case Pattern::none: return "none";
  case Pattern::all_gather: return "all_gather";
  case Pattern::all_to_all: return "all_to_all";
  case Pattern::slice: return "slice";
  case Pattern::send_recv: return "send_recv";
  case Pattern::mixed: return "mixed";
  }
  return "unknown";
}

namespace {

void check_layout(const TensorLayout& l, const Config& c, std::span<const int> devices, const char* side) {
  const std::size_t r = l.shape.size();
  if (l.dim_axis.size() != r || l.parts.size() != r) {
    throw Error(fmt::format("redistribute: {} layout has {} axes and {} parts for rank {}", side, l.dim_axis.size(),
                            l.parts.size(), r));
  }
  for (std::size_t j = 0; j < r; ++j) {
    const int a = l.dim_axis[j];
    const bool ok =
        a < 0 ? l.parts[j] == 1
              : static_cast<std::size_t>(a) < c.splits.size() && c.splits[static_cast<std::size_t>(a)] == l.parts[j];
    if (!ok) {
      throw Error(fmt::format("redistribute: {} layout cuts tensor dim {} in {} parts, which its config does not", side,
                              j, l.parts[j]));
    }
  }
  detail::check_device_copies(c, devices, side[0] == 'p' ? "redistribute (producer)" : "redistribute (consumer)");
}

// The ids of a side that the closed forms did not take (they take 0 .. N-1 alone).
void check_device_ids(std::span<const int> devices, const char* side) {
  for (const int d : devices) {
    if (d < 0) {
      throw Error(fmt::format("redistribute: {} device id {} is negative", side, d));
    }
  }
}

// The grid coordinates of every position 0 .. devices()-1 of a config, position-major (what
// detail::unravel gives, without a division per coordinate).
void grid_coords(const Config& c, std::vector<int>& out) {
  const std::size_t axes = c.splits.size();
  const auto k = static_cast<std::size_t>(c.devices());
  out.assign(k * axes, 0);
  for (std::size_t p = 1; p < k; ++p) {
    std::copy_n(out.begin() + static_cast<std::ptrdiff_t>((p - 1) * axes), axes,
                out.begin() + static_cast<std::ptrdiff_t>(p * axes));
    for (std::size_t i = axes; i-- > 0;) {
      int& x = out[p * axes + i];
      if (++x < c.splits[i]) {
        break;
      }
      x = 0;
    }
  }
}

// Every part of every dim of a layout, computed once per call so that the loops over devices
// divide nothing: part i of dim j is [begin[offset[j] + i], end[offset[j] + i]).
struct Parts {
  std::vector<std::int64_t> begin, end;
  std::vector<std::size_t> offset;

  void fill(const TensorLayout& l) {
    begin.clear();
    end.clear();
    offset.clear();
    for (std::size_t j = 0; j < l.shape.size(); ++j) {
      offset.push_back(begin.size());
      const int parts = l.dim_axis[j] < 0 ? 1 : l.parts[j];
      for (int i = 0; i < parts; ++i) {
        std::int64_t b = 0, e = 0;
        detail::part_range(l.shape[j], parts, i, b, e);
        begin.push_back(b);
        end.push_back(e);
      }
    }
  }
  // Index of the part grid position `coords` holds of dim j.
  std::size_t at(const TensorLayout& l, std::span<const int> coords, std::size_t j) const {
    const int a = l.dim_axis[j];
    return offset[j] + (a < 0 ? 0 : static_cast<std::size_t>(coords[static_cast<std::size_t>(a)]));
  }
};

struct DisjointSets {
  std::vector<int> parent;
  void reset(std::size_t n) {
    parent.resize(n);
    std::iota(parent.begin(), parent.end(), 0);
  }
  int find(int x) {
    while (parent[static_cast<std::size_t>(x)] != x) {
      int& p = parent[static_cast<std::size_t>(x)];
      p = parent[static_cast<std::size_t>(p)]; // path halving
      x = p;
    }
    return x;
  }
  // unite(root, b) for a root: the root of the joined set (the smaller of the two roots).
  int join_root(int root, int b) {
    b = find(b);
    if (b != root) {
      parent[static_cast<std::size_t>(std::max(root, b))] = std::min(root, b);
    }
    return std::min(root, b);
  }
  // Returns whether two components merged.
  bool unite(int a, int b) {
    a = find(a);
    b = find(b);
    if (a == b) {
      return false;
    }
    join_root(a, b);
    return true;
  }
};

// A move's pattern from what its receiving consumers saw (and, when none receives, whether any
// keeps less than it holds). Consumers that hold nothing of the producer's receive whole blocks: a
// send/recv, as between pipeline stages on disjoint devices.
Pattern pattern_of(double total, bool any_slice, bool any_gather, bool any_a2a, bool any_fresh) {
  if (total == 0) {
    return any_slice ? Pattern::slice : Pattern::none;
  }
  const int kinds = int{any_gather} + int{any_a2a} + int{any_fresh};
  return kinds > 1    ? Pattern::mixed
         : any_gather ? Pattern::all_gather
         : any_a2a    ? Pattern::all_to_all
                      : Pattern::send_recv;
}

// Calls f(d) for every d whose set bits are among `keep`'s, ascending (every d below 2^k when keep
// is 2^k - 1).
template <class F> void for_each_kept(std::uint64_t keep, F f) {
  std::uint64_t d = 0;
  do {
    f(d);
    d = (d - keep) & keep;
  } while (d != 0);
}

// The groups: the involved devices of ids 0 .. ids-1 (those `each` visits, ascending) by their set,
// each group in ascending order, the groups in the order of their first device.
template <class Each>
void write_groups(std::size_t ids, Each each, DisjointSets& sets, const std::vector<char>& involved,
                  Redistribution& out) {
  thread_local std::vector<int> group_of_root, group_of;
  thread_local std::vector<std::size_t> sizes;
  group_of_root.assign(ids, -1);
  group_of.assign(ids, -1);
  sizes.clear();
  each([&](std::uint64_t device) {
    const auto d = static_cast<std::size_t>(device);
    if (involved[d] == 0) {
      return;
    }
    int& g = group_of_root[static_cast<std::size_t>(sets.find(static_cast<int>(d)))];
    if (g < 0) {
      g = static_cast<int>(sizes.size());
      sizes.push_back(0);
    }
    group_of[d] = g;
    ++sizes[static_cast<std::size_t>(g)];
  });
  out.groups.assign_sizes(sizes);
  std::fill(sizes.begin(), sizes.end(), 0);
  each([&](std::uint64_t device) {
    const auto d = static_cast<std::size_t>(device);
    if (const int g = group_of[d]; g >= 0) {
      out.groups.at(static_cast<std::size_t>(g), sizes[static_cast<std::size_t>(g)]++) = static_cast<int>(d);
    }
  });
}

void write_groups(std::size_t ids, DisjointSets& sets, const std::vector<char>& involved, Redistribution& out) {
  const auto all = [ids](auto f) {
    for (std::size_t d = 0; d < ids; ++d) {
      f(static_cast<std::uint64_t>(d));
    }
  };
  write_groups(ids, all, sets, involved, out);
}

// The groups of the closed forms over the devices of ids below n whose bits are among `keep`'s.
void write_kept_groups(std::int64_t n, std::uint64_t keep, DisjointSets& sets, const std::vector<char>& involved,
                       Redistribution& out) {
  // Every kept id is at most `keep` (its bits are among keep's).
  const auto ids = std::min(static_cast<std::size_t>(n), static_cast<std::size_t>(keep) + 1);
  write_groups(
      ids, [keep](auto f) { for_each_kept(keep, f); }, sets, involved, out);
}

// The buffers of one redistribute() call, kept per thread: the search calls it hundreds of
// thousands of times, and allocating them each time cost as much as the geometry.
struct Scratch {
  std::vector<int> from_pos, from_coords, to_coords;
  std::vector<std::int64_t> stride, pos_stride, cell_of_pos, nb, ne, hb, he, lo, hi, cur;
  std::vector<char> seen, involved;
  std::vector<std::array<int, 2>> remembered;
  DisjointSets sets;
  Parts from_parts, to_parts;
  std::vector<std::int64_t> first_cell, last_cell; // per part of to_parts: the producer cells it overlaps
  std::vector<std::size_t> to_index;
};

// log2 of x when x is a power of two, else -1.
int log2_exact(std::int64_t x) {
  if (x <= 0 || (x & (x - 1)) != 0) {
    return -1;
  }
  int b = 0;
  while ((std::int64_t{1} << b) < x) {
    ++b;
  }
  return b;
}

// The groups of closed_form() where the consumer reads its parts from bits that also cut the
// producer's layout: device d lacks the cells whose cutting bits copy d's bits of each pair and
// run over the others (`free`), and takes each from the device that differs from it in those bits
// alone: a set S of devices alike but for the free bits. The groups are the connected sets of
// such links (ascending, as the walk gives them): d joins S's first device, and the devices of
// every S someone takes from join one another. A device whose blocks meet (every pair agrees)
// receives nothing when `meeting_is_all`. Only devices whose bits are among `keep`'s, which holds
// the cutting bits (a set stays among them).
//
// With `alike_by_xor` (a caller that prices a group by how many of its devices each node holds, on
// nodes whose devices are alike: any translation of the device ids by an exclusive or with a
// constant keeps those counts, up to the nodes' order), only the devices whose bits outside the
// cutting ones are 0 are visited where the other classes are such translations of them: a device
// keeps its bits outside the cutting ones along every link, so the groups of a class x are those
// of class 0 with each device d replaced by d ^ x ^ t, t setting each copied bit a whose consumer
// bit b does not cut to x's bit b; that holds unless some pair's consumer bit, cutting, is such a
// copied bit (then the translation would change what it reads), which is checked.
void closed_form_groups(std::int64_t n, std::uint64_t cutting, std::span<const std::pair<int, int>> pairs,
                        bool meeting_is_all, std::uint64_t keep, bool alike_by_xor, Redistribution& out) {
  std::uint64_t copied = 0;
  std::uint64_t set_from_outside = 0; // copied bits whose consumer bit does not cut
  std::uint64_t cutting_read = 0;     // consumer bits that cut
  for (const auto& [a, b] : pairs) {
    copied |= std::uint64_t{1} << a;
    if (((cutting >> b) & 1U) == 0) {
      set_from_outside |= std::uint64_t{1} << a;
    } else {
      cutting_read |= std::uint64_t{1} << b;
    }
  }
  if (alike_by_xor && (cutting_read & set_from_outside) == 0) {
    keep &= cutting;
  }
  const std::uint64_t free = cutting & ~copied;
  // Every kept id is at most `keep`.
  const auto ids = std::min(static_cast<std::size_t>(n), static_cast<std::size_t>(keep) + 1);
  thread_local DisjointSets sets;
  thread_local std::vector<char> involved, taken_from;
  sets.reset(ids);
  involved.assign(ids, 0);
  taken_from.assign(ids, 0);
  for_each_kept(keep, [&](std::uint64_t bits) {
    std::uint64_t first = bits & ~cutting;
    bool meets = true;
    for (const auto& [a, b] : pairs) {
      const std::uint64_t bit = (bits >> b) & 1U;
      meets = meets && bit == ((bits >> a) & 1U);
      first |= bit << a;
    }
    if (meets && meeting_is_all) {
      return;
    }
    involved[bits] = 1;
    taken_from[first] = 1;
    sets.unite(static_cast<int>(bits), static_cast<int>(first));
  });
  for_each_kept(keep, [&](std::uint64_t s) {
    if (taken_from[s] == 0) {
      return;
    }
    std::uint64_t sub = 0;
    do {
      const auto h = s | sub;
      involved[h] = 1;
      sets.unite(static_cast<int>(s), static_cast<int>(h));
      sub = (sub - free) & free;
    } while (sub != 0);
  });
  write_kept_groups(n, keep, sets, involved, out);
}

constexpr std::size_t most_axes = 16;
using AxisBits = std::array<int, most_axes>;

// The closed forms' devices to visit, as the bits they may set (see redistribute's `node_bits`):
// all of 0 .. n-1, or where node_bits >= 0 all but those whose bits at or above node_bits include
// one that neither side reads (`read`): the rest differ from a visited device by whole nodes only.
std::uint64_t kept_bits(std::int64_t n, std::uint64_t read, int node_bits) {
  const auto all = static_cast<std::uint64_t>(n - 1);
  if (node_bits < 0) {
    return all;
  }
  const std::uint64_t low = node_bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << node_bits) - 1;
  return all & (read | low);
}

// One way of tabled_form's walk: its totals and its groups, built as the devices are visited.
struct TabledWay {
  std::uint64_t cutting = 0; // the bits of the holders' parts
  DisjointSets sets;
  std::vector<char> involved;
  // Per device, 1 + the last device of the box last joined from it as its first (0: none): devices
  // needing that box or one inside it join nothing more.
  std::vector<std::uint64_t> joined;
  double total = 0, max_in = 0, max_block = 0;
  bool any_slice = false, any_gather = false, any_a2a = false;
  void reset(std::size_t n) {
    cutting = 0;
    sets.reset(n);
    involved.assign(n, 0);
    joined.assign(n, 0);
    total = max_in = max_block = 0;
    any_slice = any_gather = any_a2a = false;
  }
};

// closed_form() where some dim is not a whole number of both sides' parts: the parts of a dim are
// ceil-division blocks (the last ones short or empty), so the overlap of a consumer's part with a
// producer's is tabled per dim instead of read off the bits (Table: every pair of parts, or per
// consumer part the producer parts it meets where the pairs are many; more than 16 cut dims,
// false). Per device,
// O(dims); the groups join each device to the first device of the box of
// cells it lacks (those devices differ from it in cutting bits alone), and the devices of every
// box taken from to one another. With `back`, the way back too (from `to` to `from`, into it) in
// the same walk: a device's blocks and what they share are the same both ways, its needed and
// held blocks swapped. `alike_by_xor` as redistribute() takes it: the devices that differ only in
// bits neither side reads need, hold and share alike, and their groups are one another moved by an
// exclusive or of those bits (the links change cutting bits only, which are read), so one of each
// such set is visited where node_bits alone would visit every one inside a node.
bool tabled_form(const TensorLayout& from, const TensorLayout& to, std::int64_t n, const AxisBits& from_low,
                 const AxisBits& from_width, const AxisBits& to_low, const AxisBits& to_width, int node_bits,
                 bool alike_by_xor, Redistribution& out, Redistribution* back) {
  const std::size_t r = from.shape.size();
  // A dim's parts on both sides: they follow from its size and the two part counts alone, so each
  // is computed once per thread and kept (a search meets the same few again and again).
  struct Table {
    std::vector<std::int64_t> from_len, to_len;
    std::vector<int> lo, hi; // per consumer part: the producer parts it meets
    // The overlaps: up to 4,096 pairs of parts, overlap[cf * t + ct] (`dense`); beyond, per
    // consumer part ct its overlap with producer parts lo[ct] .. hi[ct] from overlap[at[ct]] (the
    // others: none), as many entries as the parts of both sides, not their product.
    bool dense = true;
    std::vector<std::int64_t> overlap;
    std::vector<std::size_t> at;
  };
  struct Key {
    std::int64_t size;
    int f, t;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const { return std::hash<std::int64_t>{}(k.size * 8191 + k.f * 4099 + k.t); }
  };
  thread_local std::unordered_map<Key, Table, KeyHash> tables; // nodes: a reference stays valid
  const auto table_of = [](std::int64_t size, int f, int t) -> const Table& {
    auto [it, fresh] = tables.try_emplace(Key{size, f, t});
    Table& tab = it->second;
    if (!fresh) {
      return tab;
    }
    tab.from_len.assign(static_cast<std::size_t>(f), 0);
    tab.to_len.assign(static_cast<std::size_t>(t), 0);
    tab.dense = f * t <= 4096;
    tab.overlap.assign(tab.dense ? static_cast<std::size_t>(f * t) : 0, 0);
    tab.at.assign(tab.dense ? 0 : static_cast<std::size_t>(t), 0);
    tab.lo.assign(static_cast<std::size_t>(t), 0);
    tab.hi.assign(static_cast<std::size_t>(t), -1);
    // Parts of ceil division (detail::part_range), without a division per part: a consumer's part
    // meets only the producer's parts lo .. hi.
    const std::int64_t step = detail::part_size(size, f), to_step = detail::part_size(size, t);
    for (int cf = 0; cf < f; ++cf) {
      tab.from_len[static_cast<std::size_t>(cf)] = std::min(size, step * (cf + 1)) - std::min(size, step * cf);
    }
    for (int ct = 0; ct < t; ++ct) {
      const std::int64_t tb = std::min(size, to_step * ct), te = std::min(size, to_step * (ct + 1));
      tab.to_len[static_cast<std::size_t>(ct)] = te - tb;
      if (te <= tb) {
        continue;
      }
      const int lo = static_cast<int>(tb / step), hi = static_cast<int>((te - 1) / step);
      tab.lo[static_cast<std::size_t>(ct)] = lo;
      tab.hi[static_cast<std::size_t>(ct)] = hi;
      if (!tab.dense) {
        tab.at[static_cast<std::size_t>(ct)] = tab.overlap.size();
      }
      for (int cf = lo; cf <= hi; ++cf) {
        const std::int64_t fb = std::min(size, step * cf), fe = std::min(size, step * (cf + 1));
        const std::int64_t overlap = std::min(te, fe) - std::max(tb, fb);
        if (tab.dense) {
          tab.overlap[static_cast<std::size_t>(cf * t + ct)] = overlap;
        } else {
          tab.overlap.push_back(overlap);
        }
      }
    }
    return tab;
  };
  // Per cut dim, each side's part count and lowest bit ([0]: the producer's, [1]: the consumer's),
  // and per way the parts of the holder side that a part of the other side meets.
  struct Dim {
    std::array<int, 2> parts{1, 1}, low{0, 0};
    const std::int64_t *from_len = nullptr, *to_len = nullptr, *overlap = nullptr;
    // Table::at and Table::dense, set with the table of every cut dim (left unset in the others:
    // the array is not cleared for them on every call).
    const std::size_t* at;
    bool dense;
    std::array<const int*, 2> lo{}, hi{}; // [0]: per consumer part, producer parts; [1]: the reverse
  };
  std::array<Dim, most_axes> dims;
  std::size_t m = 0; // dims[0 .. m): the cut ones
  thread_local std::array<TabledWay, 2> ways;
  const std::size_t way_count = back != nullptr ? 2 : 1;
  for (std::size_t w = 0; w < way_count; ++w) {
    ways[w].reset(static_cast<std::size_t>(n));
  }
  std::uint64_t read = 0; // every bit a part of either side is read from
  // Only the dims cut on either side vary between devices: the others count whole (`whole`, the
  // product of their sizes) in what every device needs, holds and shares.
  std::int64_t whole = 1;
  for (std::size_t j = 0; j < r; ++j) {
    if (from.parts[j] == 1 && to.parts[j] == 1) {
      whole *= from.shape[j];
      continue;
    }
    if (m == dims.size()) {
      return false;
    }
    Dim& dm = dims[m++];
    dm.parts = {from.parts[j], to.parts[j]};
    const int fa = from.dim_axis[j], ta = to.dim_axis[j];
    dm.low = {fa < 0 ? 0 : from_low[static_cast<std::size_t>(fa)], ta < 0 ? 0 : to_low[static_cast<std::size_t>(ta)]};
    const std::array<bool, 2> cuts{fa >= 0 && from_width[static_cast<std::size_t>(fa)] > 0,
                                   ta >= 0 && to_width[static_cast<std::size_t>(ta)] > 0};
    for (std::size_t w = 0; w < 2; ++w) {
      const auto field = (static_cast<std::uint64_t>(dm.parts[w]) - 1) << dm.low[w];
      read |= field;
      if (w < way_count && cuts[w]) {
        ways[w].cutting |= field;
      }
    }
    const Table& tab = table_of(from.shape[j], dm.parts[0], dm.parts[1]);
    dm.from_len = tab.from_len.data();
    dm.to_len = tab.to_len.data();
    dm.overlap = tab.overlap.data();
    dm.at = tab.at.data();
    dm.dense = tab.dense;
    dm.lo[0] = tab.lo.data();
    dm.hi[0] = tab.hi.data();
    if (back != nullptr) {
      const Table& reverse = table_of(from.shape[j], dm.parts[1], dm.parts[0]);
      dm.lo[1] = reverse.lo.data();
      dm.hi[1] = reverse.hi.data();
    }
  }
  const auto es = static_cast<double>(from.element_size);
  std::array<int, 64> at{}; // a box's odometer: the first m
  if (m > at.size()) {
    return false;
  }
  // Joins every device of the box from `first` to `last` (each cut dim's part on way w's holder
  // side from first's to last's) to `first`, whose set is found once.
  const auto join_box = [&](std::size_t w, std::uint64_t first, std::uint64_t last) {
    TabledWay& way = ways[w];
    const auto part = [&](std::uint64_t bits, const Dim& dm) {
      return static_cast<int>((bits >> dm.low[w]) & static_cast<std::uint64_t>(dm.parts[w] - 1));
    };
    for (std::size_t j = 0; j < m; ++j) {
      at[j] = part(first, dims[j]);
    }
    int root = way.sets.find(static_cast<int>(first));
    for (;;) {
      std::uint64_t h = first & ~way.cutting;
      for (std::size_t j = 0; j < m; ++j) {
        h |= static_cast<std::uint64_t>(at[j]) << dims[j].low[w];
      }
      way.involved[h] = 1;
      root = way.sets.join_root(root, static_cast<int>(h));
      std::size_t j = m;
      while (j-- > 0) {
        if (at[j] < part(last, dims[j])) {
          ++at[j];
          break;
        }
        at[j] = part(first, dims[j]);
      }
      if (j == static_cast<std::size_t>(-1)) {
        break;
      }
    }
  };
  // Whether the box from a first device to `last` lies in the one to `joined` - 1 from the same first
  // (0: none), joined already: each cut dim's part of last at most that of joined's.
  const auto inside = [&](std::size_t w, std::uint64_t last, std::uint64_t joined_last) {
    if (joined_last-- == 0) {
      return false;
    }
    for (std::size_t j = 0; j < m; ++j) {
      const auto field = static_cast<std::uint64_t>(dims[j].parts[w] - 1) << dims[j].low[w];
      if ((last & field) > (joined_last & field)) {
        return false;
      }
    }
    return true;
  };
  // Device d on way w, which needs `needed` elements, holds `held` and shares `common` of them.
  const auto visit = [&](std::size_t w, std::uint64_t d, std::int64_t needed, std::int64_t held, std::int64_t common,
                         std::uint64_t first, std::uint64_t last) {
    TabledWay& way = ways[w];
    way.max_block = std::max(way.max_block, static_cast<double>(needed) * es);
    const std::int64_t received = needed - common;
    if (received == 0) {
      way.any_slice = way.any_slice || needed != held;
      return;
    }
    way.total += static_cast<double>(received) * es;
    way.max_in = std::max(way.max_in, static_cast<double>(received) * es);
    (common == held ? way.any_gather : way.any_a2a) = true;
    way.involved[d] = 1;
    way.sets.unite(static_cast<int>(d), static_cast<int>(first));
    if (!inside(w, last, way.joined[first])) {
      way.joined[first] = last + 1;
      join_box(w, first, last);
    }
  };
  // Devices moved by whole nodes in bits neither side reads do as a visited one does, and join
  // devices moved so too: visit one of each such set (`copies` devices).
  const std::uint64_t keep = kept_bits(n, read, node_bits) & (alike_by_xor ? read : ~std::uint64_t{0});
  const auto copies =
      static_cast<double>(std::uint64_t{1} << (std::popcount(static_cast<std::uint64_t>(n - 1)) - std::popcount(keep)));
  for_each_kept(keep, [&](std::uint64_t bits) {
    std::int64_t needed = whole, held = whole, common = whole;
    std::array<std::uint64_t, 2> first{bits & ~ways[0].cutting, bits & ~ways[1].cutting}, last = first;
    for (std::size_t j = 0; j < m; ++j) {
      const Dim& dm = dims[j];
      const auto cf = static_cast<std::size_t>((bits >> dm.low[0]) & static_cast<std::uint64_t>(dm.parts[0] - 1));
      const auto ct = static_cast<std::size_t>((bits >> dm.low[1]) & static_cast<std::uint64_t>(dm.parts[1] - 1));
      needed *= dm.to_len[ct];
      held *= dm.from_len[cf];
      if (dm.dense) {
        common *= dm.overlap[cf * static_cast<std::size_t>(dm.parts[1]) + ct];
      } else {
        const int lo = dm.lo[0][ct], c = static_cast<int>(cf);
        common *= c >= lo && c <= dm.hi[0][ct] ? dm.overlap[dm.at[ct] + static_cast<std::size_t>(c - lo)] : 0;
      }
      if (dm.parts[0] > 1) {
        first[0] |= static_cast<std::uint64_t>(std::max(0, dm.lo[0][ct])) << dm.low[0];
        last[0] |= static_cast<std::uint64_t>(std::max(0, dm.hi[0][ct])) << dm.low[0];
      }
      if (back != nullptr && dm.parts[1] > 1) {
        first[1] |= static_cast<std::uint64_t>(std::max(0, dm.lo[1][cf])) << dm.low[1];
        last[1] |= static_cast<std::uint64_t>(std::max(0, dm.hi[1][cf])) << dm.low[1];
      }
    }
    visit(0, bits, needed, held, common, first[0], last[0]);
    if (back != nullptr) {
      visit(1, bits, held, needed, common, first[1], last[1]);
    }
  });
  for (std::size_t w = 0; w < way_count; ++w) {
    TabledWay& way = ways[w];
    Redistribution& result = w == 0 ? out : *back;
    way.total *= copies; // whole numbers of bytes: exact
    result.total_bytes = way.total;
    result.max_bytes_in = way.max_in;
    result.max_block_bytes = way.max_block;
    result.pattern = pattern_of(way.total, way.any_slice, way.any_gather, way.any_a2a, false);
    if (way.total != 0) {
      write_kept_groups(n, keep, way.sets, way.involved, result);
    }
  }
  return true;
}

// The bit form's grids (closed_form, tabled_form): both sides on devices 0 .. N-1 (N a power of
// two, `n`), every split a power of two; per side and axis of its grid, the lowest bit of the
// axis's field and its width (the last axis lowest). False where they do not apply.
bool bit_fields(const Config& from_config, std::span<const int> from_devices, const Config& to_config,
                std::span<const int> to_devices, AxisBits& from_low, AxisBits& from_width, AxisBits& to_low,
                AxisBits& to_width) {
  const auto n = static_cast<std::int64_t>(from_devices.size());
  if (log2_exact(n) < 0 || to_devices.size() != from_devices.size()) {
    return false;
  }
  int differ = 0; // without a branch per device, which the compiler vectorizes
  for (std::size_t i = 0; i < from_devices.size(); ++i) {
    differ |= (from_devices[i] ^ static_cast<int>(i)) | (to_devices[i] ^ static_cast<int>(i));
  }
  if (differ != 0) {
    return false;
  }
  const auto fields = [](const Config& c, AxisBits& low, AxisBits& width) {
    if (c.splits.size() > most_axes) {
      return false;
    }
    int at = 0;
    for (std::size_t a = c.splits.size(); a-- > 0;) {
      width[a] = log2_exact(c.splits[a]);
      if (width[a] < 0) {
        return false;
      }
      low[a] = at;
      at += width[a];
    }
    return true;
  };
  return fields(from_config, from_low, from_width) && fields(to_config, to_low, to_width);
}

// Whether some dim is not a whole number of both sides' parts (tabled_form's case).
bool uneven(const TensorLayout& from, const TensorLayout& to) {
  for (std::size_t j = 0; j < from.shape.size(); ++j) {
    if (from.shape[j] % std::max(from.parts[j], to.parts[j]) != 0) {
      return true;
    }
  }
  return false;
}

// The closed form of the common case of the search: both sides on devices 0 .. N-1 (N a power of
// two), grids of powers of two, every dim a whole number of both sides' parts. Then a device index's bits name its
// blocks: on each side, axis a of the grid is a field of bits (the last axis lowest; the copies of the grid above
// them), and a dim cut by that axis has its part index in that field. A device's needed block meets its own block in a
// dim only where the top bits of the two fields agree, in which case it holds min of the two parts of it; so every
// device receives either `needed` or `needed - common`, the latter exactly when the equalities between bits hold
// (2^(classes of equated bits) devices). The holder of each cell a device lacks differs from it only in the producer's
// cutting bits (replica_base): where they are set from bits that do not cut, the groups are the sets of devices that
// agree on every other bit; else they are joined link by link (closed_form_groups). Returns false where the case does
// not apply (redistribute() then walks the devices).
// On `n` devices, with the two sides' bit_fields; `alike_by_xor` as redistribute() takes it.
bool closed_form(const TensorLayout& from, const TensorLayout& to, std::int64_t n, const AxisBits& from_low,
                 const AxisBits& from_width, const AxisBits& to_low, const AxisBits& to_width, int node_bits,
                 bool alike_by_xor, Redistribution& out) {
  const int bits = log2_exact(n);
  const std::size_t r = from.shape.size();
  std::uint64_t cutting = 0; // the producer's cutting bits
  std::uint64_t read = 0;    // the bits the consumer's parts are read from, where they meet the producer's
  std::uint64_t reading = 0; // every bit the consumer's parts are read from
  // Pairs of bits (the producer's, the consumer's) that must agree for a device's blocks to meet.
  std::array<std::pair<int, int>, 64> pairs; // the first pair_count
  std::size_t pair_count = 0;
  std::array<int, 64> parent; // the first `bits`
  for (int b = 0; b < bits; ++b) {
    parent[static_cast<std::size_t>(b)] = b;
  }
  const auto root = [&parent](int b) {
    while (parent[static_cast<std::size_t>(b)] != b) {
      b = parent[static_cast<std::size_t>(b)];
    }
    return b;
  };
  if (uneven(from, to)) {
    return tabled_form(from, to, n, from_low, from_width, to_low, to_width, node_bits, alike_by_xor, out, nullptr);
  }
  std::int64_t needed = 1, held = 1, common = 1;
  for (std::size_t j = 0; j < r; ++j) {
    const std::int64_t f = from.parts[j], t = to.parts[j];
    const std::int64_t size = from.shape[j];
    needed *= size / t;
    held *= size / f;
    common *= size / std::max(f, t);
    const int fa = from.dim_axis[j], ta = to.dim_axis[j];
    const int fw = fa < 0 ? 0 : from_width[static_cast<std::size_t>(fa)];
    const int tw = ta < 0 ? 0 : to_width[static_cast<std::size_t>(ta)];
    if (fw > 0) {
      cutting |= ((std::uint64_t{1} << fw) - 1) << from_low[static_cast<std::size_t>(fa)];
    }
    if (tw > 0) {
      reading |= ((std::uint64_t{1} << tw) - 1) << to_low[static_cast<std::size_t>(ta)];
    }
    // The top min(fw, tw) bits of the two fields must agree for the blocks to meet.
    for (int i = 0; i < std::min(fw, tw); ++i) {
      const int a = from_low[static_cast<std::size_t>(fa)] + fw - 1 - i;
      const int b = to_low[static_cast<std::size_t>(ta)] + tw - 1 - i;
      read |= std::uint64_t{1} << b;
      pairs[pair_count++] = {a, b};
      const int ra = root(a), rb = root(b);
      if (ra != rb) {
        parent[static_cast<std::size_t>(std::max(ra, rb))] = std::min(ra, rb);
      }
    }
  }
  int classes = 0;
  for (int b = 0; b < bits; ++b) {
    classes += root(b) == b ? 1 : 0;
  }
  const std::int64_t matching = std::int64_t{1} << classes; // devices whose own block meets the needed one
  const auto es = static_cast<double>(from.element_size);
  const double received_matching = static_cast<double>(needed - common);
  out.max_block_bytes = static_cast<double>(needed) * es;
  out.total_bytes = (static_cast<double>(n - matching) * static_cast<double>(needed) +
                     static_cast<double>(matching) * received_matching) *
                    es;
  out.max_bytes_in = (matching < n ? static_cast<double>(needed) : received_matching) * es;
  const bool gather = received_matching > 0 && common == held;
  const bool a2a = matching < n || (received_matching > 0 && common != held);
  out.pattern = pattern_of(out.total_bytes, needed != held, gather, a2a, false);
  if (out.total_bytes == 0) {
    return true;
  }
  if ((read & cutting) != 0) {
    closed_form_groups(n, cutting, std::span(pairs.data(), pair_count), needed == common,
                       kept_bits(n, cutting | reading, node_bits), alike_by_xor, out);
    return true;
  }
  // Groups: the devices agreeing on every bit but the cutting ones, smallest first (which bits the
  // consumer reads changes none of them).
  // Every group is the first (the devices that set cutting bits only) moved by an exclusive or of
  // bits that do not cut: where such moves price a group alike, the first stands for them all.
  const std::uint64_t keep = kept_bits(n, cutting, node_bits) & (alike_by_xor ? cutting : ~std::uint64_t{0});
  const int size_bits = std::popcount(cutting);
  const auto groups = std::size_t{1} << (std::popcount(keep) - size_bits);
  out.groups.reserve(groups, groups << size_bits);
  for_each_kept(keep & ~cutting, [&](std::uint64_t d) {
    out.groups.open();
    for_each_kept(cutting, [&](std::uint64_t sub) { out.groups.add(static_cast<int>(d | sub)); });
  });
  return true;
}

} // namespace

Redistribution redistribute(const TensorLayout& from, const Config& from_config, std::span<const int> from_devices,
                            const TensorLayout& to, const Config& to_config, std::span<const int> to_devices,
                            int node_bits) {
  Redistribution out;
  redistribute(from, from_config, from_devices, to, to_config, to_devices, node_bits, out);
  return out;
}

void redistribute_both(const TensorLayout& from, const Config& from_config, std::span<const int> from_devices,
                       const TensorLayout& to, const Config& to_config, std::span<const int> to_devices, int node_bits,
                       Redistribution& forward, Redistribution& backward, bool alike_by_xor) {
  if (AxisBits from_low, to_low, from_width, to_width;
      from.shape == to.shape &&
      bit_fields(from_config, from_devices, to_config, to_devices, from_low, from_width, to_low, to_width)) {
    check_layout(from, from_config, from_devices, "producer");
    check_layout(to, to_config, to_devices, "consumer");
    for (auto* r : {&forward, &backward}) {
      r->pattern = Pattern::none;
      r->max_bytes_in = r->total_bytes = r->max_block_bytes = 0;
      r->groups.clear();
    }
    const auto n = static_cast<std::int64_t>(from_devices.size());
    if (uneven(from, to)
            ? tabled_form(from, to, n, from_low, from_width, to_low, to_width, node_bits, alike_by_xor, forward,
                          &backward)
            : closed_form(from, to, n, from_low, from_width, to_low, to_width, node_bits, alike_by_xor, forward) &&
                  closed_form(to, from, n, to_low, to_width, from_low, from_width, node_bits, alike_by_xor, backward)) {
      return;
    }
  }
  redistribute(from, from_config, from_devices, to, to_config, to_devices, node_bits, forward, alike_by_xor);
  redistribute(to, to_config, to_devices, from, from_config, from_devices, node_bits, backward, alike_by_xor);
}

void redistribute(const TensorLayout& from, const Config& from_config, std::span<const int> from_devices,
                  const TensorLayout& to, const Config& to_config, std::span<const int> to_devices, int node_bits,
                  Redistribution& out, bool alike_by_xor) {
  if (from.shape != to.shape) {
    throw Error(fmt::format("redistribute: producer shape {} differs from consumer shape {}",
                            graph::shape_string(from.shape), graph::shape_string(to.shape)));
  }
  check_layout(from, from_config, from_devices, "producer");
  check_layout(to, to_config, to_devices, "consumer");
  out.pattern = Pattern::none;
  out.max_bytes_in = out.total_bytes = out.max_block_bytes = 0;
  out.groups.clear();
  if (AxisBits from_low, to_low, from_width, to_width;
      bit_fields(from_config, from_devices, to_config, to_devices, from_low, from_width, to_low, to_width) &&
      closed_form(from, to, static_cast<std::int64_t>(from_devices.size()), from_low, from_width, to_low, to_width,
                  node_bits, alike_by_xor, out)) {
    return;
  }
  check_device_ids(from_devices, "producer");
  check_device_ids(to_devices, "consumer");
  const std::size_t r = from.shape.size();

  // Dense tables by device id: which producer position a device is, and duplicates check.
  int max_id = 0;
  for (const int d : from_devices) {
    max_id = std::max(max_id, d);
  }
  for (const int d : to_devices) {
    max_id = std::max(max_id, d);
  }
  const auto ids = static_cast<std::size_t>(max_id) + 1;
  thread_local Scratch scratch;
  auto& from_pos = scratch.from_pos;
  from_pos.assign(ids, -1);
  for (std::size_t p = 0; p < from_devices.size(); ++p) {
    int& slot = from_pos[static_cast<std::size_t>(from_devices[p])];
    if (slot >= 0) {
      throw Error(fmt::format("redistribute: producer device {} is listed twice", from_devices[p]));
    }
    slot = static_cast<int>(p);
  }
  std::size_t components = from_devices.size(); // distinct devices of both sides, as singletons
  {
    auto& seen = scratch.seen;
    seen.assign(ids, 0);
    for (const int d : to_devices) {
      if (seen[static_cast<std::size_t>(d)]) {
        throw Error(fmt::format("redistribute: consumer device {} is listed twice", d));
      }
      seen[static_cast<std::size_t>(d)] = 1;
      components += from_pos[static_cast<std::size_t>(d)] < 0 ? 1 : 0;
    }
  }

  // Producer cells: cell id = the producer's part indices raveled, last dim fastest.
  auto& stride = scratch.stride;
  stride.assign(r, 1);
  std::int64_t cells = 1;
  for (std::size_t j = r; j-- > 0;) {
    stride[j] = cells;
    cells *= from.parts[j];
  }
  const auto& from_coords = scratch.from_coords;
  const auto& to_coords = scratch.to_coords;
  grid_coords(from_config, scratch.from_coords);
  grid_coords(to_config, scratch.to_coords);
  const std::size_t from_axes = from_config.splits.size(), to_axes = to_config.splits.size();
  const int from_k = from_config.devices(), to_k = to_config.devices();
  auto from_at = [&](int p) {
    return std::span<const int>(from_coords).subspan(static_cast<std::size_t>(p % from_k) * from_axes, from_axes);
  };
  auto to_at = [&](int t) {
    return std::span<const int>(to_coords).subspan(static_cast<std::size_t>(t % to_k) * to_axes, to_axes);
  };
  // Per tensor dim, how far apart on the producer's grid two positions are whose parts of that dim
  // differ by one (0 for an uncut dim): a cell's holder of a given replica is found by arithmetic.
  auto& pos_stride = scratch.pos_stride;
  pos_stride.assign(r, 0);
  for (std::size_t j = 0; j < r; ++j) {
    if (from.dim_axis[j] >= 0) {
      std::int64_t s = 1;
      for (std::size_t i = static_cast<std::size_t>(from.dim_axis[j]) + 1; i < from_axes; ++i) {
        s *= from_config.splits[i];
      }
      pos_stride[j] = s;
    }
  }
  auto& cell_of_pos = scratch.cell_of_pos;
  cell_of_pos.assign(from_devices.size(), 0);
  for (std::size_t p = 0; p < from_devices.size(); ++p) {
    const auto coords = from_at(static_cast<int>(p));
    std::int64_t cell = 0;
    for (std::size_t j = 0; j < r; ++j) {
      const int a = from.dim_axis[j];
      cell += a < 0 ? 0 : coords[static_cast<std::size_t>(a)] * stride[j];
    }
    cell_of_pos[p] = cell;
  }
  const bool single_holder = static_cast<std::int64_t>(from_devices.size()) == cells;

  // Consumers with one holder per cell and the same needed block touch the same holders: the
  // first walks the cells, the others join through a remembered holder (two, from distinct cells,
  // so that one of them is not the consumer itself).
  std::int64_t to_cells = 1;
  for (const int p : to.parts) {
    to_cells *= p;
  }
  auto& remembered = scratch.remembered;
  remembered.assign(single_holder ? static_cast<std::size_t>(to_cells) : 0, {-1, -1});

  auto& sets = scratch.sets;
  sets.reset(ids);
  auto& involved = scratch.involved;
  involved.assign(ids, 0);
  std::size_t senders = 0; // producer devices marked involved
  auto involve = [&](int device) {
    if (involved[static_cast<std::size_t>(device)] == 0) {
      involved[static_cast<std::size_t>(device)] = 1;
      senders += from_pos[static_cast<std::size_t>(device)] >= 0 ? 1 : 0;
    }
  };
  auto link = [&](int a, int b) { components -= sets.unite(a, b) ? 1 : 0; };
  auto& nb = scratch.nb;
  auto& ne = scratch.ne;
  auto& hb = scratch.hb;
  auto& he = scratch.he;
  auto& lo = scratch.lo;
  auto& hi = scratch.hi;
  auto& cur = scratch.cur;
  for (auto* v : {&nb, &ne, &hb, &he, &lo, &hi, &cur}) {
    v->assign(r, 0);
  }
  double total = 0, max_in = 0, max_block = 0;
  bool any_slice = false, any_gather = false, any_a2a = false, any_fresh = false;
  auto& from_parts = scratch.from_parts;
  auto& to_parts = scratch.to_parts;
  from_parts.fill(from);
  to_parts.fill(to);
  scratch.first_cell.assign(to_parts.begin.size(), 0);
  scratch.last_cell.assign(to_parts.begin.size(), -1);
  for (std::size_t j = 0; j < r; ++j) {
    const std::int64_t step = detail::part_size(from.shape[j], from.parts[j]);
    const std::size_t end = j + 1 < r ? to_parts.offset[j + 1] : to_parts.begin.size();
    for (std::size_t i = to_parts.offset[j]; i < end; ++i) {
      if (to_parts.end[i] > to_parts.begin[i]) {
        scratch.first_cell[i] = to_parts.begin[i] / step;
        scratch.last_cell[i] = (to_parts.end[i] - 1) / step;
      }
    }
  }
  std::vector<std::size_t>& to_index = scratch.to_index; // per dim: the consumer's part of it
  to_index.assign(r, 0);

  for (std::size_t t = 0; t < to_devices.size(); ++t) {
    const int d = to_devices[t];
    const auto coords = to_at(static_cast<int>(t));
    for (std::size_t j = 0; j < r; ++j) {
      to_index[j] = to_parts.at(to, coords, j);
      nb[j] = to_parts.begin[to_index[j]];
      ne[j] = to_parts.end[to_index[j]];
    }
    std::int64_t to_cell = 0, to_stride = 1;
    for (std::size_t j = r; j-- > 0;) {
      const int a = to.dim_axis[j];
      to_cell += a < 0 ? 0 : coords[static_cast<std::size_t>(a)] * to_stride;
      to_stride *= to.parts[j];
    }
    std::int64_t needed = 1;
    for (std::size_t j = 0; j < r; ++j) {
      needed *= ne[j] - nb[j];
    }
    max_block = std::max(max_block, static_cast<double>(needed) * static_cast<double>(from.element_size));
    const int p = from_pos[static_cast<std::size_t>(d)];
    std::int64_t held = 0, common = 0, own_cell = -1;
    if (p >= 0) {
      own_cell = cell_of_pos[static_cast<std::size_t>(p)];
      const auto from_coords_p = from_at(p);
      for (std::size_t j = 0; j < r; ++j) {
        const std::size_t i = from_parts.at(from, from_coords_p, j);
        hb[j] = from_parts.begin[i];
        he[j] = from_parts.end[i];
      }
      held = common = 1;
      for (std::size_t j = 0; j < r; ++j) {
        held *= he[j] - hb[j];
        common *= std::max<std::int64_t>(0, std::min(ne[j], he[j]) - std::max(nb[j], hb[j]));
      }
    }
    const std::int64_t received = needed - common;
    if (received == 0) {
      any_slice = any_slice || needed != held;
      continue;
    }
    const double bytes = static_cast<double>(received) * static_cast<double>(from.element_size);
    total += bytes;
    max_in = std::max(max_in, bytes);
    (p < 0 ? any_fresh : common == held ? any_gather : any_a2a) = true;

    // Groups: link d to a holder of every other cell its block overlaps.
    involve(d);
    // Once every device is in one group and every producer sends, no walk can change the groups.
    if (components == 1 && senders == from_devices.size()) {
      continue;
    }
    if (single_holder) {
      const auto& rem = remembered[static_cast<std::size_t>(to_cell)];
      if (rem[0] >= 0) {
        link(d, rem[0] != d ? rem[0] : rem[1]);
        continue;
      }
    }
    // The holders of d's replica (replica_base): d's own position among the producer's devices,
    // or its position in its own list when it is not one of them.
    const std::int64_t stand_in = p >= 0 ? p : static_cast<std::int64_t>(t % from_devices.size());
    std::int64_t base = stand_in;
    {
      const auto sc = from_at(static_cast<int>(stand_in));
      for (std::size_t j = 0; j < r; ++j) {
        const int a = from.dim_axis[j];
        base -= a < 0 ? 0 : sc[static_cast<std::size_t>(a)] * pos_stride[j];
      }
    }
    for (std::size_t j = 0; j < r; ++j) {
      lo[j] = scratch.first_cell[to_index[j]];
      hi[j] = scratch.last_cell[to_index[j]];
      cur[j] = lo[j];
    }
    std::array<int, 2> seen{-1, -1};
    for (;;) {
      std::int64_t cell = 0, at = base;
      for (std::size_t j = 0; j < r; ++j) {
        cell += cur[j] * stride[j];
        at += cur[j] * pos_stride[j];
      }
      if (cell != own_cell) {
        const int h = from_devices[static_cast<std::size_t>(at)];
        involve(h);
        link(d, h);
        if (seen[0] < 0) {
          seen[0] = h;
        } else if (seen[1] < 0) {
          seen[1] = h;
        }
      } else if (seen[1] < 0) {
        // Remember d as the holder of its own cell: another consumer needing this block gets it.
        (seen[0] < 0 ? seen[0] : seen[1]) = d;
      }
      std::size_t j = r;
      while (j-- > 0 && ++cur[j] > hi[j]) {
        cur[j] = lo[j];
      }
      if (j == static_cast<std::size_t>(-1)) {
        break;
      }
    }
    if (single_holder) {
      remembered[static_cast<std::size_t>(to_cell)] = seen;
    }
  }

  out.total_bytes = total;
  out.max_bytes_in = max_in;
  out.max_block_bytes = max_block;
  out.pattern = pattern_of(total, any_slice, any_gather, any_a2a, any_fresh);
  if (total == 0) {
    return;
  }

  write_groups(ids, sets, involved, out);
}

void DeviceGroups::assign_sizes(std::span<const std::size_t> sizes) {
  m_ends.resize(sizes.size());
  std::size_t at = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    at += sizes[i];
    m_ends[i] = at;
  }
  m_devices.resize(at);
}

std::vector<std::vector<int>> DeviceGroups::lists() const {
  std::vector<std::vector<int>> out;
  for (const auto g : *this) {
    out.emplace_back(g.begin(), g.end());
  }
  return out;
}

int replica_base(const TensorLayout& layout, const Config& config, int position) {
  const int k = config.devices();
  const int copy = position / k * k;
  int within = position % k, base = 0, stride = 1;
  std::vector<bool> cuts(config.splits.size(), false);
  for (const int a : layout.dim_axis) {
    if (a >= 0) {
      cuts[static_cast<std::size_t>(a)] = true;
    }
  }
  for (std::size_t i = config.splits.size(); i-- > 0;) {
    const int f = config.splits[i];
    base += cuts[i] ? 0 : within % f * stride;
    within /= f;
    stride *= f;
  }
  return copy + base;
}

} // namespace partita::sharding
