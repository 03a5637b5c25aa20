// Pipeline parallelism (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2019): the op sequence
// cut into contiguous stages, each on its own devices with data parallelism inside, the batch
// split into micro-batches. Cuts are even by op count, at given points, or balanced by
// forward+backward time (the balancing BaPipe automates further). The bubble and the in-flight
// activations of each schedule are evaluate()'s part.

#include "search/families.h"

#include "partita/cost/op_cost.h"
#include "partita/search/auto_search.h"
#include "partita/sim/simulate.h"
#include "search/simulated_ranking.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>

namespace partita::search::detail {

namespace {

// The cuts of `ops` ops into `parts` runs where a balanced fill found fewer: the widest run split
// in two at its middle, until every stage has a run or no run holds two ops.
std::vector<int> use_every_stage(std::vector<int> cuts, int parts, std::size_t ops) {
  while (static_cast<int>(cuts.size()) + 1 < parts) {
    std::vector<int> bounds{0};
    bounds.insert(bounds.end(), cuts.begin(), cuts.end());
    bounds.push_back(static_cast<int>(ops));
    std::size_t widest = 0;
    for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
      if (bounds[s + 1] - bounds[s] > bounds[widest + 1] - bounds[widest]) {
        widest = s;
      }
    }
    const int a = bounds[widest], b = bounds[widest + 1];
    if (b - a < 2) {
      break;
    }
    cuts.push_back((a + b) / 2);
    std::sort(cuts.begin(), cuts.end());
  }
  return cuts;
}

// Contiguous partition of `times` into `parts` runs minimizing the largest run: binary search on
// the bound with a greedy fill (exact; each run takes as many ops as fit, so ops that weigh
// nothing ride with the run before them, as Megatron-LM's cut wants). Returns the start index of
// every stage after the first.
std::vector<int> balanced_cuts_greedy(const std::vector<double>& times, int parts) {
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
  return use_every_stage(fill(hi), parts, times.size());
}

// Contiguous partition of `times` into `parts` runs minimizing the largest run, where a run
// starting at op s > 0 also costs receive[s] (what a stage starting there receives; empty: none):
// binary search on the bound, each bound checked exactly by the fewest runs that cover the ops
// within it (a run from s may end anywhere up to the farthest op its bound allows, so the runs
// reaching each op are found in one sweep with a heap). Returns the start index of every stage
// after the first.
std::vector<int> balanced_cuts_one_kind(const std::vector<double>& times, int parts,
                                        const std::vector<double>& receive) {
  if (receive.empty()) {
    return balanced_cuts_greedy(times, parts);
  }
  const std::size_t n = times.size();
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    prefix[i + 1] = prefix[i] + times[i];
  }
  const auto entry = [&](std::size_t s) { return s == 0 || receive.empty() ? 0.0 : receive[s]; };
  // The cuts of the fewest runs within `bound`, or nothing where no partition keeps to it.
  auto fill = [&](double bound) -> std::optional<std::vector<int>> {
    constexpr int none = std::numeric_limits<int>::max();
    std::vector<int> runs(n + 1, none); // runs[x]: fewest runs covering ops [0, x)
    std::vector<std::size_t> from(n + 1, 0);
    runs[0] = 0;
    using Open = std::tuple<int, std::size_t, std::size_t>; // (runs before it, farthest end, start)
    std::priority_queue<Open, std::vector<Open>, std::greater<>> open;
    for (std::size_t x = 0; x <= n; ++x) {
      if (x > 0) {
        while (!open.empty() && std::get<1>(open.top()) < x) {
          open.pop();
        }
        if (!open.empty()) {
          runs[x] = std::get<0>(open.top()) + 1;
          from[x] = std::get<2>(open.top());
        }
      }
      if (x < n && runs[x] != none) {
        const double limit = bound - entry(x) + prefix[x];
        const auto end = static_cast<std::size_t>(std::upper_bound(prefix.begin() + static_cast<std::ptrdiff_t>(x) + 1,
                                                                   prefix.end(), limit) -
                                                  prefix.begin()) -
                         1;
        if (end > x) {
          open.emplace(runs[x], end, x);
        }
      }
    }
    if (runs[n] == none) {
      return std::nullopt;
    }
    std::vector<int> cuts;
    for (std::size_t x = n; from[x] > 0; x = from[x]) {
      cuts.push_back(static_cast<int>(from[x]));
    }
    std::reverse(cuts.begin(), cuts.end());
    return cuts;
  };
  const auto within = [&](double bound) {
    const auto cuts = fill(bound);
    return cuts && static_cast<int>(cuts->size()) + 1 <= parts;
  };
  double lo = 0;
  double hi = prefix[n] + (receive.empty() ? 0.0 : *std::max_element(receive.begin(), receive.end()));
  if (!within(hi)) { // one run of everything always keeps within the sum
    hi = prefix[n];
  }
  for (int iter = 0; iter < 100 && hi - lo > 1e-12 * hi; ++iter) {
    const double mid = (lo + hi) / 2;
    (within(mid) ? hi : lo) = mid;
  }
  return use_every_stage(fill(hi).value_or(std::vector<int>{}), parts, times.size());
}

