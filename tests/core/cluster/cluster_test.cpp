// Cluster validation (errors name the field), link lookup, efficiency curves and peak fallbacks.

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace partita::cluster {
namespace {

using ::testing::HasSubstr;

// A small mesh node: 4 devices, pairs 0-1 (2 lanes), 1-2, 2-3, 3-0; 0-2 and 1-3 over PCIe.
proto::Cluster mesh() {
  proto::Cluster p;
  io::parse_json(R"({
    "name": "mesh", "nodes": 2, "devices_per_node": 4,
    "device": {"peak_fp32": 1e13, "peak_fp16": 8e13, "memory_bandwidth": 9e11, "memory_capacity": 1.6e10,
               "kernel_launch_overhead": 5e-6},
    "intra_node": {"link": {"kind": "NVLINK", "bandwidth": 2.5e10, "latency": 1e-6}, "switched": false,
                   "pairs": [{"a": 0, "b": 1, "lanes": 2}, {"a": 1, "b": 2, "lanes": 1},
                             {"a": 2, "b": 3, "lanes": 1}, {"a": 3, "b": 0, "lanes": 1}],
                   "fallback": {"kind": "PCIE", "bandwidth": 1e10, "latency": 5e-6}},
    "inter_node": {"nic": {"kind": "INFINIBAND", "bandwidth": 1.25e10, "latency": 3e-6}, "nics_per_node": 2}
  })",
                 "mesh", p);
  return p;
}

