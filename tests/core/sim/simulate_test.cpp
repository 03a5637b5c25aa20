// The event simulator against the additive prediction (overlap off), the closed-form pipeline
// bubble, and what overlap and faster links may never do.

#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/search/optimizer.h"
#include "partita/sim/chrome_trace.h"
#include "partita/sim/simulate.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"
#include "test_support.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <set>

namespace partita {
namespace {

using ::testing::HasSubstr;

constexpr double tolerance = 1e-9;

const std::vector<std::string>& zoo_models() {
  static const std::vector<std::string> specs{"zoo:mlp", "zoo:bert?layers=2&hidden=256&heads=4&seq=64&batch=16",
                                              "zoo:gpt2?layers=2&hidden=256&heads=4&seq=64&batch=16",
                                              "zoo:resnet50?batch=16&image=64"};
  return specs;
}

const onnx_import::ImportResult& model(const std::string& spec) {
  static std::map<std::string, onnx_import::ImportResult> cache;
  auto it = cache.find(spec);
  if (it == cache.end()) {
    it = cache.emplace(spec, zoo::load(spec)).first;
  }
  return it->second;
}

struct Planned {
  std::string spec, family;
  strategy::Strategy strategy;
};

// Every family's strategy for every zoo model at 8 devices of a DGX A100 (those that apply).
const std::vector<Planned>& plans() {
  static const std::vector<Planned> all = [] {
    const auto cluster = cluster::load_cluster("dgx-a100");
    std::vector<Planned> v;
    for (const auto& spec : zoo_models()) {
      for (const auto& o : search::optimizers()) {
        if (o->name() == "given") {
          continue;
        }
        search::Request r;
        r.graph = &model(spec).graph;
        r.cluster = &cluster;
        r.devices = 8;
        v.push_back({spec, std::string(o->name()), o->optimize(r)});
      }
      // The interleaved schedule: 2 stages of 2 chunks (micro-batches a multiple of the stages).
      if (strategy::batch_size(model(spec).graph) % 2 != 0) {
        continue;
      }
      search::Request r;
      r.graph = &model(spec).graph;
      r.cluster = &cluster;
      r.devices = 2;
      r.stages = 2;
      r.micro_batches = 2;
      r.schedule = strategy::Schedule::interleaved;
      r.chunks = 2;
      v.push_back({spec, "pipeline interleaved", search::find_optimizer("pipeline").optimize(r)});
    }
    return v;
  }();
  return all;
}

double relative(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-300);
}

double total_duration(const sim::TaskGraph& tg, int stage = -1) {
  double sum = 0;
  for (const auto& t : tg.tasks) {
    if (stage < 0 || t.stage == stage) {
      sum += t.duration;
    }
  }
  return sum;
}

TEST(Simulate, WithoutOverlapEqualsTheAdditivePredictionForEveryFamily) {
  const auto cluster = cluster::load_cluster("dgx-a100");
  int compared = 0;
  for (const auto& p : plans()) {
    SCOPED_TRACE(p.spec + " " + p.family);
    const auto s = sim::simulate(model(p.spec).graph, cluster, p.strategy, {}, {.overlap = false});
    if (p.strategy.pipeline) {
      continue; // below
    }
    EXPECT_LE(relative(s.result.iteration_time, s.prediction.iteration_time), tolerance)
        << "simulated " << s.result.iteration_time << " s, additive " << s.prediction.iteration_time << " s";
    ++compared;
  }
  EXPECT_GE(compared, 28) << "every non-pipeline family on four models";
}

// A pipeline's additive time paces every stage, in the fill and the drain too, at the slowest
// stage's forward + backward: (m + p - 1) x slowest + the largest sync. The simulation runs the
// schedule instead, so the two part where stages differ (below the additive time when one stage
// is the slowest both ways, above it when the slowest forward and the slowest backward are on
// different stages); equal stages are checked against the closed form below. Without overlap each
// stage still runs exactly its own terms, one at a time.
TEST(Simulate, WithoutOverlapAPipelineStageRunsExactlyItsTermsOneAtATime) {
  const auto cluster = cluster::load_cluster("dgx-a100");
  int pipelines = 0;
  for (const auto& p : plans()) {
    if (!p.strategy.pipeline) {
      continue;
    }
    SCOPED_TRACE(p.spec + " " + p.family);
    ++pipelines;
    const auto s = sim::simulate(model(p.spec).graph, cluster, p.strategy, {}, {.overlap = false});
    const auto& pl = *p.strategy.pipeline;
    std::vector<double> stage_time(static_cast<std::size_t>(pl.stages), 0.0);
    for (std::size_t i = 0; i < s.prediction.ops.size(); ++i) {
      stage_time[static_cast<std::size_t>(pl.stage_of_op[i] % pl.stages)] += s.prediction.ops[i].time; // its chunks
    }
    for (int stage = 0; stage < pl.stages; ++stage) {
      EXPECT_LE(relative(total_duration(s.tasks, stage), stage_time[static_cast<std::size_t>(stage)]), tolerance)
          << "stage " << stage;
    }
    // A stage runs one task at a time: the iteration is at least its work; and something runs at
    // every instant: at most all stages' work.
    const double longest = *std::max_element(stage_time.begin(), stage_time.end());
    const double all = std::accumulate(stage_time.begin(), stage_time.end(), 0.0);
    EXPECT_GE(s.result.iteration_time, longest * (1 - tolerance));
    EXPECT_LE(s.result.iteration_time, all * (1 + tolerance));
    if (pl.stages > 1) { // bapipe may find one stage fastest (a tied weight summed across stages costs)
      EXPECT_GT(s.result.iteration_time, longest * (1 + 1e-6)) << "the fill and drain of the pipeline cost time";
    }
  }
  EXPECT_GE(pipelines, 4);
}

TEST(Simulate, EveryTimeTermIsRunOnceWhateverTheSetup) {
  const auto cluster = cluster::load_cluster("dgx-a100");
  const auto& g = model("zoo:gpt2?layers=2&hidden=256&heads=4&seq=64&batch=16").graph;
  for (const char* family : {"dp", "megatron", "pipeline"}) {
    search::Request r;
    r.graph = &g;
    r.cluster = &cluster;
    r.devices = 8;
    const auto st = search::find_optimizer(family).optimize(r);
    for (int zero : {0, 1, 3}) {
      for (auto recompute : {cost::Recompute::none, cost::Recompute::full}) {
        cost::TrainingSetup setup;
        setup.zero_stage = zero;
        setup.recompute = recompute;
        setup.precision = cluster::Precision::bf16;
        for (bool overlap : {false, true}) {
          SCOPED_TRACE(fmt::format("{} ZeRO-{} recompute {} overlap {}", family, zero, cost::recompute_name(recompute),
                                   overlap));
          const auto s = sim::simulate(g, cluster, st, setup, {.overlap = overlap});
          double terms = 0;
          for (const auto& op : s.prediction.ops) {
            terms += op.time;
          }
          EXPECT_LE(relative(total_duration(s.tasks), terms), tolerance);
          if (!st.pipeline && !overlap) {
            EXPECT_LE(relative(s.result.iteration_time, s.prediction.iteration_time), tolerance);
          }
          if (zero == 3 && st.family == "dp") {
            EXPECT_TRUE(std::any_of(s.tasks.tasks.begin(), s.tasks.tasks.end(), [](const sim::Task& t) {
              return t.kind == sim::TaskKind::parameter_gather && t.pass == sim::Pass::backward;
            })) << "ZeRO-3 gathers the weights again before the backward pass";
          }
        }
      }
    }
  }
}

// p stages of k identical ops, one device each, nothing to communicate: a pipeline of uniform
// stages, built by hand so that its closed form is exact. With V chunks, p x V virtual stages of k
// ops, virtual stage v on device v mod p.
struct UniformPipeline {
  graph::Graph g;
  strategy::Strategy st;
  strategy::Prediction p;
  static constexpr double forward = 1e-3, backward = 2e-3, step = 0.25e-3; // per op, whole batch
  static constexpr double activations = 64e6;                              // per op, whole batch

