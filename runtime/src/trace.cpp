#include "trace.h"

#include "collectives.h"

#include "partita/graph/statistics.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <map>

namespace partita::runtime {

std::string_view phase_name(Phase p) {
  switch (p) {
  case Phase::forward: return "forward";
  case Phase::forward_reduce: return "forward partial-sum reduce";
  case Phase::forward_redistribution: return "forward redistribution";
  case Phase::backward: return "backward";
  case Phase::backward_reduce: return "input-gradient reduce";
  case Phase::backward_redistribution: return "backward redistribution";
  case Phase::gradient_sync: return "weight-gradient sync";
  case Phase::optimizer: return "optimizer";
  case Phase::iteration: return "iteration";
  case Phase::pipeline_send: return "pipeline send";
  case Phase::pipeline_receive: return "pipeline receive (wait)";
  case Phase::parameter_gather: return "parameter all-gather (ZeRO-3)";
  }
  return "?";
}

void Recorder::add(int rank, graph::OpId op, Phase phase, double t0, double t1, double bytes, bool stand_in) {
  if (m_on) {
    const std::lock_guard lock(m_mutex);
    m_records.push_back({rank, m_iteration, op, phase, t0 - m_origin, t1 - m_origin, bytes, stand_in});
  }
  if (m_hook) {
    m_hook(op, phase);
  }
}

std::vector<Record> Recorder::copy() const {
  const std::lock_guard lock(m_mutex);
  return m_records;
}

std::vector<Record> gather_records(const std::vector<Record>& mine, MPI_Comm comm) {
  constexpr int fields = 8;
  std::vector<double> flat;
  flat.reserve(mine.size() * fields);
  for (const auto& r : mine) {
    flat.insert(flat.end(), {static_cast<double>(r.rank), static_cast<double>(r.iteration), static_cast<double>(r.op),
                             static_cast<double>(r.phase), r.start, r.end, r.bytes, r.stand_in ? 1.0 : 0.0});
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int count = static_cast<int>(flat.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  check_mpi(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm), "MPI_Gather");
  for (std::size_t i = 1; i < counts.size(); ++i) {
    displs[i] = displs[i - 1] + counts[i - 1];
  }
  std::vector<double> all(rank == 0 ? static_cast<std::size_t>(displs.back() + counts.back()) : 0);
  check_mpi(MPI_Gatherv(flat.data(), count, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE, 0, comm),
            "MPI_Gatherv");
  std::vector<Record> out;
  for (std::size_t i = 0; i + fields <= all.size(); i += fields) {
    out.push_back({static_cast<int>(all[i]), static_cast<int>(all[i + 1]), static_cast<graph::OpId>(all[i + 2]),
                   static_cast<Phase>(static_cast<int>(all[i + 3])), all[i + 4], all[i + 5], all[i + 6],
                   all[i + 7] != 0.0});
  }
  return out;
}

std::string chrome_trace_json(const graph::Graph& g, const std::vector<Record>& all) {
  nlohmann::json events = nlohmann::json::array();
  std::map<int, bool> ranks;
  for (const auto& r : all) {
    ranks[r.rank] = true;
    nlohmann::json e{{"name", r.op >= 0 ? g.op(r.op).name : fmt::format("iteration {}", r.iteration)},
                     {"cat", phase_name(r.phase)},
                     {"ph", "X"},
                     {"ts", r.start * 1e6},
                     {"dur", (r.end - r.start) * 1e6},
                     {"pid", r.rank},
                     {"tid", static_cast<int>(r.phase)},
                     {"args", {{"iteration", r.iteration}, {"phase", phase_name(r.phase)}}}};
    if (r.op >= 0) {
      e["args"]["type"] = g.op(r.op).type;
    }
    if (r.bytes > 0) {
      e["args"]["bytes_received"] = r.bytes;
    }
    if (r.stand_in) {
      e["args"]["kernel"] = "memory-bound stand-in (no kernel for this op)";
    }
    events.push_back(std::move(e));
  }
  for (const auto& [rank, unused] : ranks) {
    events.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", fmt::format("rank {}", rank)}}}});
    for (int p = 0; p < phase_count; ++p) {
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", rank},
                        {"tid", p},
                        {"args", {{"name", phase_name(static_cast<Phase>(p))}}}});
    }
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump(1) + "\n";
}

Summary summarize(const graph::Graph& g, const std::vector<Record>& all, int iterations) {
  // Per (op, phase, iteration): each rank's total, then the slowest rank; then the median over
  // iterations (an iteration without the phase counts 0).
  std::map<std::tuple<graph::OpId, int, int, int>, double> per_rank;
  std::map<std::tuple<graph::OpId, int, int>, double> bytes_per_rank; // (op, iteration, rank)
  std::map<int, double> iteration_time;                               // slowest rank per iteration
  Summary out;
  out.ops.resize(g.ops().size());
  out.iterations = iterations;
  for (const auto& r : all) {
    const double d = r.end - r.start;
    if (r.phase == Phase::iteration) {
      iteration_time[r.iteration] = std::max(iteration_time[r.iteration], d);
      continue;
    }
    if (r.op < 0 || static_cast<std::size_t>(r.op) >= out.ops.size()) {
      continue;
    }
    per_rank[std::make_tuple(r.op, static_cast<int>(r.phase), r.iteration, r.rank)] += d;
    bytes_per_rank[std::make_tuple(r.op, r.iteration, r.rank)] += r.bytes;
    out.ops[static_cast<std::size_t>(r.op)].stand_in = out.ops[static_cast<std::size_t>(r.op)].stand_in || r.stand_in;
  }
  // A collective every rank of its group enters (a reduce, a gradient sync) ends on all of them
  // together: the rank that came last spent only the transfer in it, the others waited for it as
  // well. Its time is the fastest rank's; the slowest's surplus is waiting, kept apart.
  std::map<std::tuple<graph::OpId, int, int>, std::pair<double, double>> extremes; // slowest, fastest
  for (const auto& [key, seconds] : per_rank) {
    auto [it, fresh] =
        extremes.try_emplace(std::make_tuple(std::get<0>(key), std::get<1>(key), std::get<2>(key)), seconds, seconds);
    if (!fresh) {
      it->second.first = std::max(it->second.first, seconds);
      it->second.second = std::min(it->second.second, seconds);
    }
  }
  // (op, phase): per iteration the phase's time and the wait beside it.
  std::map<std::pair<graph::OpId, int>, std::pair<std::vector<double>, std::vector<double>>> by_iteration;
  for (const auto& [key, times] : extremes) {
    const auto phase = static_cast<Phase>(std::get<1>(key));
    const bool collective =
        phase == Phase::forward_reduce || phase == Phase::backward_reduce || phase == Phase::gradient_sync;
    auto& [seconds, waits] = by_iteration[{std::get<0>(key), std::get<1>(key)}];
    seconds.push_back(collective ? times.second : times.first);
    waits.push_back(collective ? times.first - times.second : 0.0);
  }
  for (auto& [key, series] : by_iteration) {
    auto& [seconds, waits] = series;
    const auto n = static_cast<std::size_t>(std::max(iterations, static_cast<int>(seconds.size())));
    seconds.resize(n, 0.0);
    waits.resize(n, 0.0);
    auto& op = out.ops[static_cast<std::size_t>(key.first)];
    op.seconds[static_cast<std::size_t>(key.second)] = median(seconds);
    op.collective_wait += median(waits);
  }
  std::map<std::pair<graph::OpId, int>, double> most_bytes; // (op, iteration): the rank receiving most
  for (const auto& [key, bytes] : bytes_per_rank) {
    auto& b = most_bytes[{std::get<0>(key), std::get<1>(key)}];
    b = std::max(b, bytes);
  }
  for (const auto& [key, bytes] : most_bytes) {
    out.ops[static_cast<std::size_t>(key.first)].bytes += bytes / std::max(iterations, 1);
  }
  if (!iteration_time.empty()) {
    double sum = 0;
    out.iteration_min = std::numeric_limits<double>::max();
    for (const auto& [i, t] : iteration_time) {
      sum += t;
      out.iteration_each.push_back(t);
      out.iteration_min = std::min(out.iteration_min, t);
      out.iteration_max = std::max(out.iteration_max, t);
    }
    out.iteration_mean = sum / static_cast<double>(iteration_time.size());
    out.iteration_median = median(out.iteration_each);
    out.iterations = static_cast<int>(iteration_time.size());
  }
  return out;
}

namespace {

double phase_seconds(const Summary::OpTimes& t, Phase p) {
  return t.seconds[static_cast<std::size_t>(p)];
}

} // namespace

std::string text_summary(const graph::Graph& g, const Summary& summary) {
  bool pipeline = false;
  for (const auto& t : summary.ops) {
    pipeline = pipeline || phase_seconds(t, Phase::pipeline_send) + phase_seconds(t, Phase::pipeline_receive) > 0;
  }
  std::string out = fmt::format("{:<4} {:<32} {:<18} {:>11} {:>11} {:>11} {:>11} {:>11}{}\n", "#", "op", "type",
                                "fwd ms", "fwd comm", "bwd ms", "bwd comm", "grad sync",
                                pipeline ? fmt::format(" {:>11} {:>11}", "p2p send", "p2p wait") : "");
  for (std::size_t id = 0; id < g.ops().size(); ++id) {
    const auto op = static_cast<graph::OpId>(id);
    const auto& t = summary.ops[id];
    const auto get = [&](Phase p) { return phase_seconds(t, p) * 1e3; };
    out += fmt::format(
        "{:<4} {:<32} {:<18} {:>11.4f} {:>11.4f} {:>11.4f} {:>11.4f} {:>11.4f}{}{}\n", id, g.op(op).name.substr(0, 32),
        g.op(op).type, get(Phase::forward),
        get(Phase::forward_reduce) + get(Phase::forward_redistribution) + get(Phase::parameter_gather),
        get(Phase::backward), get(Phase::backward_reduce) + get(Phase::backward_redistribution),
        get(Phase::gradient_sync),
        pipeline ? fmt::format(" {:>11.4f} {:>11.4f}", get(Phase::pipeline_send), get(Phase::pipeline_receive)) : "",
        t.stand_in ? "  (memory-bound stand-in)" : "");
  }
  if (summary.iteration_mean > 0) {
    out += fmt::format("iteration time over {} timed iterations (slowest rank): median {:.4f} ms, mean {:.4f} ms, "
                       "min {:.4f} ms, max {:.4f} ms\n",
                       summary.iterations, summary.iteration_median * 1e3, summary.iteration_mean * 1e3,
                       summary.iteration_min * 1e3, summary.iteration_max * 1e3);
  }
  return out;
}

namespace {

void add_events(const std::vector<Record>& records, proto::RunResult& out) {
  for (const auto& r : records) {
    auto& e = *out.add_events();
    e.set_rank(r.rank);
    e.set_iteration(r.iteration);
    e.set_op(r.op);
    e.set_phase(std::string(phase_name(r.phase)));
    e.set_start(r.start);
    e.set_end(r.end);
    e.set_bytes(r.bytes);
    e.set_stand_in(r.stand_in);
  }
}

proto::RunResult header(const RunInfo& info) {
  proto::RunResult out;
  out.set_model(info.model);
  out.set_family(info.family);
  out.set_ranks(info.ranks);
  out.set_backend(info.backend);
  out.set_threads_per_rank(info.threads);
  out.set_predicted_iteration_seconds(info.predicted_iteration_seconds);
  return out;
}

} // namespace

proto::RunResult run_result(const graph::Graph& g, const Summary& summary, const std::vector<Record>& all,
                            const RunInfo& info, const std::vector<proto::RankMemory>& memory) {
  proto::RunResult out = header(info);
  out.set_timed_iterations(summary.iterations);
  out.set_statistic("per op and phase: median over timed iterations of the slowest rank");
  auto& it = *out.mutable_iteration_seconds();
  it.set_median(summary.iteration_median);
  it.set_mean(summary.iteration_mean);
  it.set_min(summary.iteration_min);
  it.set_max(summary.iteration_max);
  for (const double t : summary.iteration_each) {
    it.add_each(t);
  }
  for (std::size_t id = 0; id < g.ops().size(); ++id) {
    const auto& t = summary.ops[id];
    const auto& op = g.op(static_cast<graph::OpId>(id));
    auto& m = *out.add_ops();
    m.set_id(static_cast<int>(id));
    m.set_name(op.name);
    m.set_type(op.type);
    m.set_forward_seconds(phase_seconds(t, Phase::forward));
    m.set_backward_seconds(phase_seconds(t, Phase::backward));
    // ZeRO-3's parameter gathers (before the forward and the backward pass) count with the forward
    // communication: RunResult has no field of their own; the trace names them.
    m.set_forward_communication_seconds(phase_seconds(t, Phase::forward_reduce) +
                                        phase_seconds(t, Phase::forward_redistribution) +
                                        phase_seconds(t, Phase::parameter_gather));
    m.set_backward_communication_seconds(phase_seconds(t, Phase::backward_reduce) +
                                         phase_seconds(t, Phase::backward_redistribution));
    m.set_gradient_sync_seconds(phase_seconds(t, Phase::gradient_sync));
    m.set_pipeline_send_seconds(phase_seconds(t, Phase::pipeline_send));
    m.set_pipeline_wait_seconds(phase_seconds(t, Phase::pipeline_receive));
    m.set_collective_wait_seconds(t.collective_wait);
    m.set_optimizer_seconds(phase_seconds(t, Phase::optimizer));
    m.set_stand_in(t.stand_in);
    m.set_bytes_received(t.bytes);
  }
  for (const auto& m : memory) {
    *out.add_memory() = m;
  }
  add_events(all, out);
  out.set_complete(true);
  return out;
}

proto::RunResult partial_result(const std::vector<Record>& mine, const RunInfo& info, int rank,
                                const std::string& failure) {
  proto::RunResult out = header(info);
  out.set_statistic(fmt::format("partial: the records of rank {} only, up to its failure", rank));
  std::map<int, bool> iterations;
  for (const auto& r : mine) {
    if (r.phase == Phase::iteration) {
      iterations[r.iteration] = true;
    }
  }
  out.set_timed_iterations(static_cast<int>(iterations.size()));
  add_events(mine, out);
  out.set_complete(false);
  out.set_failure(failure);
  return out;
}

} // namespace partita::runtime