// balanced_cuts where what a piece receives depends on the piece (the devices of its boundary: two
// stages inside a node, or on two nodes): the fewest-runs fill no longer applies (a piece that
// starts one op later may cross a dearer boundary), so each bound is checked piece by piece: the
// ends piece v reaches within it from the starts the pieces before it reach, every piece non-empty
// and the last one ending at the last op. Exact for any rows; per bound, O(parts x ops) and the
// farthest end of each (row of times, row of receives) pair from each start, found once.
std::vector<int> balanced_cuts_by_piece(const std::vector<std::vector<double>>& times,
                                        const std::vector<int>& kind_of_piece, const PieceReceives& receive) {
  const auto parts = kind_of_piece.size();
  const std::size_t n = times.front().size();
  std::vector<std::vector<double>> prefix(times.size(), std::vector<double>(n + 1, 0.0));
  double hi = 0, dearest = 0;
  for (std::size_t k = 0; k < times.size(); ++k) {
    for (std::size_t i = 0; i < n; ++i) {
      prefix[k][i + 1] = prefix[k][i] + times[k][i];
    }
    hi = std::max(hi, prefix[k][n]);
  }
  for (const auto& row : receive.rows) {
    dearest = std::max(dearest, row.empty() ? 0.0 : *std::max_element(row.begin(), row.end()));
  }
  hi += dearest; // every partition into non-empty pieces keeps within it
  // The distinct (row of times, row of receives) pairs of the pieces (piece 0 receives nothing: -1).
  std::vector<std::pair<int, int>> pairs;
  std::vector<std::size_t> pair_of_piece(parts);
  for (std::size_t v = 0; v < parts; ++v) {
    const std::pair<int, int> pr{kind_of_piece[v], v == 0 || receive.rows.empty() ? -1 : receive.row_of_piece[v]};
    const auto it = std::find(pairs.begin(), pairs.end(), pr);
    pair_of_piece[v] = static_cast<std::size_t>(it - pairs.begin());
    if (it == pairs.end()) {
      pairs.push_back(pr);
    }
  }
  std::vector<std::vector<std::size_t>> far(pairs.size(), std::vector<std::size_t>(n, 0));
  std::vector<char> starts(n + 1, 0), next(n + 1, 0);
  std::vector<std::vector<std::size_t>> from; // per piece, per end: a start that reaches it
  // Whether `bound` admits a partition; with `cuts`, the cuts of one.
  const auto within = [&](double bound, std::vector<int>* cuts) {
    for (std::size_t c = 0; c < pairs.size(); ++c) {
      const auto& p = prefix[static_cast<std::size_t>(pairs[c].first)];
      const auto* row = pairs[c].second < 0 ? nullptr : &receive.rows[static_cast<std::size_t>(pairs[c].second)];
      for (std::size_t x = 0; x < n; ++x) {
        const double limit = bound - (row == nullptr ? 0.0 : (*row)[x]) + p[x];
        far[c][x] = static_cast<std::size_t>(std::upper_bound(p.begin() + static_cast<std::ptrdiff_t>(x) + 1, p.end(),
                                                              limit) -
                                             p.begin()) -
                    1; // x itself when not even one op fits
      }
    }
    if (cuts != nullptr) {
      from.assign(parts, std::vector<std::size_t>(n + 1, 0));
    }
    std::fill(starts.begin(), starts.end(), 0);
    starts[0] = 1;
    for (std::size_t v = 0; v < parts; ++v) {
      const auto& reach = far[pair_of_piece[v]];
      // Piece v starts at x with parts - v pieces left for ops x .. n-1, and ends at y leaving
      // parts - v - 1 non-empty pieces after it.
      const std::size_t last_start = n - (parts - v), last_end = n - (parts - v - 1);
      std::fill(next.begin(), next.end(), 0);
      std::size_t best = 0, arg = 0;
      bool any = false;
      for (std::size_t y = 1; y <= last_end; ++y) {
        const std::size_t x = y - 1;
        if (x <= last_start && starts[x] != 0 && (!any || reach[x] > best)) {
          best = reach[x];
          arg = x;
          any = true;
        }
        if (any && best >= y) {
          next[y] = 1;
          if (cuts != nullptr) {
            from[v][y] = arg;
          }
        }
      }
      std::swap(starts, next);
    }
    if (starts[n] == 0) {
      return false;
    }
    if (cuts != nullptr) {
      cuts->assign(parts - 1, 0);
      std::size_t y = n;
      for (std::size_t v = parts; v-- > 1;) {
        y = from[v][y];
        (*cuts)[v - 1] = static_cast<int>(y);
      }
    }
    return true;
  };
  double lo = 0;
  for (int iter = 0; iter < 100 && hi - lo > 1e-12 * hi; ++iter) {
    const double mid = (lo + hi) / 2;
    (within(mid, nullptr) ? hi : lo) = mid;
  }
  std::vector<int> cuts;
  if (!within(hi, &cuts)) { // unreachable: hi is kept only where a partition keeps within it
    for (std::size_t v = 1; v < parts; ++v) {
      cuts.push_back(static_cast<int>(v * n / parts));
    }
  }
  return cuts;
}

} // namespace

