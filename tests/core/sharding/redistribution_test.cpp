#include "partita/graph/error.h"
#include "partita/sharding/redistribution.h"
#include "sharding_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

namespace partita {
namespace {

using sharding::Config;
using sharding::Pattern;
using sharding::TensorLayout;
using Groups = std::vector<std::vector<int>>;

// A repeatable stream of draws for the randomized tests: next(n) is in 0 .. n-1.
class Draws {
public:
  explicit Draws(std::uint32_t seed) : m_seed(seed) {}
  std::uint32_t operator()(std::uint32_t n) {
    m_seed = m_seed * 1664525u + 1013904223u;
    return (m_seed >> 8) % n;
  }

private:
  std::uint32_t m_seed;
};

// The devices moved up by n.
std::vector<int> shifted_by(std::vector<int> devices, int n) {
  for (int& d : devices) {
    d += n;
  }
  return devices;
}

// A layout built by hand: tensor dim j cut by grid axis axes[j] (or -1) into that axis's factor.
TensorLayout layout(std::vector<std::int64_t> shape, const Config& c, std::vector<int> axes) {
  TensorLayout l;
  l.shape = std::move(shape);
  l.element_size = 4;
  l.dim_axis = axes;
  for (const int a : axes) {
    l.parts.push_back(a < 0 ? 1 : c.splits[static_cast<std::size_t>(a)]);
  }
  return l;
}

// Y split (b:2, n:2) feeding a layer that wants Y split along b only (its own
// b:2 with a second axis not indexing Y, so Y is replicated over it): the two n halves are
// all-gathered within each n group.
TEST(ShardingRedistribution, WorkedExampleAllGatherWithinNGroups) {
  const test::TwoLayers t;
  const Config c1 = test::config(t.fc1, {{"m", 2}, {"n", 2}});
  const Config c2 = test::config(t.fc2, {{"m", 2}, {"n", 2}});
  const auto devices = test::iota_devices(4);
  const TensorLayout from = output_layout(t.g, t.fc1, c1, 0);
  const TensorLayout to = input_layout(t.g, t.fc2, c2, 0);
  EXPECT_EQ(to.parts, (std::vector<int>{2, 1}));
  const auto r = redistribute(from, c1, devices, to, c2, devices);
  EXPECT_EQ(r.pattern, Pattern::all_gather);
  // Each device receives the other half of its rows: 4 rows x 6 columns of f32.
  EXPECT_DOUBLE_EQ(r.max_bytes_in, 4.0 * 4 * 6);
  EXPECT_DOUBLE_EQ(r.total_bytes, 4 * 4.0 * 4 * 6);
  // ... and assembles its whole rows: the half it held and the half it received.
  EXPECT_DOUBLE_EQ(r.max_block_bytes, 2 * r.max_bytes_in);
  const int n = t.fc1.find_dim("n");
  EXPECT_EQ(r.groups.lists(), groups_along(c1, devices, std::vector<int>{n}));
  EXPECT_EQ(r.groups.lists(), (Groups{{0, 1}, {2, 3}}));
}

TEST(ShardingRedistribution, IdenticalLayoutsMoveNothing) {
  const test::TwoLayers t;
  const Config c = test::config(t.fc1, {{"m", 2}, {"n", 2}});
  const auto devices = test::iota_devices(4);
  const TensorLayout y = output_layout(t.g, t.fc1, c, 0);
  const auto r = redistribute(y, c, devices, y, c, devices);
  EXPECT_EQ(r.pattern, Pattern::none);
  EXPECT_DOUBLE_EQ(r.max_bytes_in, 0);
  EXPECT_DOUBLE_EQ(r.total_bytes, 0);
  EXPECT_TRUE(r.groups.empty());
  EXPECT_EQ(pattern_name(r.pattern), "none");
}

TEST(ShardingRedistribution, DisjointDevicesSendWholeShards) {
  const test::TwoLayers t;
  const Config c = test::config(t.fc1, {{"m", 2}, {"n", 2}});
  const TensorLayout y = output_layout(t.g, t.fc1, c, 0);
  const auto r = redistribute(y, c, test::iota_devices(4), y, c, test::iota_devices(4, 4));
  EXPECT_EQ(r.pattern, Pattern::send_recv);
  EXPECT_DOUBLE_EQ(r.max_bytes_in, y.shard_bytes());
  EXPECT_DOUBLE_EQ(r.total_bytes, 4 * y.shard_bytes());
  EXPECT_EQ(r.groups.lists(), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// Y row-split 4 ways feeding a layer that splits its reduction dim k (Y's columns) 4 ways: the
// partitioned dim changes. Each device holds 2 rows x 12 and needs 8 x 3, of which it has 2 x 3.
TEST(ShardingRedistribution, TransposeOfPartitionedDimIsAllToAll) {
  const test::TwoLayers t;
  const Config c1 = test::config(t.fc1, {{"m", 4}});
  const Config c2 = test::config(t.fc2, {{"k", 4}});
  const auto devices = test::iota_devices(4);
  const auto r =
      redistribute(output_layout(t.g, t.fc1, c1, 0), c1, devices, input_layout(t.g, t.fc2, c2, 0), c2, devices);
  EXPECT_EQ(r.pattern, Pattern::all_to_all);
  EXPECT_DOUBLE_EQ(r.max_bytes_in, 4.0 * (24 - 6));
  EXPECT_DOUBLE_EQ(r.total_bytes, 4 * 4.0 * (24 - 6));
  EXPECT_EQ(r.groups.lists(), (Groups{{0, 1, 2, 3}}));
}

// A producer whose split k left partial sums holds, once reduced, all of Y on both devices; a
// consumer splitting the rows takes a local slice.
TEST(ShardingRedistribution, NeedingLessIsASlice) {
  const test::TwoLayers t;
  const Config c1 = test::config(t.fc1, {{"k", 2}});
  const Config c2 = test::config(t.fc2, {{"m", 2}});
  const auto devices = test::iota_devices(2);
  const TensorLayout from = output_layout(t.g, t.fc1, c1, 0);
  ASSERT_EQ(from.partial_axes.size(), 1u);
  const auto r = redistribute(from, c1, devices, input_layout(t.g, t.fc2, c2, 0), c2, devices);
  EXPECT_EQ(r.pattern, Pattern::slice);
  EXPECT_DOUBLE_EQ(r.total_bytes, 0);
  EXPECT_TRUE(r.groups.empty());
}

// From 2 row blocks on devices {0, 1} to 4 on {0, 1, 2, 3}: device 0 slices, device 1 needs rows
// device 0 holds, devices 2 and 3 hold nothing yet and take rows from device 1.
TEST(ShardingRedistribution, DifferentKindsAtOnceAreMixed) {
  Config c2{{2}}, c4{{4}};
  const auto r = redistribute(layout({8, 4}, c2, {0, -1}), c2, test::iota_devices(2), layout({8, 4}, c4, {0, -1}), c4,
                              test::iota_devices(4));
  EXPECT_EQ(r.pattern, Pattern::mixed);
  EXPECT_DOUBLE_EQ(r.max_bytes_in, 4.0 * 2 * 4);
  EXPECT_DOUBLE_EQ(r.total_bytes, 3 * 4.0 * 2 * 4);
  EXPECT_EQ(r.groups.lists(), (Groups{{0, 1, 2, 3}}));
}

// Each needed block comes from the holder of the consumer's own replica: the producer has block 0
// on {0, 1} and block 1 on {2, 3} (replicas along its second axis); consumers 1 and 2 want
// everything, so 1 (replica 1) takes block 1 from 3 and 2 (replica 0) takes block 0 from 0.
TEST(ShardingRedistribution, NeededBlocksComeFromTheConsumersOwnReplica) {
  const Config from_c{{2, 2}}, to_c{{2}};
  const auto from = layout({8}, from_c, {0});
  const auto r =
      redistribute(from, from_c, test::iota_devices(4), layout({8}, to_c, {-1}), to_c, std::vector<int>{1, 2});
  EXPECT_EQ(r.pattern, Pattern::all_gather);
  EXPECT_DOUBLE_EQ(r.max_bytes_in, 4.0 * 4);
  EXPECT_EQ(r.groups.lists(), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(replica_base(from, from_c, 0), 0);
  EXPECT_EQ(replica_base(from, from_c, 3), 1);
  EXPECT_EQ(replica_base(from, from_c, 4 + 2), 4); // a second copy of the grid
}

// A consumer that is none of the producer's devices (the next pipeline stage) is of the replica
// of its own position in its list: the producer holds column block 0 on {0, 2} and 1 on {1, 3};
// replicated consumers 4 and 5 (positions 0 and 1, replica 0) take both blocks from {0, 1}, and 6
// and 7 from {2, 3}, rather than all crowding onto the closest holders.
TEST(ShardingRedistribution, AnotherStageTakesFromTheReplicaAtItsOwnPosition) {
  const Config from_c{{2, 2}}, to_c{{1}};
  const auto r = redistribute(layout({4, 8}, from_c, {-1, 1}), from_c, test::iota_devices(4),
                              layout({4, 8}, to_c, {-1, -1}), to_c, std::vector<int>{4, 5, 6, 7});
  EXPECT_EQ(r.pattern, Pattern::send_recv);
  EXPECT_EQ(r.groups.lists(), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
}

// 1024 devices, one row block each, gathered onto a replicated consumer: one group of everyone.
TEST(ShardingRedistribution, LargeGatherAndAllToAll) {
  const Config c{{1024, 1}};
  const Config cols{{1, 1024}};
  const auto devices = test::iota_devices(1024);
  const TensorLayout rows = layout({1024, 2048}, c, {0, -1});
  const auto gather = redistribute(rows, c, devices, layout({1024, 2048}, c, {-1, -1}), c, devices);
  EXPECT_EQ(gather.pattern, Pattern::all_gather);
  EXPECT_DOUBLE_EQ(gather.max_bytes_in, 4.0 * 1023 * 2048);
  ASSERT_EQ(gather.groups.size(), 1u);
  EXPECT_EQ(gather.groups[0].size(), 1024u);
  const auto a2a = redistribute(rows, c, devices, layout({1024, 2048}, cols, {-1, 1}), cols, devices);
  EXPECT_EQ(a2a.pattern, Pattern::all_to_all);
  EXPECT_DOUBLE_EQ(a2a.max_bytes_in, 4.0 * 1023 * 2);
  ASSERT_EQ(a2a.groups.size(), 1u);
}

// What the per-layer search relies on to price one geometry for tensors of many sizes: where each
// dim's size is a whole number of units (the lcm of both sides' part counts), the same layouts on
// the same devices exchange within the same groups, in the same pattern, and every byte count
// scales by the product of the units, exactly. Random grids of up to 16 devices, random dims
// cut by random axes, sizes of 1 to 3 units per dim.
TEST(ShardingRedistribution, BytesScaleWithWholeUnitsAndGroupsStay) {
  Draws next(12345u);
  const std::vector<Config> grids{Config{{2, 2, 4}},  Config{{4, 1, 2}}, Config{{1, 8, 2}}, Config{{2, 4, 1}},
                                  Config{{16, 1, 1}}, Config{{1, 1, 1}}, Config{{2, 1, 1}}, Config{{4, 4, 1}}};
  const auto devices = test::iota_devices(16);
  int moved = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const Config& fc = grids[next(static_cast<std::uint32_t>(grids.size()))];
    const Config& tc = grids[next(static_cast<std::uint32_t>(grids.size()))];
    std::vector<int> fa(2), ta(2);
    for (std::size_t j = 0; j < 2; ++j) { // an axis per dim, never one axis for both
      fa[j] = static_cast<int>(next(4)) - 1;
      ta[j] = static_cast<int>(next(4)) - 1;
    }
    if ((fa[0] >= 0 && fa[0] == fa[1]) || (ta[0] >= 0 && ta[0] == ta[1])) {
      continue;
    }
    const auto parts = [](const Config& c, int axis) {
      return axis < 0 ? 1 : c.splits[static_cast<std::size_t>(axis)];
    };
    std::vector<std::int64_t> unit(2), big(2);
    std::int64_t units = 1;
    for (std::size_t j = 0; j < 2; ++j) {
      unit[j] = std::lcm(parts(fc, fa[j]), parts(tc, ta[j]));
      const std::int64_t u = 1 + next(3);
      big[j] = unit[j] * u;
      units *= u;
    }
    const std::vector<int> from_devices(devices.begin(), devices.begin() + 16 / fc.devices() * fc.devices());
    const std::vector<int> to_devices(devices.begin(), devices.begin() + 16 / tc.devices() * tc.devices());
    const auto small = redistribute(layout(unit, fc, fa), fc, from_devices, layout(unit, tc, ta), tc, to_devices);
    const auto large = redistribute(layout(big, fc, fa), fc, from_devices, layout(big, tc, ta), tc, to_devices);
    SCOPED_TRACE(testing::Message() << "trial " << trial);
    EXPECT_EQ(large.pattern, small.pattern);
    EXPECT_EQ(large.groups.lists(), small.groups.lists());
    EXPECT_EQ(large.max_bytes_in, small.max_bytes_in * static_cast<double>(units));
    EXPECT_EQ(large.total_bytes, small.total_bytes * static_cast<double>(units));
    EXPECT_EQ(large.max_block_bytes, small.max_block_bytes * static_cast<double>(units));
    moved += small.total_bytes > 0 ? 1 : 0;
  }
  EXPECT_GT(moved, 100); // most trials move something
}

// A move does not depend on the order of the tensor's dims (the per-layer search prices moves
// alike up to that order once): random grids and layouts as below, on devices 0 .. N-1 (the closed
// forms) and on N .. 2N-1 (the walk), give the same pattern, byte counts and groups with the
// dims reversed on both sides.
TEST(ShardingRedistribution, TheOrderOfTheDimsDoesNotMatter) {
  Draws next(7u);
  int moved = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int bits = 1 + static_cast<int>(next(5));
    const int n = 1 << bits;
    Config fc, tc;
    for (auto* c : {&fc, &tc}) {
      int left = bits;
      for (int a = 0; a < 3; ++a) {
        const int b = a == 2 ? left : static_cast<int>(next(static_cast<std::uint32_t>(left) + 1));
        c->splits.push_back(1 << b);
        left -= b;
      }
    }
    const std::size_t rank = 2 + next(2);
    std::vector<int> fa(rank, -1), ta(rank, -1);
    for (std::size_t j = 0; j < rank && j < 3; ++j) {
      fa[j] = static_cast<int>((j + next(3)) % 3);
      ta[j] = static_cast<int>((j + next(3)) % 3);
    }
    for (auto* axes : {&fa, &ta}) { // each axis cuts one dim at most
      for (std::size_t j = 0; j < rank; ++j) {
        for (std::size_t i = 0; i < j; ++i) {
          if ((*axes)[i] == (*axes)[j]) {
            (*axes)[j] = -1;
          }
        }
      }
    }
    std::vector<std::int64_t> shape(rank);
    for (std::size_t j = 0; j < rank; ++j) {
      shape[j] = next(3) == 0 ? 1 + next(97) : std::int64_t{n} * (1 + next(3));
    }
    const auto reversed = [](auto v) {
      std::reverse(v.begin(), v.end());
      return v;
    };
    const auto zero = test::iota_devices(n);
    const auto shifted = shifted_by(zero, n);
    SCOPED_TRACE(testing::Message() << "trial " << trial << ", " << n << " devices");
    for (const auto& devices : {zero, shifted}) {
      const auto a = redistribute(layout(shape, fc, fa), fc, devices, layout(shape, tc, ta), tc, devices);
      const auto b = redistribute(layout(reversed(shape), fc, reversed(fa)), fc, devices,
                                  layout(reversed(shape), tc, reversed(ta)), tc, devices);
      EXPECT_EQ(a.pattern, b.pattern);
      EXPECT_EQ(a.max_bytes_in, b.max_bytes_in);
      EXPECT_EQ(a.total_bytes, b.total_bytes);
      EXPECT_EQ(a.max_block_bytes, b.max_block_bytes);
      EXPECT_EQ(a.groups.lists(), b.groups.lists());
      moved += a.total_bytes > 0 ? 1 : 0;
    }
  }
  EXPECT_GT(moved, 300);
}

// same_block_signature() is the comparison of the two block signatures: random layouts, a third
// of them compared with themselves and a third with the same cut on a grid with an axis of one
// more (the same blocks, another grid).
TEST(ShardingRedistribution, SameBlockSignatureComparesTheSignatures) {
  Draws next(11u);
  int same = 0;
  for (int trial = 0; trial < 600; ++trial) {
    Config fc, tc;
    for (auto* c : {&fc, &tc}) {
      for (int a = 0; a < 3; ++a) {
        c->splits.push_back(1 << next(3));
      }
    }
    const std::size_t rank = 1 + next(3);
    std::vector<int> fa(rank, -1), ta(rank, -1);
    for (std::size_t j = 0; j < rank; ++j) {
      fa[j] = j < 3 && next(2) == 0 ? static_cast<int>(j) : -1;
      ta[j] = j < 3 && next(2) == 0 ? static_cast<int>(j) : -1;
    }
    std::vector<std::int64_t> shape(rank, 64);
    const int kind = static_cast<int>(next(3));
    if (kind == 1) {
      tc = fc;
      ta = fa;
    } else if (kind == 2) {
      tc = fc;
      tc.splits.insert(tc.splits.begin(), 1);
      ta = fa;
      for (int& a : ta) {
        a += a >= 0 ? 1 : 0;
      }
    }
    const auto from = layout(shape, fc, fa), to = layout(shape, tc, ta);
    const bool expected = sharding::block_signature(from, fc) == sharding::block_signature(to, tc);
    EXPECT_EQ(sharding::same_block_signature(from, fc, to, tc), expected) << "trial " << trial;
    same += expected ? 1 : 0;
  }
  EXPECT_GT(same, 300);
  EXPECT_LT(same, 580);
}

// On devices 0 .. N-1 with grids of powers of two, redistribute() takes a closed form (bits of the
// device index); on any other ids, it walks the devices. The same layouts on devices N .. 2N-1
// must give the same pattern and byte counts, and the same groups moved by N: random grids of up
// to 64 devices and tensors of up to 3 dims, random axes (some cutting no dim, some dims uncut),
// sizes a whole number of both sides' parts and, a third of the time, any size (parts of ceil
// division, the last short or empty).
// Of groups of two devices or more (each ascending, in the order of their first device), the first
// of each way of sitting on nodes of 2^node_bits devices: per device, its node's rank among the
// group's nodes and its place on its node (what a cluster of equal nodes prices once).
std::vector<std::vector<int>> first_of_each_shape(const std::vector<std::vector<int>>& groups, int node_bits) {
  std::set<std::vector<int>> seen;
  std::vector<std::vector<int>> out;
  for (const auto& g : groups) {
    std::vector<int> shape;
    int rank = -1, last = -1;
    for (const int d : g) {
      rank += (d >> node_bits) != last ? 1 : 0;
      last = d >> node_bits;
      shape.push_back((rank << node_bits) + (d & ((1 << node_bits) - 1)));
    }
    if (g.size() >= 2 && seen.insert(shape).second) {
      out.push_back(g);
    }
  }
  return out;
}

// Of groups of two devices or more, how many devices each holds on each node of 2^node_bits
// devices, sorted (what a cluster of switched nodes, every device of a node on the same links,
// prices), each once.
std::set<std::vector<int>> node_counts(const std::vector<std::vector<int>>& groups, int node_bits) {
  std::set<std::vector<int>> out;
  for (const auto& g : groups) {
    std::map<int, int> per_node;
    for (const int d : g) {
      ++per_node[d >> node_bits];
    }
    std::vector<int> counts;
    for (const auto& [node, count] : per_node) {
      counts.push_back(count);
    }
    std::sort(counts.begin(), counts.end());
    if (g.size() >= 2) {
      out.insert(counts);
    }
  }
  return out;
}

TEST(ShardingRedistribution, TheClosedFormOnDevicesFromZeroIsTheWalk) {
  Draws next(2026u);
  const auto grid = [&](int bits) { // up to 4 axes of powers of two, product 2^b for some b <= bits
    Config c;
    const int axes = 1 + static_cast<int>(next(4));
    int left = static_cast<int>(next(static_cast<std::uint32_t>(bits) + 1));
    for (int a = 0; a < axes; ++a) {
      const int b = a + 1 == axes ? left : static_cast<int>(next(static_cast<std::uint32_t>(left) + 1));
      c.splits.push_back(1 << b);
      left -= b;
    }
    return c;
  };
  const auto axes_for = [&](const Config& c, std::size_t rank) {
    std::vector<int> axes(rank, -1);
    std::vector<bool> used(c.splits.size(), false);
    for (std::size_t j = 0; j < rank; ++j) {
      const int a = static_cast<int>(next(static_cast<std::uint32_t>(c.splits.size()) + 1)) - 1;
      if (a >= 0 && !used[static_cast<std::size_t>(a)]) {
        axes[j] = a;
        used[static_cast<std::size_t>(a)] = true;
      }
    }
    return axes;
  };
  int moved = 0, several_groups = 0, fewer = 0, fewer_alike = 0, uneven_both = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    const int bits = 1 + static_cast<int>(next(6));
    const int n = 1 << bits;
    const Config fc = grid(bits), tc = grid(bits);
    const std::size_t rank = 1 + next(3);
    const auto fa = axes_for(fc, rank), ta = axes_for(tc, rank);
    std::vector<std::int64_t> shape(rank);
    for (std::size_t j = 0; j < rank; ++j) {
      shape[j] = next(3) == 0 ? 1 + next(97) : std::int64_t{n} * (1 + next(3));
    }
    const auto zero = test::iota_devices(n);
    const auto shifted = shifted_by(zero, n);
    const auto from = layout(shape, fc, fa), to = layout(shape, tc, ta);
    SCOPED_TRACE(testing::Message() << "trial " << trial << ", " << n << " devices");
    const auto fast = redistribute(from, fc, zero, to, tc, zero);
    const auto walked = redistribute(from, fc, shifted, to, tc, shifted);
    EXPECT_EQ(fast.pattern, walked.pattern);
    EXPECT_EQ(fast.max_bytes_in, walked.max_bytes_in);
    EXPECT_EQ(fast.total_bytes, walked.total_bytes);
    EXPECT_EQ(fast.max_block_bytes, walked.max_block_bytes);
    auto groups = fast.groups.lists();
    for (auto& g : groups) {
      for (int& d : g) {
        d += n;
      }
    }
    EXPECT_EQ(groups, walked.groups.lists());
    moved += fast.total_bytes > 0 ? 1 : 0;
    several_groups += fast.groups.size() > 1 ? 1 : 0;

    // Asked for the groups up to moves between nodes of 2^node_bits devices: the same bytes, a
    // part of the groups, and the same first group of each way of sitting on the nodes.
    const int node_bits = static_cast<int>(next(static_cast<std::uint32_t>(bits) + 1));
    SCOPED_TRACE(testing::Message() << "nodes of " << (1 << node_bits));
    const auto by_nodes = redistribute(from, fc, zero, to, tc, zero, node_bits);
    EXPECT_EQ(by_nodes.pattern, fast.pattern);
    EXPECT_EQ(by_nodes.max_bytes_in, fast.max_bytes_in);
    EXPECT_EQ(by_nodes.total_bytes, fast.total_bytes);
    EXPECT_EQ(by_nodes.max_block_bytes, fast.max_block_bytes);
    const auto all = fast.groups.lists(), listed = by_nodes.groups.lists();
    EXPECT_TRUE(std::includes(all.begin(), all.end(), listed.begin(), listed.end()));
    EXPECT_EQ(first_of_each_shape(listed, node_bits), first_of_each_shape(all, node_bits));
    fewer += listed.size() < all.size() ? 1 : 0;
    // Asked for the groups up to moves that keep how many devices each node holds (switched
    // nodes): the same bytes, a part of the groups, and every count of devices per node that the
    // groups make (the search prices each once).
    sharding::Redistribution alike;
    sharding::redistribute(from, fc, zero, to, tc, zero, node_bits, alike, true);
    EXPECT_EQ(alike.pattern, fast.pattern);
    EXPECT_EQ(alike.max_bytes_in, fast.max_bytes_in);
    EXPECT_EQ(alike.total_bytes, fast.total_bytes);
    EXPECT_EQ(alike.max_block_bytes, fast.max_block_bytes);
    const auto alike_listed = alike.groups.lists();
    EXPECT_TRUE(std::includes(all.begin(), all.end(), alike_listed.begin(), alike_listed.end()));
    EXPECT_EQ(node_counts(alike_listed, node_bits), node_counts(all, node_bits));
    fewer_alike += alike_listed.size() < listed.size() ? 1 : 0;

    // Both ways at once (one walk where a dim is uneven) are the two ways one at a time.
    const auto same = [](const sharding::Redistribution& a, const sharding::Redistribution& b) {
      EXPECT_EQ(a.pattern, b.pattern);
      EXPECT_EQ(a.max_bytes_in, b.max_bytes_in);
      EXPECT_EQ(a.total_bytes, b.total_bytes);
      EXPECT_EQ(a.max_block_bytes, b.max_block_bytes);
      EXPECT_EQ(a.groups.lists(), b.groups.lists());
    };
    sharding::Redistribution forward, backward;
    sharding::redistribute_both(from, fc, zero, to, tc, zero, node_bits, forward, backward);
    same(forward, by_nodes);
    same(backward, redistribute(to, tc, zero, from, fc, zero, node_bits));
    sharding::redistribute_both(from, fc, zero, to, tc, zero, node_bits, forward, backward, true);
    same(forward, alike);
    sharding::Redistribution alike_back;
    sharding::redistribute(to, tc, zero, from, fc, zero, node_bits, alike_back, true);
    same(backward, alike_back);
    sharding::redistribute_both(from, fc, shifted, to, tc, shifted, -1, forward, backward);
    same(forward, walked);
    same(backward, redistribute(to, tc, shifted, from, fc, shifted));
    uneven_both += std::any_of(shape.begin(), shape.end(), [&](std::int64_t size) { return size % n != 0; }) ? 1 : 0;
  }
  EXPECT_GT(uneven_both, 200);
  EXPECT_GT(moved, 300);
  EXPECT_GT(several_groups, 80);
  EXPECT_GT(fewer, 50);
  EXPECT_GT(fewer_alike, 20);
}

// A dim cut into many parts on both sides (1,000 elements in 256 parts, then 128: more pairs of
// parts than the tabled form's overlap tables once held, 4,096) is tabled too, and equals the walk
// over every device (shifted ids), both ways, with and without a second dim cut on other bits.
TEST(ShardingRedistribution, DimsOfManyPartsOnBothSidesAreTabledAsTheWalk) {
  const int n = 256;
  const auto zero = test::iota_devices(n);
  const auto shifted = shifted_by(zero, n);
  for (const auto& [shape, fc, fa, tc, ta] :
       {std::tuple{std::vector<std::int64_t>{1000}, Config{{256}}, std::vector<int>{0}, Config{{2, 128}},
                   std::vector<int>{1}},
        std::tuple{std::vector<std::int64_t>{1000, 6}, Config{{128, 2}}, std::vector<int>{0, 1}, Config{{4, 64}},
                   std::vector<int>{1, 0}},
        std::tuple{std::vector<std::int64_t>{999, 30}, Config{{256}}, std::vector<int>{0, -1}, Config{{64, 4}},
                   std::vector<int>{0, 1}}}) {
    const auto from = layout(shape, fc, fa), to = layout(shape, tc, ta);
    SCOPED_TRACE(testing::Message() << "shape " << shape.front() << ", " << fc.splits.front() << " parts");
    sharding::Redistribution forward, backward;
    sharding::redistribute_both(from, fc, zero, to, tc, zero, -1, forward, backward);
    for (const auto& [fast, walked] : {std::pair{&forward, redistribute(from, fc, shifted, to, tc, shifted)},
                                       std::pair{&backward, redistribute(to, tc, shifted, from, fc, shifted)}}) {
      EXPECT_EQ(fast->pattern, walked.pattern);
      EXPECT_EQ(fast->max_bytes_in, walked.max_bytes_in);
      EXPECT_EQ(fast->total_bytes, walked.total_bytes);
      EXPECT_EQ(fast->max_block_bytes, walked.max_block_bytes);
      EXPECT_GT(fast->total_bytes, 0);
      auto groups = fast->groups.lists();
      for (auto& g : groups) {
        for (int& d : g) {
          d += n;
        }
      }
      EXPECT_EQ(groups, walked.groups.lists());
    }
  }
}

TEST(ShardingRedistribution, RejectsMismatchedInputs) {
  const Config c{{2}};
  const TensorLayout l = layout({8}, c, {0});
  EXPECT_THROW(redistribute(l, c, test::iota_devices(3), l, c, test::iota_devices(2)), Error);
  EXPECT_THROW(redistribute(l, c, std::vector<int>{1, 1}, l, c, test::iota_devices(2)), Error);
  EXPECT_THROW(redistribute(l, c, test::iota_devices(2), layout({9}, c, {0}), c, test::iota_devices(2)), Error);
  EXPECT_THROW(redistribute(l, Config{{4}}, test::iota_devices(4), l, c, test::iota_devices(2)), Error);
}

} // namespace
} // namespace partita
