// The programs of the pipeline schedules (strategy::pipeline_program, which the simulator and
// partita-run follow) and the interleaved schedule from the families to the plan file.

#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/plan_file.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"
#include "simple_cluster.h"
#include "test_support.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <functional>
#include <set>
#include <tuple>

namespace partita {
namespace {

using strategy::Pipeline;
using strategy::Schedule;
using ::testing::HasSubstr;

// The message of the partita::Error `f` throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

Pipeline pipeline(Schedule schedule, int stages, int micro, int chunks = 1) {
  Pipeline p;
  p.stages = stages;
  p.micro_batches = micro;
  p.schedule = schedule;
  p.chunks = chunks;
  return p;
}

// Megatron-LM's order on 2 stages, 2 chunks, 4 micro-batches: forwards through chunk 0 for a group
// of 2 micro-batches, then chunk 1 for them, ...; stage 0 warms up with (2-0-1) x 2 + (2-1) x 2 = 4.
TEST(PipelineProgram, InterleavedFollowsMegatronLMsOrder) {
  const auto p = pipeline(Schedule::interleaved, 2, 4, 2);
  const auto s0 = strategy::pipeline_program(p, 0);
  std::vector<std::tuple<char, int, int>> got;
  for (const auto& s : s0) {
    got.emplace_back(s.forward ? 'F' : 'B', s.micro_batch, s.chunk);
  }
  const std::vector<std::tuple<char, int, int>> want{
      {'F', 0, 0}, {'F', 1, 0}, {'F', 0, 1}, {'F', 1, 1}, {'F', 2, 0}, {'B', 0, 1}, {'F', 3, 0}, {'B', 1, 1},
      {'F', 2, 1}, {'B', 0, 0}, {'F', 3, 1}, {'B', 1, 0}, {'B', 2, 1}, {'B', 3, 1}, {'B', 2, 0}, {'B', 3, 0}};
  EXPECT_EQ(got, want);
}

// Every chunk's forward and backward of every micro-batch exactly once, the forward first; and all
// stages, each blocking until what it runs next has arrived (a virtual stage's forward after the one
// before's, its backward after the one after's), finish: no schedule deadlocks.
TEST(PipelineProgram, EveryStepOnceAndNoStageWaitsForever) {
  for (const auto schedule : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved}) {
    for (int stages = 1; stages <= 5; ++stages) {
      for (int chunks : schedule == Schedule::interleaved ? std::vector<int>{2, 3} : std::vector<int>{1}) {
        for (int micro = 1; micro <= 12; ++micro) {
          auto p = pipeline(schedule, stages, micro, chunks);
          if (schedule == Schedule::interleaved && micro % stages != 0) {
            EXPECT_THROW(strategy::check_schedule(p), Error);
            continue;
          }
          SCOPED_TRACE(fmt::format("{} p={} V={} m={}", strategy::schedule_name(schedule), stages, chunks, micro));
          const int virtual_stages = stages * chunks;
          std::vector<std::vector<strategy::PipelineStep>> order;
          for (int s = 0; s < stages; ++s) {
            order.push_back(strategy::pipeline_program(p, s));
            std::set<std::tuple<bool, int, int>> seen;
            std::set<std::pair<int, int>> forwarded;
            for (const auto& step : order.back()) {
              EXPECT_TRUE(seen.insert({step.forward, step.micro_batch, step.chunk}).second);
              if (step.forward) {
                forwarded.insert({step.micro_batch, step.chunk});
              } else {
                EXPECT_TRUE(forwarded.count({step.micro_batch, step.chunk})) << "backward before forward";
              }
            }
            EXPECT_EQ(seen.size(), static_cast<std::size_t>(2 * micro * chunks));
          }
          std::vector<std::size_t> next(static_cast<std::size_t>(stages), 0);
          std::vector<std::vector<bool>> done_f(static_cast<std::size_t>(virtual_stages),
                                                std::vector<bool>(static_cast<std::size_t>(micro))),
              done_b = done_f;
          for (bool progress = true; progress;) {
            progress = false;
            for (int s = 0; s < stages; ++s) {
              const auto su = static_cast<std::size_t>(s);
              if (next[su] == order[su].size()) {
                continue;
              }
              const auto step = order[su][next[su]];
              const auto j = static_cast<std::size_t>(step.micro_batch);
              const auto v = static_cast<std::size_t>(step.chunk * stages + s);
              const bool ready =
                  step.forward ? (v == 0 || done_f[v - 1][j])
                               : (v + 1 == static_cast<std::size_t>(virtual_stages) ? done_f[v][j] : done_b[v + 1][j]);
              if (ready) {
                (step.forward ? done_f : done_b)[v][j] = true;
                ++next[su];
                progress = true;
              }
            }
          }
          for (int s = 0; s < stages; ++s) {
            EXPECT_EQ(next[static_cast<std::size_t>(s)], order[static_cast<std::size_t>(s)].size()) << "stage " << s;
          }
        }
      }
    }
  }
}

// Korthikanti et al. 2022 (section 4.2.3): under 1F1B the first stage holds p micro-batches; with
// the interleaved schedule's V chunks it holds p (1 + (p - 1) / (p V)) = p + (p - 1) / V
// micro-batches' worth. GPipe holds them all.
TEST(PipelineProgram, MicroBatchesInFlightAsKorthikantiCountsThem) {
  for (int p : {2, 4, 8}) {
    for (int v : {2, 3, 4}) {
      const int m = 4 * p * v;
      EXPECT_DOUBLE_EQ(strategy::micro_batches_in_flight(pipeline(Schedule::interleaved, p, m, v), 0),
                       p + static_cast<double>(p - 1) / v);
    }
    EXPECT_DOUBLE_EQ(strategy::micro_batches_in_flight(pipeline(Schedule::one_f_one_b, p, 32), 0), p);
    EXPECT_DOUBLE_EQ(strategy::micro_batches_in_flight(pipeline(Schedule::one_f_one_b, p, 32), p - 1), 1);
    EXPECT_DOUBLE_EQ(strategy::micro_batches_in_flight(pipeline(Schedule::gpipe, p, 32), 0), 32);
  }
}

TEST(PipelineProgram, SchedulesThatCannotRunAreRefusedWithTheReason) {
  auto refused = [](const Pipeline& p) { return error_of([&] { strategy::check_schedule(p); }); };
  EXPECT_THAT(refused(pipeline(Schedule::one_f_one_b, 2, 4, 2)), HasSubstr("need the interleaved schedule"));
  EXPECT_THAT(refused(pipeline(Schedule::interleaved, 2, 4, 1)), HasSubstr("at least 2 chunks"));
  EXPECT_THAT(refused(pipeline(Schedule::interleaved, 4, 6, 2)), HasSubstr("not a multiple of 4"));
  EXPECT_THAT(refused(pipeline(Schedule::gpipe, 0, 4)), HasSubstr("at least 1"));
  EXPECT_EQ(refused(pipeline(Schedule::interleaved, 4, 8, 2)), "");
}

// The pipeline family with --schedule interleaved: p x V contiguous pieces, piece v on the devices
// of stage v mod p; evaluate's bubble is (p - 1) / V of the slowest stage's micro-batch; the plan
// file carries the chunks and reads back to the same prediction.
TEST(PipelineProgram, AnInterleavedPlanFromTheFamilyToThePlanFile) {
  const auto model = zoo::load("zoo:gpt2?layers=4&hidden=64&heads=4&seq=16&batch=8&vocab=100&positions=32");
  const auto& g = model.graph;
  const auto c = test::simple_cluster(4);
  search::Request r;
  r.graph = &g;
  r.cluster = &c;
  r.devices = 4;
  r.stages = 2;
  r.micro_batches = 4;
  r.schedule = Schedule::interleaved;
  r.chunks = 2;
  const auto st = search::find_optimizer("pipeline").optimize(r);
  ASSERT_TRUE(st.pipeline);
  EXPECT_EQ(st.pipeline->chunks, 2);
  std::set<int> pieces;
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    const int v = st.pipeline->stage_of_op[i];
    pieces.insert(v);
    for (const int d : st.ops[i].devices) {
      EXPECT_EQ(d / 2, v % 2) << "piece " << v << " runs on the devices of stage " << v % 2;
    }
  }
  EXPECT_EQ(pieces, (std::set<int>{0, 1, 2, 3}));
  const auto p = strategy::evaluate(g, c, st, {});
  double bubble = -1;
  for (const auto& t : p.iteration) {
    if (t.name == "pipeline bubble") {
      bubble = t.value;
      EXPECT_THAT(t.formula, HasSubstr("/ 2 chunks"));
    }
  }
  EXPECT_GT(bubble, 0);

