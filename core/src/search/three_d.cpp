// The 3-D search: pipeline stages x tensor-parallel width x data-parallel replicas, with the
// micro-batch size, the schedule, the ZeRO stage, recomputation and sequence parallelism, each
// candidate planned by the megatron family (or, for stages of a node at most, by the pipeline family
// with every stage laid out by the per-layer search: Candidate::per_layer) and predicted by
// strategy::Evaluator.
//
// Bounds that skip a candidate without planning it, both provable against evaluate():
// - Resident memory. Megatron's layout splits a weight at most `tensor` ways and ZeRO shards its
//   state over at most the replicas, so each device of a stage holds at least, per weight value
//   of the stage, value/tensor bytes of the weight, gradient and optimizer state (each over `data`
//   where ZeRO shards it); the fullest stage holds at least the mean of the stages. A candidate
//   whose bound exceeds the limit cannot fit. A per-layer layout may split a weight over all of a
//   stage's devices: its bound is value/(stage devices) with nothing sharded further.
// - Time. A candidate differing from a planned one only in its ZeRO stage, recomputation or
//   micro-batch size shares its plan's ops on the same devices (a per-layer layout only its
//   recomputation: it is searched per micro-batch count and ZeRO stage); recomputation only adds terms
//   (none <= selective <= full for the same plan and ZeRO stage). So once "none" has been predicted
//   for a shape and ZeRO stage, its time bounds the other two from below: they are skipped when
//   the bound is no faster than the best found and the candidate could not join the front. When
//   the simulator ranks, the bound is "none"'s simulated lower bound (below), which recomputation
//   only raises: the work it adds is compute that nothing overlaps.
// The final ranking: a simulated iteration is taken to be at least the terms added up less the
// gradient synchronization, the moves between ops (a pipeline's, per stage) and the bubble, which
// are what the simulator overlaps or shortens (kernels, an op's own collectives and the step run in
// dependence order; a shared NIC only lengthens a transfer). Candidates are simulated in the order
// of that bound and the ranking stops once the next bound is no faster than the best simulated, or
// when the budget is spent (Result::budget_cut). The bound is checked, not proven: simulating every
// candidate of GPT-2 (12 layers, 16 devices, 2,182 candidates) and BERT-large (32 devices, 3,492)
// found none below it, and the tests compare the ranking with simulating every candidate.
//
// Every micro-batch size is planned: a micro-batch's kernels run on its share at the efficiency
// of that size, the weights are read whole for each, and each activation collective and send
// pays its latency once per micro-batch, so neither more nor fewer micro-batches of a plan are
// faster in general (fewer shrink those costs, more shrink the bubble and the activations in
// flight).

#include "partita/search/three_d.h"

#include "partita/graph/error.h"
#include "partita/sim/simulate.h"
#include "search/families.h"
#include "search/simulated_ranking.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace partita::search::three_d {

namespace {

std::string gib(double bytes) {
  constexpr double k = 1024.0;
  return bytes >= 0.1 * k * k * k ? fmt::format("{:.1f} GiB", bytes / (k * k * k))
         : bytes >= 0.1 * k * k   ? fmt::format("{:.1f} MiB", bytes / (k * k))
                                  : fmt::format("{:.1f} KiB", bytes / k);
}
std::string seconds_text(double s) {
  return s >= 1 ? fmt::format("{:.3f} s", s) : fmt::format("{:.4g} ms", s * 1e3);
}

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) {
      out.push_back(d);
    }
  }
  return out;
}

// The weight values of the model, each counted once (a tied table once), that train as floats.
double trained_values(const graph::Graph& g) {
  double values = 0;
  for (const auto& t : g.tensors()) {
    if (t.role == graph::TensorRole::parameter && graph::trains_as_float(t)) {
      double n = 1;
      for (const auto d : t.shape) {
        n *= static_cast<double>(d);
      }
      values += n;
    }
  }
  return values;
}

