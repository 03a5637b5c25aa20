// The bapipe family: the exact partition at every stage count the devices allow, each candidate
// predicted by evaluate(), ranked in the end by the event simulator (the iteration time `partita
// plan` prints), the fastest that fits kept, and an explanation naming the bottleneck stage and
// what binds it.

#include "partita/search/bapipe.h"

#include "partita/graph/error.h"
#include "partita/sim/simulate.h"
#include "search/simulated_ranking.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>

namespace partita::search::bapipe {

namespace {

std::string gib(double bytes) {
  return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}
std::string count(int n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}
std::string ms(double seconds) {
  return seconds >= 1 ? fmt::format("{:.0f} ms", seconds * 1e3) : fmt::format("{:.4g} ms", seconds * 1e3);
}

struct Candidate {
  Shape shape;
  Tables tables;
  Partition partition;
  strategy::Strategy strategy;
  strategy::Prediction prediction;
  // The lower bound on its simulated iteration (rank_by_simulation), and whether it still holds its
  // plan: one whose bound exceeds the fastest terms added up found keeps only its shape, partition
  // and totals, for the explanation (a 175B plan on 1,024 devices with its per-op prediction is
  // tens of MiB).
  double bound = 0;
  bool whole = true;
};

// The file comment's lower bound: the terms added up less all the simulator can overlap or
// shorten (the gradient sync, the moves per stage, the bubble); the terms added up themselves
// where the plan is too large to simulate.
bool simulatable(const graph::Graph& g, const Shape& shape) {
  // A forward and a backward task per op and micro-batch at least: larger ones are not built.
  return 2 * g.ops().size() * static_cast<std::size_t>(shape.micro_batches) <= sim::max_predicted_tasks;
}
double simulated_bound(const graph::Graph& g, const Shape& shape, const strategy::Prediction& p) {
  return simulatable(g, shape) ? detail::simulated_lower_bound(p, shape.stages) : p.iteration_time;
}

void lighten(Candidate& c) {
  c.whole = false;
  c.tables = {};
  c.strategy = {};
  std::vector<strategy::OpPrediction>().swap(c.prediction.ops);
  std::vector<strategy::DeviceMemory>().swap(c.prediction.memory);
}

// A fitted candidate's iteration (simulated where it was) and its terms added up in three parts:
// the bubble, the steady state (micro-batches x the slowest stage) and the once-per-iteration
// gradient sync and optimizer step after them.
struct Summary {
  int stages = 0, micro = 0;
  double iteration = 0, bubble = 0, steady = 0, sync = 0;
};

Summary summarize(const Candidate& c) {
  Summary s{c.shape.stages, c.shape.micro_batches, c.prediction.iteration_time, 0, 0, 0};
  for (const auto& t : c.prediction.iteration) {
    if (t.name == "pipeline bubble") {
      s.bubble = t.value;
    }
  }
  for (const auto& st : c.partition.stages) {
    s.sync = std::max(s.sync, st.sync);
  }
  // The parts are the terms added up (a simulation overlaps them): the steady state is what is left
  // of their sum.
  const double added = c.prediction.simulated ? c.prediction.additive_time : c.prediction.iteration_time;
  s.steady = added - s.bubble - s.sync;
  return s;
}

// Why the runner-up is slower: the part of the iteration it loses most on.
std::string runner_up_text(const Summary& best, const Summary& next) {
  const double bubble = next.bubble - best.bubble, steady = next.steady - best.steady, sync = next.sync - best.sync;
  std::string why;
  if (bubble >= steady && bubble >= sync) {
    why = fmt::format("its bubble, {} against {}", ms(next.bubble), ms(best.bubble));
  } else if (steady >= sync) {
    why = fmt::format("its steady state ({} x its slowest stage), {} against {}",
                      count(next.micro, "micro-batch", "micro-batches"), ms(next.steady), ms(best.steady));
  } else {
    why = fmt::format("its gradient sync and optimizer step, {} against {}", ms(next.sync), ms(best.sync));
  }
  return fmt::format(" Runner-up: {} x {}, {} (+{:.1f}%), losing most on {}.", count(next.stages, "stage", "stages"),
                     count(next.micro, "micro-batch", "micro-batches"), ms(next.iteration),
                     100 * (next.iteration / best.iteration - 1), why);
}

// What keeps the bottleneck where it is: memory when the same stages without a memory limit
// would balance better; else the sends into the stage when they take most of it; else one op
// that no cut can split; else the granularity of the ops (compute).
std::string binding_constraint(const Candidate& c, const graph::Graph& g, int slowest) {
  Problem free = c.tables.problem;
  for (auto& sp : free.stages) {
    sp.memory_limit = std::numeric_limits<double>::infinity();
  }
  const auto unlimited = partition(free);
  if (unlimited.bottleneck < c.partition.bottleneck * (1 - 1e-9)) {
    return fmt::format("memory: without the limit the stages would balance to {} per micro-batch",
                       ms(unlimited.bottleneck));
  }
  const auto& st = c.partition.stages[static_cast<std::size_t>(slowest)];
  if (st.receive > st.time / 2) {
    return fmt::format("communication: receiving its inputs takes {} of its {}", ms(st.receive), ms(st.time));
  }
  const int first = c.partition.starts[static_cast<std::size_t>(slowest)];
  const int last =
      slowest + 1 < c.shape.stages ? c.partition.starts[static_cast<std::size_t>(slowest) + 1] : c.tables.problem.ops;
  if (last - first == 1) {
    return fmt::format("compute: the stage is one op, {}, which no cut can split",
                       g.op(c.tables.order[static_cast<std::size_t>(first)]).name);
  }
  if (st.time - st.compute > st.time / 2) {
    return fmt::format("communication: collectives inside the stage take {} of its {}",
                       ms(st.time - st.compute - st.receive), ms(st.time));
  }
  return "compute: the ops' granularity (no cut point balances the stages better)";
}

std::string explain(const Candidate& c, const Request& r, const std::string& tried, int batch,
                    const std::optional<Summary>& runner_up) {
  const auto& g = *r.graph;
  const auto& part = c.partition;
  const int stages = c.shape.stages, micro = c.shape.micro_batches;
  const int per_stage = r.devices / stages;
  int slowest = 0;
  for (int s = 0; s < stages; ++s) {
    if (part.stages[static_cast<std::size_t>(s)].time > part.stages[static_cast<std::size_t>(slowest)].time) {
      slowest = s;
    }
  }
  const int first = part.starts[static_cast<std::size_t>(slowest)];
  const int last = slowest + 1 < stages ? part.starts[static_cast<std::size_t>(slowest) + 1] : c.tables.problem.ops;
  const auto& st = part.stages[static_cast<std::size_t>(slowest)];
  const auto& sp = c.tables.problem.stages[static_cast<std::size_t>(slowest)];
  std::vector<std::string> sizes;
  for (int s = 0; s < stages; ++s) {
    const int end = s + 1 < stages ? part.starts[static_cast<std::size_t>(s) + 1] : c.tables.problem.ops;
    sizes.push_back(std::to_string(end - part.starts[static_cast<std::size_t>(s)]));
  }
  const std::string inside = c.shape.tensor_parallel > 1
                                 ? fmt::format("{}-way tensor parallel x {}-way data parallel inside each",
                                               c.shape.tensor_parallel, per_stage / c.shape.tensor_parallel)
                                 : "data parallel inside each";
  std::string text =
      fmt::format("{} of {} ({}), {} of {}, {} schedule; cut by exact dynamic programming over {} ops (BaPipe) "
                  "into {} ops per stage.",
                  count(stages, "stage", "stages"), count(per_stage, "device", "devices"), inside,
                  count(micro, "micro-batch", "micro-batches"), count(batch / micro, "sample", "samples"),
                  strategy::schedule_name(c.shape.schedule), c.tables.problem.ops, fmt::join(sizes, "/"));
  if (r.cluster->heterogeneous()) { // which device each stage landed on sized it
    std::vector<std::string> kinds;
    for (const auto& stage : c.tables.problem.stages) {
      kinds.push_back(stage.device);
    }
    text += fmt::format(" On mixed nodes, the stages run on {}.", fmt::join(kinds, " / "));
  }
  if (stages > 1) {
    text +=
        fmt::format(" Bottleneck: stage {} ({} .. {}), {} per micro-batch ({} compute, {} receiving), {} of "
                    "{} per device; bubble {:.1f}% of the pipeline.",
                    slowest, g.op(c.tables.order[static_cast<std::size_t>(first)]).name,
                    g.op(c.tables.order[static_cast<std::size_t>(last) - 1]).name, ms(st.time), ms(st.compute),
                    ms(st.receive), gib(st.memory), gib(sp.memory_limit), 100.0 * (stages - 1) / (micro + stages - 1));
    text += fmt::format(" Binding constraint: {}.", binding_constraint(c, g, slowest));
  } else {
    text +=
        fmt::format(" One stage is fastest: no pipeline ({} of {} per device).", gib(st.memory), gib(sp.memory_limit));
  }
  text += fmt::format(" Stage counts: {}.", tried);
  if (runner_up) {
    text += runner_up_text(summarize(c), *runner_up);
  }
  if (r.micro_batches <= 0) {
    text += fmt::format(" Micro-batches: {}, the fastest of the counts that split a replica's samples evenly "
                        "(searched for each stage count); more shrink the bubble and the activations in flight, "
                        "fewer run larger kernels fewer times (every kernel and every collective on activations "
                        "runs once per micro-batch).",
                        micro);
  }
  return text;
}

// The final ranking, as the 3-D search's (three_d.cpp): the candidates simulated in the order of
// a bound (their terms added up less the gradient sync, the moves per stage and the bubble, all
// the simulator can overlap or shorten) until no candidate left can beat the best simulated or the
// budget (Request::simulation_budget, tasks plus shared NICs) is spent; then the fastest is
// simulated whatever the budget, where its size allows, so that its figure is `partita plan`'s.
void rank_by_simulation(const Request& r, std::vector<Candidate>& fitted) {
  const auto& g = *r.graph;
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < fitted.size(); ++i) {
    if (fitted[i].whole) {
      order.push_back(i);
    }
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return fitted[a].bound < fitted[b].bound; });
  std::size_t work = 0;
  auto simulate = [&](Candidate& c) {
    if (c.prediction.simulated || !c.whole || !simulatable(g, c.shape)) {
      return;
    }
    const auto s =
        sim::simulate_prediction(*r.graph, *r.cluster, c.strategy, c.prediction, {}, sim::max_predicted_tasks);
    work += s ? detail::simulation_work(s->tasks) : sim::max_predicted_tasks;
  };
  double best = std::numeric_limits<double>::infinity();
  for (const std::size_t i : order) {
    if (r.cancel != nullptr && r.cancel->load()) {
      throw Cancelled();
    }
    if (!r.simulate_every_candidate && (fitted[i].bound >= best || work >= r.simulation_budget)) {
      break;
    }
    simulate(fitted[i]);
    best = std::min(best, fitted[i].prediction.iteration_time);
  }
  for (int settled = 0; settled < 8 && !order.empty(); ++settled) {
    Candidate* fastest = nullptr;
    for (const std::size_t i : order) {
      if (fastest == nullptr || fitted[i].prediction.iteration_time < fastest->prediction.iteration_time) {
        fastest = &fitted[i];
      }
    }
    if (fastest->prediction.simulated || !simulatable(g, fastest->shape)) {
      break;
    }
    simulate(*fastest);
    if (!fastest->prediction.simulated) {
      break; // too large to simulate after all: its terms added up, as `partita plan` shows it
    }
  }
}

} // namespace