  const std::string path = test::scratch_dir() + "/interleaved-plan.json";
  io::write_json_file(path, strategy::to_plan(g, c, st, p, {}, "zoo:gpt2"));
  proto::Plan plan;
  io::read_json_file(path, plan);
  EXPECT_EQ(plan.pipeline().schedule(), "interleaved");
  EXPECT_EQ(plan.pipeline().chunks(), 2);
  const auto back = strategy::from_plan(plan, g, path);
  ASSERT_TRUE(back.pipeline);
  EXPECT_EQ(back.pipeline->chunks, 2);
  EXPECT_EQ(back.pipeline->stage_of_op, st.pipeline->stage_of_op);
  EXPECT_DOUBLE_EQ(strategy::evaluate(g, c, back, {}).iteration_time, p.iteration_time);

  auto hostile = plan;
  hostile.mutable_pipeline()->set_micro_batches(2000000000);
  EXPECT_THAT(error_of([&] { (void)strategy::from_plan(hostile, g, path); }),
              HasSubstr("field 'pipeline.micro_batches': 2000000000 micro-batches; the batch of 8 allows 1 to 8"));

  plan.mutable_pipeline()->set_chunks(1);
  EXPECT_THAT(error_of([&] { (void)strategy::from_plan(plan, g, path); }), HasSubstr("field 'pipeline'"));

  auto bad = r;
  bad.micro_batches = 3;
  EXPECT_THROW((void)search::find_optimizer("pipeline").optimize(bad), Error);
  bad = r;
  bad.schedule = Schedule::one_f_one_b;
  EXPECT_THROW((void)search::find_optimizer("pipeline").optimize(bad), Error); // --chunks without interleaved
  EXPECT_THROW((void)search::find_optimizer("bapipe").optimize(r), Error);
}

} // namespace
} // namespace partita