std::vector<int> balanced_cuts(const std::vector<std::vector<double>>& times, const std::vector<int>& kind_of_piece,
                               const PieceReceives& receive) {
  if (times.empty() || kind_of_piece.empty() || kind_of_piece.size() > times.front().size()) {
    throw Error(
        fmt::format("pipeline: {} pieces for {} ops", kind_of_piece.size(), times.empty() ? 0 : times.front().size()));
  }
  if (!receive.rows.empty() && receive.row_of_piece.size() != kind_of_piece.size()) {
    throw Error(
        fmt::format("pipeline: receives given for {} of {} pieces", receive.row_of_piece.size(), kind_of_piece.size()));
  }
  // One row shared by every piece past the first (or none): the fill that takes it as a cost of
  // the op where a piece starts.
  bool shared = true;
  for (std::size_t v = 2; v < receive.row_of_piece.size(); ++v) {
    shared = shared && receive.row_of_piece[v] == receive.row_of_piece[1];
  }
  if (kind_of_piece.size() == 1) {
    return {};
  }
  if (times.size() == 1 && (receive.rows.empty() || shared)) {
    return balanced_cuts_one_kind(
        times.front(), static_cast<int>(kind_of_piece.size()),
        receive.rows.empty() ? std::vector<double>{} : receive.rows[static_cast<std::size_t>(receive.row_of_piece[1])]);
  }
  return balanced_cuts_by_piece(times, kind_of_piece, receive);
}

namespace {

// What repeated_ops compares: an op's type and its tensors' shapes.
std::string op_key(const graph::Graph& g, graph::OpId id) {
  const auto& op = g.op(id);
  std::string key = op.type;
  for (const auto* list : {&op.inputs, &op.outputs}) {
    for (const graph::TensorId t : *list) {
      key += t == graph::no_tensor ? "|-" : "|" + graph::shape_string(g.tensor(t).shape);
    }
  }
  return key;
}

// The places a repeated block can start: the ops of `order` (past the first) like the first
// repeated op with a weight (a transformer layer's first layer norm), taken with the period of the
// blocks: its second layer norm is like the first, so the ops between two such places alternate
// (attention, then the MLP), and only every second place starts a layer. The period is the
// fewest places after which the runs of ops between them repeat (past the first period), each run
// compared by its ops' types and shapes.
std::vector<int> block_starts(const graph::Graph& g, const std::vector<graph::OpId>& order,
                              const std::vector<bool>& repeated) {
  auto weighted = [&](graph::OpId id) {
    const auto& inputs = g.op(id).inputs;
    return std::any_of(inputs.begin(), inputs.end(), [&](graph::TensorId t) {
      return t != graph::no_tensor && g.tensor(t).role == graph::TensorRole::parameter;
    });
  };
  std::size_t first = 0;
  while (first < order.size() && !(repeated[first] && weighted(order[first]))) {
    ++first;
  }
  if (first == order.size()) {
    return {};
  }
  const auto key = op_key(g, order[first]);
  std::vector<std::size_t> places{first};
  for (std::size_t i = first + 1; i < order.size(); ++i) {
    if (repeated[i] && op_key(g, order[i]) == key) {
      places.push_back(i);
    }
  }
  // Each run between two places as an interned id.
  std::map<std::vector<std::string>, int> runs;
  std::vector<int> run;
  for (std::size_t j = 0; j + 1 < places.size(); ++j) {
    std::vector<std::string> keys;
    for (std::size_t i = places[j]; i < places[j + 1]; ++i) {
      keys.push_back(op_key(g, order[i]));
    }
    run.push_back(runs.try_emplace(std::move(keys), static_cast<int>(runs.size())).first->second);
  }
  // The first block may hold more (what the layers share, made in the first of them): it is left
  // out of the comparison. No period seen twice: every place.
  const auto repeats = [&](std::size_t p) {
    for (std::size_t j = p; j + p < run.size(); ++j) {
      if (run[j] != run[j + p]) {
        return false;
      }
    }
    return true;
  };
  std::size_t period = 1;
  while (2 * period <= run.size() && !repeats(period)) {
    ++period;
  }
  if (2 * period > run.size()) {
    period = 1;
  }
  std::vector<int> out;
  for (std::size_t j = period; j < places.size(); j += period) {
    out.push_back(static_cast<int>(places[j]));
  }
  return out;
}

// balanced_cuts with cuts only at `starts` (increasing op indices past 0): the ops between two
// starts weighed as one. Nothing where there are fewer such runs than pieces.
std::optional<std::vector<int>> balanced_cuts_at(const std::vector<std::vector<double>>& times,
                                                 const std::vector<int>& kind_of_piece,
                                                 const std::vector<int>& starts) {
  if (starts.size() + 1 < kind_of_piece.size()) {
    return std::nullopt;
  }
  std::vector<int> bounds{0};
  bounds.insert(bounds.end(), starts.begin(), starts.end());
  bounds.push_back(static_cast<int>(times.front().size()));
  std::vector<std::vector<double>> runs(times.size());
  for (std::size_t row = 0; row < times.size(); ++row) {
    for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
      runs[row].push_back(std::accumulate(times[row].begin() + bounds[k], times[row].begin() + bounds[k + 1], 0.0));
    }
  }
  auto cuts = balanced_cuts(runs, kind_of_piece, {});
  for (int& c : cuts) {
    c = bounds[static_cast<std::size_t>(c)];
  }
  return cuts;
}

} // namespace

