// PaSE's own benchmark: the optimum of each graph equals the "Total cost" its reference
// implementation prints (scheduler.py, default batch 128, --flops 10 --bw 16), exactly.

#include "partita/graph/error.h"
#include "partita/search/pase.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace partita::search {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

struct Reference {
  const char* graph;
  int procs;
  double total_cost;
};

// Printed by the reference on a 2-core machine.
constexpr Reference kReference[] = {
    {"alexnet", 4, 148215719552.0},      {"alexnet", 8, 97098296512.0},     {"resnet101", 4, 1718742247936.0},
    {"resnet101", 8, 1425262849920.0},   {"inception3", 4, 986757044608.0}, {"inception3", 8, 782140602432.0},
    {"rnnlm", 4, 13247562153984.0},      {"rnnlm", 8, 7462723813376.0},     {"transformer", 4, 3943828242432.0},
    {"transformer", 8, 2340308361216.0},
};

TEST(Pase, OptimumEqualsTheReferenceTotalCostAtFourAndEightDevices) {
  for (const auto& ref : kReference) {
    pase::Options o;
    o.procs = ref.procs;
    const auto r = pase::search(ref.graph, o);
    EXPECT_EQ(r.total_cost, ref.total_cost) << ref.graph << " at " << ref.procs;
    EXPECT_EQ(pase::format_cost(r.total_cost), pase::format_cost(ref.total_cost)) << ref.graph;
    EXPECT_EQ(static_cast<int>(r.layers.size()), r.vertices) << ref.graph;
  }
}

TEST(Pase, GraphsHaveTheReferenceShape) {
  pase::Options o;
  o.procs = 4;
  const auto alexnet = pase::build("alexnet", o);
  // 5 convs, 3 pools, a reshape (ravel + unravel), 3 FCs and the loss, in a chain.
  EXPECT_EQ(alexnet.layers.size(), 14u);
  EXPECT_EQ(alexnet.problem.edges.size(), 13u);
  EXPECT_EQ(alexnet.layers.front().op, "Conv");
  EXPECT_EQ(alexnet.layers.front().dims, "bchwrsn");
  // Each configuration splits the domain in at most P parts, exactly.
  for (const auto& l : alexnet.layers) {
    for (const auto& c : l.configs) {
      int parts = 1;
      for (std::size_t i = 0; i < c.size(); ++i) {
        EXPECT_EQ(l.domain[i] % c[i], 0) << l.name;
        parts *= c[i];
      }
      EXPECT_LE(parts, 4) << l.name;
    }
  }
  const auto rnnlm = pase::build("rnnlm", o);
  EXPECT_EQ(rnnlm.layers.size(), 4u); // embedding, LSTM, projection, loss
  const auto resnet = pase::build("resnet101", o);
  EXPECT_EQ(resnet.layers.size(), 245u);
  EXPECT_GT(resnet.problem.edges.size(), resnet.layers.size()); // the residual connections
}

TEST(Pase, ChoiceReportsEveryLayerAndItsSplit) {
  pase::Options o;
  o.procs = 8;
  const auto r = pase::search("alexnet", o);
  ASSERT_EQ(r.layers.size(), 14u);
  EXPECT_EQ(r.layers[0].name, "conv1");
  EXPECT_THAT(r.layers[0].split, AllOf(HasSubstr("b="), HasSubstr("n=")));
  double own = 0;
  for (const auto& l : r.layers) {
    own += l.cost;
  }
  // The rest of the total is redistribution on the edges, never negative.
  EXPECT_LE(own, r.total_cost);
  EXPECT_GT(r.configs, 14);
  EXPECT_EQ(r.edges, 13);
}

// The vertices [first, last) of a problem and the edges among them.
dp::Problem induced(const dp::Problem& p, int first, int last) {
  dp::Problem out;
  out.tables = p.tables;
  for (int v = first; v < last; ++v) {
    const int w = out.add_vertex(p.domain[static_cast<std::size_t>(v)], p.names[static_cast<std::size_t>(v)]);
    out.unary[static_cast<std::size_t>(w)] = p.unary[static_cast<std::size_t>(v)];
  }
  for (const auto& e : p.edges) {
    if (e.u >= first && e.u < last && e.v >= first && e.v < last) {
      out.edges.push_back({e.u - first, e.v - first, e.table});
    }
  }
  return out;
}

