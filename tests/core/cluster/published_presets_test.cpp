// The GPU presets reproduce the published measurements they are built from
// (resources/published/SYSTEM.json, written into resources/clusters/SYSTEM.json by
// scripts/gpu-presets): matrix-product rates by size, STREAM bandwidth, nccl-tests all-reduce bus
// bandwidth inside a node by size, the ring bus bandwidth of the other collectives, and the
// all-reduce bus bandwidth between nodes.

#include "partita/cluster/cluster.h"
#include "partita/cluster/collectives.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

namespace partita::cluster {
namespace {

namespace fs = std::filesystem;

nlohmann::json published(const std::string& system) {
  std::ifstream in(fs::path(PARTITA_SOURCE_DIR) / "resources" / "published" / (system + ".json"));
  return nlohmann::json::parse(in);
}

std::vector<int> first(int n) {
  std::vector<int> d(static_cast<std::size_t>(n));
  std::iota(d.begin(), d.end(), 0);
  return d;
}

double relative(double x, double reference) {
  return std::fabs(x - reference) / reference;
}

class PublishedPresets : public ::testing::TestWithParam<std::string> {};

TEST_P(PublishedPresets, EveryPublishedSystemHasItsPreset) {
  EXPECT_NO_THROW(load_cluster(GetParam()));
}

TEST_P(PublishedPresets, MatrixProductRatesBySize) {
  const auto p = published(GetParam());
  const Cluster c = load_cluster(GetParam());
  const auto& gemm = p["gemm"];
  const double peak = c.device.peak(gemm["precision"] == "fp8" ? Precision::fp8 : Precision::fp16);
  // The curve keeps the published shape: every size's fraction over its published one is the
  // same factor (1 where the table is in a training precision).
  double scale = 0;
  for (const auto& row : gemm["rows"]) {
    const double work = 2.0 * row[0].get<double>() * row[1].get<double>() * row[2].get<double>();
    const double ratio = c.device.compute_efficiency.at(work) * peak / row[3].get<double>();
    SCOPED_TRACE(row.dump());
    if (scale == 0) {
      scale = ratio;
    }
    EXPECT_NEAR(ratio, scale, 1e-4 * scale);
  }
  if (gemm.contains("bf16")) { // scaled so that the one bf16 rate measured is met
    const auto& b = gemm["bf16"];
    const double work = 2.0 * b["m"].get<double>() * b["n"].get<double>() * b["k"].get<double>();
    EXPECT_LT(relative(c.device.compute_efficiency.at(work) * c.device.peak(Precision::bf16), b["rate"]), 1e-4);
  } else {
    EXPECT_NEAR(scale, 1.0, 1e-4);
  }
  // Smaller products are never faster per FLOP than larger ones down to 1e6 FLOPs.
  double previous = 0;
  for (double work = 1e6; work <= 1e14; work *= 2) {
    const double f = c.device.compute_efficiency.at(work);
    EXPECT_GE(f, previous) << work;
    EXPECT_LE(f, 1.0);
    previous = f;
  }
}

TEST_P(PublishedPresets, LargeMemoryBoundKernelsAtTheStreamRate) {
  const auto s = published(GetParam())["stream"];
  const Cluster c = load_cluster(GetParam());
  const double stream =
      (s["copy"].get<double>() + s["mul"].get<double>() + s["add"].get<double>() + s["triad"].get<double>()) / 4;
  EXPECT_LT(relative(c.device.memory_efficiency.at(1e9) * c.device.memory_bandwidth, stream), 1e-4);
  EXPECT_EQ(c.device.kernel_launch_overhead, 0);
}

TEST_P(PublishedPresets, AllReduceInsideANodeAsNcclTestsMeasuredIt) {
  const auto a = published(GetParam())["all_reduce"];
  const Cluster c = load_cluster(GetParam());
  const auto devices = first(a["devices"].get<int>());
  for (const auto& row : a["rows"]) {
    const double bytes = row[0].get<double>();
    const auto cost = collective_cost(c, Collective::all_reduce, devices, bytes);
    EXPECT_EQ(cost.algorithm, Algorithm::ring) << bytes; // the measurement holds NCCL's own choice
    EXPECT_LT(relative(cost.busbw, row[1].get<double>()), 1e-3) << bytes;
  }
}

TEST_P(PublishedPresets, OtherCollectivesAtTheRingBusBandwidth) {
  const auto p = published(GetParam());
  const Cluster c = load_cluster(GetParam());
  const double bytes = 8.0 * 1024 * 1024 * 1024;
  for (const auto coll : {Collective::all_gather, Collective::reduce_scatter}) {
    const auto cost = collective_cost(c, coll, first(8), bytes);
    EXPECT_LT(relative(cost.busbw, p["ring"]["busbw"]), 0.01) << collective_name(coll);
  }
}

TEST_P(PublishedPresets, AllReduceBetweenNodesAtTheNicsBusBandwidth) {
  const auto p = published(GetParam());
  const Cluster c = load_cluster(GetParam() + "?nodes=4");
  const double bytes = 8.0 * 1024 * 1024 * 1024;
  const auto cost = collective_cost(c, Collective::all_reduce, first(32), bytes);
  // 2(p-1) steps of NCCL's 9.6 us network latency take 1-2% of these 8 GiB.
  EXPECT_LT(relative(cost.busbw, p["nic"]["node_busbw"]), 0.02) << cost.formula;
  EXPECT_LT(cost.busbw, p["nic"]["node_busbw"].get<double>());
}

// Small messages between nodes run NCCL's LL protocol (2.7 us a step at a quarter of the
// bandwidth, never less than a step inside the node), large ones Simple (9.6 us a step): at the
// crossing both take the same time.
TEST_P(PublishedPresets, NetworkProtocolsAsNcclsTuningModelHasThem) {
  const auto proto = published(GetParam())["nic"]["protocols"];
  const Cluster c = load_cluster(GetParam() + "?nodes=4");
  const std::vector<int> one_per_node{0, 8, 16, 24};
  const auto tiny = collective_cost(c, Collective::all_reduce, one_per_node, 64, Algorithm::ring);
  const double ll = std::max(proto["ll_latency"].get<double>(), c.intra_link.latency);
  EXPECT_NEAR(tiny.latency_seconds, 6 * ll, 1e-12);
  EXPECT_NEAR(c.nic.bandwidth, proto["ll_bandwidth_fraction"].get<double>() * c.nic.at(1e9).bandwidth, 1);
  const auto large = collective_cost(c, Collective::all_reduce, one_per_node, 1e9, Algorithm::ring);
  EXPECT_NEAR(large.latency_seconds, 6 * proto["simple_latency"].get<double>(), 1e-12);
  // At the crossing (a message of from_bytes per rank) both protocols take the same time.
  const double m = c.nic.protocols.front().from_bytes;
  const Link small{c.nic.kind, c.nic.bandwidth, c.nic.latency}, simple = c.nic.at(m);
  EXPECT_NEAR(m / small.bandwidth + small.latency, m / simple.bandwidth + simple.latency, 1e-9);
}

std::vector<std::string> systems() {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(fs::path(PARTITA_SOURCE_DIR) / "resources" / "published")) {
    if (entry.path().extension() == ".json") {
      out.push_back(entry.path().stem().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Systems, PublishedPresets, ::testing::ValuesIn(systems()), [](const auto& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
});

} // namespace
} // namespace partita::cluster