strategy::Strategy optimize(const Request& r) {
  if (!r.cuts.empty()) {
    throw Error("bapipe: it chooses the cut points itself; --cuts belongs to --strategy pipeline");
  }
  if (r.schedule == strategy::Schedule::interleaved || r.chunks > 0) {
    throw Error("bapipe: its cuts are contiguous stages under gpipe or 1f1b; the interleaved schedule (--chunks) is "
                "planned by --strategy pipeline or megatron --pp");
  }
  const auto& g = *r.graph;
  const int n = static_cast<int>(g.ops().size());
  const int batch = strategy::batch_size(g);
  std::vector<int> counts;
  if (r.stages > 0) {
    counts.push_back(r.stages);
  } else {
    for (int s = 1; s <= std::min(r.devices, n); ++s) {
      if (r.devices % s == 0) {
        counts.push_back(s);
      }
    }
  }
  const double limit = r.memory_limit > 0 ? r.memory_limit : r.cluster->device.memory_capacity;
  std::vector<Candidate> fitted; // every (stage count, micro-batches) that fits
  double fastest_added = std::numeric_limits<double>::infinity();
  std::vector<std::string> tried; // per stage count: why none fits, or empty (filled once ranked)
  std::vector<int> tried_stages;
  for (std::size_t ci = 0; ci < counts.size(); ++ci) {
    const int stages = counts[ci];
    tried_stages.push_back(stages);
    const int per_stage = r.devices / std::max(1, stages);
    Shape shape;
    shape.stages = stages;
    shape.schedule = r.schedule;
    shape.tensor_parallel = r.tensor_parallel > 1 ? r.tensor_parallel : 1;
    const bool given = r.stages > 0;
    if (!given && per_stage % shape.tensor_parallel != 0) {
      tried.push_back(fmt::format("{}: {}-way tensor parallel does not divide {}", stages, shape.tensor_parallel,
                                  count(per_stage, "device", "devices")));
      continue;
    }
    const int replicas = std::max(1, per_stage / shape.tensor_parallel);
    // Micro-batch counts: the one given, else a range of the counts that split a replica's samples
    // evenly (for each power of two, the largest such count up to it): more micro-batches shrink
    // the bubble and the activations in flight, fewer run larger kernels, fewer times.
    std::vector<int> micros;
    if (r.micro_batches > 0) {
      micros.push_back(r.micro_batches);
    } else if (batch % replicas == 0) {
      const int samples = batch / replicas;
      for (int x = 1;; x = std::min(2 * x, samples)) {
        int d = x;
        while (samples % d != 0) {
          --d;
        }
        if (micros.empty() || micros.back() != d) {
          micros.push_back(d);
        }
        if (x == samples) {
          break;
        }
      }
    } else {
      if (given) {
        throw Error(fmt::format("bapipe: the batch of {} does not split over the {} data-parallel replicas of a stage",
                                batch, replicas));
      }
      tried.push_back(fmt::format("{}: the batch of {} does not split over {} replicas", stages, batch, replicas));
      continue;
    }
    bool any_fits = false;
    std::string refused;
    bool over = false;
    // Most micro-batches first: a stage's memory never grows with the count (weights and optimizer
    // state are whole each micro-batch; a micro-batch's activations are 1/m of the batch's, and a
    // stage holds min(in flight, m) of them under 1F1B, all m under GPipe), so once a count does
    // not fit, no smaller one does and the rest are not priced.
    std::reverse(micros.begin(), micros.end());
    for (const int micro : micros) {
      if (over) {
        break;
      }
      shape.micro_batches = micro;
      try {
        check_shape(r, shape);
      } catch (const Error& e) {
        if (given && r.micro_batches > 0) {
          throw; // the user's stage count and micro-batches: refused with the reason, never replaced
        }
        // A micro-batch count that this stage count cannot take: another may.
        refused = std::string(std::string_view(e.what()).substr(std::string_view("bapipe: ").size()));
        continue;
      }
      Candidate c{shape, tables(r, shape), {}, {}, {}};
      if (c.tables.fits) {
        c.partition = partition(c.tables.problem, r.cancel);
      }
      if (!c.partition.feasible) {
        over = true;
        continue;
      }
      c.strategy = to_strategy(r, shape, c.tables, c.partition);
      c.prediction = strategy::evaluate(g, *r.cluster, c.strategy, r.setup);
      // Memory is priced per op exactly as evaluate() sums it; checked again all the same.
      // (Mixed nodes: every device against its own memory, as evaluate() checks it.)
      const bool fits = r.memory_limit <= 0 && r.cluster->heterogeneous()
                            ? c.prediction.fits
                            : c.prediction.peak_memory <= limit * (1 + 1e-12);
      if (!fits) {
        over = true;
        continue;
      }
      c.bound = simulated_bound(g, shape, c.prediction);
      fastest_added = std::min(fastest_added, c.prediction.iteration_time);
      fitted.push_back(std::move(c));
      for (auto& f : fitted) {
        if (f.whole && f.bound > fastest_added) {
          lighten(f); // it cannot beat the fastest terms added up, simulated or not
        }
      }
      any_fits = true;
    }
    if (any_fits) {
      tried.emplace_back(); // the fastest of this stage count, once ranked
    } else if (over) {
      tried.push_back(fmt::format("{}: does not fit", stages));
    } else {
      if (given) {
        throw Error("bapipe: " + refused); // the user's stage count: refused with the reason, never replaced
      }
      tried.push_back(fmt::format("{}: {}", stages, refused));
    }
    if (r.progress) {
      r.progress(static_cast<double>(ci + 1) / static_cast<double>(counts.size()));
    }
  }
  if (r.simulation_budget > 0 || r.simulate_every_candidate) {
    rank_by_simulation(r, fitted);
  }
  // The fastest (simulated where the ranking simulated it), the fastest of another stage count,
  // and each stage count's fastest for the explanation.
  Candidate* best = nullptr;
  std::optional<Summary> runner_up;
  for (auto& c : fitted) {
    if (c.whole && (best == nullptr || c.prediction.iteration_time < best->prediction.iteration_time)) {
      best = &c;
    }
  }
  for (std::size_t i = 0; i < tried.size(); ++i) {
    if (!tried[i].empty()) {
      continue;
    }
    const Candidate* fastest = nullptr;
    for (const auto& c : fitted) {
      if (c.shape.stages == tried_stages[i] &&
          (fastest == nullptr || c.prediction.iteration_time < fastest->prediction.iteration_time)) {
        fastest = &c;
      }
    }
    tried[i] = fmt::format("{}: {} ({}{})", tried_stages[i], ms(fastest->prediction.iteration_time),
                           count(fastest->shape.micro_batches, "micro-batch", "micro-batches"),
                           fastest->prediction.simulated ? ", simulated" : "");
    if (best != nullptr && fastest->shape.stages != best->shape.stages &&
        (!runner_up || fastest->prediction.iteration_time < runner_up->iteration)) {
      runner_up = summarize(*fastest);
    }
  }
  const std::string table = fmt::format("{}", fmt::join(tried, ", "));
  if (best == nullptr) {
    throw Error(fmt::format("bapipe: no pipeline fits {} per device with these options ({} schedule; stage counts "
                            "{}); try more devices, --zero, --recompute or a smaller batch",
                            gib(limit), strategy::schedule_name(r.schedule), table));
  }
  best->strategy.explanation = explain(*best, r, table, batch, runner_up);
  return std::move(best->strategy);
}

} // namespace partita::search::bapipe
