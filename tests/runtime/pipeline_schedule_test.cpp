// The pipeline schedules partita-run follows, and the micro-batch geometry: pure functions,
// checked without MPI.

#include "micro_batch.h"
#include "pipeline_schedule.h"

#include "partita/graph/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace partita::runtime {
namespace {

using strategy::Schedule;

std::vector<PipelineStep> steps(std::initializer_list<std::pair<char, int>> list) {
  std::vector<PipelineStep> out;
  for (const auto& [kind, j] : list) {
    out.push_back({kind == 'F', j});
  }
  return out;
}

TEST(PipelineSchedule, GPipeRunsEveryForwardThenEveryBackward) {
  EXPECT_EQ(schedule(Schedule::gpipe, 0, 2, 3), steps({{'F', 0}, {'F', 1}, {'F', 2}, {'B', 0}, {'B', 1}, {'B', 2}}));
}

TEST(PipelineSchedule, OneFOneBWarmsUpByTheStagesAfterIt) {
  EXPECT_EQ(schedule(Schedule::one_f_one_b, 0, 2, 4),
            steps({{'F', 0}, {'F', 1}, {'B', 0}, {'F', 2}, {'B', 1}, {'F', 3}, {'B', 2}, {'B', 3}}));
  EXPECT_EQ(schedule(Schedule::one_f_one_b, 1, 2, 4),
            steps({{'F', 0}, {'B', 0}, {'F', 1}, {'B', 1}, {'F', 2}, {'B', 2}, {'F', 3}, {'B', 3}}));
  // Fewer micro-batches than the warm-up would take.
  EXPECT_EQ(schedule(Schedule::one_f_one_b, 0, 4, 2), steps({{'F', 0}, {'F', 1}, {'B', 0}, {'B', 1}}));
}

// The most micro-batches whose activations a stage holds at once.
int peak_in_flight(const std::vector<PipelineStep>& order) {
  int now = 0, peak = 0;
  for (const auto& s : order) {
    now += s.forward ? 1 : -1;
    peak = std::max(peak, now);
  }
  return peak;
}

TEST(PipelineSchedule, InFlightMicroBatchesAreWhatTheCostModelAssumes) {
  for (int stages = 1; stages <= 5; ++stages) {
    for (int micro = 1; micro <= 9; ++micro) {
      for (int stage = 0; stage < stages; ++stage) {
        const auto f1b = schedule(Schedule::one_f_one_b, stage, stages, micro);
        // evaluate(): 1F1B keeps min(stages - stage, micro) micro-batches, GPipe all of them.
        EXPECT_EQ(peak_in_flight(f1b), std::min(stages - stage, micro)) << stages << " " << micro << " " << stage;
        EXPECT_EQ(peak_in_flight(schedule(Schedule::gpipe, stage, stages, micro)), micro);
        std::map<int, int> forward_at, backward_at;
        for (std::size_t i = 0; i < f1b.size(); ++i) {
          (f1b[i].forward ? forward_at : backward_at)[f1b[i].micro_batch] = static_cast<int>(i);
        }
        ASSERT_EQ(forward_at.size(), static_cast<std::size_t>(micro));
        ASSERT_EQ(backward_at.size(), static_cast<std::size_t>(micro));
        for (int j = 0; j < micro; ++j) {
          EXPECT_LT(forward_at[j], backward_at[j]);
        }
      }
    }
  }
}

// That every schedule finishes with blocking receives is core's test
// (PipelineProgram.EveryStepOnceAndNoStageWaitsForever): schedule() is core's program.

TEST(MicroBatch, ASliceAlongTheOneDimThatDiffers) {
  const auto s = batch_slice({2, 3, 16}, {8, 3, 16}, 4, "x");
  EXPECT_EQ(s.dim, 0);
  EXPECT_EQ(s.extent, 2);
  EXPECT_EQ(batch_slice({3, 16}, {3, 16}, 4, "w").dim, -1);
  // Sequence-first layouts: the batch is dim 1.
  EXPECT_EQ(batch_slice({5, 2, 16}, {5, 8, 16}, 4, "y").dim, 1);
  sharding::Block b{{1, 0, 4}, {2, 3, 8}};
  const auto f = to_full(b, s, 3);
  EXPECT_EQ(f.begin, (std::vector<std::int64_t>{7, 0, 4}));
  EXPECT_EQ(f.end, (std::vector<std::int64_t>{8, 3, 8}));
}

TEST(MicroBatch, RefusesShapesThatAreNotOneBatchSlice) {
  try {
    batch_slice({2, 4}, {8, 8}, 4, "h.0.out");
    FAIL() << "two dims differ";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'h.0.out'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(batch_slice({3, 4}, {8, 4}, 4, "x"), Error); // 3 x 4 != 8
  EXPECT_THROW(batch_slice({3}, {3, 1}, 1, "x"), Error);
}

TEST(MicroBatch, GeneratedValuesAreTheFullTensorsSlice) {
  const graph::Shape full{8, 5};
  Shard whole_tensor = make_shard(whole(full));
  fill_deterministic(whole_tensor, full, "input:x", 0.5F);
  const auto slice = batch_slice({2, 5}, full, 4, "x");
  for (int j = 0; j < 4; ++j) {
    Shard part = make_shard({{1, 2}, {2, 5}}); // row 1 of the micro-batch, columns 2..4
    fill_slice(part, slice, j, "input:x", 0.5F);
    Floats expected(3);
    pack(whole_tensor, to_full(part.block, slice, j), expected.data());
    EXPECT_EQ(part.data, expected) << "micro-batch " << j;
  }
}

TEST(MicroBatch, ZooSpecsGetTheirBatchReplaced) {
  EXPECT_EQ(with_batch("zoo:mlp?batch=8&input=16", 2), "zoo:mlp?input=16&batch=2");
  EXPECT_EQ(with_batch("zoo:gpt2?layers=1&batch=4", 1), "zoo:gpt2?layers=1&batch=1");
  EXPECT_EQ(with_batch("zoo:mlp", 4), "zoo:mlp?batch=4");
  EXPECT_THROW(with_batch("/models/net.onnx", 4), Error);
}

} // namespace
} // namespace partita::runtime