TEST(Pase, SolveAgreesWithBruteForceOnSmallPaseProblems) {
  pase::Options o;
  o.procs = 8;
  const auto rnnlm = pase::build("rnnlm", o);
  const auto exact = dp::solve(rnnlm.problem);
  const auto all = dp::brute_force(rnnlm.problem);
  EXPECT_EQ(exact.cost, all.cost);
  EXPECT_EQ(exact.cost, 7462723813376.0);

  // ResNet's first bottleneck with its downsample branch: pool1 to the residual add, a cycle.
  o.procs = 2;
  const auto resnet = pase::build("resnet101", o);
  ASSERT_EQ(resnet.layers[2].name, "pool1");
  ASSERT_EQ(resnet.layers[11].name, "layer1.0/add");
  const auto block = induced(resnet.problem, 2, 12);
  const auto block_exact = dp::solve(block);
  const auto block_all = dp::brute_force(block);
  EXPECT_DOUBLE_EQ(block_exact.cost, block_all.cost);
  EXPECT_DOUBLE_EQ(dp::total_cost(block, block_exact.choice), block_exact.cost);
}

TEST(Pase, UnknownGraphNamesTheKnownOnes) {
  try {
    (void)pase::search("vgg16", {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("vgg16"), HasSubstr("alexnet"), HasSubstr("resnet101"),
                                HasSubstr("inception3"), HasSubstr("rnnlm"), HasSubstr("transformer")));
  }
  EXPECT_EQ(pase::graph_names().size(), 5u);
  pase::Options o;
  o.procs = 0;
  EXPECT_THROW((void)pase::build("alexnet", o), Error);
}

TEST(Pase, OptionsOverrideBatchAndBandwidth) {
  pase::Options o;
  o.procs = 4;
  const double base = pase::search("alexnet", o).total_cost;
  o.batch = 64;
  const double half_batch = pase::search("alexnet", o).total_cost;
  EXPECT_LT(half_batch, base);
  o.batch = 128;
  o.bw = 1e9; // communication nearly free: the cost tends to the computation alone
  EXPECT_LT(pase::search("alexnet", o).total_cost, base);
}

TEST(Pase, CommunicationRatioIsTheReferenceDefault) {
  // 10 TFLOPS over 16 GB/s of 8-byte words.
  EXPECT_DOUBLE_EQ(pase::comm_ratio({}), 5000.0);
  pase::Options o;
  o.bw = 32.0;
  EXPECT_DOUBLE_EQ(pase::comm_ratio(o), 2500.0);
}

TEST(Pase, ModelNamesAreParsedStrictly) {
  pase::Options o;
  EXPECT_TRUE(pase::is_spec("zoo:pase?graph=alexnet"));
  EXPECT_TRUE(pase::is_spec("pase"));
  EXPECT_FALSE(pase::is_spec("zoo:paseo"));
  EXPECT_FALSE(pase::is_spec("zoo:alexnet"));
  EXPECT_EQ(pase::parse_spec("zoo:pase?graph=rnnlm&batch=64", o), "rnnlm");
  EXPECT_EQ(o.batch, 64);
  auto fails = [](const char* spec, const char* why) {
    pase::Options options;
    EXPECT_THAT([&] { (void)pase::parse_spec(spec, options); }, ::testing::ThrowsMessage<Error>(HasSubstr(why)))
        << spec;
    EXPECT_EQ(options.batch, pase::Options{}.batch) << spec;
  };
  fails("zoo:pase", "give graph=NAME");
  fails("zoo:pase?graph=vgg", "unknown graph 'vgg'");
  fails("zoo:pase?graph=alexnet&graph=rnnlm", "'graph' given twice");
  fails("zoo:pase?graph=alexnet&batch=0", "positive integer");
  fails("zoo:pase?graph=alexnet&batch=12x", "positive integer");
  fails("zoo:pase?graph=alexnet&procs=4", "no parameter 'procs'");
  fails("zoo:pase?graph", "expected key=value");
  fails("zoo:mlp", "not one of PaSE's graphs");
}

} // namespace
} // namespace partita::search