std::vector<bool> repeated_ops(const graph::Graph& g, const std::vector<graph::OpId>& order) {
  std::map<std::string, int> seen;
  std::vector<std::string> keys;
  for (graph::OpId id : order) {
    auto key = op_key(g, id);
    ++seen[key];
    keys.push_back(std::move(key));
  }
  std::vector<bool> out;
  for (const auto& key : keys) {
    out.push_back(seen[key] > 1);
  }
  return out;
}

namespace {

// What a stage that starts at each op of the order receives, in seconds per iteration (forward
// and backward, the whole batch): every tensor made before that op and read by it or after it,
// priced as input_redistribution() prices it from its producer's layout on `from` (one stage's
// devices, each op laid out as `from_config` gives it) to its dearest reader's on `to` (the next
// stage's, as `to_config` gives it).
// Weighed by time alone, a cut can fall where a large tensor crosses (inside attention, the
// scores of every head); this is what the cut weighs against it.
std::vector<double> receives_at(const Builder& b, const std::function<sharding::Config(graph::OpId)>& from_config,
                                const std::function<sharding::Config(graph::OpId)>& to_config,
                                const std::vector<int>& from, const std::vector<int>& to,
                                const cost::TrainingSetup& setup) {
  const auto& g = b.graph();
  const auto& order = b.order();
  const std::size_t n = order.size();
  std::vector<std::size_t> position(g.ops().size(), 0);
  for (std::size_t i = 0; i < n; ++i) {
    position[static_cast<std::size_t>(order[i])] = i;
  }
  const auto on = [&](graph::OpId id, const std::function<sharding::Config(graph::OpId)>& config_of,
                      const std::vector<int>& devices) {
    auto config = config_of(id);
    const auto k = static_cast<std::size_t>(config.devices());
    return strategy::OpAssignment{
        config,
        std::vector<int>(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(devices.size() / k * k))};
  };
  std::vector<strategy::OpAssignment> mixed(g.ops().size());
  std::map<std::string, double> priced; // reads alike (a transformer's blocks) priced once
  std::map<graph::TensorId, std::pair<double, std::size_t>> crossing; // tensor -> (dearest read, last reader)
  for (std::size_t c = 0; c < n; ++c) {
    b.check_cancel();
    const graph::OpId id = order[c];
    const auto& inputs = g.op(id).inputs;
    for (std::size_t j = 0; j < inputs.size(); ++j) {
      const graph::TensorId t = inputs[j];
      if (t == graph::no_tensor || g.tensor(t).producer < 0) {
        continue;
      }
      const graph::OpId producer = g.tensor(t).producer;
      if (position[static_cast<std::size_t>(producer)] >= c) {
        continue;
      }
      const auto& outs = g.op(producer).outputs;
      auto key = fmt::format("{}#{}#{}#{}#{}#{}", b.signature_id(producer),
                             std::find(outs.begin(), outs.end(), t) - outs.begin(), b.signature_id(id), j,
                             fmt::join(from_config(producer).splits, ","), fmt::join(to_config(id).splits, ","));
      auto [it, unseen] = priced.try_emplace(std::move(key), 0.0);
      if (unseen) {
        mixed[static_cast<std::size_t>(producer)] = on(producer, from_config, from);
        mixed[static_cast<std::size_t>(id)] = on(id, to_config, to);
        for (const auto& term :
             strategy::input_redistribution(g, b.all_semantics(), mixed, b.cluster(), setup, id, j, 1, false,
                                            g.tensor(t).fixed)) { // a fixed tensor goes once (sent_once)
          it->second += term.value;
        }
      }
      auto& [dearest, last] = crossing[t];
      dearest = std::max(dearest, it->second);
      last = std::max(last, c);
    }
  }
  // A tensor crosses every cut after its producer up to its last reader.
  std::vector<double> delta(n + 1, 0.0);
  for (const auto& [t, read] : crossing) {
    delta[position[static_cast<std::size_t>(g.tensor(t).producer)] + 1] += read.first;
    delta[read.second + 1] -= read.first;
  }
  std::vector<double> out(n, 0.0);
  double run = 0;
  for (std::size_t i = 0; i < n; ++i) {
    run += delta[i];
    out[i] = std::max(0.0, run);
  }
  return out;
}

// The pipeline as asked, its stages laid out as r.stage_layout says ("auto" is "searched" here;
// pipeline() below ranks it).
strategy::Strategy pipeline_as_asked(const Request& r,
                                     std::vector<std::vector<sharding::Config>>* stage_layouts = nullptr) {
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
  // --stage-layout searched (and auto): every op split as the per-layer search splits it on one
  // stage's devices, each op priced as run in the pipeline's micro-batches (every stage alike; the
  // sends between stages and the bubble are priced when the plan is evaluated, not in that search).
  if (!r.stage_layout.empty() && r.stage_layout != "auto" && r.stage_layout != "searched") {
    throw Error(fmt::format("pipeline: --stage-layout '{}' is not auto or searched", r.stage_layout));
  }
  const bool auto_layout = !r.stage_layout.empty();
  if (auto_layout && t > 1) {
    throw Error(fmt::format("pipeline: --stage-layout {} chooses every op's split; --tp {} does not apply",
                            r.stage_layout, r.tensor_parallel));
  }
  auto stage_devices = [&](int stage) {
    std::vector<int> devices(static_cast<std::size_t>(per_stage));
    std::iota(devices.begin(), devices.end(), stage * per_stage);
    return devices;
  };
  // The stages' kinds (the kinds of device their devices are; one on a cluster of one kind):
  // stages of the same kinds take one layout and weigh the ops alike.
  std::vector<int> kind_of_stage(static_cast<std::size_t>(stages), 0);
  std::vector<int> first_stage_of_kind{0};
  if (b.cluster().heterogeneous()) {
    std::vector<std::vector<int>> kinds{b.cluster().kinds_of(stage_devices(0))};
    for (int s = 1; s < stages; ++s) {
      const auto k = b.cluster().kinds_of(stage_devices(s));
      const auto it = std::find(kinds.begin(), kinds.end(), k);
      kind_of_stage[static_cast<std::size_t>(s)] = static_cast<int>(it - kinds.begin());
      if (it == kinds.end()) {
        kinds.push_back(k);
        first_stage_of_kind.push_back(s);
      }
    }
  }
  // The per-layer search's layouts: one per kind of stage, each searched on the devices of the
  // first stage of that kind, or given (Request::stage_layouts).
  std::vector<std::vector<sharding::Config>> searched;
  const std::vector<int>& layout_of_stage = kind_of_stage;
  const std::vector<int>& first_stage_of_layout = first_stage_of_kind;
  int batch_split = 1; // the widest split of the batch among the searched configurations
  if (auto_layout) {
    Request q = r;
    q.devices = per_stage;
    q.stages = 0;
    q.pipeline_parallel = 0;
    q.micro_batches = 0;
    q.micro_batch_size = 0;
    q.cuts.clear();
    q.chunks = 0;
    q.schedule = strategy::Schedule::one_f_one_b;
    q.stage_layout.clear();
    q.memory_limit = 1e30; // a stage holds its share of the model: the whole plan is held to the limit
    // Priced as a stage runs its ops: in micro-batches (those asked, else the default's count).
    int m = std::min(r.micro_batches > 0 ? r.micro_batches : 4 * stages, batch);
    while (m > 1 && (batch % m != 0 || (interleaved && m % stages != 0))) {
      --m;
    }
    q.search_micro_batches = std::max(1, m);
    // Batch splits that leave each replica whole micro-batches only: else the layout found could
    // not run in them, where another could.
    q.batch_dims.resize(b.graph().ops().size());
    for (graph::OpId id = 0; id < static_cast<graph::OpId>(q.batch_dims.size()); ++id) {
      q.batch_dims[static_cast<std::size_t>(id)] = b.batch_dim(id);
    }
    q.simulation_budget = 0;
    q.progress = {};
    // Searched under the ZeRO stage (it moves the gradient sync and the step) without
    // recomputation (which adds compute to whatever layout), so that plans differing only in the
    // latter share their layout.
    q.setup.recompute = cost::Recompute::none;
    if (!r.stage_layouts.empty()) {
      if (r.stage_layouts.size() != first_stage_of_layout.size()) {
        throw Error(fmt::format("pipeline: {} stage layouts given for {} kinds of stage", r.stage_layouts.size(),
                                first_stage_of_layout.size()));
      }
      for (const auto& layout : r.stage_layouts) {
        if (layout.size() != b.graph().ops().size()) {
          throw Error(
              fmt::format("pipeline: {} stage configurations given for {} ops", layout.size(), b.graph().ops().size()));
        }
      }
    }
    if (r.stage_layouts.empty()) {
      for (const int first : first_stage_of_layout) {
        // A stage elsewhere than on the first devices is searched on its own nodes, as a cluster
        // of their own whose devices 0 .. per_stage - 1 stand for the stage's.
        const int first_node = b.cluster().node_of(first * per_stage);
        const int last_node = b.cluster().node_of((first + 1) * per_stage - 1);
        const cluster::Cluster own =
            first == 0 ? b.cluster() : b.cluster().nodes_from(first_node, last_node - first_node + 1);
        q.cluster = &own;
        searched.emplace_back();
        for (const auto& a : auto_search(q).strategy.ops) {
          searched.back().push_back(a.config);
        }
      }
    } else {
      searched = r.stage_layouts;
    }
    if (stage_layouts != nullptr) {
      *stage_layouts = searched;
    }
    for (const auto& layout : searched) {
      for (graph::OpId id = 0; id < static_cast<graph::OpId>(layout.size()); ++id) {
        const auto& config = layout[static_cast<std::size_t>(id)];
        const int dim = b.batch_dim(id);
        if (dim >= 0 && static_cast<std::size_t>(dim) < config.splits.size()) {
          batch_split = std::max(batch_split, config.splits[static_cast<std::size_t>(dim)]);
        }
      }
    }
  }
  const int replicas = auto_layout ? batch_split : std::max(1, per_stage / t);
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

  // An op's configuration on a stage: its kind's searched layout, else data parallel inside it.
  auto stage_config = [&](graph::OpId id, int stage) {
    return auto_layout ? searched[static_cast<std::size_t>(layout_of_stage[static_cast<std::size_t>(stage)])]
                                 [static_cast<std::size_t>(id)]
                       : b.split(id, {{b.batch_dim(id), per_stage}});
  };
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
  } else if (r.balance == "time" || r.balance == "layers" || r.balance == "speed") {
    const auto& repeated = b.repeated();
    const bool has_repeated = std::find(repeated.begin(), repeated.end(), true) != repeated.end();
    if (r.balance == "layers" && !has_repeated) {
      throw Error("pipeline: --balance layers: the model has no repeated blocks to share out");
    }
    // "speed": the repeated blocks (else every op) shared out by their time on each stage's own
    // devices. "time" weighs every op at the devices of the stage it lands on too; "layers", as
    // Megatron-LM, at the first stage's, so that every stage gets as many layers whatever its kind.
    const bool by_layers = r.balance == "layers" || (r.balance == "speed" && has_repeated);
    const bool per_stage_kind = r.balance != "layers" && b.cluster().heterogeneous();
    // A row of times per kind of stage (one, at the first stage's devices, for "layers").
    const std::vector<int> row_of_stage =
        per_stage_kind ? kind_of_stage : std::vector<int>(static_cast<std::size_t>(stages), 0);
    const std::vector<int> first_stage_of_row = per_stage_kind ? first_stage_of_kind : std::vector<int>{0};
    // Megatron-LM's cut depends on the layers alone: weighed without ZeRO's collectives and
    // recomputation, so that the same layers land on the same stages whatever those settings.
    cost::TrainingSetup weigh = r.setup;
    if (by_layers) {
      weigh.zero_stage = 0;
      weigh.recompute = cost::Recompute::none;
    }
    std::vector<std::vector<double>> times(first_stage_of_row.size());
    for (std::size_t row = 0; row < times.size(); ++row) {
      const auto devices_of_stage = stage_devices(first_stage_of_row[row]);
      // Ops of equal cost signature and configuration cost the same (a model's repeated layers):
      // each priced once per row.
      std::map<std::pair<int, std::vector<int>>, double> priced; // (signature, splits)
      for (graph::OpId id : b.order()) {
        b.check_cancel();
        const auto config = stage_config(id, first_stage_of_row[row]);
        auto key = std::make_pair(b.signature_id(id), config.splits);
        if (const auto it = priced.find(key); it != priced.end()) {
          times[row].push_back(it->second);
          continue;
        }
        const auto k = static_cast<std::size_t>(config.devices());
        std::vector<int> devices(devices_of_stage.begin(),
                                 devices_of_stage.begin() + static_cast<std::ptrdiff_t>(per_stage / k * k));
        times[row].push_back(cost::op_cost(b.graph(), id, b.semantics(id), config, devices, b.cluster(), weigh,
                                           cost::Saved::kept, {}, 1, false)
                                 .time_total());
        priced.emplace(std::move(key), times[row].back());
      }
      if (by_layers) {
        // Megatron-LM's way: the repeated blocks (layers) shared out, what occurs once (the
        // embedding, the output layer, the loss) riding along with the first and the last piece.
        for (std::size_t i = 0; i < times[row].size(); ++i) {
          times[row][i] = repeated[i] ? times[row][i] : 0.0;
        }
      }
    }
    std::vector<int> kind_of_piece(static_cast<std::size_t>(pieces));
    for (int v = 0; v < pieces; ++v) {
      kind_of_piece[static_cast<std::size_t>(v)] = row_of_stage[static_cast<std::size_t>(v % stages)];
    }
    // Shared out by speed over stages of several kinds, the repeated blocks stay whole where there
    // are enough of them (a cut inside one sends a tensor of its inner layout between stages). Over
    // stages of one kind it is the "layers" cut.
    std::optional<std::vector<int>> whole_blocks;
    if (r.balance == "speed" && by_layers && times.size() > 1) {
      whole_blocks = balanced_cuts_at(times, kind_of_piece, block_starts(b.graph(), b.order(), repeated));
    }
    // Cut by time, a stage also waits for what it receives (receives_at), priced on the devices of
    // its own boundary: piece v receives from the stage of piece v - 1 (stages inside one node, on
    // two nodes, of two kinds). Boundaries whose devices sit alike in their nodes, of the same
    // kinds, receive alike: each such is priced once, and rows alike in every figure are one.
    PieceReceives receive;
    if (!by_layers && pieces > 1) {
      const int per_node = b.cluster().devices_per_node;
      std::map<std::vector<int>, int> row_of_boundary;
      receive.row_of_piece.assign(static_cast<std::size_t>(pieces), -1);
      for (int v = 1; v < pieces; ++v) {
        const int sf = (v - 1) % stages, st = v % stages;
        const int base = b.cluster().node_of(sf * per_stage) * per_node;
        const std::vector<int> key{kind_of_stage[static_cast<std::size_t>(sf)],
                                   kind_of_stage[static_cast<std::size_t>(st)], sf * per_stage - base,
                                   st * per_stage - base};
        auto [it, fresh] = row_of_boundary.try_emplace(key, -1);
        if (fresh) {
          auto row = receives_at(
              b, [&](graph::OpId id) { return stage_config(id, sf); },
              [&](graph::OpId id) { return stage_config(id, st); }, stage_devices(sf), stage_devices(st), weigh);
          const auto same = std::find(receive.rows.begin(), receive.rows.end(), row);
          it->second = static_cast<int>(same - receive.rows.begin());
          if (same == receive.rows.end()) {
            receive.rows.push_back(std::move(row));
          }
        }
        receive.row_of_piece[static_cast<std::size_t>(v)] = it->second;
      }
    }
    cuts = whole_blocks ? *whole_blocks : balanced_cuts(times, kind_of_piece, receive);
    const std::string where = times.size() > 1 ? " on the devices of the stage each lands on" : "";
    // "speed" over stages of one kind is the "layers" cut.
    how = r.balance == "layers" || (by_layers && times.size() == 1)
              ? "sharing the repeated blocks out evenly by their time (the ops that occur once "
                "ride along with the first and last pieces), as Megatron-LM does"
          : by_layers ? fmt::format("sharing the repeated blocks out by their time{} (the ops that occur once ride "
                                    "along with the first and last pieces)",
                                    where)
                      : fmt::format("balanced by forward+backward time{} and what each stage receives", where);
  } else {
    throw Error(fmt::format("pipeline: balance '{}' is not time, layers, speed or even", r.balance));
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
      b.assign(id, stage_config(id, stage % stages));
    }
  }
  const std::string inside =
      auto_layout && searched.size() > 1
          ? fmt::format("each op split as the per-layer search splits it on the devices of its stage's kind "
                        "({} layouts, one per kind of stage)",
                        searched.size())
      : auto_layout ? "each op split as the per-layer search splits it on one stage's devices"
      : t > 1       ? fmt::format("{}-way tensor parallel x {}-way data parallel inside each", t, per_stage / t)
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

} // namespace