  UniformPipeline(int stages, int ops_per_stage, int micro, strategy::Schedule schedule, int chunks = 1) {
    test::tensor(g, "x0", {64, 64}, graph::TensorRole::input);
    const int n = stages * chunks * ops_per_stage;
    st.family = "pipeline";
    st.devices = stages;
    st.pipeline = strategy::Pipeline{stages, micro, schedule, chunks, {}};
    for (int i = 0; i < n; ++i) {
      test::tensor(g, fmt::format("x{}", i + 1), {64, 64});
      test::op(g, "Relu", {fmt::format("x{}", i)}, {fmt::format("x{}", i + 1)});
      st.ops.push_back({{}, {i / ops_per_stage % stages}});
      st.pipeline->stage_of_op.push_back(i / ops_per_stage);
      strategy::OpPrediction op;
      op.cost.time = {{std::string(cost::term::forward_compute), forward, ""},
                      {std::string(cost::term::backward_compute), backward, ""},
                      {std::string(cost::term::optimizer_step), step, ""}};
      op.cost.memory = {{std::string(cost::term::activations), activations, ""}};
      op.time = forward + backward + step;
      op.term_input = {-1, -1, -1};
      p.ops.push_back(op);
    }
  }
};

TEST(Simulate, APipelineOfUniformStagesHasTheClosedFormBubble) {
  for (auto schedule : {strategy::Schedule::gpipe, strategy::Schedule::one_f_one_b}) {
    for (int stages : {2, 4, 8}) {
      for (int micro : {1, 3, 8, 32}) {
        for (bool overlap : {false, true}) {
          SCOPED_TRACE(
              fmt::format("{} p={} m={} overlap {}", strategy::schedule_name(schedule), stages, micro, overlap));
          const int k = 3;
          UniformPipeline u(stages, k, micro, schedule);
          const auto tg = sim::build_task_graph(u.g, u.st, u.p, stages, {.overlap = overlap});
          const auto r = sim::simulate(tg);
          const double per_micro = k * (u.forward + u.backward) / micro;
          const double steps = k * u.step;
          EXPECT_LE(relative(r.iteration_time, (micro + stages - 1) * per_micro + steps), tolerance);
          const double bubble = static_cast<double>(stages - 1) / (micro + stages - 1);
          for (int d = 0; d < stages; ++d) {
            const auto& dev = r.devices[static_cast<std::size_t>(d)];
            EXPECT_LE(relative(dev.busy, micro * per_micro + steps), tolerance) << "device " << d;
            EXPECT_LE(relative(dev.idle / (r.iteration_time - steps), bubble), tolerance) << "device " << d;
          }
        }
      }
    }
  }
}

// Narayanan et al. 2021: V model chunks per device divide the bubble by V, (p - 1) / V of a
// device's micro-batch, for the interleaved schedule as Megatron-LM orders it (micro-batches a
// multiple of the stages).
TEST(Simulate, InterleavingWithVChunksDividesTheBubbleByV) {
  for (int stages : {2, 4}) {
    for (int chunks : {2, 3}) {
      for (int micro : {stages, 2 * stages, 8 * stages}) {
        for (bool overlap : {false, true}) {
          SCOPED_TRACE(fmt::format("p={} V={} m={} overlap {}", stages, chunks, micro, overlap));
          const int k = 2; // ops per chunk
          UniformPipeline u(stages, k, micro, strategy::Schedule::interleaved, chunks);
          const auto tg = sim::build_task_graph(u.g, u.st, u.p, stages, {.overlap = overlap});
          const auto r = sim::simulate(tg);
          const double per_micro = chunks * k * (u.forward + u.backward) / micro; // a device's micro-batch
          const double steps = chunks * k * u.step;
          const double expected = (micro + static_cast<double>(stages - 1) / chunks) * per_micro + steps;
          EXPECT_LE(relative(r.iteration_time, expected), tolerance);
          for (int d = 0; d < stages; ++d) {
            EXPECT_LE(relative(r.devices[static_cast<std::size_t>(d)].busy, micro * per_micro + steps), tolerance);
          }
        }
      }
    }
  }
}

// The memory the schedule holds is evaluate()'s: resident state, plus the activations of every
// micro-batch in flight (1F1B: stages - stage of them at most; GPipe: all).
TEST(Simulate, PeakMemoryOfTheScheduleIsTheMemoryEvaluatePredicts) {
  const auto cluster = cluster::load_cluster("dgx-a100");
  for (const auto& p : plans()) {
    SCOPED_TRACE(p.spec + " " + p.family);
    for (bool overlap : {false, true}) {
      const auto s = sim::simulate(model(p.spec).graph, cluster, p.strategy, {}, {.overlap = overlap});
      int checked = 0;
      for (std::size_t d = 0; d < s.result.devices.size(); ++d) {
        if (!s.result.devices[d].used) {
          continue;
        }
        ++checked;
        EXPECT_LE(relative(s.result.devices[d].peak_memory, s.prediction.memory[d].total()), tolerance)
            << "device " << d << ": activations at the peak " << s.result.devices[d].peak_activations << ", evaluate "
            << s.prediction.memory[d].activations;
      }
      EXPECT_EQ(checked, s.prediction.devices_used);
    }
  }
}

TEST(Simulate, OneFOneBHoldsStagesMinusStageMicroBatchesAndGPipeAll) {
  const int stages = 4, k = 2, micro = 8;
  for (auto schedule : {strategy::Schedule::gpipe, strategy::Schedule::one_f_one_b}) {
    UniformPipeline u(stages, k, micro, schedule);
    const auto tg = sim::build_task_graph(u.g, u.st, u.p, stages);
    const auto r = sim::simulate(tg);
    for (int d = 0; d < stages; ++d) {
      const int in_flight = schedule == strategy::Schedule::gpipe ? micro : std::min(stages - d, micro);
      const double expected = in_flight * k * u.activations / micro;
      EXPECT_LE(relative(r.devices[static_cast<std::size_t>(d)].peak_activations, expected), tolerance)
          << strategy::schedule_name(schedule) << " device " << d;
      const auto steps = sim::memory_timeline(tg, r, d);
      ASSERT_FALSE(steps.empty());
      EXPECT_EQ(steps.front().first, 0.0);
      double most = 0;
      for (const auto& [at, bytes] : steps) {
        most = std::max(most, bytes);
      }
      EXPECT_LE(relative(most, expected), tolerance);
      EXPECT_NEAR(steps.back().second, 0.0, 1e-3) << "every activation is freed by its backward kernel";
    }
  }
}

TEST(Simulate, OneFOneBStartsBackwardBeforeTheLastForwardAndGPipeDoesNot) {
  for (auto schedule : {strategy::Schedule::gpipe, strategy::Schedule::one_f_one_b}) {
    UniformPipeline u(4, 2, 8, schedule);
    const auto tg = sim::build_task_graph(u.g, u.st, u.p, 4);
    const auto r = sim::simulate(tg);
    double first_backward = 1e300, last_forward = 0;
    for (std::size_t i = 0; i < tg.tasks.size(); ++i) {
      const auto& t = tg.tasks[i];
      if (t.stage != 0) {
        continue;
      }
      if (t.kind == sim::TaskKind::backward) {
        first_backward = std::min(first_backward, r.schedule[i].start);
      } else if (t.kind == sim::TaskKind::forward) {
        last_forward = std::max(last_forward, r.schedule[i].start);
      }
    }
    if (schedule == strategy::Schedule::gpipe) {
      EXPECT_GT(first_backward, last_forward);
    } else {
      EXPECT_LT(first_backward, last_forward);
    }
  }
}

cluster::Cluster faster_links(cluster::Cluster c) {
  for (auto* link : {&c.intra_link, &c.intra_fallback, &c.nic}) {
    link->bandwidth *= 2;
    for (auto& p : link->protocols) {
      p.bandwidth *= 2;
    }
    for (auto& figures : link->collectives) {
      figures.bandwidth *= 2;
      for (auto& p : figures.protocols) {
        p.bandwidth *= 2;
      }
    }
  }
  return c;
}

TEST(Simulate, OverlapAndFasterLinksNeverLengthenAnIteration) {
  const auto cluster = cluster::load_cluster("dgx-a100");
  const auto faster = faster_links(cluster);
  int shortened = 0;
  for (const auto& p : plans()) {
    SCOPED_TRACE(p.spec + " " + p.family);
    const auto& g = model(p.spec).graph;
    const auto off = sim::simulate(g, cluster, p.strategy, {}, {.overlap = false});
    const auto on = sim::simulate(g, cluster, p.strategy, {}, {.overlap = true});
    EXPECT_LE(on.result.iteration_time, off.result.iteration_time * (1 + tolerance));
    shortened += on.result.iteration_time < off.result.iteration_time * (1 - 1e-6) ? 1 : 0;
    for (bool overlap : {false, true}) {
      const auto slow = overlap ? on.result.iteration_time : off.result.iteration_time;
      const auto fast = sim::simulate(g, faster, p.strategy, {}, {.overlap = overlap});
      EXPECT_LE(fast.result.iteration_time, slow * (1 + tolerance)) << "overlap " << overlap;
    }
  }
  EXPECT_GE(shortened, 10) << "overlap hides communication in many of the plans";
}

// Transfers built by hand on 2 nodes of 2 devices: each task is a transfer on its group unless
// `compute` says otherwise.
struct Transfers {
  sim::TaskGraph tg;
  explicit Transfers(std::vector<std::vector<int>> groups) {
    tg.devices = 4;
    tg.groups = std::move(groups);
  }
  int add(int group, double duration, std::vector<int> after = {}, bool compute = false) {
    sim::Task t;
    t.kind = compute ? sim::TaskKind::forward : sim::TaskKind::redistribution;
    t.stream = compute ? sim::Stream::compute : sim::Stream::communication;
    t.group = group;
    t.duration = duration;
    t.after = std::move(after);
    tg.tasks.push_back(std::move(t));
    return static_cast<int>(tg.tasks.size()) - 1;
  }
};

cluster::Cluster two_nodes_of_two(int nics) {
  auto c = cluster::load_cluster("dgx-a100?nodes=2");
  c.devices_per_node = 2;
  c.nics_per_node = nics;
  return c;
}

// Transfers that leave a node at once share its NICs: with one NIC, two transfers that would each
// fill it take twice as long together; with two, each has its own; a transfer inside a node shares
// nothing; a transfer that joins late slows the other only while both run (fluid sharing).
TEST(Simulate, TransfersAtOnceShareTheNicsOfTheirNodes) {
  {
    Transfers t({{0, 2}, {1, 3}});
    t.add(0, 1.0);
    t.add(1, 1.0);
    sim::share_links(t.tg, two_nodes_of_two(1));
    ASSERT_EQ(t.tg.links, (std::vector<std::string>{"node 0 NICs", "node 1 NICs"}));
    const auto r = sim::simulate(t.tg);
    EXPECT_DOUBLE_EQ(r.schedule[0].finish, 2.0);
    EXPECT_DOUBLE_EQ(r.schedule[1].finish, 2.0);
    EXPECT_DOUBLE_EQ(r.iteration_time, 2.0);
    sim::share_links(t.tg, two_nodes_of_two(2));
    EXPECT_DOUBLE_EQ(sim::simulate(t.tg).iteration_time, 1.0) << "a NIC each";
    t.tg.links.clear();
    t.tg.group_links.clear();
    EXPECT_DOUBLE_EQ(sim::simulate(t.tg).iteration_time, 1.0) << "without contention";
  }
  {
    Transfers t({{0, 1}, {2, 3}, {0, 2}});
    t.add(0, 1.0);
    t.add(1, 1.0);
    t.add(2, 1.0, {0, 1}); // on the same devices: after both
    sim::share_links(t.tg, two_nodes_of_two(1));
    EXPECT_TRUE(t.tg.group_links[0].empty()) << "inside node 0";
    EXPECT_TRUE(t.tg.group_links[1].empty()) << "inside node 1";
    EXPECT_EQ(t.tg.group_links[2].size(), 2U);
    EXPECT_DOUBLE_EQ(sim::simulate(t.tg).iteration_time, 2.0);
  }
  {
    // Transfer 0 runs alone for 0.5 s, then both at half rate: it ends at 1.5 s with 0.5 s of the
    // other done, which then runs alone until 2.0 s.
    Transfers t({{0, 2}, {1, 3}, {1}});
    t.add(0, 1.0);
    const int wait = t.add(2, 0.5, {}, true);
    t.add(1, 1.0, {wait});
    sim::share_links(t.tg, two_nodes_of_two(1));
    const auto r = sim::simulate(t.tg);
    EXPECT_DOUBLE_EQ(r.schedule[0].finish, 1.5);
    EXPECT_DOUBLE_EQ(r.schedule[2].start, 0.5);
    EXPECT_DOUBLE_EQ(r.schedule[2].finish, 2.0);
    // The critical path still runs start to end: the late transfer after the kernel it waited for.
    EXPECT_EQ(r.critical_path, (std::vector<int>{1, 2}));
    // With two NICs per node, each transfer (one device on each node) has one of its own.
    sim::share_links(t.tg, two_nodes_of_two(2));
    EXPECT_DOUBLE_EQ(sim::simulate(t.tg).iteration_time, 1.5);
  }
}

// Inside a DGX-1 (a mesh of NVLinks), devices without a direct link talk through the host: two
// such transfers at once share the fallback link and take twice as long; pairs and rings on direct
// links share nothing.
TEST(Simulate, TransfersThroughTheHostOfAMeshShareIt) {
  const auto dgx1 = cluster::load_cluster("dgx1");
  ASSERT_FALSE(dgx1.intra_switched);
  auto graph_of = [](std::vector<std::vector<int>> groups) {
    sim::TaskGraph tg;
    tg.devices = 8;
    tg.groups = std::move(groups);
    for (int g = 0; g < static_cast<int>(tg.groups.size()); ++g) {
      sim::Task t;
      t.kind = sim::TaskKind::redistribution;
      t.stream = sim::Stream::communication;
      t.group = g;
      t.duration = 1.0;
      tg.tasks.push_back(std::move(t));
    }
    return tg;
  };
  auto through_host = graph_of({{0, 5}, {1, 6}}); // neither pair has an NVLink
  sim::share_links(through_host, dgx1);
  ASSERT_EQ(through_host.links, (std::vector<std::string>{"node 0 host link"}));
  EXPECT_DOUBLE_EQ(sim::simulate(through_host).iteration_time, 2.0);

  auto direct = graph_of({{0, 1}, {2, 3}, {4, 5, 6, 7}}); // NVLinks, and a ring of them
  sim::share_links(direct, dgx1);
  EXPECT_TRUE(direct.links.empty());
  EXPECT_DOUBLE_EQ(sim::simulate(direct).iteration_time, 1.0);

  auto switched = graph_of({{0, 5}, {1, 6}});
  sim::share_links(switched, cluster::load_cluster("dgx-a100"));
  EXPECT_TRUE(switched.links.empty()) << "an NVSwitch port per device";
  EXPECT_DOUBLE_EQ(sim::simulate(switched).iteration_time, 1.0);
}

// On a plan across nodes of one NIC each, contention never shortens an iteration, and without
// overlap (one task at a time) it changes nothing: the additive prediction again.
TEST(Simulate, SharedNicsNeverShortenAnIterationAndDoNotTouchTheAdditiveOne) {
  const auto cluster = cluster::load_cluster("pcie-8gpu?nodes=2");
  const auto& g = model("zoo:bert?layers=2&hidden=256&heads=4&seq=64&batch=16").graph;
  int links = 0;
  for (const char* family : {"dp", "megatron", "owt", "hybrid", "bapipe"}) {
    SCOPED_TRACE(family);
    search::Request r;
    r.graph = &g;
    r.cluster = &cluster;
    r.devices = 16;
    const auto st = search::find_optimizer(family).optimize(r);
    const auto shared = sim::simulate(g, cluster, st, {});
    const auto alone = sim::simulate(g, cluster, st, {}, {.contention = false});
    links += static_cast<int>(shared.tasks.links.size());
    EXPECT_GE(shared.result.iteration_time, alone.result.iteration_time * (1 - tolerance));
    if (!st.pipeline) {
      const auto serial = sim::simulate(g, cluster, st, {}, {.overlap = false});
      EXPECT_LE(relative(serial.result.iteration_time, serial.prediction.iteration_time), tolerance);
    }
  }
  EXPECT_GT(links, 0) << "some plan sends between the nodes";
}

// A tensor sent once (strategy::sent_once) crosses with micro-batch 0 alone: the later
// micro-batches of its reader wait for nothing of the stage that made it.
TEST(Simulate, AFixedTensorIsSentWithTheFirstMicroBatchOnly) {
  const auto& g = model("zoo:gpt2?layers=2&hidden=256&heads=4&seq=64&batch=16").graph;
  const auto cluster = cluster::load_cluster("dgx-a100");
  search::Request r;
  r.graph = &g;
  r.cluster = &cluster;
  r.devices = 2;
  r.stages = 2;
  r.micro_batches = 4;
  r.balance = "layers"; // a layer each: the second reads the mask and the scales the first made
  const auto st = search::find_optimizer("pipeline").optimize(r);
  const auto s = sim::simulate(g, cluster, st, {});
  std::map<std::pair<graph::OpId, int>, std::set<int>> sent; // (reader, input) -> micro-batches sent
  for (const auto& t : s.tasks.tasks) {
    if (t.kind == sim::TaskKind::send && t.pass == sim::Pass::forward) {
      sent[{t.op, t.input}].insert(t.micro_batch);
    }
  }
  int once = 0;
  for (const auto& [slot, micro] : sent) {
    SCOPED_TRACE(g.op(slot.first).name);
    if (strategy::sent_once(g, st, slot.first, static_cast<std::size_t>(slot.second))) {
      ++once;
      EXPECT_EQ(micro, (std::set<int>{0}));
    } else {
      EXPECT_EQ(micro, (std::set<int>{0, 1, 2, 3}));
    }
  }
  EXPECT_GT(once, 0);
  EXPECT_GT(sent.size(), static_cast<std::size_t>(once));
}

// Gradient buckets run on a channel of their own: a send that becomes ready while a bucket is
// being all-reduced does not wait for it, and where both leave a node through its one NIC they
// share it.
TEST(Simulate, ASendDoesNotQueueBehindAGradientBucket) {
  Transfers t({{0, 2}});
  const int bucket = t.add(0, 1.0);
  t.tg.tasks[static_cast<std::size_t>(bucket)].kind = sim::TaskKind::gradient_sync;
  t.tg.tasks[static_cast<std::size_t>(bucket)].stream = sim::Stream::gradients;
  const int send = t.add(0, 0.5);
  t.tg.tasks[static_cast<std::size_t>(send)].kind = sim::TaskKind::send;
  auto r = sim::simulate(t.tg);
  EXPECT_DOUBLE_EQ(r.schedule[static_cast<std::size_t>(send)].start, 0.0);
  EXPECT_DOUBLE_EQ(r.schedule[static_cast<std::size_t>(send)].finish, 0.5);
  EXPECT_DOUBLE_EQ(r.devices[0].communication, 1.0) << "the channels' time together, not summed";
  sim::share_links(t.tg, two_nodes_of_two(1));
  r = sim::simulate(t.tg);
  EXPECT_DOUBLE_EQ(r.schedule[static_cast<std::size_t>(send)].finish, 1.0) << "half the NIC while both run";
  EXPECT_DOUBLE_EQ(r.schedule[static_cast<std::size_t>(bucket)].finish, 1.5);
  // An op's own collectives load no NIC (their task spans the op's concurrent groups).
  Transfers c({{0, 2}, {1, 3}});
  c.add(0, 1.0);
  const int reduce = c.add(1, 1.0);
  c.tg.tasks[static_cast<std::size_t>(reduce)].kind = sim::TaskKind::collective;
  sim::share_links(c.tg, two_nodes_of_two(1));
  EXPECT_DOUBLE_EQ(sim::simulate(c.tg).iteration_time, 1.0);
}

TEST(Simulate, TheCriticalPathAddsUpToTheIterationAndTheDevicesAccountForIt) {
  const auto cluster = cluster::load_cluster("dgx-a100");
  for (const auto& p : plans()) {
    SCOPED_TRACE(p.spec + " " + p.family);
    const auto s = sim::simulate(model(p.spec).graph, cluster, p.strategy, {});
    const auto& r = s.result;
    ASSERT_FALSE(r.critical_path.empty());
    double along = 0, at = 0;
    for (int t : r.critical_path) {
      const auto& span = r.schedule[static_cast<std::size_t>(t)];
      EXPECT_DOUBLE_EQ(span.start, at) << sim::task_name(model(p.spec).graph, s.tasks, t);
      at = span.finish;
      along += span.finish - span.start;
      EXPECT_GE(span.finish - span.start, s.tasks.tasks[static_cast<std::size_t>(t)].duration * (1 - tolerance));
    }
    EXPECT_LE(relative(along, r.iteration_time), tolerance);
    for (std::size_t d = 0; d < r.devices.size(); ++d) {
      const auto& dev = r.devices[d];
      if (!dev.used) {
        continue;
      }
      EXPECT_LE(relative(dev.busy + dev.exposed_communication + dev.idle, r.iteration_time), tolerance);
      EXPECT_LE(dev.exposed_communication, dev.communication * (1 + tolerance));
    }
  }
}

// A small ResNet-50 under data parallelism on one DGX A100 node, predicted.
struct DataParallelResNet {
  cluster::Cluster cluster = cluster::load_cluster("dgx-a100");
  const graph::Graph& g = model("zoo:resnet50?batch=16&image=64").graph;
  strategy::Strategy st;
  strategy::Prediction p;
  DataParallelResNet() {
    search::Request r;
    r.graph = &g;
    r.cluster = &cluster;
    r.devices = 8;
    st = search::find_optimizer("dp").optimize(r);
    p = strategy::evaluate(g, cluster, st, {});
  }
};

TEST(Simulate, DataParallelGradientsAreSynchronizedInBucketsDuringTheBackwardPass) {
  const DataParallelResNet dp;
  const auto& [cluster, g, st, p] = dp;
  int synced = 0;
  for (const auto& op : p.ops) {
    synced += op.cost.get(cost::term::gradient_sync) > 0 ? 1 : 0;
  }
  const auto per_op = sim::build_task_graph(g, st, p, 8, {.bucket_bytes = 1});
  EXPECT_EQ(per_op.buckets.size(), static_cast<std::size_t>(synced));
  const auto one = sim::build_task_graph(g, st, p, 8, {.bucket_bytes = 1e12});
  EXPECT_EQ(one.buckets.size(), 1U);
  const auto ddp = sim::build_task_graph(g, st, p, 8);
  ASSERT_GT(ddp.buckets.size(), 1U);
  ASSERT_LT(ddp.buckets.size(), static_cast<std::size_t>(synced));
  for (std::size_t b = 0; b + 1 < ddp.buckets.size(); ++b) {
    EXPECT_GE(ddp.buckets[b].bytes, 25e6) << "every bucket but the last is full";
  }
  // With overlap, the first bucket's all-reduce runs while the backward pass goes on.
  const auto res = sim::simulate(ddp);
  double first_sync = 1e300, last_backward = 0;
  for (std::size_t i = 0; i < ddp.tasks.size(); ++i) {
    if (ddp.tasks[i].kind == sim::TaskKind::gradient_sync) {
      first_sync = std::min(first_sync, res.schedule[i].start);
    } else if (ddp.tasks[i].kind == sim::TaskKind::backward) {
      last_backward = std::max(last_backward, res.schedule[i].finish);
    }
  }
  EXPECT_LT(first_sync, last_backward);
  EXPECT_LT(res.devices[0].exposed_communication, res.devices[0].communication);
  // One bucket overlaps nothing: it waits for the whole backward pass.
  EXPECT_GT(sim::simulate(one).iteration_time, res.iteration_time);
}

// partita-run --overlap-gradients on GPUs: every op one at a time as without overlap, but each
// full bucket summed beside the backward pass. Its iteration lies between the two, and only the
// buckets run beside other work.
TEST(Simulate, GradientOverlapAloneRunsTheBucketsBesideTheSerialPass) {
  const DataParallelResNet dp;
  const auto& [cluster, g, st, p] = dp;
  const auto serial = sim::simulate(sim::build_task_graph(g, st, p, 8, {.overlap = false}));
  const auto full = sim::simulate(sim::build_task_graph(g, st, p, 8, {.overlap = true}));
  const auto tg = sim::build_task_graph(g, st, p, 8, {.overlap = false, .overlap_gradients = true});
  ASSERT_GT(tg.buckets.size(), 1U);
  const auto beside = sim::simulate(tg);
  EXPECT_LT(beside.iteration_time, serial.iteration_time);
  EXPECT_GE(beside.iteration_time, full.iteration_time * (1 - 1e-12));
  // Apart from the buckets, nothing on device 0 runs at once with anything else on it.
  std::vector<std::pair<double, double>> others;
  double first_sync = 1e300, last_backward = 0;
  for (std::size_t i = 0; i < tg.tasks.size(); ++i) {
    const auto& t = tg.tasks[i];
    const auto& devices = tg.groups[static_cast<std::size_t>(t.group)];
    if (std::find(devices.begin(), devices.end(), 0) == devices.end()) {
      continue;
    }
    if (t.kind == sim::TaskKind::gradient_sync) {
      first_sync = std::min(first_sync, beside.schedule[i].start);
    } else {
      others.emplace_back(beside.schedule[i].start, beside.schedule[i].finish);
      if (t.kind == sim::TaskKind::backward) {
        last_backward = std::max(last_backward, beside.schedule[i].finish);
      }
    }
  }
  EXPECT_LT(first_sync, last_backward);
  std::sort(others.begin(), others.end());
  for (std::size_t i = 1; i < others.size(); ++i) {
    EXPECT_LE(others[i - 1].second, others[i].first * (1 + 1e-12) + 1e-15) << "task " << i;
  }
}

TEST(Simulate, PipelineStagesSendToEachOtherPointToPoint) {
  const auto cluster = cluster::load_cluster("dgx-a100");
  for (const auto& p : plans()) {
    if (p.family != "pipeline") {
      continue;
    }
    SCOPED_TRACE(p.spec);
    const auto s = sim::simulate(model(p.spec).graph, cluster, p.strategy, {});
    const auto& pl = *p.strategy.pipeline;
    std::set<std::pair<int, int>> crossings; // (from stage, to stage) of forward sends
    int sends = 0;
    for (const auto& t : s.tasks.tasks) {
      if (t.kind != sim::TaskKind::send) {
        continue;
      }
      ++sends;
      EXPECT_EQ(t.stream, sim::Stream::communication);
      ASSERT_GE(t.input, 0);
      const auto producer =
          model(p.spec).graph.tensor(model(p.spec).graph.op(t.op).inputs[static_cast<std::size_t>(t.input)]).producer;
      const int from = pl.stage_of_op[static_cast<std::size_t>(producer)];
      EXPECT_LT(from, t.stage) << "a send goes to a later stage (its gradient comes back)";
      // It occupies the channels of both sides.
      const auto& group = s.tasks.groups[static_cast<std::size_t>(t.group)];
      for (auto id : {producer, t.op}) {
        for (int d : p.strategy.ops[static_cast<std::size_t>(id)].devices) {
          EXPECT_TRUE(std::binary_search(group.begin(), group.end(), d));
        }
      }
      if (t.pass == sim::Pass::forward) {
        crossings.insert({from, t.stage});
      }
    }
    EXPECT_GT(sends, 0);
    // Every activation an op reads from another stage arrives by a send (a stage may receive none:
    // one that holds only the transpose of a tied embedding reads a weight, held where it is read).
    const auto& g = model(p.spec).graph;
    for (std::size_t op = 0; op < g.ops().size(); ++op) {
      for (const auto input : g.ops()[op].inputs) {
        const auto producer = g.tensor(input).producer;
        if (producer < 0) {
          continue;
        }
        const int from = pl.stage_of_op[static_cast<std::size_t>(producer)];
        const int to = pl.stage_of_op[op];
        if (from != to) {
          EXPECT_TRUE(crossings.count({from, to})) << g.ops()[op].name << " receives from stage " << from;
        }
      }
    }
  }
}

TEST(Simulate, TheTraceHasAProcessPerDeviceAndATrackPerStream) {
  const auto cluster = cluster::load_cluster("dgx-a100");
  const auto& p = *std::find_if(plans().begin(), plans().end(), [](const Planned& x) {
    return x.family == "pipeline" && x.spec.starts_with("zoo:gpt2");
  });
  const auto& g = model(p.spec).graph;
  const auto s = sim::simulate(g, cluster, p.strategy, {});
  google::protobuf::Struct trace;
  io::parse_json(sim::chrome_trace(g, s.tasks, s.result), "trace", trace);
  const auto& events = trace.fields().at("traceEvents").list_value().values();
  std::set<int> processes, with_memory;
  std::set<std::pair<int, int>> tracks;
  std::size_t complete = 0, critical = 0;
  for (const auto& v : events) {
    const auto& e = v.struct_value().fields();
    const auto ph = e.at("ph").string_value();
    const int pid = static_cast<int>(e.at("pid").number_value());
    if (ph == "M" && e.at("name").string_value() == "process_name") {
      processes.insert(pid);
    } else if (ph == "X") {
      ++complete;
      tracks.insert({pid, static_cast<int>(e.at("tid").number_value())});
      critical += e.at("args").struct_value().fields().at("critical path").bool_value() ? 1 : 0;
      EXPECT_GE(e.at("dur").number_value(), 0);
    } else if (ph == "C") {
      with_memory.insert(pid);
    }
  }
  std::size_t expected = 0, on_path = 0;
  std::set<std::pair<int, int>> streams; // (device, stream) with a task
  for (std::size_t i = 0; i < s.tasks.tasks.size(); ++i) {
    const auto& t = s.tasks.tasks[i];
    if (t.duration > 0) {
      expected += s.tasks.groups[static_cast<std::size_t>(t.group)].size();
      for (int d : s.tasks.groups[static_cast<std::size_t>(t.group)]) {
        streams.insert({d, static_cast<int>(t.stream)});
      }
    }
  }
  for (int t : s.result.critical_path) {
    const auto& task = s.tasks.tasks[static_cast<std::size_t>(t)];
    on_path += task.duration > 0 ? s.tasks.groups[static_cast<std::size_t>(task.group)].size() : 0;
  }
  EXPECT_EQ(complete, expected) << "one complete event per task and device";
  EXPECT_EQ(critical, on_path);
  EXPECT_EQ(processes.size(), static_cast<std::size_t>(s.prediction.devices_used));
  EXPECT_EQ(with_memory, processes);
  for (int d : processes) {
    EXPECT_TRUE(tracks.count({d, 0}) && tracks.count({d, 1})) << "device " << d << ": compute and communication";
  }
  EXPECT_EQ(tracks, streams) << "a track per stream a device uses";
  EXPECT_GT(tracks.size(), 2 * processes.size()) << "gradient buckets on a track of their own";
}

TEST(Simulate, TasksAreNamedAfterTheirOpAndTerm) {
  UniformPipeline u(2, 1, 2, strategy::Schedule::one_f_one_b);
  const auto tg = sim::build_task_graph(u.g, u.st, u.p, 2);
  EXPECT_EQ(sim::task_name(u.g, tg, 0), fmt::format("{}: forward compute, micro-batch 0", u.g.op(0).name));
}

TEST(Simulate, BadInputIsRefusedWithTheFieldAndTheReason) {
  UniformPipeline u(2, 2, 4, strategy::Schedule::gpipe);
  const auto build = [&](const strategy::Strategy& st, const strategy::Prediction& p, sim::Options o = {}) {
    return sim::build_task_graph(u.g, st, p, 2, o);
  };
  const auto message = [&](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message([&] { build(u.st, u.p, {.bucket_bytes = 0}); }), HasSubstr("'bucket_bytes'"));
  EXPECT_THAT(message([&] { build(u.st, u.p, {.bucket_bytes = std::nan("")}); }), HasSubstr("'bucket_bytes'"));
  auto fewer = u.p;
  fewer.ops.pop_back();
  EXPECT_THAT(message([&] { build(u.st, fewer); }), HasSubstr("the prediction has 3 ops, the model has 4"));
  auto backwards = u.st;
  backwards.pipeline->stage_of_op = {1, 1, 0, 0};
  EXPECT_THAT(message([&] { build(backwards, u.p); }), HasSubstr("later stage 1"));
  auto outside = u.st;
  outside.pipeline->stage_of_op[3] = 2;
  EXPECT_THAT(message([&] { build(outside, u.p); }), HasSubstr("stage 2 is not one of the pipeline's 2"));
  auto off_cluster = u.st;
  off_cluster.ops[0].devices = {5};
  EXPECT_THAT(message([&] { build(off_cluster, u.p); }), HasSubstr("device 5 is not in the cluster of 2 devices"));
  auto unknown = u.p;
  unknown.ops[1].cost.time.push_back({"teleportation", 1.0, ""});
  unknown.ops[1].term_input.push_back(-1);
  EXPECT_THAT(message([&] { build(u.st, unknown); }), HasSubstr("'teleportation' has no place"));
  auto negative = u.p;
  negative.ops[1].cost.time[0].value = -1;
  EXPECT_THAT(message([&] { build(u.st, negative); }), HasSubstr("must be finite, >= 0"));
  auto untagged = u.p;
  untagged.ops[2].term_input.clear();
  EXPECT_THAT(message([&] { build(u.st, untagged); }), HasSubstr("not made by evaluate()"));
  auto tg = build(u.st, u.p);
  tg.links = {"node 0 NICs"};
  tg.group_links.assign(tg.groups.size(), {});
  tg.group_links[0] = {{0, 0.0}};
  EXPECT_THAT(message([&] { sim::simulate(tg); }),
              HasSubstr("loads link 'node 0 NICs' by 0; a share must be in (0, 1]"));
  tg.group_links[0] = {{3, 0.5}};
  EXPECT_THAT(message([&] { sim::simulate(tg); }), HasSubstr("device group 0 loads link 3, which does not exist"));
  tg.group_links.pop_back();
  EXPECT_THAT(message([&] { sim::simulate(tg); }), HasSubstr("shared-link loads for"));
  tg.group_links.clear();
  tg.tasks[1].stream = static_cast<sim::Stream>(7);
  EXPECT_THAT(message([&] { sim::simulate(tg); }), HasSubstr("task 1: stream 7 is not one of the 3"));
  EXPECT_THAT(message([&] { sim::share_links(tg, cluster::load_cluster("dgx-a100")); }),
              HasSubstr("a task graph of 2 devices on dgx-a100, which has 8"));
}

} // namespace
} // namespace partita
