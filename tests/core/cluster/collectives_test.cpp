// Collective costs: the closed forms of each algorithm, nccl-tests' bandwidths, and the orderings
// that follow from the topology.

#include "partita/cluster/collectives.h"
#include "partita/graph/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace partita::cluster {
namespace {

using ::testing::HasSubstr;

constexpr double GiB = 1024.0 * 1024 * 1024;

// A preset with its links at one bandwidth and latency each: the closed forms below are the
// algorithms' on such links. (The GPU presets carry published per-collective figures, priced by
// the ring formula they were read off: tests/core/cluster/published_presets_test.cpp.)
Cluster nominal(std::string_view spec) {
  Cluster c = load_cluster(spec);
  for (Link* link : {&c.intra_link, &c.intra_fallback, &c.nic}) {
    link->collectives.clear();
    link->protocols.clear();
  }
  return c;
}

std::vector<int> range(int first, int count) {
  std::vector<int> v(count);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int> concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const Collective all_collectives[] = {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                                      Collective::all_to_all, Collective::broadcast};

TEST(Collectives, RingAllReduceClosedFormOnASwitchedNode) {
  const Cluster c = nominal("dgx-a100");
  const double B = c.intra_link.bandwidth;
  const double a = c.intra_link.latency;
  for (const int p : {2, 3, 4, 8}) {
    const auto cost = collective_cost(c, Collective::all_reduce, range(0, p), GiB, Algorithm::ring);
    EXPECT_DOUBLE_EQ(cost.seconds, 2.0 * (p - 1) / p * GiB / B + 2.0 * (p - 1) * a) << p;
    EXPECT_DOUBLE_EQ(cost.latency_seconds, 2.0 * (p - 1) * a);
    EXPECT_EQ(cost.algorithm, Algorithm::ring);
    EXPECT_EQ(cost.bottleneck, LinkKind::nvswitch);
  }
}

TEST(Collectives, OtherClosedFormsOnASwitchedNode) {
  const Cluster c = nominal("dgx-h100");
  const double B = c.intra_link.bandwidth;
  const double a = c.intra_link.latency;
  const double n = 256e6;
  const double p = 8;
  const auto group = range(0, 8);
  EXPECT_DOUBLE_EQ(collective_cost(c, Collective::all_gather, group, n, Algorithm::ring).seconds,
                   (p - 1) / p * n / B + (p - 1) * a);
  EXPECT_DOUBLE_EQ(collective_cost(c, Collective::reduce_scatter, group, n, Algorithm::ring).seconds,
                   (p - 1) / p * n / B + (p - 1) * a);
  EXPECT_DOUBLE_EQ(collective_cost(c, Collective::all_to_all, group, n).seconds, (p - 1) / p * n / B + (p - 1) * a);
  EXPECT_DOUBLE_EQ(collective_cost(c, Collective::broadcast, group, n).seconds, n / B + (p - 1) * a);
  EXPECT_DOUBLE_EQ(collective_cost(c, Collective::send_recv, std::vector{2, 5}, n).seconds, n / B + a);
  EXPECT_DOUBLE_EQ(collective_cost(c, Collective::all_reduce, group, n, Algorithm::tree).seconds,
                   2 * n / B + 2 * 3 * a);
}

TEST(Collectives, BusBandwidthOfRingAllReduceIsTheLinkWithoutLatency) {
  Cluster c = nominal("dgx-a100");
  c.intra_link.latency = 0;
  for (const int p : {2, 4, 8}) {
    const auto cost = collective_cost(c, Collective::all_reduce, range(0, p), 64e6, Algorithm::ring);
    EXPECT_DOUBLE_EQ(cost.busbw, c.intra_link.bandwidth) << p;
    EXPECT_DOUBLE_EQ(cost.algbw, 64e6 / cost.seconds);
  }
  const auto gather = collective_cost(c, Collective::all_gather, range(0, 8), 64e6, Algorithm::ring);
  EXPECT_DOUBLE_EQ(gather.busbw, c.intra_link.bandwidth);
}

TEST(Collectives, RingKeepsTiesWithoutLatency) {
  Cluster c = nominal("dgx-a100");
  c.intra_link.latency = 0;
  for (const auto coll : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter}) {
    EXPECT_EQ(collective_cost(c, coll, range(0, 8), 3e7).algorithm, Algorithm::ring) << collective_name(coll);
  }
}

TEST(Collectives, BusFactors) {
  EXPECT_DOUBLE_EQ(bus_factor(Collective::all_reduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::all_gather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::all_to_all, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::send_recv, 2), 1.0);
}

TEST(Collectives, FlatRingAcrossNodesIsHeldToTheNics) {
  const Cluster c = nominal("dgx-a100?nodes=2");
  const double p = 16;
  const double n = GiB;
  // 8 devices per node drive the 8 HDR NICs: 200 GB/s out of each node, below the 300 GB/s ports.
  const double B = 8 * c.nic.bandwidth;
  const auto cost = collective_cost(c, Collective::all_reduce, range(0, 16), n, Algorithm::ring);
  EXPECT_DOUBLE_EQ(cost.seconds, 2 * (p - 1) / p * n / B + 2 * (p - 1) * c.nic.latency);
  EXPECT_EQ(cost.bottleneck, LinkKind::infiniband);
}

TEST(Collectives, HierarchicalClosedForm) {
  const Cluster c = nominal("dgx-a100?nodes=2");
  const double k = 8, m = 2, n = GiB;
  const double Bin = c.intra_link.bandwidth;
  const double Bshard = c.nic.bandwidth; // 8 shard rings, 8 NICs: one each
  const auto cost = collective_cost(c, Collective::all_reduce, range(0, 16), n, Algorithm::hierarchical);
  EXPECT_EQ(cost.algorithm, Algorithm::hierarchical);
  EXPECT_DOUBLE_EQ(cost.bandwidth_seconds, 2 * (k - 1) / k * n / Bin + 2 * (m - 1) / m * (n / k) / Bshard);
  EXPECT_DOUBLE_EQ(cost.latency_seconds, 2 * (k - 1) * c.intra_link.latency + 2 * (m - 1) * c.nic.latency);

  const auto gather = collective_cost(c, Collective::all_gather, range(0, 16), n, Algorithm::hierarchical);
  EXPECT_DOUBLE_EQ(gather.bandwidth_seconds, (k - 1) / k * n / Bin + (m - 1) / m * (n / k) / Bshard);
}

// Inside a switched node a k x m 2D ring moves what the flat ring moves, (p-1)/p n/B, in k+m-2
// latency steps instead of p-1.
TEST(Collectives, TwoLevelInsideANodeTradesLatencySteps) {
  const Cluster c = nominal("dgx-a100");
  const double n = GiB, B = c.intra_link.bandwidth, a = c.intra_link.latency;
  const auto cost = collective_cost(c, Collective::all_gather, range(0, 8), n, Algorithm::hierarchical);
  EXPECT_EQ(cost.algorithm, Algorithm::hierarchical);
  EXPECT_DOUBLE_EQ(cost.bandwidth_seconds, 7.0 / 8 * n / B);
  EXPECT_DOUBLE_EQ(cost.latency_seconds, 4 * a); // 2 x 4 or 4 x 2
  EXPECT_THAT(cost.formula, HasSubstr("inside the node"));
  EXPECT_EQ(collective_cost(c, Collective::all_gather, range(0, 8), 1e3).algorithm, Algorithm::hierarchical);
}

TEST(Collectives, HierarchicalWinsForSmallMessagesAcrossNodes) {
  const Cluster c = nominal("dgx-a100?nodes=4");
  const auto small = collective_cost(c, Collective::all_reduce, range(0, 32), 4096);
  EXPECT_NE(small.algorithm, Algorithm::ring); // 62 ring steps at the NIC's latency cost most
}

TEST(Collectives, AlgorithmsThatDoNotApplyFallBackToRing) {
  const Cluster c = nominal("dgx-a100?nodes=2");
  const auto tree = collective_cost(c, Collective::all_gather, range(0, 8), 1e6, Algorithm::tree);
  EXPECT_EQ(tree.algorithm, Algorithm::ring);
  EXPECT_THAT(tree.formula, HasSubstr("ring used"));
  const auto prime = collective_cost(c, Collective::all_reduce, range(0, 3), 1e6, Algorithm::hierarchical);
  EXPECT_EQ(prime.algorithm, Algorithm::ring); // 3 devices: no k x m blocks
  const auto broadcast = collective_cost(c, Collective::broadcast, range(0, 16), 1e6, Algorithm::hierarchical);
  EXPECT_EQ(broadcast.algorithm, Algorithm::ring);
  const auto uneven = collective_cost(c, Collective::all_reduce, std::vector{0, 1, 2, 8}, 1e6, Algorithm::hierarchical);
  EXPECT_EQ(uneven.algorithm, Algorithm::ring);
}

TEST(Collectives, AutomaticIsNeverSlowerThanAnyAlgorithm) {
  for (const char* spec : {"dgx-a100?nodes=4", "dgx1?nodes=2", "pcie-8gpu?nodes=2"}) {
    const Cluster c = nominal(spec);
    const std::vector<std::vector<int>> groups{range(0, 2), range(0, 8), concat(range(0, 4), range(8, 4)),
                                               std::vector{0, 8}, range(0, 16)};
    for (const auto& group : groups) {
      for (const auto coll : all_collectives) {
        for (const double n : {1e3, 1e6, 1e9}) {
          const double best = collective_cost(c, coll, group, n).seconds;
          for (const auto algo : {Algorithm::ring, Algorithm::tree, Algorithm::hierarchical}) {
            EXPECT_LE(best, collective_cost(c, coll, group, n, algo).seconds)
                << spec << " " << collective_name(coll) << " " << algorithm_name(algo) << " n=" << n;
          }
        }
      }
    }
  }
}

// For each size, the first devices of node 0 against groups of the same size spread over nodes
// (half on each of two nodes, or one device per node).
TEST(Collectives, GroupInsideANodeIsNeverSlowerThanOneSpanningNodes) {
  for (const char* spec : {"dgx-a100?nodes=4", "dgx1?nodes=2", "dgx-h100?nodes=2", "pcie-8gpu?nodes=8"}) {
    const Cluster c = nominal(spec);
    const int d = c.devices_per_node;
    for (const int p : {2, 4, 8}) {
      const auto inside = range(0, p);
      std::vector<std::vector<int>> spanning{concat(range(0, p / 2), range(d, p / 2))};
      if (p <= c.nodes) {
        std::vector<int> one_per_node;
        for (int i = 0; i < p; ++i) {
          one_per_node.push_back(i * d);
        }
        spanning.push_back(one_per_node);
      }
      for (const auto& other : spanning) {
        for (const auto coll : all_collectives) {
          for (const double n : {1e3, 1e6, 1e9}) {
            for (const auto algo : {Algorithm::automatic, Algorithm::ring}) {
              EXPECT_LE(collective_cost(c, coll, inside, n, algo).seconds,
                        collective_cost(c, coll, other, n, algo).seconds)
                  << spec << " p=" << p << " " << collective_name(coll) << " n=" << n;
            }
          }
        }
      }
    }
  }
}

// On the DGX-1 mesh, {0,1,2,3} is a fully connected face with 9 lanes: two edge-disjoint rings
// (0-1-2-3 and 0-2-1-3), each run in both directions, move 4 x 25 GB/s. {0,1,4,5} has the links
// 0-1 (1 lane), 1-5 (2), 5-4 (1), 4-0 (2) and no diagonal: one ring, 2 x 25 GB/s.
TEST(Collectives, Dgx1FaceIsFasterThanCubeSide) {
  const Cluster c = nominal("dgx1");
  const double n = GiB;
  const auto face = collective_cost(c, Collective::all_reduce, std::vector{0, 1, 2, 3}, n, Algorithm::ring);
  const auto side = collective_cost(c, Collective::all_reduce, std::vector{0, 1, 4, 5}, n, Algorithm::ring);
  EXPECT_DOUBLE_EQ(face.bandwidth_seconds, 1.5 * n / 100e9);
  EXPECT_DOUBLE_EQ(side.bandwidth_seconds, 1.5 * n / 50e9);
  EXPECT_LT(face.seconds, side.seconds);
  EXPECT_EQ(face.bottleneck, LinkKind::nvlink);
}

// All 24 lanes of the 8 GPUs form three edge-disjoint Hamiltonian rings: 6 x 25 GB/s.
TEST(Collectives, Dgx1WholeNodeUsesEveryLane) {
  const Cluster c = nominal("dgx1");
  const auto cost = collective_cost(c, Collective::all_reduce, range(0, 8), GiB, Algorithm::ring);
  EXPECT_DOUBLE_EQ(cost.bandwidth_seconds, 1.75 * GiB / 150e9);
}

TEST(Collectives, Dgx1GroupWithoutNvlinkRingUsesPcie) {
  const Cluster c = nominal("dgx1");
  const auto cost = collective_cost(c, Collective::all_reduce, std::vector{0, 5, 6}, GiB, Algorithm::ring);
  EXPECT_EQ(cost.bottleneck, LinkKind::pcie);
  EXPECT_DOUBLE_EQ(cost.bandwidth_seconds, 2.0 * 2 / 3 * GiB / c.intra_fallback.bandwidth);
  // Every GPU has 3 peers without NVLink: its all-to-all waits on PCIe.
  EXPECT_EQ(collective_cost(c, Collective::all_to_all, range(0, 8), GiB).bottleneck, LinkKind::pcie);
  const auto pair = collective_cost(c, Collective::send_recv, std::vector{0, 3}, GiB);
  EXPECT_DOUBLE_EQ(pair.bandwidth_seconds, GiB / 50e9); // two lanes
}

TEST(Collectives, NicSharingSlowsNodeSpanningGroups) {
  // One NIC per node shared by 8 data-parallel groups of one device per node.
  const Cluster pcie = nominal("pcie-8gpu?nodes=2");
  const auto alone = collective_cost(pcie, Collective::all_reduce, std::vector{0, 8}, GiB, Algorithm::ring, 1);
  const auto shared = collective_cost(pcie, Collective::all_reduce, std::vector{0, 8}, GiB, Algorithm::ring, 8);
  EXPECT_GT(shared.seconds, alone.seconds);
  EXPECT_DOUBLE_EQ(shared.bandwidth_seconds, 8 * alone.bandwidth_seconds);

  // DGX-1: 4 NICs; 4 groups of 2 devices per node get one NIC each instead of two.
  const Cluster dgx1 = nominal("dgx1?nodes=2");
  const std::vector group{0, 1, 8, 9};
  EXPECT_GT(collective_cost(dgx1, Collective::all_reduce, group, GiB, Algorithm::ring, 4).seconds,
            collective_cost(dgx1, Collective::all_reduce, group, GiB, Algorithm::ring, 1).seconds);

  // DGX A100: a whole-node group alone uses all 8 NICs, 8 concurrent ones one each.
  const Cluster a100 = nominal("dgx-a100?nodes=2");
  EXPECT_GT(collective_cost(a100, Collective::all_reduce, range(0, 16), GiB, Algorithm::automatic, 8).seconds,
            collective_cost(a100, Collective::all_reduce, range(0, 16), GiB, Algorithm::automatic, 1).seconds);
  // ... but 8 groups of one device per node each have their own NIC: no contention.
  EXPECT_DOUBLE_EQ(collective_cost(a100, Collective::all_reduce, std::vector{3, 11}, GiB, Algorithm::ring, 8).seconds,
                   collective_cost(a100, Collective::all_reduce, std::vector{3, 11}, GiB, Algorithm::ring, 1).seconds);
}

TEST(Collectives, AllToAllAcrossNodesCountsTheTrafficLeavingANode) {
  const Cluster c = nominal("dgx-a100?nodes=2");
  const double n = GiB;
  // 16 devices, 8 per node: each node sends 8 x n x 8/16 over 8 NICs.
  const auto cost = collective_cost(c, Collective::all_to_all, range(0, 16), n);
  EXPECT_DOUBLE_EQ(cost.bandwidth_seconds, 8 * n * 8 / 16 / (8 * c.nic.bandwidth));
  EXPECT_EQ(cost.bottleneck, LinkKind::infiniband);
}

TEST(Collectives, GroupOfOneCostsNothing) {
  const Cluster c = nominal("dgx-a100");
  for (const auto coll : all_collectives) {
    const auto cost = collective_cost(c, coll, std::vector{3}, GiB);
    EXPECT_EQ(cost.seconds, 0);
    EXPECT_EQ(cost.busbw, 0);
  }
}

TEST(Collectives, FormulaIsASentenceWithTheNumbers) {
  const Cluster c = nominal("dgx-a100");
  const auto cost = collective_cost(c, Collective::all_reduce, range(0, 8), 64.0 * 1024 * 1024, Algorithm::ring);
  EXPECT_THAT(cost.formula, HasSubstr("ring all-reduce of 64 MiB over 8 devices"));
  EXPECT_THAT(cost.formula, HasSubstr("230 GB/s"));
  EXPECT_THAT(cost.formula, HasSubstr("NVSwitch"));
}

TEST(Collectives, BadGroupsAreErrors) {
  const Cluster c = nominal("dgx-a100");
  const auto error_of = [&](std::vector<int> group, Collective coll = Collective::all_reduce, double n = 1e6,
                            int concurrent = 1) -> std::string {
    try {
      collective_cost(c, coll, group, n, Algorithm::automatic, concurrent);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(error_of({0, 8}), HasSubstr("device 8 is not in cluster 'dgx-a100' (devices 0..7)"));
  EXPECT_THAT(error_of({-1, 2}), HasSubstr("device -1 is not in cluster"));
  EXPECT_THAT(error_of({9}), HasSubstr("device 9 is not in cluster"));
  EXPECT_THAT(error_of({1, 2, 1}), HasSubstr("device 1 appears twice"));
  EXPECT_THAT(error_of({}), HasSubstr("empty"));
  EXPECT_THAT(error_of({0, 1, 2}, Collective::send_recv), HasSubstr("exactly 2 devices"));
  EXPECT_THAT(error_of({0, 1}, Collective::all_reduce, -1), HasSubstr("zero or positive bytes"));
  EXPECT_THAT(error_of({0, 1}, Collective::all_reduce, 1e6, 0), HasSubstr("concurrent_groups"));
}

// The search prices collectives without their text: the same numbers, whatever the cluster, group,
// algorithm or link figures (protocols by message size, a collective's own calibrated figures).
TEST(Collectives, UnexplainedCostsAreTheExplainedOnesWithoutTheFormula) {
  std::vector<Cluster> clusters{nominal("dgx-a100?nodes=2"), nominal("dgx1?nodes=2"), nominal("pcie-8gpu?nodes=2")};
  Cluster calibrated = nominal("dgx-a100?nodes=2");
  calibrated.intra_link.protocols = {{0, 20e9, 3e-6}, {65536, 150e9, 8e-6}};
  calibrated.nic.protocols = {{0, 5e9, 4e-6}, {1 << 20, 22e9, 9e-6}};
  CollectiveFigures all_gather;
  all_gather.collective = "all-gather";
  all_gather.bandwidth = 90e9;
  all_gather.latency = 6e-6;
  calibrated.intra_link.collectives.push_back(all_gather);
  clusters.push_back(calibrated);
  const std::vector<std::vector<int>> groups{
      range(0, 2), range(0, 8), {1, 3, 4, 6}, {2, 9}, concat(range(0, 4), range(8, 4)), range(0, 16), {0}};
  const Algorithm algorithms[] = {Algorithm::automatic, Algorithm::ring, Algorithm::tree, Algorithm::hierarchical};
  int compared = 0;
  for (const auto& c : clusters) {
    for (const auto& group : groups) {
      for (const double bytes : {0.0, 512.0, 1e5, 3e8}) {
        for (const Algorithm algorithm : algorithms) {
          for (const Collective coll : all_collectives) {
            for (const int concurrent : {1, 4}) {
              const auto told = collective_cost(c, coll, group, bytes, algorithm, concurrent);
              const auto quiet = collective_cost_unexplained(c, coll, group, bytes, algorithm, concurrent);
              EXPECT_FALSE(told.formula.empty());
              EXPECT_TRUE(quiet.formula.empty());
              auto without = told;
              without.formula.clear();
              EXPECT_EQ(quiet, without) << c.name << " " << collective_name(coll) << " over " << group.size()
                                        << " devices, " << bytes << " bytes";
              ++compared;
            }
          }
        }
        if (group.size() == 2) {
          EXPECT_EQ(collective_cost_unexplained(c, Collective::send_recv, group, bytes).seconds,
                    collective_cost(c, Collective::send_recv, group, bytes).seconds);
        }
      }
    }
  }
  EXPECT_EQ(compared, 4 * 7 * 4 * 4 * 5 * 2);
}

} // namespace
} // namespace partita::cluster

namespace partita::cluster {
namespace {

// The memo answers what pricing afresh answers, for its own cluster only, and only while in use.
TEST(CollectiveMemo, RemembersItsClustersCollectivesWhileInUse) {
  const Cluster dgx = load_cluster("dgx-a100?nodes=4"); // per-collective figures and protocols
  const Cluster other = load_cluster("dgx-a100?nodes=4");
  const std::vector<int> across{0, 8, 16, 24};
  const std::vector<int> inside{0, 1, 2, 3, 4, 5, 6, 7};
  CollectiveMemo memo(dgx);
  {
    const CollectiveMemo::Use use(memo);
    for (const auto kind : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter}) {
      for (const double bytes : {1e3, 1e6, 1e9}) {
        for (const auto& group : {across, inside}) {
          const auto fresh = collective_cost(dgx, kind, group, bytes);
          const auto first = collective_cost_unexplained(dgx, kind, group, bytes);
          const auto again = collective_cost_unexplained(dgx, kind, group, bytes);
          EXPECT_EQ(first.seconds, fresh.seconds);
          EXPECT_EQ(again.seconds, fresh.seconds);
          EXPECT_EQ(again.algorithm, fresh.algorithm);
          EXPECT_EQ(again.bottleneck, fresh.bottleneck);
        }
      }
    }
    EXPECT_EQ(memo.size(), 18U);
    // Another cluster, even an equal one, is priced afresh and not remembered.
    (void)collective_cost_unexplained(other, Collective::all_reduce, across, 5e5);
    EXPECT_EQ(memo.size(), 18U);
  }
  // Out of use: nothing more is remembered.
  (void)collective_cost_unexplained(dgx, Collective::all_reduce, across, 5e5);
  EXPECT_EQ(memo.size(), 18U);
  // A bad group is still refused, memo or not.
  const CollectiveMemo::Use use(memo);
  EXPECT_THROW((void)collective_cost_unexplained(dgx, Collective::all_reduce, std::vector<int>{0, 0}, 1e6), Error);
}

// On a switched cluster groups that spread over their nodes alike (as many devices on as many
// nodes, whichever devices and nodes) are one entry, priced as either is afresh; on a mesh (DGX-1)
// which devices of a node a group holds changes its rings, and each group is its own entry.
TEST(CollectiveMemo, KeysASwitchedClustersGroupsByHowTheySpreadOverTheirNodes) {
  const Cluster dgx = load_cluster("dgx-a100?nodes=4");
  CollectiveMemo memo(dgx);
  const CollectiveMemo::Use use(memo);
  const std::vector<std::vector<int>> alike{{0, 1, 2, 9}, {8, 16, 17, 18}, {21, 27, 28, 29}};
  for (const auto kind : {Collective::all_reduce, Collective::all_gather, Collective::all_to_all}) {
    for (const auto& group : alike) {
      const auto fresh = collective_cost(dgx, kind, group, 3e6);
      const auto kept = collective_cost_unexplained(dgx, kind, group, 3e6);
      EXPECT_EQ(kept.seconds, fresh.seconds);
      EXPECT_EQ(kept.algorithm, fresh.algorithm);
    }
  }
  EXPECT_EQ(memo.size(), 3U); // one per collective
  // Spread otherwise (two and two), or listed out of order: entries of their own.
  const auto two_two = collective_cost_unexplained(dgx, Collective::all_reduce, std::vector<int>{0, 1, 8, 9}, 3e6);
  EXPECT_EQ(two_two.seconds, collective_cost(dgx, Collective::all_reduce, std::vector<int>{0, 1, 8, 9}, 3e6).seconds);
  (void)collective_cost_unexplained(dgx, Collective::all_reduce, std::vector<int>{9, 0, 1, 2}, 3e6);
  EXPECT_EQ(memo.size(), 5U);
  // A device outside the cluster is still refused, though a group of its spread is remembered.
  EXPECT_THROW((void)collective_cost_unexplained(dgx, Collective::all_reduce, std::vector<int>{0, 1, 2, 32}, 3e6),
               Error);

  const Cluster mesh = nominal("dgx1");
  ASSERT_FALSE(mesh.intra_switched);
  CollectiveMemo mesh_memo(mesh);
  const CollectiveMemo::Use mesh_use(mesh_memo);
  for (const auto& group : {std::vector<int>{0, 1, 2, 3}, std::vector<int>{0, 1, 4, 5}, std::vector<int>{0, 2, 5, 7}}) {
    EXPECT_EQ(collective_cost_unexplained(mesh, Collective::all_reduce, group, 3e6).seconds,
              collective_cost(mesh, Collective::all_reduce, group, 3e6).seconds);
  }
  EXPECT_EQ(mesh_memo.size(), 3U);
}

} // namespace
} // namespace partita::cluster