// The resident-memory lower bound of the file comment, bytes per device.
double resident_bound(double values, const Candidate& c, const cost::TrainingSetup& base, double stage_devices) {
  cost::TrainingSetup s = base;
  s.zero_stage = c.zero_stage;
  // The per-layer search may split a weight over all of a stage's devices and shard nothing more.
  const double split = c.per_layer ? static_cast<double>(c.tensor) * c.data * stage_devices : c.tensor;
  const double per_device = values / (split * c.pipeline);
  const double d = c.per_layer ? 1.0 : c.data;
  const double weights = per_device * s.value_bytes() / (c.zero_stage >= 3 ? d : 1.0);
  const double gradients = per_device * s.gradient_bytes() / (c.zero_stage >= 2 ? d : 1.0);
  const double state = per_device * s.optimizer_bytes() / (c.zero_stage >= 1 ? d : 1.0);
  return weights + gradients + state;
}

cost::TrainingSetup setup_of(const Request& r, const Candidate& c) {
  cost::TrainingSetup s = r.setup;
  s.zero_stage = c.zero_stage;
  s.recompute = c.recompute;
  s.sequence_parallel = c.sequence_parallel;
  return s;
}

// The number of layers (repeated blocks) Megatron-LM's cut shares out: the most common number of
// occurrences among the weighted matrix products whose type and input shapes repeat (each of a
// transformer layer's products occurs once per layer). 1 for a model without repeated products.
int layer_count(const graph::Graph& g) {
  std::map<std::string, int> seen;
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    const auto id = static_cast<graph::OpId>(i);
    const auto& op = g.op(id);
    if (graph::describe(g, id).op_class != graph::OpClass::contraction || !detail::has_weight(g, id)) {
      continue;
    }
    std::string key = op.type;
    for (const auto t : op.inputs) {
      if (t != graph::no_tensor) {
        key += fmt::format("|{}", fmt::join(g.tensor(t).shape, ","));
      }
    }
    ++seen[key];
  }
  std::map<int, int> how_often; // occurrences -> products with that many
  for (const auto& [key, n] : seen) {
    if (n >= 2) {
      ++how_often[n];
    }
  }
  int layers = 1, most = 0;
  for (const auto& [n, products] : how_often) {
    if (products > most || (products == most && n > layers)) {
      layers = n;
      most = products;
    }
  }
  return layers;
}

// Every candidate of the space, the user's held choices applied.
// The schedules of a pipeline of p stages and m micro-batches: 1F1B, and interleaved with V chunks
// (each of `chunk_counts`, or the count held) where every stage gets V whole pieces of the layers
// and the micro-batches group by the stages (Megatron-LM's condition); a schedule held, alone.
std::vector<std::pair<strategy::Schedule, int>> schedules_for(const Request& r, int p, int m, int layers,
                                                              std::initializer_list<int> chunk_counts) {
  std::vector<std::pair<strategy::Schedule, int>> out;
  const bool interleaved_asked = r.schedule == strategy::Schedule::interleaved;
  if (!(r.held.schedule && interleaved_asked)) {
    out.emplace_back(strategy::Schedule::one_f_one_b, 1);
  }
  if (p < 2 || (r.held.schedule && !interleaved_asked) || m % p != 0) {
    return out;
  }
  const auto add = [&](int v) {
    if (v >= 2 && layers % (p * v) == 0) {
      out.emplace_back(strategy::Schedule::interleaved, v);
    }
  };
  if (r.chunks > 0) {
    add(r.chunks);
  } else {
    for (const int v : chunk_counts) {
      add(v);
    }
  }
  return out;
}

