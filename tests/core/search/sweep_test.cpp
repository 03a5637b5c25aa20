// The scaling sweep behind `partita compare --devices` and the GUI's scaling chart.

#include "partita/graph/error.h"
#include "partita/search/sweep.h"
#include "partita/zoo/zoo.h"
#include "simple_cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

namespace partita::search {
namespace {

using ::testing::HasSubstr;

SweepRequest request(const std::vector<std::string>& families, const std::vector<int>& devices) {
  SweepRequest r;
  r.families = families;
  r.devices = devices;
  r.cluster_for = [](int) { return test::simple_cluster(8); };
  return r;
}

TEST(Sweep, OneCellPerFamilyAndCountDevicesMajorWithGaps) {
  const auto model = zoo::load("zoo:mlp?batch=8");
  auto r = request({"dp", "pipeline"}, {1, 2, 4});
  std::vector<double> progress;
  r.progress = [&](double f) { progress.push_back(f); };
  const auto cells = sweep(model.graph, r);
  ASSERT_EQ(cells.size(), 6u);
  EXPECT_EQ(cells[0].family, "dp");
  EXPECT_EQ(cells[0].devices, 1);
  EXPECT_EQ(cells[1].family, "pipeline");
  EXPECT_EQ(cells[5].devices, 4);
  // A pipeline needs at least two stages: a gap at one device, with the family's reason.
  EXPECT_THAT(cells[1].error, HasSubstr("pipeline"));
  for (std::size_t i : {0u, 2u, 3u, 4u, 5u}) {
    EXPECT_EQ(cells[i].error, "") << i;
    EXPECT_GT(cells[i].prediction.samples_per_second, 0) << i;
  }
  ASSERT_FALSE(progress.empty());
  EXPECT_DOUBLE_EQ(progress.back(), 1.0);
}

TEST(Sweep, UnknownFamilyAndCancelPropagate) {
  const auto model = zoo::load("zoo:mlp?batch=8");
  EXPECT_THROW((void)sweep(model.graph, request({"dp", "nope"}, {1})), Error);
  std::atomic<bool> cancel{true};
  auto r = request({"dp"}, {1, 2});
  r.base.cancel = &cancel;
  EXPECT_THROW((void)sweep(model.graph, r), Cancelled);
}

} // namespace
} // namespace partita::search
