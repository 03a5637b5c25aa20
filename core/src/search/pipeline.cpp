// Pipeline parallelism (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2019): the op sequence
// cut into contiguous stages, each on its own devices with data parallelism inside, the batch
// split into micro-batches. Cuts are even by op count, at given points, or balanced by
// forward+backward time (the balancing BaPipe automates further). The bubble and the in-flight
// activations of each schedule are evaluate()'s part.

#include "search/families.h"

#include "partita/cost/op_cost.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <unordered_map>

namespace partita::search::detail {

namespace {

// Contiguous partition of `times` into at most `parts` runs minimizing the largest run: binary
// search on the bound with a greedy fill. Returns the start index of every stage after the first.
std::vector<int> balanced_cuts(const std::vector<double>& times, int parts) {
  double lo = *std::max_element(times.begin(), times.end());
  double hi = std::accumulate(times.begin(), times.end(), 0.0);
  auto fill = [&](double bound) {
    std::vector<int> cuts;
    double run = 0;
    for (std::size_t i = 0; i < times.size(); ++i) {
      if (run + times[i] > bound && run > 0) {
        cuts.push_back(static_cast<int>(i));
        run = 0;
      }
      run += times[i];
    }
    return cuts;
  };
  for (int iter = 0; iter < 100 && hi - lo > 1e-12 * hi; ++iter) {
    const double mid = (lo + hi) / 2;
    (static_cast<int>(fill(mid).size()) + 1 <= parts ? hi : lo) = mid;
  }
  auto cuts = fill(hi);
  // Use every stage: split the longest runs further if the greedy fill needed fewer.
  while (static_cast<int>(cuts.size()) + 1 < parts) {
    std::vector<int> bounds{0};
    bounds.insert(bounds.end(), cuts.begin(), cuts.end());
    bounds.push_back(static_cast<int>(times.size()));
    int widest = 0;
    for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
      if (bounds[s + 1] - bounds[s] >
          bounds[static_cast<std::size_t>(widest) + 1] - bounds[static_cast<std::size_t>(widest)]) {
        widest = static_cast<int>(s);
      }
    }
    const int a = bounds[static_cast<std::size_t>(widest)], b = bounds[static_cast<std::size_t>(widest) + 1];
    if (b - a < 2) {
      break;
    }
    cuts.push_back((a + b) / 2);
    std::sort(cuts.begin(), cuts.end());
  }
  return cuts;
}

} // namespace

std::vector<bool> repeated_ops(const graph::Graph& g, const std::vector<graph::OpId>& order) {
  std::map<std::string, int> seen;
  std::vector<std::string> keys;
  for (graph::OpId id : order) {
    const auto& op = g.op(id);
    std::string key = op.type;
    for (const auto* list : {&op.inputs, &op.outputs}) {
      for (const graph::TensorId t : *list) {
        key += t == graph::no_tensor ? "|-" : "|" + graph::shape_string(g.tensor(t).shape);
      }
    }
    ++seen[key];
    keys.push_back(std::move(key));
  }
  std::vector<bool> out;
  for (const auto& key : keys) {
    out.push_back(seen[key] > 1);
  }
  return out;
}