std::vector<Candidate> space(const Request& r) {
  const graph::Graph& g = *r.graph;
  const int n = r.devices;
  const int batch = strategy::batch_size(g);
  const int per_node = std::max(1, r.cluster->devices_per_node);
  const int layers = layer_count(g);
  std::vector<int> tensors;
  if (r.tensor_parallel > 0) {
    tensors = {r.tensor_parallel};
  } else {
    for (const int t : divisors(std::min(n, per_node))) {
      if (n % t == 0) {
        tensors.push_back(t);
      }
    }
  }
  std::vector<cost::Recompute> recomputes = {cost::Recompute::none, cost::Recompute::selective, cost::Recompute::full};
  if (r.held.recompute) {
    recomputes = {r.setup.recompute};
  }
  std::vector<int> zeros = {0, 1, 2, 3};
  if (r.held.zero) {
    zeros = {r.setup.zero_stage};
  }
  // On a cluster of mixed nodes whose kinds the devices span, each pipeline shape is also cut by
  // its stages' speed.
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    all[static_cast<std::size_t>(i)] = i;
  }
  const bool mixed = r.cluster->kinds_of(all).size() > 1;
  std::vector<Candidate> out;
  for (const int t : tensors) {
    if (n % t != 0) {
      throw Error(fmt::format("3d: --tp {} does not divide the {} devices", t, n));
    }
    std::vector<int> pipelines;
    if (r.pipeline_parallel > 0) {
      pipelines = {r.pipeline_parallel};
    } else {
      for (const int p : divisors(n / t)) {
        if (p <= layers) {
          pipelines.push_back(p);
        }
      }
    }
    std::vector<bool> sps = {false};
    if (r.held.sequence_parallel) {
      sps = {r.setup.sequence_parallel};
    } else if (t > 1) {
      sps = {false, true};
    }
    for (const int p : pipelines) {
      if ((n / t) % p != 0) {
        continue;
      }
      const int d = n / (t * p);
      if (batch % d != 0) {
        continue; // a replica without a whole share of the batch
      }
      const int per_replica = batch / d;
      std::vector<int> sizes;
      if (r.micro_batch_size > 0) {
        sizes = {r.micro_batch_size};
      } else if (r.micro_batches > 0) {
        if (per_replica % r.micro_batches != 0) {
          continue; // the count held does not split this replica's share
        }
        sizes = {per_replica / r.micro_batches};
      } else {
        for (const int b : divisors(per_replica)) {
          // Powers of two, and the replica's whole batch (no accumulation).
          if ((b & (b - 1)) == 0 || b == per_replica) {
            sizes.push_back(b);
          }
        }
      }
      for (const int b : sizes) {
        if (per_replica % b != 0) {
          continue;
        }
        const int m = per_replica / b;
        if (p > 1 && m < p) {
          continue; // fewer micro-batches than stages leaves stages idle throughout
        }
        const auto schedules = schedules_for(r, p, m, layers, {2, 3, 4});
        const std::vector<bool> speed_cuts = p > 1 && mixed ? std::vector<bool>{false, true} : std::vector<bool>{false};
        for (const auto& [schedule, v] : schedules) {
          for (const bool sp : sps) {
            for (const bool speed : speed_cuts) {
              for (const int z : zeros) {
                for (const auto rc : recomputes) {
                  Candidate c;
                  c.pipeline = p;
                  c.tensor = t;
                  c.data = d;
                  c.micro_batch_size = b;
                  c.micro_batches = m;
                  c.schedule = schedule;
                  c.chunks = v;
                  c.zero_stage = z;
                  c.recompute = rc;
                  c.sequence_parallel = sp;
                  c.speed_cut = speed;
                  out.push_back(c);
                }
              }
            }
          }
        }
      }
    }
  }
  // Each stage laid out by the per-layer search: pipelines of 2 stages or more whose stages fit in
  // a node (its splits pay off on the fastest links; across nodes Megatron's layouts above keep the
  // tensor split inside nodes anyway), the micro-batches at least the stages and at most 4 x, in
  // powers of two dividing the batch, unless held; the ZeRO stage and recomputation as above. Each
  // (stages, micro-batches, schedule) is a search of its own, held to a fraction of a second.
  if (r.tensor_parallel <= 0 && !(r.held.sequence_parallel && r.setup.sequence_parallel) && r.micro_batch_size <= 0) {
    std::vector<int> pipelines;
    for (const int p : divisors(n)) {
      if (p >= 2 && p <= layers && n / p <= per_node && (r.pipeline_parallel <= 0 || p == r.pipeline_parallel)) {
        pipelines.push_back(p);
      }
    }
    for (const int p : pipelines) {
      std::vector<int> counts;
      if (r.micro_batches > 0) {
        counts = {r.micro_batches};
      } else {
        for (int m = p; m <= 4 * p && m <= batch; m *= 2) {
          counts.push_back(m);
        }
      }
      for (const int m : counts) {
        if (m < p || batch % m != 0) {
          continue;
        }
        const auto schedules = schedules_for(r, p, m, layers, {2});
        for (const auto& [schedule, v] : schedules) {
          for (const int z : zeros) {
            for (const auto rc : recomputes) {
              for (const bool layers_cut : {false, true}) {
                Candidate c;
                c.pipeline = p;
                c.micro_batch_size = batch / m;
                c.micro_batches = m;
                c.schedule = schedule;
                c.chunks = v;
                c.zero_stage = z;
                c.recompute = rc;
                c.per_layer = true;
                c.layers_cut = layers_cut;
                out.push_back(c);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

// The layout shared by candidates that differ only in micro-batch size, ZeRO stage and
// recomputation: the megatron family places and cuts the ops the same way whatever the micro-batch
// count (its cut balances whole-batch times), so one plan serves them with its count replaced.
auto layout_key(const Candidate& c) {
  // The per-layer search prices its layout in the micro-batches and under the ZeRO stage: one
  // layout per count and stage.
  return std::make_tuple(c.pipeline, c.tensor, static_cast<int>(c.schedule), c.chunks, c.sequence_parallel, c.speed_cut,
                         c.per_layer ? c.micro_batches : 0, c.per_layer ? c.zero_stage : -1, c.layers_cut);
}
// The time bound's key: the layout and the micro-batch count.
auto shape_key(const Candidate& c) {
  return std::tuple_cat(layout_key(c), std::make_tuple(c.micro_batch_size));
}

std::vector<Point> pareto_front(std::vector<Point> points) {
  std::sort(points.begin(), points.end(), [](const Point& a, const Point& b) {
    return a.iteration_time != b.iteration_time ? a.iteration_time < b.iteration_time : a.peak_memory < b.peak_memory;
  });
  std::vector<Point> front;
  double least = std::numeric_limits<double>::infinity();
  for (const auto& p : points) {
    if (p.peak_memory < least) {
      front.push_back(p);
      least = p.peak_memory;
    }
  }
  return front;
}

// The final ranking (the file comment's last paragraph): candidates that fit, simulated in the
// order of their bound (additive_time - overlappable), until the next bound is no faster than the
// best iteration found, or the task budget is spent; then the additive Pareto front's points not
// yet simulated, while the budget lasts. Points not simulated keep their terms added up, as
// `partita plan` shows a plan too large to simulate.
// Per-layer stage layouts already searched, by (stages, micro-batches, ZeRO stage): the schedules
// of one stage count, the final ranking and the chosen plan share them.
using StageLayouts = std::map<std::tuple<int, int, int>, std::vector<std::vector<sharding::Config>>>;
strategy::Strategy plan(const Request& r, const Candidate& c, StageLayouts* layouts);

void rank_by_simulation(const Request& r, strategy::Evaluator& evaluator, std::vector<Point>& fitting,
                        const std::vector<double>& overlappable, Result& result, StageLayouts& stage_layouts) {
  const graph::Graph& g = *r.graph;
  const std::size_t ops = g.ops().size();
  auto too_large = [&](const Point& p) {
    // A forward and a backward task per op and micro-batch at least: larger ones are not even built.
    return 2 * ops * static_cast<std::size_t>(p.candidate.micro_batches) > sim::max_predicted_tasks;
  };
  const auto additive_front = pareto_front(fitting); // before any point is simulated
  std::vector<double> bound(fitting.size());
  for (std::size_t i = 0; i < fitting.size(); ++i) {
    bound[i] = too_large(fitting[i]) ? fitting[i].additive_time : fitting[i].additive_time - overlappable[i];
  }
  std::vector<std::size_t> order(fitting.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return bound[a] < bound[b]; });
  std::map<decltype(layout_key(Candidate{})), std::optional<strategy::Strategy>> plans;
  // Per layout and recomputation: the fewest micro-batches whose task graph came out too large to
  // simulate (more never come out smaller).
  std::map<decltype(std::tuple_cat(layout_key(Candidate{}), std::make_tuple(0))), int> too_many_from;
  auto simulate = [&](Point& p) {
    const auto tasks_key =
        std::tuple_cat(layout_key(p.candidate), std::make_tuple(static_cast<int>(p.candidate.recompute)));
    const auto known = too_many_from.find(tasks_key);
    if (too_large(p) || (known != too_many_from.end() && p.candidate.micro_batches >= known->second)) {
      return;
    }
    auto& layout = plans[layout_key(p.candidate)];
    if (!layout) {
      layout = plan(r, p.candidate, &stage_layouts);
    }
    strategy::Strategy st = *layout;
    st.setup = setup_of(r, p.candidate);
    st.pipeline->micro_batches = p.candidate.micro_batches;
    auto prediction = evaluator(st, *st.setup);
    const auto s = sim::simulate_prediction(g, *r.cluster, st, prediction, {}, sim::max_predicted_tasks);
    if (s) {
      p.iteration_time = prediction.iteration_time;
      p.simulated = true;
      ++result.simulated;
      result.simulation_work += detail::simulation_work(s->tasks);
    } else {
      result.simulation_work += sim::max_predicted_tasks; // built, and found too large
      int& from = too_many_from.try_emplace(tasks_key, p.candidate.micro_batches).first->second;
      from = std::min(from, p.candidate.micro_batches);
    }
  };
  double best = std::numeric_limits<double>::infinity();
  for (const std::size_t i : order) {
    if (r.cancel != nullptr && r.cancel->load()) {
      throw Cancelled();
    }
    if (!r.simulate_every_candidate) {
      if (bound[i] >= best) {
        break; // no candidate left can beat the best
      }
      if (result.simulation_work >= r.simulation_budget) {
        result.budget_cut = true;
        break;
      }
    }
    simulate(fitting[i]);
    best = std::min(best, fitting[i].iteration_time);
  }
  // The best is what `partita plan` prints for it: simulated whatever the budget, as long as the
  // fastest so far is one the budget left unsimulated (it mostly stays the fastest).
  for (int settled = 0; settled < 8; ++settled) {
    auto fastest = std::min_element(fitting.begin(), fitting.end(), [](const Point& a, const Point& b) {
      return a.iteration_time != b.iteration_time ? a.iteration_time < b.iteration_time : a.peak_memory < b.peak_memory;
    });
    if (fastest->simulated) {
      break;
    }
    simulate(*fastest);
    if (!fastest->simulated) {
      break; // too large to simulate: its terms added up, as `partita plan` shows it
    }
  }
  for (const auto& p : additive_front) {
    if (result.simulation_work >= r.simulation_budget) {
      break;
    }
    for (auto& q : fitting) {
      if (!q.simulated && q.candidate.text() == p.candidate.text()) {
        simulate(q);
      }
    }
  }
}

} // namespace

std::string Candidate::text() const {
  std::string s = per_layer ? fmt::format("PP {} x the per-layer search in each stage, micro-batch {} ({} per "
                                          "iteration)",
                                          pipeline, micro_batch_size, micro_batches)
                            : fmt::format("PP {} x TP {} x DP {}, micro-batch {} ({} per iteration)", pipeline, tensor,
                                          data, micro_batch_size, micro_batches);
  if (pipeline > 1) {
    s += schedule == strategy::Schedule::interleaved ? fmt::format(", interleaved 1F1B x{}", chunks) : ", 1F1B";
  }
  s += fmt::format(", ZeRO {}, recompute {}", zero_stage, cost::recompute_name(recompute));
  if (sequence_parallel) {
    s += ", sequence parallel";
  }
  if (speed_cut) {
    s += ", layers by stage speed";
  }
  if (per_layer) {
    s += layers_cut ? ", Megatron-LM's cut" : ", cut by time";
  }
  return s;
}

std::string Candidate::options() const {
  if (per_layer) {
    std::string s = fmt::format("--strategy pipeline --stages {} --stage-layout searched --micro-batches {}", pipeline,
                                micro_batches);
    s += schedule == strategy::Schedule::interleaved ? fmt::format(" --schedule interleaved --chunks {}", chunks)
                                                     : " --schedule 1f1b";
    s += fmt::format(" --zero {} --recompute {}", zero_stage, cost::recompute_name(recompute));
    if (layers_cut) {
      s += " --balance layers";
    }
    return s;
  }
  std::string s =
      fmt::format("--strategy megatron --tp {} --pp {} --micro-batch-size {}", tensor, pipeline, micro_batch_size);
  if (schedule == strategy::Schedule::interleaved) {
    s += fmt::format(" --schedule interleaved --chunks {}", chunks);
  }
  s += fmt::format(" --zero {} --recompute {}", zero_stage, cost::recompute_name(recompute));
  if (sequence_parallel) {
    s += " --sequence-parallel";
  }
  if (speed_cut) {
    s += " --balance speed";
  }
  return s;
}

strategy::Strategy plan(const Request& r, const Candidate& c) {
  return plan(r, c, nullptr);
}

namespace {

strategy::Strategy plan(const Request& r, const Candidate& c, StageLayouts* layouts) {
  Request q = r;
  q.tensor_parallel = c.tensor;
  q.pipeline_parallel = c.pipeline;
  q.micro_batch_size = c.micro_batch_size;
  q.micro_batches = 0;
  q.schedule = c.schedule;
  q.chunks = c.schedule == strategy::Schedule::interleaved ? c.chunks : 0;
  q.balance = c.speed_cut ? "speed" : "layers";
  q.setup = setup_of(r, c);
  q.progress = {};
  if (c.per_layer) {
    q.stages = c.pipeline;
    q.pipeline_parallel = 0;
    q.tensor_parallel = 0;
    q.micro_batch_size = 0;
    q.micro_batches = c.micro_batches;
    q.stage_layout = "searched";
    q.balance = c.layers_cut ? "layers" : "time";
    q.simulation_budget = 0;
    // Kept to searches of a fraction of a second (2e6 units: 0.01-0.03 s): a larger one is refused
    // and the candidate with it.
    q.max_search_work = std::min(q.max_search_work, 2e6);
    std::vector<std::vector<sharding::Config>>* known = nullptr;
    if (layouts != nullptr) {
      known = &(*layouts)[{c.pipeline, c.micro_batches, c.zero_stage}];
      q.stage_layouts = *known;
    }
    auto st = detail::pipeline(q, known != nullptr && known->empty() ? known : nullptr);
    st.setup = q.setup;
    return st;
  }
  auto st = detail::megatron(q);
  st.setup = q.setup;
  return st;
}

} // namespace

Result search(const Request& request) {
  if (request.graph == nullptr || request.cluster == nullptr) {
    throw Error("3d: no model or cluster");
  }
  // Every candidate is a plan of the same model: its semantics and cost signatures derived once.
  Request r = request;
  if (!r.facts) {
    r.facts = ModelFacts::of(*r.graph);
  }
  if (r.devices > r.cluster->device_count()) {
    throw Error(fmt::format("3d: {} devices asked, the cluster has {}", r.devices, r.cluster->device_count()));
  }
  if (r.chunks > 0 && r.schedule != strategy::Schedule::interleaved) {
    throw Error(fmt::format("3d: --chunks {} needs --schedule interleaved", r.chunks));
  }
  if (r.held.schedule && r.schedule == strategy::Schedule::gpipe) {
    throw Error("3d: --schedule gpipe is not among the schedules it searches (1f1b and interleaved, Megatron-LM's)");
  }
  Result result;
  std::vector<int> all(static_cast<std::size_t>(r.devices));
  for (int i = 0; i < r.devices; ++i) {
    all[static_cast<std::size_t>(i)] = i;
  }
  result.memory_limit = r.memory_limit > 0 ? r.memory_limit : r.cluster->smallest_memory(all);
  auto candidates = space(r);
  result.candidates = candidates.size();
  if (candidates.empty()) {
    throw Error(fmt::format("3d: no pipeline x tensor x data shape of {} devices splits the batch of {} (each "
                            "data-parallel replica needs a whole share)",
                            r.devices, strategy::batch_size(*r.graph)));
  }
  const double values = trained_values(*r.graph);
  // Recomputation last within a shape and ZeRO stage, so that "none" bounds the others.
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::make_tuple(shape_key(a), a.zero_stage, static_cast<int>(a.recompute)) <
           std::make_tuple(shape_key(b), b.zero_stage, static_cast<int>(b.recompute));
  });

  strategy::Evaluator evaluator(*r.graph, *r.cluster);
  std::vector<Point> fitting;
  std::vector<double> overlappable; // per fitting point: its terms added up less its simulated_lower_bound()
  double best_time = std::numeric_limits<double>::infinity();
  std::optional<Point> smallest; // the least memory seen, for "nothing fits"
  double fastest_any = std::numeric_limits<double>::infinity();
  // (shape, zero) -> time with recompute none, or its simulated lower bound when simulating
  std::map<decltype(std::tuple_cat(shape_key(Candidate{}), std::make_tuple(0))), double> none_time;
  const bool simulating = r.simulation_budget > 0 || r.simulate_every_candidate;
  // The current layout's plan (candidates come sorted by layout; nullopt: the family refused it).
  std::optional<decltype(layout_key(Candidate{}))> current_layout;
  std::optional<strategy::Strategy> current_plan;
  int current_prepared = -1; // the Evaluator's layout of current_plan
  std::set<int> too_wide;    // stage counts whose per-layer search is refused for its size
  StageLayouts stage_layouts;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (r.cancel != nullptr && r.cancel->load()) {
      throw Cancelled();
    }
    if (r.progress) {
      r.progress(static_cast<double>(i) / static_cast<double>(candidates.size()));
    }
    const Candidate& c = candidates[i];
    if (resident_bound(values, c, r.setup, static_cast<double>(r.devices) / c.pipeline) > result.memory_limit) {
      ++result.too_big;
      continue;
    }
    const auto key = shape_key(c);
    const auto bound_key = std::tuple_cat(key, std::make_tuple(c.zero_stage));
    if (c.recompute != cost::Recompute::none) {
      const auto it = none_time.find(bound_key);
      // A bound no faster than the best: skipped when a point found is at least as fast as the
      // bound and holds no more memory than the candidate's resident bound, so that it could not
      // join the front either.
      if (it != none_time.end() && it->second >= best_time) {
        bool beaten = false;
        const double least_memory = resident_bound(values, c, r.setup, static_cast<double>(r.devices) / c.pipeline);
        for (const auto& p : fitting) {
          beaten = beaten || (p.iteration_time <= it->second && p.peak_memory <= least_memory);
        }
        if (beaten) {
          ++result.too_slow;
          continue;
        }
      }
    }
    if (current_layout != layout_key(c)) {
      current_layout = layout_key(c);
      current_plan.reset();
      // A per-layer search too wide for its stage's devices is as wide for every micro-batch count
      // and schedule of that stage count: refused once.
      if (!(c.per_layer && too_wide.contains(c.pipeline))) {
        try {
          current_plan = plan(r, c, &stage_layouts);
          current_prepared = evaluator.prepare(*current_plan);
        } catch (const Cancelled&) {
          throw;
        } catch (const Error& e) {
          if (c.per_layer && std::string_view(e.what()).find("too large to run here") != std::string_view::npos) {
            too_wide.insert(c.pipeline);
          }
        }
      }
    }
    if (!current_plan || !current_plan->pipeline) {
      ++result.refused;
      continue;
    }
    strategy::Strategy& st = *current_plan; // the layout's plan, its micro-batches and setup set in place
    st.setup = setup_of(r, c);
    st.pipeline->micro_batches = c.micro_batches;
    try {
      strategy::check_schedule(*st.pipeline);
    } catch (const Error&) {
      ++result.refused;
      continue;
    }
    const auto p = evaluator.totals(st, *st.setup, current_prepared);
    ++result.evaluated;
    Point point{c, p.iteration_time, p.iteration_time, false, p.peak_memory, p.peak_memory <= result.memory_limit};
    if (c.recompute == cost::Recompute::none) {
      // Ranked by the simulator, the bound is the simulated one (recomputation only adds work that
      // nothing overlaps), so that a skip holds against the final ranking too.
      none_time[bound_key] = simulating ? detail::simulated_lower_bound(p, c.pipeline) : p.iteration_time;
    }
    fastest_any = std::min(fastest_any, p.iteration_time);
    if (!smallest || point.peak_memory < smallest->peak_memory) {
      smallest = point;
    }
    if (point.fits) {
      fitting.push_back(point);
      overlappable.push_back(p.iteration_time - detail::simulated_lower_bound(p, c.pipeline));
      best_time = std::min(best_time, point.iteration_time);
    }
  }
  if (r.progress) {
    r.progress(1.0);
  }
  if (fitting.empty()) {
    if (smallest) {
      throw Error(fmt::format("3d: no candidate fits in {} per device ({} of {} planned, {} over the limit on "
                              "parameters, gradients and optimizer state alone); the smallest footprint found is "
                              "{} ({})",
                              gib(result.memory_limit), result.evaluated, result.candidates, result.too_big,
                              gib(smallest->peak_memory), smallest->candidate.text()));
    }
    throw Error(fmt::format("3d: no candidate fits in {} per device: all {} shapes need more for their parameters, "
                            "gradients and optimizer state alone",
                            gib(result.memory_limit), result.too_big));
  }
  const double fastest_additive = std::min_element(fitting.begin(), fitting.end(), [](const Point& a, const Point& b) {
                                    return a.additive_time < b.additive_time;
                                  })->additive_time;
  if (simulating) {
    rank_by_simulation(r, evaluator, fitting, overlappable, result, stage_layouts);
  }
  // The best: the fastest, and of equally fast ones the one holding least memory.
  std::stable_sort(fitting.begin(), fitting.end(), [](const Point& a, const Point& b) {
    return a.iteration_time != b.iteration_time ? a.iteration_time < b.iteration_time : a.peak_memory < b.peak_memory;
  });
  result.best = fitting.front();
  if (fitting.size() > 1) {
    result.runner_up = fitting[1];
  }
  result.pareto = pareto_front(fitting);
  result.strategy = plan(r, result.best.candidate, &stage_layouts);
  const auto best = strategy::evaluate(*r.graph, *r.cluster, result.strategy, *result.strategy.setup);
  // The search's figures are the Evaluator's (evaluate()'s up to the order of sums): the chosen
  // plan's are evaluate()'s own, as `partita plan` prints them.
  for (Point* p : {&result.best, &result.pareto.front()}) {
    if (p->candidate.text() == result.best.candidate.text()) {
      if (!p->simulated) {
        p->iteration_time = best.iteration_time;
      }
      p->additive_time = best.iteration_time;
      p->peak_memory = best.peak_memory;
    }
  }
  if (fastest_any < fastest_additive) {
    result.binding = "memory";
  } else {
    double bubble = 0, communication = 0;
    for (const auto& t : best.iteration) {
      if (t.name == "pipeline bubble") {
        bubble = t.value;
      } else if (t.name != "compute" && t.name != "optimizer step") {
        communication += t.value;
      }
    }
    result.binding = bubble > communication ? "pipeline bubble" : "communication";
  }
  return result;
}

strategy::Strategy optimize(const Request& r, Result* result) {
  auto res = search(r);
  auto st = res.strategy;
  auto how = [](const Point& p) {
    return p.simulated ? fmt::format("simulated; terms added up {}", seconds_text(p.additive_time))
                       : std::string("terms added up");
  };
  std::string text = fmt::format(
      "3-D search over {} candidates: {} planned and predicted, {} skipped as over the "
      "memory limit on parameters, gradients and optimizer state alone, {} as bounded by a "
      "faster plan, {} refused by the layout; {} of those that fit simulated for the final ranking{}. "
      "Chosen: {}, {} per iteration ({}), {} per device.",
      res.candidates, res.evaluated, res.too_big, res.too_slow, res.refused, res.simulated,
      res.budget_cut ? " (the simulation budget ran out first: the rest ranked by their terms added up)" : "",
      res.best.candidate.text(), seconds_text(res.best.iteration_time), how(res.best), gib(res.best.peak_memory));
  if (res.runner_up) {
    text += fmt::format(" Runner-up: {}, {} (+{:.1f}%, {}), {} per device.", res.runner_up->candidate.text(),
                        seconds_text(res.runner_up->iteration_time),
                        100 * (res.runner_up->iteration_time / res.best.iteration_time - 1), how(*res.runner_up),
                        gib(res.runner_up->peak_memory));
  }
  text +=
      res.binding == "memory"
          ? fmt::format(" Binding: memory (a faster candidate needs more than {} per device).", gib(res.memory_limit))
          : fmt::format(" Binding: {} (the larger of the two in the chosen plan).", res.binding);
  text += fmt::format(" Pareto front (time, memory): {} plans.", res.pareto.size());
  st.family = "3d";
  st.explanation = text + " " + st.explanation;
  if (result != nullptr) {
    *result = std::move(res);
    result->strategy = st;
  }
  return st;
}

} // namespace partita::search::three_d
