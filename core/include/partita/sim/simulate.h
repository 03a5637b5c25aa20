#pragma once

// The event simulator: runs a TaskGraph on a compute stream and two communication
// channels per device (Stream), transfers that overlap sharing their nodes' NICs and a mesh's host link (share_links),
// and gives the iteration as a timeline: its time, where each device spent it, and the tasks that make it up.

#include "partita/cluster/cluster.h"
#include "partita/cost/setup.h"
#include "partita/graph/graph.h"
#include "partita/sim/task_graph.h"
#include "partita/strategy/strategy.h"

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

namespace partita::sim {

struct Span {
  double start = 0, finish = 0; // seconds from the start of the iteration
};

struct DeviceTime {
  bool used = false;
  double busy = 0;                  // its compute stream runs kernels
  double communication = 0;         // its communication channel is busy
  double exposed_communication = 0; // the channel is busy and the compute stream is not
  double idle = 0;                  // neither: waiting for another device (pipeline bubbles included)
  double peak_memory = 0;           // bytes: resident + the most activations alive at once
  double peak_activations = 0;      // bytes of activations alive at the peak
  double peak_at = 0;               // seconds: when the peak is first reached
};

struct Result {
  double iteration_time = 0;
  std::vector<Span> schedule;      // per task
  std::vector<DeviceTime> devices; // per device of the cluster
  std::vector<int> critical_path;  // tasks, first to last, each starting as the one before ends
};

// Starts every task as soon as the tasks it comes after have finished and its resources are free:
// the stream or channel of each of its devices (and, without overlap, its pipeline stage), served
// in the order tasks become ready; tasks a stream runs in program order say so in `after`. A
// transfer on shared links (TaskGraph::group_links) ends when its work is done at the rate it gets:
// 1 / the load of its busiest link while that is above 1 (fluid sharing), so its end moves as
// other transfers start and end. Throws partita::Error naming the task or group of a malformed
// graph.
Result simulate(const TaskGraph& tasks);

// The memory of `device` over the iteration, as steps: (time, bytes held from then on), the
// first at 0 with its resident bytes.
std::vector<std::pair<double, double>> memory_timeline(const TaskGraph& tasks, const Result& result, int device);

struct Simulation {
  strategy::Prediction prediction; // evaluate()'s, whose terms the tasks take their durations from
  TaskGraph tasks;
  Result result;
};

// The prediction of a plan as the simulator runs it, the figure `plan`, `compare`, `run` and the GUI
// show: `prediction` (evaluate()'s, for `strategy` on `cluster`) gets the simulated iteration as
// its iteration_time (additive_time and `iteration` keep the terms added up), the throughput that
// follows, and the split of the critical path into compute kernels and the rest. Returns the
// simulation, or nothing where the iteration has more than `max_tasks` tasks: the prediction then
// stays the sum of its terms, and a note says so.
inline constexpr std::size_t max_predicted_tasks = 500'000;
std::optional<Simulation> simulate_prediction(const graph::Graph& g, const cluster::Cluster& cluster,
                                              const strategy::Strategy& strategy, strategy::Prediction& prediction,
                                              const Options& options = {}, std::size_t max_tasks = max_predicted_tasks);

// evaluate(), build_task_graph() and simulate() in one.
Simulation simulate(const graph::Graph& g, const cluster::Cluster& cluster, const strategy::Strategy& strategy,
                    const cost::TrainingSetup& setup, const Options& options = {});

} // namespace partita::sim
