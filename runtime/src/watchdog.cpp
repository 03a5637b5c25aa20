#include "watchdog.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <charconv>
#include <chrono>

namespace partita::runtime {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

} // namespace

Watchdog::Watchdog(double timeout_seconds, std::function<void(const Heartbeat&)> on_timeout)
    : m_timeout(timeout_seconds), m_on_timeout(std::move(on_timeout)), m_last_time(now_seconds()) {
  if (m_timeout > 0) {
    m_thread = std::thread([this] { loop(); });
  }
}

Watchdog::~Watchdog() {
  {
    const std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  if (m_thread.joinable()) {
    m_thread.join();
  }
}

void Watchdog::beat(graph::OpId op, Phase phase, int iteration) {
  const std::lock_guard lock(m_mutex);
  m_last.op = op;
  m_last.phase = phase;
  m_last.iteration = iteration;
  m_last_time = now_seconds();
}

void Watchdog::set_activity(std::string activity) {
  const std::lock_guard lock(m_mutex);
  m_last.activity = std::move(activity);
  m_last_time = now_seconds();
}

void Watchdog::loop() {
  std::unique_lock lock(m_mutex);
  while (!m_stop) {
    const double idle = now_seconds() - m_last_time;
    if (idle >= m_timeout) {
      Heartbeat last = m_last;
      last.idle_seconds = idle;
      lock.unlock();
      m_on_timeout(last); // does not return when it ends the process
      return;
    }
    m_wake.wait_for(lock, std::chrono::duration<double>(std::min(m_timeout - idle, 0.1) + 1e-3));
  }
}

Fault parse_fault(std::string_view spec) {
  const auto bad = [&](std::string_view why) {
    return Error(fmt::format("--inject-fault '{}': {} (expected fail:RANK:OP[:ITERATION] or hang:RANK:OP[:ITERATION])",
                             spec, why));
  };
  const auto first = spec.find(':');
  const auto second = first == std::string_view::npos ? first : spec.find(':', first + 1);
  if (second == std::string_view::npos) {
    throw bad("three fields separated by ':'");
  }
  Fault f;
  const auto kind = spec.substr(0, first);
  if (kind == "fail") {
    f.kind = Fault::Kind::fail;
  } else if (kind == "hang") {
    f.kind = Fault::Kind::hang;
  } else {
    throw bad(fmt::format("unknown kind '{}'", kind));
  }
  const auto rank = spec.substr(first + 1, second - first - 1);
  const auto [end, ec] = std::from_chars(rank.data(), rank.data() + rank.size(), f.rank);
  if (ec != std::errc{} || end != rank.data() + rank.size() || f.rank < 0) {
    throw bad(fmt::format("rank '{}' is not a non-negative integer", rank));
  }
  // Op names may hold ':'; a last field of digits is the iteration.
  auto rest = spec.substr(second + 1);
  if (const auto last = rest.rfind(':'); last != std::string_view::npos) {
    const auto it = rest.substr(last + 1);
    int iteration = 0;
    const auto [e, c] = std::from_chars(it.data(), it.data() + it.size(), iteration);
    if (c == std::errc{} && e == it.data() + it.size() && !it.empty()) {
      f.iteration = iteration;
      rest = rest.substr(0, last);
    }
  }
  f.op = std::string(rest);
  if (f.op.empty()) {
    throw bad("no op name");
  }
  return f;
}

void inject(const Fault& fault, const graph::Graph& g, int rank, graph::OpId op, Phase phase, int timed_iteration) {
  if (rank != fault.rank || op < 0 || phase != Phase::forward || timed_iteration != fault.iteration ||
      g.op(op).name != fault.op) {
    return;
  }
  if (fault.kind == Fault::Kind::fail) {
    throw Error(
        fmt::format("injected failure in the forward of op '{}', timed iteration {}", fault.op, timed_iteration));
  }
  for (;;) {
    std::this_thread::sleep_for(std::chrono::seconds(1)); // an injected hang: only the watchdog ends it
  }
}

} // namespace partita::runtime
