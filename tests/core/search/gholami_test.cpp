// Gholami et al.'s Pr x Pc grid: on a fully-connected layer the cost model's communication is
// exactly the paper's volume, and the family picks the grid with the least volume.

#include "partita/search/optimizer.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"
#include "simple_cluster.h"
#include "test_support.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace partita {
namespace {

using graph::TensorRole;
using ::testing::HasSubstr;

TEST(Gholami, FullyConnectedLayerCommunicationIsThePapersVolume) {
  const std::int64_t batch = 16, d0 = 32, d1 = 64, d2 = 48;
  graph::Graph g;
  test::tensor(g, "x", {batch, d0}, TensorRole::input);
  test::tensor(g, "w1", {d0, d1}, TensorRole::parameter);
  test::tensor(g, "y1", {batch, d1});
  test::tensor(g, "w2", {d1, d2}, TensorRole::parameter);
  test::tensor(g, "y2", {batch, d2});
  test::op(g, "MatMul", {"x", "w1"}, {"y1"});
  test::op(g, "MatMul", {"y1", "w2"}, {"y2"});
  for (auto [pr, pc] : {std::pair{2, 2}, std::pair{4, 1}, std::pair{1, 4}, std::pair{2, 4}}) {
    const int p = pr * pc;
    const double link = 1e10;
    const auto c = test::simple_cluster(p, link);
    strategy::Strategy st;
    st.devices = p;
    std::vector<int> devices(static_cast<std::size_t>(p));
    for (int i = 0; i < p; ++i) {
      devices[static_cast<std::size_t>(i)] = i;
    }
    for (graph::OpId id : {0, 1}) {
      const auto s = graph::describe(g, id);
      st.ops.push_back(
          {sharding::make_config(s, std::vector<std::pair<std::string, int>>{{"m", pc}, {"n", pr}}), devices});
    }
    const auto pred = strategy::evaluate(g, c, st, {});
    const auto& layer2 = pred.ops[1].cost;
    // The paper's per-process volume for layer 2, in fp32 bytes:
    //   (Pr-1)/Pr B d1/Pc  +  2(Pr-1)/Pr B d1/Pc  +  2(Pc-1)/Pc |W2|/Pr
    const double activations = 4.0 * batch * d1 / pc;
    const double weights = 4.0 * d1 * d2 / pr;
    const double volume = 3.0 * (pr - 1) / pr * activations + 2.0 * (pc - 1) / pc * weights;
    // The transfers; the copies beside them (packing, unpacking, adding gradients) are a term of their own.
    if (pr > 1) { // activations move
      EXPECT_GT(layer2.get(cost::term::redistribution_copies), 0) << pr << "x" << pc;
    }
    EXPECT_NEAR(layer2.communication_time() - layer2.get(cost::term::redistribution_copies), volume / link,
                1e-9 * volume / link)
        << pr << "x" << pc;
  }
}

TEST(Gholami, PicksTheGridWithLeastVolumeAndSaysSo) {
  // Wide layers, small batch: weights dominate, so model parallelism along Pr pays off.
  const auto model = zoo::load("zoo:mlp?batch=4&input=2048&hidden=4096&layers=2&classes=1024");
  const auto c = test::simple_cluster(8);
  search::Request r;
  r.graph = &model.graph;
  r.cluster = &c;
  r.devices = 8;
  const auto st = search::find_optimizer("gholami").optimize(r);
  EXPECT_THAT(st.explanation, HasSubstr("Pr x Pc = 8 x 1"));
  EXPECT_THAT(st.explanation, HasSubstr("1x8:"));
  // Large batch, narrow layers: activations dominate, batch parallelism wins.
  const auto wide_batch = zoo::load("zoo:mlp?batch=4096&input=64&hidden=64&layers=2&classes=16");
  r.graph = &wide_batch.graph;
  EXPECT_THAT(search::find_optimizer("gholami").optimize(r).explanation, HasSubstr("Pr x Pc = 1 x 8"));
  // Every grid of the devices is weighed, not only powers of two: 12 = 3 x 4 and 6 x 2 too.
  const auto c12 = test::simple_cluster(12);
  r.cluster = &c12;
  r.devices = 12;
  const auto twelve = search::find_optimizer("gholami").optimize(r).explanation;
  for (const char* grid : {"1x12:", "2x6:", "3x4:", "4x3:", "6x2:", "12x1:"}) {
    EXPECT_THAT(twelve, HasSubstr(grid));
  }
}

TEST(Gholami, EarlyConvolutionsGoDomainParallel) {
  const auto model = zoo::load("zoo:vgg16?batch=8&image=224");
  const auto c = test::simple_cluster(8);
  search::Request r;
  r.graph = &model.graph;
  r.cluster = &c;
  r.devices = 8;
  const auto st = search::find_optimizer("gholami").optimize(r);
  EXPECT_THAT(st.explanation, HasSubstr("convolutions domain-parallel"));
  const auto p = strategy::evaluate(model.graph, c, st, {});
  double halo = 0;
  for (const auto& op : p.ops) {
    halo += op.cost.get(cost::term::halo_exchange);
  }
  EXPECT_GT(halo, 0) << "a spatially split convolution exchanges halos";
}

} // namespace
} // namespace partita