// --stage-layout auto: the per-layer search prices each op on its own, in a stage, by its terms
// added up; the pipeline runs the layout with the gradient sync under the backward pass, in a
// schedule, beside its neighbours' sends, and a cut balanced by time alone can fall inside a
// block where the tensor sent between stages is large. So the layout it found, on the cut asked and
// on Megatron-LM's (the repeated blocks shared out evenly), is set against Megatron-LM's stage
// layouts (data parallel, and t-way tensor parallel inside a node for every t dividing a stage's
// devices, on Megatron-LM's cut), all with the same stages, schedule and micro-batches asked; each
// pipeline is simulated and the fastest that fits is returned, the first on a tie. Cut points
// given are kept for all. A budget of 0 (the 3-D search, which ranks those layouts itself) or a
// layout given takes the searched one as it is.
strategy::Strategy pipeline(const Request& r, std::vector<std::vector<sharding::Config>>* stage_layouts) {
  auto searched = pipeline_as_asked(r, r.stage_layout == "searched" ? stage_layouts : nullptr);
  if (r.stage_layout != "auto" || !r.stage_layouts.empty() || r.simulation_budget == 0) {
    return searched;
  }
  const auto& g = *r.graph;
  strategy::Evaluator evaluator(g, *r.cluster);
  struct Ranked {
    std::string name;
    strategy::Strategy plan;
    double seconds = 0;
    bool fits = false;
  };
  std::size_t work = 0;
  // The plan's simulated iteration, or none where it is too large to simulate or the budget is
  // spent (the ranking then stops: an iteration added up is not comparable with a simulated one).
  const auto simulated = [&](std::string name, strategy::Strategy st) -> std::optional<Ranked> {
    if (work >= r.simulation_budget) {
      return std::nullopt;
    }
    const auto setup = st.setup ? *st.setup : r.setup;
    auto prediction = evaluator(st, setup);
    const auto s = sim::simulate_prediction(g, *r.cluster, st, prediction, {}, sim::max_predicted_tasks);
    if (!s) {
      work = r.simulation_budget;
      return std::nullopt;
    }
    work += detail::simulation_work(s->tasks);
    const double limit = r.memory_limit > 0 ? r.memory_limit : prediction.memory_capacity;
    return Ranked{std::move(name), std::move(st), prediction.iteration_time, prediction.peak_memory <= limit};
  };
  const auto cut_name = [&](const std::string& balance) {
    return !r.cuts.empty()       ? std::string()
           : balance == "layers" ? std::string(", Megatron-LM's cut")
           : balance == "even"   ? std::string(", cut evenly")
                                 : fmt::format(", cut by {}", balance);
  };
  auto first = simulated("the per-layer search's layout" + cut_name(r.balance), std::move(searched));
  if (!first) {
    return pipeline_as_asked(r); // too large to simulate: the searched layout as it is
  }
  std::vector<Ranked> ranked{std::move(*first)};
  std::vector<std::string> skipped;
  const int stages = ranked.front().plan.pipeline->stages;
  const int per_stage = r.devices / stages;
  // Megatron-LM's cut, as the megatron family takes it.
  const auto repeated = r.facts && r.facts->repeated.size() == g.ops().size() ? r.facts->repeated
                                                                              : repeated_ops(g, g.topological_order());
  const std::string megatron_cut = r.balance == "speed"                                                  ? "speed"
                                   : std::find(repeated.begin(), repeated.end(), true) != repeated.end() ? "layers"
                                                                                                         : "time";
  const auto rank = [&](std::string name, const Request& q) {
    try {
      auto plan = pipeline_as_asked(q);
      if (auto x = simulated(name, std::move(plan))) {
        ranked.push_back(std::move(*x));
      }
    } catch (const Cancelled&) {
      throw;
    } catch (const Error& e) { // micro-batches this layout cannot run in, say
      skipped.push_back(fmt::format("{} ({})", name, e.what()));
    }
  };
  if (r.cuts.empty() && megatron_cut != r.balance) {
    Request q = r;
    q.balance = megatron_cut;
    q.progress = {};
    rank("the per-layer search's layout" + cut_name(megatron_cut), q);
  }
  for (int t = 1; t <= per_stage && t <= r.cluster->devices_per_node; t *= 2) {
    if (per_stage % t != 0) {
      continue;
    }
    Request q = r;
    q.stage_layout.clear();
    q.tensor_parallel = t;
    q.stages = stages;
    q.balance = megatron_cut;
    q.progress = {};
    rank((t == 1 ? std::string("data parallel")
                 : fmt::format("Megatron-LM's {}-way tensor x {}-way data parallel", t, per_stage / t)) +
             cut_name(megatron_cut),
         q);
  }
  std::size_t best = 0;
  for (std::size_t i = 1; i < ranked.size(); ++i) {
    const auto& x = ranked[i];
    const auto& y = ranked[best];
    if ((x.fits && !y.fits) || (x.fits == y.fits && x.seconds < y.seconds)) {
      best = i;
    }
  }
  std::vector<std::string> figures;
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    figures.push_back(fmt::format("{} {:.3f} ms{}{}", ranked[i].name, ranked[i].seconds * 1e3,
                                  ranked[i].fits ? "" : " (does not fit)", i == best ? " (chosen)" : ""));
  }
  auto out = std::move(ranked[best].plan);
  out.explanation += fmt::format(
      " Stage layout auto: the per-layer search's layout set against Megatron-LM's stage layouts on the same "
      "stages and micro-batches, each pipeline simulated: {}{}.",
      fmt::join(figures, "; "), skipped.empty() ? "" : fmt::format("; not run: {}", fmt::join(skipped, "; ")));
  return out;
}

} // namespace partita::search::detail
