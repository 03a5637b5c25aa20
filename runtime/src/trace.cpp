#include "trace.h"

#include "collectives.h"

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
  }
  return "?";
}

void Recorder::add(int rank, graph::OpId op, Phase phase, double t0, double t1, double bytes, bool stand_in) {
  if (m_on) {
    m_records.push_back({rank, m_iteration, op, phase, t0 - m_origin, t1 - m_origin, bytes, stand_in});
  }
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
  // Per (op, phase, iteration): each rank's total, then the slowest rank; then the mean.
  std::map<std::tuple<graph::OpId, int, int, int>, double> per_rank;
  std::map<int, double> iteration_time; // slowest rank per iteration
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
    out.ops[static_cast<std::size_t>(r.op)].stand_in = out.ops[static_cast<std::size_t>(r.op)].stand_in || r.stand_in;
  }
  std::map<std::tuple<graph::OpId, int, int>, double> slowest;
  for (const auto& [key, seconds] : per_rank) {
    auto& s = slowest[std::make_tuple(std::get<0>(key), std::get<1>(key), std::get<2>(key))];
    s = std::max(s, seconds);
  }
  for (const auto& [key, seconds] : slowest) {
    out.ops[static_cast<std::size_t>(std::get<0>(key))].seconds[static_cast<std::size_t>(std::get<1>(key))] +=
        seconds / std::max(iterations, 1);
  }
  if (!iteration_time.empty()) {
    double sum = 0;
    out.iteration_min = std::numeric_limits<double>::max();
    for (const auto& [i, t] : iteration_time) {
      sum += t;
      out.iteration_min = std::min(out.iteration_min, t);
      out.iteration_max = std::max(out.iteration_max, t);
    }
    out.iteration_mean = sum / static_cast<double>(iteration_time.size());
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
        g.op(op).type, get(Phase::forward), get(Phase::forward_reduce) + get(Phase::forward_redistribution),
        get(Phase::backward), get(Phase::backward_reduce) + get(Phase::backward_redistribution),
        get(Phase::gradient_sync),
        pipeline ? fmt::format(" {:>11.4f} {:>11.4f}", get(Phase::pipeline_send), get(Phase::pipeline_receive)) : "",
        t.stand_in ? "  (memory-bound stand-in)" : "");
  }
  if (summary.iteration_mean > 0) {
    out += fmt::format("iteration time over {} timed iterations (slowest rank): mean {:.4f} ms, min {:.4f} ms, "
                       "max {:.4f} ms\n",
                       summary.iterations, summary.iteration_mean * 1e3, summary.iteration_min * 1e3,
                       summary.iteration_max * 1e3);
  }
  return out;
}

std::string measurements_json(const graph::Graph& g, const Summary& summary, const std::string& model,
                              const std::string& family, int ranks) {
  nlohmann::json ops = nlohmann::json::array();
  for (std::size_t id = 0; id < g.ops().size(); ++id) {
    const auto& t = summary.ops[id];
    const auto& op = g.op(static_cast<graph::OpId>(id));
    ops.push_back({{"id", id},
                   {"name", op.name},
                   {"type", op.type},
                   {"forward_seconds", phase_seconds(t, Phase::forward)},
                   {"backward_seconds", phase_seconds(t, Phase::backward)},
                   {"forward_communication_seconds",
                    phase_seconds(t, Phase::forward_reduce) + phase_seconds(t, Phase::forward_redistribution)},
                   {"backward_communication_seconds",
                    phase_seconds(t, Phase::backward_reduce) + phase_seconds(t, Phase::backward_redistribution)},
                   {"gradient_sync_seconds", phase_seconds(t, Phase::gradient_sync)},
                   {"pipeline_send_seconds", phase_seconds(t, Phase::pipeline_send)},
                   {"pipeline_wait_seconds", phase_seconds(t, Phase::pipeline_receive)},
                   {"optimizer_seconds", phase_seconds(t, Phase::optimizer)},
                   {"stand_in", t.stand_in}});
  }
  const nlohmann::json doc{
      {"model", model},
      {"family", family},
      {"ranks", ranks},
      {"timed_iterations", summary.iterations},
      {"statistic", "per op and phase: mean over timed iterations of the slowest rank"},
      {"iteration_seconds",
       {{"mean", summary.iteration_mean}, {"min", summary.iteration_min}, {"max", summary.iteration_max}}},
      {"ops", ops}};
  return doc.dump(1) + "\n";
}

} // namespace partita::runtime
