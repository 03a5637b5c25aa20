#pragma once

// A rank that stops making progress ends the whole job rather than hanging it (issue 5,
// robustness). Every step the Recorder reports is a heartbeat; after `timeout` seconds without
// one, the watchdog's thread calls `on_timeout` with the last completed step, which writes the
// rank's partial results and ends the process (mpirun then ends the other ranks).
//
// Fault injection, for the tests of exactly this: "fail:RANK:OP[:ITERATION]" throws in the forward
// of op OP on rank RANK in timed iteration ITERATION (default 0); "hang:..." blocks there forever.

#include "trace.h"

#include "partita/graph/graph.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace partita::runtime {

struct Heartbeat {
  graph::OpId op = -1; // -1: no step completed yet
  Phase phase = Phase::forward;
  int iteration = 0;
  std::string activity; // what the rank was doing: "start-up", "verify", "timed iterations"
  double idle_seconds = 0;
};

class Watchdog {
public:
  // timeout_seconds <= 0 disables the watchdog.
  Watchdog(double timeout_seconds, std::function<void(const Heartbeat&)> on_timeout);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void beat(graph::OpId op, Phase phase, int iteration);
  void set_activity(std::string activity);

private:
  void loop();

  double m_timeout;
  std::function<void(const Heartbeat&)> m_on_timeout;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stop = false;
  Heartbeat m_last;
  double m_last_time = 0;
  std::thread m_thread;
};

struct Fault {
  enum class Kind : std::uint8_t { fail, hang };
  Kind kind = Kind::fail;
  int rank = 0;
  std::string op;
  int iteration = 0; // timed iteration
};
// Parses "fail:RANK:OP[:ITERATION]" or "hang:RANK:OP[:ITERATION]"; throws partita::Error naming what
// is wrong.
Fault parse_fault(std::string_view spec);
// Called at every step: throws or blocks when the step is the fault's (the forward of its op on its
// rank in its timed iteration). `timed_iteration` is -1 outside the timed iterations.
void inject(const Fault& fault, const graph::Graph& g, int rank, graph::OpId op, Phase phase, int timed_iteration);

} // namespace partita::runtime
