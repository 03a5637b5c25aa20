// BatchNorm's statistics dims (IterDim::statistics) and the sync-BN term the cost model adds
// when they are split: partita-run all-reduces the statistics over exactly these groups.

#include "partita/cost/op_cost.h"
#include "simple_cluster.h"
#include "test_support.h"

#include <gtest/gtest.h>

namespace partita {
namespace {

using graph::TensorRole;

struct BatchNorm {
  graph::Graph g;
  graph::OpId id = -1;
  graph::OpSemantics s;

  BatchNorm() {
    test::tensor(g, "x", {8, 64, 28, 28});
    test::tensor(g, "scale", {64}, TensorRole::parameter);
    test::tensor(g, "bias", {64}, TensorRole::parameter);
    test::tensor(g, "mean", {64}, TensorRole::state);
    test::tensor(g, "var", {64}, TensorRole::state);
    test::tensor(g, "y", {8, 64, 28, 28});
    id = test::op(g, "BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"});
    s = graph::describe(g, id);
  }

  cost::OpCost cost(std::vector<std::pair<std::string, int>> splits, const cluster::Cluster& c) const {
    const auto config = sharding::make_config(s, splits);
    std::vector<int> devices;
    for (int d = 0; d < config.devices(); ++d) {
      devices.push_back(d);
    }
    return cost::op_cost(g, id, s, config, devices, c, {});
  }
};

TEST(StatisticsSync, BatchNormTakesStatisticsOverBatchAndSpatialDims) {
  const BatchNorm bn;
  for (const auto& d : bn.s.dims) {
    EXPECT_EQ(d.statistics, d.name != "c") << d.name;
    EXPECT_FALSE(d.reduction) << d.name; // the output is indexed by them: no partial sums
  }
  const auto config = sharding::make_config(bn.s, std::vector<std::pair<std::string, int>>{{"n", 2}, {"c", 2}});
  EXPECT_EQ(cost::statistics_axes(bn.s, config), std::vector<int>{bn.s.find_dim("n")});
}

TEST(StatisticsSync, SplitBatchPricesTwoAllReducesOfTwoValuesPerLocalChannel) {
  const BatchNorm bn;
  const double bandwidth = 1e10;
  const auto c = test::simple_cluster(4, bandwidth);
  EXPECT_EQ(bn.cost({{"c", 4}}, c).get(cost::term::statistics_sync), 0);
  const double batch_split = bn.cost({{"n", 4}}, c).get(cost::term::statistics_sync);
  const double spatial_split = bn.cost({{"h", 2}, {"w", 2}}, c).get(cost::term::statistics_sync);
  const double with_channels = bn.cost({{"n", 2}, {"c", 2}}, c).get(cost::term::statistics_sync);
  EXPECT_GT(batch_split, 0);
  EXPECT_DOUBLE_EQ(batch_split, spatial_split); // the same group size and volume
  // 2 x all-reduce of 2 x 64 fp32 values over 4 devices; half the channels over 2 devices.
  EXPECT_GE(batch_split, 2 * 2.0 * 3 / 4 * (2 * 64 * 4) / bandwidth);
  EXPECT_LT(with_channels, batch_split);
}

} // namespace
} // namespace partita
