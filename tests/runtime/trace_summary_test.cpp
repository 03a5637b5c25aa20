// The trace summary (runtime/src/trace.h): per op and phase the median over timed iterations of
// the slowest rank; a collective's time is the fastest rank's, the rest waiting kept apart.

#include "trace.h"

#include "partita/graph/graph.h"

#include <gtest/gtest.h>

namespace partita::runtime {
namespace {

graph::Graph one_op() {
  graph::Graph g;
  graph::Tensor x, y;
  x.name = "x";
  x.shape = {4};
  y.name = "y";
  y.shape = {4};
  graph::Op op;
  op.name = "relu";
  op.type = "Relu";
  op.inputs = {g.add_tensor(x)};
  op.outputs = {g.add_tensor(y)};
  g.add_op(op);
  return g;
}

Record record(int rank, int iteration, Phase phase, double seconds) {
  Record r;
  r.rank = rank;
  r.iteration = iteration;
  r.op = phase == Phase::iteration ? -1 : 0;
  r.phase = phase;
  r.start = 1.0;
  r.end = 1.0 + seconds;
  return r;
}

TEST(TraceSummary, MedianOfTheSlowestRank) {
  const auto g = one_op();
  std::vector<Record> all;
  // Three iterations; the third one was slow on rank 1 (the OS took its core).
  for (int i = 0; i < 3; ++i) {
    all.push_back(record(0, i, Phase::forward, 0.010));
    all.push_back(record(1, i, Phase::forward, i == 2 ? 0.050 : 0.012));
    all.push_back(record(0, i, Phase::iteration, 0.020));
    all.push_back(record(1, i, Phase::iteration, i == 2 ? 0.060 : 0.021));
  }
  const auto s = summarize(g, all, 3);
  EXPECT_NEAR(s.ops[0].seconds[static_cast<std::size_t>(Phase::forward)], 0.012, 1e-12);
  EXPECT_NEAR(s.iteration_median, 0.021, 1e-12);
  EXPECT_NEAR(s.iteration_max, 0.060, 1e-12);
  EXPECT_NEAR(s.iteration_mean, (0.021 + 0.021 + 0.060) / 3, 1e-15);
}

TEST(TraceSummary, ACollectiveIsTheLastRanksTimeAndTheRestIsWaiting) {
  const auto g = one_op();
  std::vector<Record> all;
  for (int i = 0; i < 3; ++i) {
    // Rank 0 arrived early at the gradient sync and waited 4 ms for rank 1.
    all.push_back(record(0, i, Phase::gradient_sync, 0.006));
    all.push_back(record(1, i, Phase::gradient_sync, 0.002));
    // A redistribution is not a collective of the whole group: the slowest rank's time.
    all.push_back(record(0, i, Phase::forward_redistribution, 0.001));
    all.push_back(record(1, i, Phase::forward_redistribution, 0.003));
  }
  const auto s = summarize(g, all, 3);
  EXPECT_NEAR(s.ops[0].seconds[static_cast<std::size_t>(Phase::gradient_sync)], 0.002, 1e-12);
  EXPECT_NEAR(s.ops[0].collective_wait, 0.004, 1e-12);
  EXPECT_NEAR(s.ops[0].seconds[static_cast<std::size_t>(Phase::forward_redistribution)], 0.003, 1e-12);
}

TEST(TraceSummary, AnIterationWithoutThePhaseCountsZero) {
  const auto g = one_op();
  std::vector<Record> all;
  all.push_back(record(0, 0, Phase::backward_redistribution, 0.004));
  all.push_back(record(0, 1, Phase::backward_redistribution, 0.005));
  const auto s = summarize(g, all, 4); // iterations 2 and 3 moved nothing
  EXPECT_NEAR(s.ops[0].seconds[static_cast<std::size_t>(Phase::backward_redistribution)], 0.002, 1e-12);
}

} // namespace
} // namespace partita::runtime