std::string error_of(const proto::Cluster& p) {
  try {
    from_proto(p, "test.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Cluster, ValidateNamesTheFirstBadFieldAsTheLoaderDoes) {
  EXPECT_EQ(validate(mesh()), std::nullopt);
  auto p = mesh();
  p.mutable_intra_node()->mutable_link()->set_bandwidth(-1e9);
  p.set_devices_per_node(0); // checked first: the first error is reported
  const auto first = validate(p);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->field, "devices_per_node");
  EXPECT_EQ(first->reason, "must be at least 1, got 0");
  p.set_devices_per_node(4);
  const auto link = validate(p);
  ASSERT_TRUE(link.has_value());
  EXPECT_EQ(link->field, "intra_node.link.bandwidth");
  // One source of truth: the loader's message is validate()'s field and reason.
  EXPECT_EQ(error_of(p), "test.json: field '" + link->field + "': " + link->reason);
}

TEST(Cluster, ValidMeshConverts) {
  const Cluster c = from_proto(mesh(), "mesh");
  EXPECT_EQ(c.device_count(), 8);
  EXPECT_FALSE(c.intra_switched);
  EXPECT_EQ(c.intra_pairs.size(), 4u);
  EXPECT_EQ(c.nics_per_node, 2);
  EXPECT_EQ(c.node_of(5), 1);
}

TEST(Cluster, NegativeBandwidthNamesTheField) {
  auto p = mesh();
  p.mutable_intra_node()->mutable_link()->set_bandwidth(-1);
  EXPECT_THAT(error_of(p), HasSubstr("test.json: field 'intra_node.link.bandwidth': must be positive"));
  p = mesh();
  p.mutable_inter_node()->mutable_nic()->set_bandwidth(0);
  EXPECT_THAT(error_of(p), HasSubstr("field 'inter_node.nic.bandwidth': must be positive"));
}

TEST(Cluster, NegativeLatencyNamesTheField) {
  auto p = mesh();
  p.mutable_intra_node()->mutable_fallback()->set_latency(-1e-6);
  EXPECT_THAT(error_of(p), HasSubstr("field 'intra_node.fallback.latency': must be zero or positive"));
}

TEST(Cluster, PairOutOfRangeNamesIndexAndBound) {
  auto p = mesh();
  p.mutable_intra_node()->mutable_pairs(3)->set_b(9);
  EXPECT_THAT(error_of(p), HasSubstr("field 'intra_node.pairs[3].b': is 9 but devices_per_node is 4"));
  p = mesh();
  p.mutable_intra_node()->mutable_pairs(1)->set_a(-1);
  EXPECT_THAT(error_of(p), HasSubstr("field 'intra_node.pairs[1].a': is -1"));
}

TEST(Cluster, BadPairs) {
  auto p = mesh();
  p.mutable_intra_node()->mutable_pairs(2)->set_lanes(0);
  EXPECT_THAT(error_of(p), HasSubstr("field 'intra_node.pairs[2].lanes': must be at least 1"));
  p = mesh();
  p.mutable_intra_node()->mutable_pairs(0)->set_b(0);
  EXPECT_THAT(error_of(p), HasSubstr("field 'intra_node.pairs[0].b': links device 0 to itself"));
  p = mesh();
  auto* twice = p.mutable_intra_node()->add_pairs();
  twice->set_a(1);
  twice->set_b(0);
  twice->set_lanes(1);
  EXPECT_THAT(error_of(p), HasSubstr("field 'intra_node.pairs[4]': devices 1 and 0 are listed twice"));
}

TEST(Cluster, MeshWithoutFallbackNeedsEveryPair) {
  auto p = mesh();
  p.mutable_intra_node()->clear_fallback();
  EXPECT_THAT(error_of(p), HasSubstr("field 'intra_node.fallback': devices 0 and 2 have no direct link"));
}

TEST(Cluster, SwitchedNodeWithPairsIsRejected) {
  auto p = mesh();
  p.mutable_intra_node()->set_switched(true);
  EXPECT_THAT(error_of(p), HasSubstr("field 'intra_node.pairs'"));
}

// Positive figures outside anything real (a unit slip) would make times overflow to inf or vanish:
// each is refused naming the field and the range.
TEST(Cluster, FiguresOutsideAnyRealDeviceNameTheFieldAndRange) {
  auto p = mesh();
  p.mutable_device()->set_memory_bandwidth(1e-300);
  EXPECT_THAT(error_of(p), HasSubstr("field 'device.memory_bandwidth': must be between 1000 and 1e+17 B/s"));
  p = mesh();
  p.mutable_device()->set_peak_fp32(1e-300);
  EXPECT_THAT(error_of(p), HasSubstr("field 'device.peak_fp32': must be between 1e+06 and 1e+21 FLOP/s"));
  p = mesh();
  p.mutable_device()->set_peak_bf16(1e30);
  EXPECT_THAT(error_of(p), HasSubstr("field 'device.peak_bf16': must be 0 or between 1e+06 and 1e+21 FLOP/s"));
  p = mesh();
  p.mutable_intra_node()->mutable_link()->set_bandwidth(1e-300);
  EXPECT_THAT(error_of(p), HasSubstr("field 'intra_node.link.bandwidth': must be between"));
  p = mesh();
  p.mutable_inter_node()->mutable_nic()->set_latency(1e300);
  EXPECT_THAT(error_of(p), HasSubstr("field 'inter_node.nic.latency': must be between 0 and 1000 s"));
  p = mesh();
  p.mutable_device()->set_memory_capacity(1e300);
  EXPECT_THAT(error_of(p), HasSubstr("field 'device.memory_capacity'"));
  p = mesh();
  auto* point = p.mutable_device()->add_compute_efficiency();
  point->set_work(1e9);
  point->set_fraction(1e-300);
  EXPECT_THAT(error_of(p), HasSubstr("field 'device.compute_efficiency[0].fraction': must be between 1e-09 and 1"));
  p = mesh();
  p.mutable_device()->set_peak_bf16(0); // not given: allowed
  EXPECT_EQ(error_of(p), "no error");
}

TEST(Cluster, CountsAndDevice) {
  auto p = mesh();
  p.set_nodes(0);
  EXPECT_THAT(error_of(p), HasSubstr("field 'nodes': must be at least 1, got 0"));
  p = mesh();
  p.set_devices_per_node(-2);
  EXPECT_THAT(error_of(p), HasSubstr("field 'devices_per_node': must be at least 1"));
  p = mesh();
  p.mutable_device()->set_peak_fp32(0);
  EXPECT_THAT(error_of(p), HasSubstr("field 'device.peak_fp32': must be positive"));
  p = mesh();
  p.mutable_device()->set_peak_fp8(-1);
  EXPECT_THAT(error_of(p), HasSubstr("field 'device.peak_fp8': must be zero or positive"));
  p = mesh();
  p.clear_device();
  EXPECT_THAT(error_of(p), HasSubstr("field 'device': is missing"));
  p = mesh();
  p.mutable_inter_node()->set_nics_per_node(0);
  EXPECT_THAT(error_of(p), HasSubstr("field 'inter_node.nics_per_node': must be at least 1"));
  p = mesh();
  p.clear_inter_node();
  EXPECT_THAT(error_of(p), HasSubstr("field 'inter_node': is missing, but there are 2 nodes"));
  p.set_nodes(1);
  EXPECT_NO_THROW(from_proto(p, "one node"));
}

TEST(Cluster, LinkKindMustBeSet) {
  auto p = mesh();
  p.mutable_inter_node()->mutable_nic()->set_kind(proto::LINK_KIND_UNSPECIFIED);
  EXPECT_THAT(error_of(p), HasSubstr("field 'inter_node.nic.kind': must be set"));
}

TEST(Cluster, EfficiencyPointsAreChecked) {
  auto p = mesh();
  auto* a = p.mutable_device()->add_compute_efficiency();
  a->set_work(1e9);
  a->set_fraction(0.5);
  auto* b = p.mutable_device()->add_compute_efficiency();
  b->set_work(1e6);
  b->set_fraction(0.2);
  EXPECT_THAT(error_of(p), HasSubstr("field 'device.compute_efficiency[1].work': must be larger"));
  b->set_work(1e12);
  b->set_fraction(1.5);
  EXPECT_THAT(error_of(p), HasSubstr("field 'device.compute_efficiency[1].fraction': must be in (0, 1]"));
}

TEST(Cluster, ProtoRoundTrip) {
  const Cluster c = from_proto(mesh(), "mesh");
  const Cluster back = from_proto(to_proto(c), "back");
  EXPECT_EQ(io::to_json(to_proto(back)), io::to_json(to_proto(c)));
  EXPECT_EQ(back.intra_pairs.size(), c.intra_pairs.size());
  EXPECT_EQ(back.intra_fallback.bandwidth, 1e10);
}

// Products timed at a model's shapes: kept sorted by shape, looked up by shape, written back as
// read; a bad entry names its field.
TEST(Cluster, TimedProducts) {
  auto p = mesh();
  const auto add = [&](int batch, int m, int n, int k, double forward) {
    auto* t = p.mutable_device()->add_timed_products();
    t->set_batch(batch);
    t->set_m(m);
    t->set_n(n);
    t->set_k(k);
    t->set_forward(forward);
    t->set_data_gradient(2 * forward);
    t->set_weight_gradient(3 * forward);
    return t;
  };
  add(1, 256, 2048, 2048, 9e-3);
  add(1, 128, 2048, 2048, 4e-3);
  add(16, 128, 64, 128, 3e-4);
  const Cluster c = from_proto(p, "timed");
  ASSERT_EQ(c.device.timed_products.size(), 3u);
  EXPECT_EQ(c.device.timed_products.front().m, 128); // sorted: batch 1, m 128 first
  const TimedProduct* t = c.device.timed_product(1, 128, 2048, 2048);
  ASSERT_NE(t, nullptr);
  EXPECT_DOUBLE_EQ(t->forward, 4e-3);
  EXPECT_DOUBLE_EQ(t->weight_gradient, 12e-3);
  EXPECT_NE(c.device.timed_product(16, 128, 64, 128), nullptr);
  EXPECT_EQ(c.device.timed_product(1, 128, 2048, 1024), nullptr);
  EXPECT_EQ(c.device.timed_product(2, 128, 2048, 2048), nullptr);
  const Cluster back = from_proto(to_proto(c), "back");
  EXPECT_EQ(back.device.timed_products, c.device.timed_products);

  auto bad = p;
  bad.mutable_device()->mutable_timed_products(1)->set_n(0);
  EXPECT_THAT(error_of(bad), HasSubstr("field 'device.timed_products[1].n': must be at least 1, got 0"));
  bad = p;
  bad.mutable_device()->mutable_timed_products(2)->set_data_gradient(-1e-3);
  EXPECT_THAT(error_of(bad), HasSubstr("field 'device.timed_products[2].data_gradient': must be between"));
  bad = p;
  bad.mutable_device()->mutable_timed_products(0)->set_forward(std::nan(""));
  EXPECT_THAT(error_of(bad), HasSubstr("field 'device.timed_products[0].forward'"));
  bad = p;
  add(1, 128, 2048, 2048, 5e-3);
  EXPECT_THAT(error_of(p), HasSubstr("field 'device.timed_products': the product 1x128x2048x2048 (batch x m x n x k) "
                                     "is timed twice"));
}

TEST(Cluster, LinkBetween) {
  const Cluster c = from_proto(mesh(), "mesh");
  const Link doubled = c.link_between(1, 0);
  EXPECT_EQ(doubled.kind, LinkKind::nvlink);
  EXPECT_DOUBLE_EQ(doubled.bandwidth, 5e10);            // lanes add
  EXPECT_EQ(c.link_between(4, 6).kind, LinkKind::pcie); // no direct link on node 1 either
  EXPECT_EQ(c.link_between(5, 6).bandwidth, 2.5e10);
  EXPECT_EQ(c.link_between(0, 4).kind, LinkKind::infiniband);
  EXPECT_THROW(c.link_between(2, 2), Error);
  EXPECT_THROW(c.link_between(0, 8), Error);
  EXPECT_THROW(c.link_between(-1, 0), Error);
}

TEST(Cluster, EfficiencyCurve) {
  EXPECT_EQ(EfficiencyCurve{}.at(123), 1.0);
  const EfficiencyCurve curve{{{1e3, 0.2}, {1e5, 0.6}, {1e7, 0.8}}};
  EXPECT_DOUBLE_EQ(curve.at(10), 0.2);
  EXPECT_DOUBLE_EQ(curve.at(0), 0.2);
  EXPECT_DOUBLE_EQ(curve.at(1e9), 0.8);
  EXPECT_DOUBLE_EQ(curve.at(1e5), 0.6);
  EXPECT_NEAR(curve.at(1e4), 0.4, 1e-12); // halfway in log(work)
  EXPECT_NEAR(curve.at(1e6), 0.7, 1e-12);
}

TEST(Cluster, PeakFallsBackToWiderTypes) {
  Device d;
  d.peak_fp32 = 10;
  d.peak_fp16 = 80;
  EXPECT_EQ(d.peak(Precision::tf32), 10);
  EXPECT_EQ(d.peak(Precision::bf16), 10);
  EXPECT_EQ(d.peak(Precision::fp16), 80);
  EXPECT_EQ(d.peak(Precision::fp8), 80);
  d.peak_fp8 = 160;
  EXPECT_EQ(d.peak(Precision::fp8), 160);
}

TEST(Cluster, Names) {
  EXPECT_EQ(precision_name(Precision::bf16), "bf16");
  EXPECT_EQ(link_kind_name(LinkKind::nvswitch), "NVSwitch");
  EXPECT_EQ(link_kind_name(LinkKind::infiniband), "InfiniBand");
}

} // namespace
} // namespace partita::cluster