strategy::Strategy pipeline(const Request& r) {
  Builder b(r, "pipeline");
  const int n = static_cast<int>(b.order().size());
  // Default: 4 stages where the devices allow (2 otherwise); choosing the count is BaPipe's job.
  int stages = r.stages > 0 ? r.stages : (r.devices % 4 == 0 ? 4 : 2);
  if (!r.cuts.empty()) {
    stages = static_cast<int>(r.cuts.size()) + 1;
  }
  const bool interleaved = r.schedule == strategy::Schedule::interleaved;
  if (r.chunks > 0 && !interleaved) {
    throw Error(fmt::format("pipeline: --chunks {} needs --schedule interleaved (the {} schedule runs one chunk per "
                            "stage)",
                            r.chunks, strategy::schedule_name(r.schedule)));
  }
  if (interleaved && r.chunks == 1) {
    throw Error("pipeline: --schedule interleaved needs at least 2 chunks per stage (with one, it is 1f1b)");
  }
  const int chunks = interleaved ? (r.chunks > 0 ? r.chunks : 2) : 1;
  if (!r.cuts.empty()) {
    if ((static_cast<int>(r.cuts.size()) + 1) % chunks != 0) {
      throw Error(fmt::format("pipeline: {} cut points make {} pieces, which {} chunks per stage do not divide into "
                              "stages",
                              r.cuts.size(), r.cuts.size() + 1, chunks));
    }
    stages = (static_cast<int>(r.cuts.size()) + 1) / chunks;
  }
  if (stages > r.devices || r.devices % stages != 0) {
    throw Error(fmt::format("pipeline: {} stages do not divide {} devices", stages, r.devices));
  }
  const int pieces = stages * chunks; // virtual stages: a stage's chunks
  if (pieces > n) {
    throw Error(chunks > 1 ? fmt::format("pipeline: {} stages x {} chunks for {} ops", stages, chunks, n)
                           : fmt::format("pipeline: {} stages for {} ops", stages, n));
  }
  const int per_stage = r.devices / stages;
  const int batch = strategy::batch_size(b.graph());
  // Inside a stage: data parallel, or Megatron tensor parallel when asked (--tp); a micro-batch
  // gives every data-parallel replica of a stage at least one sample.
  if (r.tensor_parallel > 1 && per_stage % r.tensor_parallel != 0) {
    throw Error(
        fmt::format("pipeline: --tp {} does not divide the {} devices of a stage", r.tensor_parallel, per_stage));
  }
  const int t = std::max(1, r.tensor_parallel);
  const int replicas = std::max(1, per_stage / t);
  // Tensor parallelism inside a stage does not split the batch: each data-parallel replica of a
  // stage holds batch / replicas samples, and a micro-batch needs at least one of them. A count the
  // user asked for that cannot work is refused; the default (4 x stages) is held to what fits.
  const int most = std::max(1, batch / replicas);
  if (r.micro_batches > most) {
    throw Error(fmt::format("pipeline: --micro-batches {}: the batch of {} gives each of the {} data-parallel "
                            "replicas of a stage {} sample{}, so at most {} micro-batches",
                            r.micro_batches, batch, replicas, most, most == 1 ? "" : "s", most));
  }
  if (interleaved && r.micro_batches > 0 && r.micro_batches % stages != 0) {
    throw Error(fmt::format("pipeline: --micro-batches {}: the interleaved schedule runs micro-batches in groups of "
                            "the {} stages, so their count must be a multiple of {}",
                            r.micro_batches, stages, stages));
  }
  if (r.micro_batches > 0 && most % r.micro_batches != 0) {
    throw Error(fmt::format("pipeline: --micro-batches {}: the {} sample{} each of the {} data-parallel replicas of a "
                            "stage holds (the batch of {}) do not split into {} equal micro-batches",
                            r.micro_batches, most, most == 1 ? "" : "s", replicas, batch, r.micro_batches));
  }
  if (interleaved && most < stages) {
    throw Error(fmt::format("pipeline: the interleaved schedule needs a multiple of the {} stages in micro-batches, "
                            "but the batch of {} gives each of the {} data-parallel replicas of a stage {} sample{}",
                            stages, batch, replicas, most, most == 1 ? "" : "s"));
  }
  const int asked = r.micro_batches > 0 ? r.micro_batches : 4 * stages;
  // The default: the most micro-batches up to 4 x stages that split a replica's samples evenly
  // (and group by the stages when interleaved); a count given was checked above.
  int micro = std::min(asked, most);
  while (micro > 1 && (most % micro != 0 || (interleaved && micro % stages != 0))) {
    --micro;
  }
  if (interleaved && micro % stages != 0) {
    throw Error(fmt::format("pipeline: the interleaved schedule needs micro-batches in a multiple of the {} stages "
                            "that split the {} samples of each of the {} data-parallel replicas of a stage evenly; "
                            "there is none up to {}",
                            stages, most, replicas, asked));
  }
  const std::string capped =
      micro < asked ? fmt::format(" ({} by default; {} is the most up to it that splits the {} sample{} of each of "
                                  "the {} data-parallel replicas of a stage evenly)",
                                  asked, micro, most, most == 1 ? "" : "s", replicas)
                    : "";

  // Per-op time on one stage's devices, data parallel inside the stage.
  std::vector<int> first_stage(static_cast<std::size_t>(per_stage));
  std::iota(first_stage.begin(), first_stage.end(), 0);
  auto stage_config = [&](graph::OpId id) { return b.split(id, {{b.batch_dim(id), per_stage}}); };
  std::vector<int> cuts;
  std::string how;
  if (!r.cuts.empty()) {
    cuts = r.cuts;
    for (std::size_t i = 0; i < cuts.size(); ++i) {
      if (cuts[i] <= (i == 0 ? 0 : cuts[i - 1]) || cuts[i] >= n) {
        throw Error(fmt::format("pipeline: cut point {} must increase and lie in 1..{}", cuts[i], n - 1));
      }
    }
    how = "at the given cut points";
  } else if (r.balance == "even") {
    for (int s = 1; s < pieces; ++s) {
      cuts.push_back(s * n / pieces);
    }
    how = "evenly by op count";
  } else if (r.balance == "time" || r.balance == "layers") {
    std::vector<double> times;
    // Megatron-LM's cut depends on the layers alone: weighed without ZeRO's collectives and
    // recomputation, so that the same layers land on the same stages whatever those settings.
    cost::TrainingSetup weigh = r.setup;
    if (r.balance == "layers") {
      weigh.zero_stage = 0;
      weigh.recompute = cost::Recompute::none;
    }
    // Ops of equal cost signature and configuration cost the same (a model's repeated layers):
    // each priced once.
    std::map<std::pair<int, std::vector<int>>, double> priced; // (signature, splits)
    for (graph::OpId id : b.order()) {
      b.check_cancel();
      const auto config = stage_config(id);
      auto key = std::make_pair(b.signature_id(id), config.splits);
      if (const auto it = priced.find(key); it != priced.end()) {
        times.push_back(it->second);
        continue;
      }
      const auto k = static_cast<std::size_t>(config.devices());
      std::vector<int> devices(first_stage.begin(),
                               first_stage.begin() + static_cast<std::ptrdiff_t>(per_stage / k * k));
      times.push_back(cost::op_cost(b.graph(), id, b.semantics(id), config, devices, b.cluster(), weigh,
                                    cost::Saved::kept, {}, 1, false)
                          .time_total());
      priced.emplace(std::move(key), times.back());
    }
    if (r.balance == "layers") {
      // Megatron-LM's way: the repeated blocks (layers) shared out evenly, what occurs once (the
      // embedding, the output layer, the loss) riding along with the first and the last piece.
      const auto& repeated = b.repeated();
      if (std::find(repeated.begin(), repeated.end(), true) == repeated.end()) {
        throw Error("pipeline: --balance layers: the model has no repeated blocks to share out");
      }
      for (std::size_t i = 0; i < times.size(); ++i) {
        times[i] = repeated[i] ? times[i] : 0.0;
      }
    }
    cuts = balanced_cuts(times, pieces);
    how = r.balance == "layers" ? "sharing the repeated blocks out evenly by their time (the ops that occur once "
                                  "ride along with the first and last pieces), as Megatron-LM does"
                                : "balanced by forward+backward time";
  } else {
    throw Error(fmt::format("pipeline: balance '{}' is not time, layers or even", r.balance));
  }
  strategy::Pipeline pipe;
  pipe.stages = stages;
  pipe.micro_batches = micro;
  pipe.schedule = r.schedule;
  pipe.chunks = chunks;
  pipe.stage_of_op.assign(b.graph().ops().size(), 0);
  MegatronTally tally;
  int stage = 0, pooled = -1;
  for (int i = 0; i < n; ++i) {
    b.check_cancel();
    while (stage < static_cast<int>(cuts.size()) && i >= cuts[static_cast<std::size_t>(stage)]) {
      ++stage;
    }
    const graph::OpId id = b.order()[static_cast<std::size_t>(i)];
    pipe.stage_of_op[static_cast<std::size_t>(id)] = stage;
    if (pooled != stage) {
      std::vector<int> devices(static_cast<std::size_t>(per_stage));
      std::iota(devices.begin(), devices.end(), stage % stages * per_stage); // chunk stage / stages of it
      b.set_pool(std::move(devices));
      pooled = stage;
    }
    if (t > 1) {
      megatron_op(b, id, t, tally);
    } else {
      b.assign(id, stage_config(id));
    }
  }
  const std::string inside =
      t > 1 ? fmt::format("{}-way tensor parallel x {}-way data parallel inside each", t, per_stage / t)
            : "data parallel inside each";
  const std::string chunk_text =
      chunks > 1 ? fmt::format(" ({} chunks each: {} pieces, piece v on the devices of stage v mod {})", chunks, pieces,
                               stages)
                 : "";
  auto st =
      b.finish(fmt::format("{} stage{} of {} devices ({}){}, cut {}; {} micro-batch{}{}, {} schedule.{}", stages,
                           stages == 1 ? "" : "s", per_stage, inside, chunk_text, how, micro, micro == 1 ? "" : "es",
                           capped, strategy::schedule_name(r.schedule), tally.lost_text(b, t)));
  st.pipeline = std::move(pipe);
  return st;
}

} // namespace partita::search::detail
