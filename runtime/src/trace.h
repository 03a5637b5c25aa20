#pragma once

// What a run measured: per rank, per op, per phase, an interval of MPI_Wtime (relative to the
// rank's start of timed iterations). Rank 0 gathers every rank's records and writes a Chrome
// Trace Event JSON (Perfetto, chrome://tracing) and a text summary.

#include "partita/graph/graph.h"
#include "partita/proto/partita.pb.h"

#include <mpi.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace partita::runtime {

enum class Phase : std::uint8_t {
  forward,
  forward_reduce,         // partial sums of a split reduction dim
  forward_redistribution, // producer layout -> consumer layout
  backward,
  backward_reduce,         // partial input gradients of a replicated input
  backward_redistribution, // consumer layout -> producer layout, gradients added
  gradient_sync,           // weight gradients over their replica groups
  optimizer,
  iteration,
  pipeline_send,    // a stage posts an activation (forward) or its gradient (backward) to another stage
  pipeline_receive, // a stage waits for one from another stage: transfer and pipeline bubble
  parameter_gather, // ZeRO-3: a weight's slices all-gathered before the op's forward or backward pass
};
inline constexpr int phase_count = 12;
std::string_view phase_name(Phase p);

struct Record {
  int rank = 0;
  int iteration = 0;
  graph::OpId op = -1; // -1 for a whole iteration
  Phase phase = Phase::forward;
  double start = 0, end = 0; // seconds since the rank's time origin
  double bytes = 0;          // moved by a collective or redistribution (received by this rank)
  bool stand_in = false;     // a memory-bound stand-in ran instead of a kernel
};

// Every step of a rank (enabled or not) is reported to the step hook: the watchdog's heartbeat
// and fault injection (watchdog.h) hang there.
using StepHook = std::function<void(graph::OpId op, Phase phase)>;

class Recorder {
public:
  void set_origin(double t) { m_origin = t; }
  void set_iteration(int i) { m_iteration = i; }
  int iteration() const { return m_iteration; }
  void enable(bool on) { m_on = on; }
  bool enabled() const { return m_on; }
  void set_step_hook(StepHook hook) { m_hook = std::move(hook); }
  void add(int rank, graph::OpId op, Phase phase, double t0, double t1, double bytes = 0, bool stand_in = false);
  const std::vector<Record>& records() const { return m_records; }
  // A copy taken under the recorder's lock: safe from the watchdog's thread.
  std::vector<Record> copy() const;

private:
  std::vector<Record> m_records;
  mutable std::mutex m_mutex;
  StepHook m_hook;
  double m_origin = 0;
  int m_iteration = 0;
  bool m_on = false;
};

// Every rank's records, on rank 0 (empty elsewhere). Collective.
std::vector<Record> gather_records(const std::vector<Record>& mine, MPI_Comm comm);

std::string chrome_trace_json(const graph::Graph& g, const std::vector<Record>& all);

// What the timed iterations measured: per op and phase the median over iterations of the slowest
// rank's time (of the fastest rank for a collective, the rest being the wait for the last rank) (one iteration the OS
// took the core away from moves a mean, not a median), and the iteration time (slowest rank) median/mean/min/max.
struct Summary {
  struct OpTimes {
    std::array<double, phase_count> seconds{}; // by Phase
    double bytes = 0;                          // received per iteration by the rank receiving most
    double collective_wait = 0;                // in reduces and gradient syncs, waiting for the group's last rank
    bool stand_in = false;
  };
  std::vector<OpTimes> ops; // by op id
  int iterations = 0;
  double iteration_median = 0, iteration_mean = 0, iteration_min = 0, iteration_max = 0;
  std::vector<double> iteration_each; // slowest rank, per timed iteration
};
Summary summarize(const graph::Graph& g, const std::vector<Record>& all, int iterations);

std::string text_summary(const graph::Graph& g, const Summary& summary);

// What the run measured, in the schema's form (partita.proto RunResult): the summary, every
// record as a TraceEvent, and each rank's memory. `memory` is by rank.
struct RunInfo {
  std::string model, family, backend;
  int ranks = 1, threads = 1;
  double predicted_iteration_seconds = 0;
};
proto::RunResult run_result(const graph::Graph& g, const Summary& summary, const std::vector<Record>& all,
                            const RunInfo& info, const std::vector<proto::RankMemory>& memory);

// What one rank recorded before it failed: its own records and the reason (complete = false).
proto::RunResult partial_result(const std::vector<Record>& mine, const RunInfo& info, int rank,
                                const std::string& failure);

} // namespace partita::runtime
