// The compiled-in presets and load_cluster's spec syntax.

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "test_support.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace partita::cluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string error_of(std::string_view spec) {
  try {
    load_cluster(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Presets, TheSixAreCompiledIn) {
  EXPECT_THAT(preset_names(),
              ElementsAre("dgx-a100", "dgx-h100", "dgx1", "h100-measured", "localhost-cpu", "pcie-8gpu"));
}

TEST(Presets, EveryPresetLoadsAndRoundTrips) {
  for (const auto& name : preset_names()) {
    SCOPED_TRACE(name);
    const Cluster c = load_cluster(name);
    EXPECT_EQ(c.name, name);
    EXPECT_FALSE(c.description.empty());
    EXPECT_GT(c.device.peak_fp32, 0);
    // A nominal preset adds a launch to every kernel; a measured one (calibrated, or built from
    // published measurements) carries the per-call cost in its curves (tiny efficiencies at small
    // sizes) and adds none.
    if (c.device.kernel_launch_overhead == 0) {
      EXPECT_LT(c.device.compute_efficiency.at(1e5), 0.01);
      EXPECT_LT(c.device.memory_efficiency.at(1e4), 0.01);
    } else {
      EXPECT_GT(c.device.kernel_launch_overhead, 0);
    }
    const Cluster back = from_proto(to_proto(c), "round trip");
    EXPECT_EQ(io::to_json(to_proto(back)), io::to_json(to_proto(c)));
  }
}

TEST(Presets, PresetFilesInTheSourceTreeValidate) {
  for (const auto& name : preset_names()) {
    const auto path = std::filesystem::path(PARTITA_SOURCE_DIR) / "resources" / "clusters" / (name + ".json");
    EXPECT_NO_THROW(load_cluster(path.string())) << path;
  }
}

TEST(Presets, Figures) {
  const Cluster a100 = load_cluster("dgx-a100");
  EXPECT_EQ(a100.device_count(), 8);
  EXPECT_TRUE(a100.intra_switched);
  EXPECT_DOUBLE_EQ(a100.intra_link.bandwidth, 230e9); // NCCL's effective ring bus bandwidth, 300 GB/s line rate
  EXPECT_DOUBLE_EQ(a100.device.peak(Precision::bf16), 312e12);
  EXPECT_DOUBLE_EQ(a100.device.peak(Precision::fp8), 312e12); // no fp8 units: runs as fp16
  EXPECT_DOUBLE_EQ(a100.nic.at(1e6).bandwidth, 24e9);         // HDR 200 Gb/s as NCCL reaches it
  EXPECT_DOUBLE_EQ(a100.nic.at(1e3).bandwidth, 6e9);          // small messages: NCCL's LL protocol
  EXPECT_EQ(a100.nics_per_node, 8);

  const Cluster h100 = load_cluster("dgx-h100");
  EXPECT_DOUBLE_EQ(h100.device.peak(Precision::fp8), 1979e12);
  EXPECT_DOUBLE_EQ(h100.intra_link.bandwidth, 370e9); // 450 GB/s line rate

  const Cluster cpu = load_cluster("localhost-cpu");
  EXPECT_EQ(cpu.device_count(), 2);
  EXPECT_EQ(cpu.intra_link.kind, LinkKind::shared_memory);
  EXPECT_DOUBLE_EQ(cpu.device.peak(Precision::bf16), cpu.device.peak_fp32);
}

// Each V100 of the DGX-1 has 6 NVLink2 links, all used by the hybrid cube mesh.
TEST(Presets, Dgx1EveryGpuHasSixLanes) {
  const Cluster c = load_cluster("dgx1");
  ASSERT_FALSE(c.intra_switched);
  std::vector<int> lanes(8, 0);
  for (const auto& pair : c.intra_pairs) {
    lanes[pair.a] += pair.lanes;
    lanes[pair.b] += pair.lanes;
  }
  EXPECT_THAT(lanes, ElementsAre(6, 6, 6, 6, 6, 6, 6, 6));
  EXPECT_EQ(c.intra_pairs.size(), 16u); // 12 cube edges + 2 face diagonals x 2
  EXPECT_DOUBLE_EQ(c.link_between(0, 3).bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(c.link_between(0, 1).bandwidth, 25e9);
  EXPECT_EQ(c.link_between(0, 5).kind, LinkKind::pcie);
}

// A cluster of mixed nodes: node groups of other device kinds follow the first nodes, share the
// node link and the network, round-trip through the file, and a bad field is named by its path.
TEST(Presets, NodeGroupsOfAnotherDeviceKind) {
  auto p = to_proto(load_cluster("dgx-a100?nodes=2"));
  auto* group = p.add_node_groups();
  group->set_nodes(3);
  *group->mutable_device() = to_proto(load_cluster("dgx1")).device();
  const Cluster c = from_proto(p, "mixed");
  EXPECT_EQ(c.total_nodes(), 5);
  EXPECT_EQ(c.device_count(), 40);
  EXPECT_TRUE(c.heterogeneous());
  EXPECT_EQ(c.device_of(15).name, "A100-SXM4-80GB");
  EXPECT_EQ(c.device_of(16).name, load_cluster("dgx1").device.name);
  EXPECT_EQ(c.device_of(39).name, load_cluster("dgx1").device.name);
  const std::vector<int> both{0, 16};
  EXPECT_EQ(c.kinds_of(both), (std::vector<int>{0, 1}));
  EXPECT_EQ(c.smallest_memory(), load_cluster("dgx1").device.memory_capacity);
  EXPECT_EQ(c.smallest_memory(std::vector<int>{0, 1}), c.device.memory_capacity);
  EXPECT_EQ(c.link_between(15, 16).kind, LinkKind::infiniband);
  EXPECT_EQ(io::to_json(to_proto(from_proto(to_proto(c), "again"))), io::to_json(to_proto(c)));

  auto bad = p;
  bad.mutable_node_groups(0)->set_nodes(0);
  EXPECT_THAT(validate(bad)->field, "node_groups[0].nodes");
  bad = p;
  bad.mutable_node_groups(0)->mutable_device()->set_peak_fp32(-1);
  EXPECT_EQ(validate(bad)->field, "node_groups[0].device.peak_fp32");
  bad = p;
  bad.mutable_node_groups(0)->clear_device();
  EXPECT_EQ(validate(bad)->field, "node_groups[0].device");
  bad = p;
  bad.set_nodes(1);
  bad.clear_inter_node();
  EXPECT_EQ(validate(bad)->field, "inter_node") << "1 + 3 nodes need a network";
}

TEST(Presets, NodesParameter) {
  const Cluster c = load_cluster("dgx-a100?nodes=64");
  EXPECT_EQ(c.nodes, 64);
  EXPECT_EQ(c.device_count(), 512);
  EXPECT_EQ(c.link_between(7, 8).kind, LinkKind::infiniband);
  EXPECT_EQ(load_cluster("dgx1?nodes=2").device_count(), 16);
}

TEST(Presets, SpecErrors) {
  const auto unknown = error_of("dgx-b200");
  EXPECT_THAT(unknown, HasSubstr("unknown cluster 'dgx-b200'"));
  EXPECT_THAT(unknown, HasSubstr("dgx-a100, dgx-h100, dgx1, h100-measured, localhost-cpu, pcie-8gpu"));
  EXPECT_THAT(error_of("dgx-a100?gpus=4"), HasSubstr("unknown parameter 'gpus' (known parameters: nodes)"));
  EXPECT_THAT(error_of("dgx-a100?nodes=zero"), HasSubstr("parameter 'nodes' must be a whole number"));
  EXPECT_THAT(error_of("dgx-a100?nodes=0"), HasSubstr("got '0'"));
  EXPECT_THAT(error_of("dgx-a100?nodes=2x"), HasSubstr("got '2x'"));
  EXPECT_THAT(error_of("dgx-a100?nodes"), HasSubstr("expected key=value"));
  EXPECT_THAT(error_of("dgx-a100?nodes=2&nodes=3"), HasSubstr("given twice"));
  EXPECT_THAT(error_of("missing/cluster.json"), HasSubstr("missing/cluster.json: no such cluster file"));
  // The CPU box is one machine: it has no network to span nodes with.
  EXPECT_THAT(error_of("localhost-cpu?nodes=2"), HasSubstr("field 'inter_node': is missing"));
}

TEST(Presets, FilePathIsReadAsJson) {
  const auto dir = std::filesystem::path(test::scratch_dir());
  Cluster c = load_cluster("pcie-8gpu");
  c.name = "my-box";
  c.devices_per_node = 4;
  io::write_json_file(dir / "box.json", to_proto(c));
  const Cluster back = load_cluster((dir / "box.json").string());
  EXPECT_EQ(back.name, "my-box");
  EXPECT_EQ(back.device_count(), 4);
  EXPECT_EQ(load_cluster((dir / "box.json").string() + "?nodes=3").device_count(), 12);
}

TEST(Presets, BadFileNamesFileAndField) {
  const auto path = std::filesystem::path(test::scratch_dir()) / "bad.json";
  {
    std::ofstream out(path);
    out << R"({"name": "bad", "nodes": 1, "devices_per_node": 8, "bandwith": 3})";
  }
  const auto unknown = error_of(path.string());
  EXPECT_THAT(unknown, HasSubstr(path.string()));
  EXPECT_THAT(unknown, HasSubstr("bandwith"));
  {
    std::ofstream out(path);
    out << R"({"name": "bad", "nodes": 1, "devices_per_node": 1,
               "device": {"peak_fp32": 1e12, "memory_bandwidth": -5, "memory_capacity": 1e9}})";
  }
  EXPECT_THAT(error_of(path.string()),
              HasSubstr(path.string() + ": field 'device.memory_bandwidth': must be positive, got -5"));
}

} // namespace
} // namespace partita::cluster
