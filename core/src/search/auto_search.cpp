// The per-layer search: a cost graph from op_cost and input_redistribution (the terms evaluate()
// sums), solved exactly by dp::solve. Ops with equal cost signatures (the blocks of a transformer,
// the units of a ResNet stage) share their tables, and an edge's costs are computed once per pair
// of distinct layouts: the tables of a 96-layer GPT cost what those of one layer do.

#include "partita/search/auto_search.h"

#include "partita/cluster/collectives.h"
#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"
#include "partita/sim/simulate.h"
#include "sharding/grid.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <system_error>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace partita::search {
namespace {

// What every op whose cost signature is the same shares: its configurations, their costs, and
// which block of each input and output tensor every configuration places where.
struct OpClassTables {
  std::vector<sharding::Config> configs;
  std::vector<double> time;      // op_cost's time total per configuration
  std::vector<double> memory;    // per device: parameters, gradients, optimizer state, activations
  std::vector<double> workspace; // per device: the op's transient backward buffers
  std::vector<double> sync;      // per configuration: the part of `time` that is weight-gradient sync
  std::vector<std::vector<int>> input_key, output_key; // per slot, per configuration: an interned placement
  // A tied weight's later reader (strategy::shared_parameters): `time` leaves out the weight's
  // state (memory, gradient sync, gathers, step), which it shares with the first reader when it
  // holds the same blocks on the same devices; per configuration, the seconds that state costs
  // when it does not (the tie edge adds them then).
  std::vector<double> tie_state;
};

class CostGraph {
public:
  explicit CostGraph(const Request& r) : m_r(r), m_g(*r.graph) {
    if (r.graph == nullptr || r.cluster == nullptr) {
      throw Error("auto: a model and a cluster are required");
    }
    if (r.devices < 1 || r.devices > r.cluster->device_count()) {
      throw Error(fmt::format("auto: {} devices requested, the cluster '{}' has {}", r.devices, r.cluster->name,
                              r.cluster->device_count()));
    }
    if (!(r.bounded_table_entries == 0 || (r.bounded_table_entries >= 1 && r.bounded_table_entries <= 6e7))) {
      throw Error(fmt::format("auto: the bounded search's tables of {} entries: give 0 (refuse a graph too wide to "
                              "search exactly) or from 1 to 6e7",
                              r.bounded_table_entries));
    }
    if (r.min_piece < 1) {
      throw Error(fmt::format("auto: the smallest piece is {} elements; it must be at least 1", r.min_piece));
    }
    if (!r.batch_dims.empty() && r.batch_dims.size() != m_g.ops().size()) {
      throw Error(fmt::format("auto: {} batch dims given for {} ops", r.batch_dims.size(), m_g.ops().size()));
    }
    m_all_devices.resize(static_cast<std::size_t>(r.devices));
    std::iota(m_all_devices.begin(), m_all_devices.end(), 0);
    const std::size_t n = m_g.ops().size();
    for (std::size_t i = 0; i < n; ++i) {
      m_sem.push_back(graph::describe(m_g, static_cast<graph::OpId>(i)));
    }
    m_order = m_g.topological_order();
    m_keep = strategy::saved_outputs(m_g, m_order, m_sem, r.setup.recompute);
    m_tie_inputs.resize(n);
    for (const auto& tie : strategy::tied_weights(m_g)) {
      for (std::size_t k = 1; k < tie.readers.size(); ++k) {
        if (tie.readers[k].first != tie.readers.front().first) {
          m_tie_inputs[static_cast<std::size_t>(tie.readers[k].first)].push_back(
              {tie.readers[k].second, tie.readers.front().first, tie.readers.front().second});
        }
      }
    }
    m_class_of.resize(n);
    std::map<std::string, int> classes;
    std::vector<graph::OpId> first_of; // per class, its first op
    for (const graph::OpId id : m_order) {
      const auto i = static_cast<std::size_t>(id);
      auto signature = cost::cost_signature(m_g, id, m_sem[i], m_keep[i]);
      if (!r.batch_dims.empty()) { // its own class: the batch dim bounds its splits (enumerate)
        signature += fmt::format("|batch dim {}", r.batch_dims[i]);
      }
      for (const auto& tie : m_tie_inputs[i]) { // its own class: its time leaves the tied weight's state out
        signature += fmt::format("|tied input {}", tie.input);
      }
      auto [it, fresh] = classes.try_emplace(std::move(signature), static_cast<int>(first_of.size()));
      m_class_of[i] = it->second;
      if (fresh) {
        first_of.push_back(id);
      }
    }
    list_edges();
    std::vector<std::vector<sharding::Config>> configs;
    for (const graph::OpId id : first_of) {
      check_cancel();
      configs.push_back(enumerate(id));
    }
    // Where every configuration places its tensors first: the size check counts the distinct
    // placements the edge tables will price, before any op is priced.
    for (std::size_t c = 0; c < first_of.size(); ++c) {
      check_cancel();
      m_classes.push_back(place_class(first_of[c], std::move(configs[c])));
    }
    check_size();
    // The ops' collectives (gradient syncs, an op's own all-reduces) recur from one configuration
    // and class to the next: each priced once, in the memo the rounds of pricing use after.
    m_memo = std::make_unique<cluster::CollectiveMemo>(*r.cluster);
    const cluster::CollectiveMemo::Use use(*m_memo);
    for (std::size_t c = 0; c < first_of.size(); ++c) {
      price_class(first_of[c], m_classes[c]);
      if (r.progress) {
        r.progress(0.3 * static_cast<double>(c + 1) / static_cast<double>(first_of.size()));
      }
    }
    // The edge tables (most of the search's time) come with build_problem(), once the ops' own
    // tables have shown that some plan fits.
  }

  const graph::Graph& graph() const { return m_g; }
  const std::vector<graph::OpSemantics>& semantics() const { return m_sem; }
  const OpClassTables& tables(graph::OpId id) const {
    return m_classes[static_cast<std::size_t>(m_class_of[static_cast<std::size_t>(id)])];
  }
  dp::Problem& problem() { return m_problem; }
  // The dynamic programs' memory, handed from one solve of the problem to the next.
  dp::Workspace& workspace() { return m_workspace; }
  const dp::Problem& problem() const { return m_problem; }
  std::size_t class_count() const { return m_classes.size(); }
  // Pairs of distinct layouts the edge tables price x devices (Request::max_search_work's units).
  double search_work() const { return m_search_work; }
  int class_of(graph::OpId id) const { return m_class_of[static_cast<std::size_t>(id)]; }
  // The dp table of each class's vertex costs (time only).
  const std::vector<int>& class_table() const { return m_class_table; }

  std::vector<int> devices(const sharding::Config& c) const {
    const int k = c.devices();
    std::vector<int> d(static_cast<std::size_t>(m_r.devices / k * k));
    std::iota(d.begin(), d.end(), 0);
    return d;
  }

  // devices(c) without a copy: the first of 0 .. devices-1.
  std::span<const int> device_span(const sharding::Config& c) const {
    const int k = c.devices();
    return {m_all_devices.data(), static_cast<std::size_t>(m_r.devices / k * k)};
  }

  strategy::OpAssignment assignment(graph::OpId id, int choice) const {
    const auto& c = tables(id).configs[static_cast<std::size_t>(choice)];
    return {c, devices(c)};
  }

  // Op `id`'s time terms in configuration x (op_cost's) and the redistribution of each of its
  // inputs from its producer's configuration in `choice`, named as evaluate() names them.
  std::vector<cost::Term> terms(graph::OpId id, int x, const std::vector<int>& choice) const {
    const auto i = static_cast<std::size_t>(id);
    const auto a = assignment(id, x);
    // A tied weight's later reader shares the weight's state where it holds the first reader's
    // blocks on its devices (strategy::shared_parameters, as evaluate() decides it).
    std::vector<std::size_t> shared;
    for (const auto& tie : m_tie_inputs[i]) {
      const auto fa = assignment(tie.first, choice[static_cast<std::size_t>(tie.first)]);
      if (strategy::move_geometry(
              sharding::input_layout(m_g, m_sem[i], a.config, tie.input), a,
              sharding::input_layout(m_g, m_sem[static_cast<std::size_t>(tie.first)], fa.config, tie.first_input), fa)
              .same_blocks) {
        shared.push_back(tie.input);
      }
    }
    auto out = cost::op_cost(m_g, id, m_sem[i], a.config, a.devices, *m_r.cluster, m_r.setup, m_keep[i], shared).time;
    // input_redistribution reads the assignments of the op and of the input's producer alone: one
    // list for every call, those two entries set and cleared again (a list per call made the
    // runner-ups quadratic in the ops).
    auto& scratch = m_terms_scratch;
    scratch.resize(m_g.ops().size());
    scratch[i] = a;
    for (const std::size_t e : m_edges_into[i]) {
      const auto& edge = m_edges[e];
      const auto pa = assignment(edge.prod, choice[static_cast<std::size_t>(edge.prod)]);
      if (edge.tie) {
        const auto geometry = strategy::move_geometry(
            sharding::input_layout(m_g, m_sem[static_cast<std::size_t>(edge.prod)], pa.config, edge.out), pa,
            sharding::input_layout(m_g, m_sem[i], a.config, edge.in), a);
        for (auto& term :
             strategy::tied_gradient_terms(geometry, m_contexts[edge.context], *m_r.cluster, m_r.setup, true)) {
          out.push_back(std::move(term));
        }
        continue;
      }
      scratch[static_cast<std::size_t>(edge.prod)] = pa;
      for (auto& term : strategy::input_redistribution(m_g, m_sem, scratch, *m_r.cluster, m_r.setup, id, edge.in)) {
        out.push_back(std::move(term));
      }
      scratch[static_cast<std::size_t>(edge.prod)] = {};
    }
    scratch[i] = {};
    return out;
  }

  void check_cancel() const {
    if (m_r.cancel != nullptr && m_r.cancel->load()) {
      throw Cancelled();
    }
  }

private:
  // The configurations op id may take (the search space of its class).
  std::vector<sharding::Config> enumerate(graph::OpId id) const {
    const auto& s = m_sem[static_cast<std::size_t>(id)];
    sharding::EnumerateOptions eo;
    eo.max_devices = m_r.devices;
    eo.powers_of_two = !m_r.all_divisors;
    std::vector<sharding::Config> out;
    // A pipeline stage's batch split leaves each replica whole micro-batches (Request::batch_dims).
    const int batch_dim = m_r.batch_dims.empty() ? -1 : m_r.batch_dims[static_cast<std::size_t>(id)];
    const std::int64_t per_micro_batch =
        m_r.search_micro_batches > 1 ? strategy::batch_size(m_g) / m_r.search_micro_batches : 0;
    for (auto& c : sharding::enumerate_configs(s, eo)) {
      bool keep = !m_r.all_divisors || m_r.devices % c.devices() == 0;
      if (batch_dim >= 0 && per_micro_batch > 0 && static_cast<std::size_t>(batch_dim) < c.splits.size()) {
        keep = keep && per_micro_batch % c.splits[static_cast<std::size_t>(batch_dim)] == 0;
      }
      for (std::size_t d = 0; d < c.splits.size() && keep; ++d) {
        keep = c.splits[d] == 1 || s.dims[d].size / c.splits[d] >= m_r.min_piece;
      }
      if (keep) {
        out.push_back(std::move(c));
      }
    }
    return out;
  }

  // Refuses, before any pricing, a search whose edge tables would take hours. Each distinct edge
  // table prices one move per pair of distinct placements of its tensor (the producer's output
  // placements x the consumer's input placements; a tied weight's table, every pair of
  // configurations), each move walking every device.
  void check_size() {
    std::set<EdgeMemo> tables;
    double pairs = 0;
    const auto distinct = [](std::vector<int> keys) {
      std::sort(keys.begin(), keys.end());
      return static_cast<double>(std::unique(keys.begin(), keys.end()) - keys.begin());
    };
    for (const auto& e : m_edges) {
      if (!tables.insert(memo_of(e)).second) {
        continue;
      }
      const auto& from = tables_of_class(class_of(e.prod));
      const auto& to = tables_of_class(class_of(e.cons));
      pairs += e.tie ? static_cast<double>(from.configs.size()) * static_cast<double>(to.configs.size())
                     : distinct(from.output_key[e.out]) * distinct(to.input_key[e.in]);
    }
    m_search_work = pairs * m_r.devices;
    if (m_r.max_search_work > 0 && m_search_work > m_r.max_search_work) {
      throw Error(fmt::format("auto: the search is too large to run here: on {} devices its {} edge tables would "
                              "price {:.3g} pairs of distinct layouts, each over every device ({:.3g} units of work, "
                              "the limit is {:.3g}); use fewer devices, a --min-piece that drops thin slivers, or "
                              "raise --search-limit to wait for it",
                              m_r.devices, tables.size(), pairs, m_search_work, m_r.max_search_work));
    }
  }

  const OpClassTables& tables_of_class(int c) const { return m_classes[static_cast<std::size_t>(c)]; }

  // Op id's configurations and where each places its input and output tensors.
  OpClassTables place_class(graph::OpId id, std::vector<sharding::Config> configs) {
    const auto i = static_cast<std::size_t>(id);
    const auto& s = m_sem[i];
    const auto& op = m_g.op(id);
    OpClassTables t;
    t.configs = std::move(configs);
    const auto key = [&](const sharding::TensorLayout& layout, const sharding::Config& c) {
      auto k = sharding::block_signature(layout, c);
      k.push_back(static_cast<std::int64_t>(devices(c).size()));
      const auto [it, fresh] = m_keys.try_emplace(std::move(k), static_cast<int>(m_keys.size()));
      if (fresh) {
        m_key_list.push_back(&it->first);
      }
      return it->second;
    };
    // Where every configuration places each input and output tensor.
    const auto placements = [&](const std::vector<graph::TensorId>& tensors, auto layout_of) {
      std::vector<std::vector<int>> keys(tensors.size());
      for (std::size_t slot = 0; slot < tensors.size(); ++slot) {
        for (std::size_t x = 0; x < t.configs.size() && tensors[slot] != graph::no_tensor; ++x) {
          keys[slot].push_back(key(layout_of(m_g, s, t.configs[x], slot), t.configs[x]));
        }
      }
      return keys;
    };
    t.input_key = placements(op.inputs, sharding::input_layout);
    t.output_key = placements(op.outputs, sharding::output_layout);
    return t;
  }

  // Op id's own costs in each of its configurations, into its class's tables t.
  void price_class(graph::OpId id, OpClassTables& t) {
    const auto i = static_cast<std::size_t>(id);
    const auto& s = m_sem[i];
    for (const auto& c : t.configs) {
      check_cancel(); // thousands of configurations of a convolution at 1,024 devices
      const auto devs = devices(c);
      const auto oc =
          cost::op_cost(m_g, id, s, c, devs, *m_r.cluster, m_r.setup, m_keep[i], {}, m_r.search_micro_batches, false);
      if (m_tie_inputs[i].empty()) {
        t.time.push_back(oc.time_total());
        t.sync.push_back(oc.get(cost::term::gradient_sync));
      } else {
        const auto shared = tie_slots(id);
        const auto without = cost::op_cost(m_g, id, s, c, devs, *m_r.cluster, m_r.setup, m_keep[i], shared,
                                           m_r.search_micro_batches, false);
        t.time.push_back(without.time_total());
        t.sync.push_back(without.get(cost::term::gradient_sync));
        t.tie_state.push_back(oc.time_total() - without.time_total());
      }
      t.memory.push_back(oc.get(cost::term::parameters) + oc.get(cost::term::gradients) +
                         oc.get(cost::term::optimizer_state) + oc.get(cost::term::activations));
      t.workspace.push_back(oc.get(cost::term::workspace));
    }
  }

  // What the cost of a move reads of a tensor besides the two layouts (strategy::move_terms): its
  // shape and type, whether a gradient goes back, and whether that gradient is added into the
  // producer's (several readers, or a graph output).
  int tensor_signature(graph::OpId consumer, std::size_t input, const strategy::MoveContext& c, bool tie) {
    const auto& x = m_g.tensor(m_g.op(consumer).inputs[input]);
    auto sig = fmt::format("{}{}|{}|{}|{}", tie ? "tie|" : "", fmt::join(x.shape, ","), static_cast<int>(x.dtype),
                           c.gradient, c.several_readers || c.graph_output);
    return m_tensor_sigs.try_emplace(std::move(sig), static_cast<int>(m_tensor_sigs.size())).first->second;
  }

public:
  // The dynamic program's problem: the ops' tables as vertices, every edge's table of moves. With
  // `lazy`, a move not priced yet holds a lower bound on its price (strategy::
  // move_seconds_lower_bound, from the two placements' block sizes alone) until a solution uses it
  // (make_exact): an optimum of such tables that uses priced moves alone is an optimum of the
  // priced tables, since every other choice costs at least its bounds. Otherwise every move is
  // priced here.
  void build_problem(bool lazy) {
    const std::size_t n = m_g.ops().size();
    for (const auto& c : m_classes) {
      m_class_table.push_back(m_problem.add_table(c.time));
    }
    for (std::size_t i = 0; i < n; ++i) {
      const auto& c = m_classes[static_cast<std::size_t>(m_class_of[i])];
      m_problem.add_vertex(static_cast<int>(c.configs.size()), m_g.op(static_cast<graph::OpId>(i)).name);
      m_problem.unary[i] = m_class_table[static_cast<std::size_t>(m_class_of[i])];
    }
    // First every table's pairs of distinct placements, each a move (one per distinct (tensor,
    // placement, placement), with the edge and configurations that stand for it) holding its price
    // or its bound; then the moves to price now (all of them, or none), on every thread asked for
    // (each move is priced on its own, so the tables do not depend on the thread count); then the
    // tables, from the moves.
    std::map<EdgeMemo, int> edge_tables;
    std::vector<std::size_t> fresh_edges; // per new table, its first edge
    std::vector<int> table_of_edge(m_edges.size(), -1);
    std::vector<int> key_slot(m_keys.size(), -1);
    std::size_t pairs = 0, key_words = 0; // of distinct placements, over the new tables
    for (std::size_t i = 0; i < m_edges.size(); ++i) {
      const auto& e = m_edges[i];
      auto [it, fresh] = edge_tables.try_emplace(memo_of(e), static_cast<int>(fresh_edges.size()));
      table_of_edge[i] = it->second;
      if (!fresh) {
        continue;
      }
      fresh_edges.push_back(i);
      m_table_moves.emplace_back();
      if (e.tie) {
        continue; // priced below, pair by pair: its cost depends on the reader's configuration
      }
      // The pairs of distinct placements (an op's configurations place a tensor in far fewer ways
      // than there are configurations), each with its first configurations.
      auto& moves = m_table_moves.back();
      const auto distinct = [&](const std::vector<int>& keys, std::vector<int>& slot, std::vector<std::size_t>& first) {
        slot.resize(keys.size());
        for (std::size_t x = 0; x < keys.size(); ++x) {
          int& seen = key_slot[static_cast<std::size_t>(keys[x])];
          if (seen < 0) {
            seen = static_cast<int>(first.size());
            first.push_back(x);
          }
          slot[x] = seen;
        }
        for (const std::size_t x : first) {
          key_slot[static_cast<std::size_t>(keys[x])] = -1;
        }
      };
      distinct(tables(e.prod).output_key[e.out], moves.from_slot, moves.first_from);
      distinct(tables(e.cons).input_key[e.in], moves.to_slot, moves.first_to);
      moves.columns = moves.first_to.size();
      const std::size_t edge_pairs = moves.first_from.size() * moves.first_to.size();
      pairs += edge_pairs;
      // write_key's length at most: the two device counts, then five words a cut dim.
      key_words += edge_pairs * (2 + 5 * m_g.tensor(m_g.op(e.cons).inputs[e.in]).shape.size());
    }
    // Then the moves of every pair, into buffers sized for the most there can be: grown as they
    // filled, they were copied and faulted in again page by page (a sixth of BERT's search at 64
    // devices); reserved memory not written is never touched.
    m_move_cost.reserve(m_move_cost.size() + pairs);
    m_move_exact.reserve(m_move_exact.size() + pairs);
    m_jobs.reserve(m_jobs.size() + pairs);
    m_geometry_of.reserve(pairs, key_words);
    const auto rates = strategy::move_bound_rates(*m_r.cluster);
    for (std::size_t t = 0; t < fresh_edges.size(); ++t) {
      const std::size_t i = fresh_edges[t];
      const auto& e = m_edges[i];
      if (e.tie) {
        continue;
      }
      auto& moves = m_table_moves[t];
      const auto& from = tables(e.prod).output_key[e.out];
      const auto& to = tables(e.cons).input_key[e.in];
      const auto& x = m_g.tensor(m_g.op(e.cons).inputs[e.in]);
      const auto block_bytes = [&](int key) { // the largest block of x a placement puts on a device
        const auto& k = *m_key_list[static_cast<std::size_t>(key)]; // (parts, stride) per dim
        double bytes = static_cast<double>(graph::dtype_size(x.dtype));
        for (std::size_t j = 0; j < x.shape.size(); ++j) {
          bytes *= static_cast<double>(sharding::detail::part_size(x.shape[j], k[2 * j]));
        }
        return bytes;
      };
      // What both device 0's blocks hold: the first part of every dim on either side.
      const auto shared_bytes = [&](int from_key, int to_key) {
        const auto& f = *m_key_list[static_cast<std::size_t>(from_key)];
        const auto& t = *m_key_list[static_cast<std::size_t>(to_key)];
        double bytes = static_cast<double>(graph::dtype_size(x.dtype));
        for (std::size_t j = 0; j < x.shape.size(); ++j) {
          bytes *= static_cast<double>(std::min(sharding::detail::part_size(x.shape[j], f[2 * j]),
                                                sharding::detail::part_size(x.shape[j], t[2 * j])));
        }
        return bytes;
      };
      const auto& context = m_contexts[e.context];
      moves.move.reserve(moves.first_from.size() * moves.first_to.size());
      // Each side's largest block, once per placement rather than per pair.
      std::vector<double> to_bytes(moves.first_to.size());
      for (std::size_t j = 0; j < to_bytes.size(); ++j) {
        to_bytes[j] = block_bytes(to[moves.first_to[j]]);
      }
      // A row (one producer placement against the table's consumer placements) met before, in
      // another table of the tensor with the same consumer placements in the same order, holds
      // the same moves: copied at once (ResNet-50's tables at 64 devices look 590,000 pairs up for
      // 141,000 moves). Else each pair is looked up, `ahead` pairs prefetched.
      thread_local std::vector<std::int64_t> column_keys;
      column_keys.clear();
      for (const std::size_t b : moves.first_to) {
        column_keys.push_back(to[b]);
      }
      const auto columns_id = static_cast<int>(m_column_lists.insert(column_keys).first);
      constexpr std::size_t ahead = 8;
      const std::size_t columns = moves.first_to.size();
      for (const std::size_t a : moves.first_from) {
        const auto [row, fresh_row] = m_rows.try_emplace(e.tensor, from[a], columns_id, m_row_moves.size());
        if (!fresh_row) {
          const auto first = m_row_moves.begin() + static_cast<std::ptrdiff_t>(*row);
          moves.move.insert(moves.move.end(), first, first + static_cast<std::ptrdiff_t>(columns));
          continue;
        }
        const double producer = block_bytes(from[a]);
        for (std::size_t j = 0; j < std::min(ahead, columns); ++j) {
          m_moves.prefetch(e.tensor, from[a], to[moves.first_to[j]]);
        }
        for (std::size_t j = 0; j < columns; ++j) {
          const std::size_t b = moves.first_to[j];
          const double consumer = to_bytes[j];
          if (j + ahead < columns) {
            m_moves.prefetch(e.tensor, from[a], to[moves.first_to[j + ahead]]);
          }
          const auto [move, unseen] = m_moves.try_emplace(e.tensor, from[a], to[b], m_move_cost.size());
          if (unseen) {
            // The same placement: nothing moves, priced as it is at once (no geometry to find).
            const bool same = from[a] == to[b];
            double cost = 0;
            if (same) {
              strategy::MoveGeometry nothing;
              nothing.same_blocks = true;
              nothing.consumer_shard_bytes = consumer;
              cost = strategy::move_seconds(nothing, 1, context, *m_r.cluster, m_r.setup);
            } else {
              // Device 0 receives what its consumer block holds beyond its producer block, and
              // sends back the reverse: the most any device receives is at least that.
              const double shared = shared_bytes(from[a], to[b]);
              cost = strategy::move_seconds_lower_bound(consumer, producer, shared, context, rates, *m_r.cluster,
                                                        m_r.setup);
            }
            m_move_cost.push_back(cost);
            m_move_exact.push_back(same ? 1 : 0);
            m_moves_priced += same ? 1 : 0;
            if (!same) {
              m_jobs.push_back(move_job(i, static_cast<int>(a), static_cast<int>(b), from[a], to[b], *move));
            }
          }
          moves.move.push_back(*move);
        }
        m_row_moves.insert(m_row_moves.end(), moves.move.end() - static_cast<std::ptrdiff_t>(columns),
                           moves.move.end());
      }
    }
    m_moves_listed = m_move_cost.size();
    index_geometries();
    for (std::size_t t = 0; t < fresh_edges.size(); ++t) {
      const auto& e = m_edges[fresh_edges[t]];
      if (e.tie) {
        m_table_index.push_back(m_problem.add_table(tie_costs(fresh_edges[t])));
        continue;
      }
      const auto& moves = m_table_moves[t];
      m_table_index.push_back(m_problem.add_zero_table(moves.from_slot.size() * moves.to_slot.size()));
      fill_table(t);
    }
    for (std::size_t i = 0; i < m_edges.size(); ++i) {
      const auto& e = m_edges[i];
      m_problem.edges.push_back({static_cast<int>(e.prod), static_cast<int>(e.cons),
                                 m_table_index[static_cast<std::size_t>(table_of_edge[i])]});
      m_edge_table.push_back(table_of_edge[i]);
    }
    if (!lazy) {
      price_all();
    }
  }

  // Prices every move that `choice` uses and only bounds so far (see build_problem); whether there
  // was one (then the tables changed, and a solution may change with them).
  bool make_exact(const std::vector<int>& choice) {
    return make_exact_entries([&](auto use) {
      for (std::size_t i = 0; i < m_problem.edges.size(); ++i) {
        const auto& edge = m_problem.edges[i];
        use(i, choice[static_cast<std::size_t>(edge.u)], choice[static_cast<std::size_t>(edge.v)]);
      }
    });
  }
  // Prices every move an op's runner-up could use: on each edge, the moves of either end's every
  // configuration with the other end as `choice` has it. With `where_missed`, only on the edges
  // whose entry in `choice` holds a bound (where the bound fell short once, the neighbours are
  // likely to be wanted next), and that entry with them; then, where `budget` seconds are given,
  // further moves of the tables holding those entries, as many as pricing at the rate measured
  // so far computes in `budget` less what the neighbourhoods take (see solve_priced).
  bool make_exact_around(const std::vector<int>& choice, bool where_missed = false, double budget = 0) {
    std::vector<char> missed(where_missed ? m_table_moves.size() : 0, 0);
    return make_exact_entries(
        [&](auto use) {
          for (std::size_t i = 0; i < m_problem.edges.size(); ++i) {
            const auto& edge = m_problem.edges[i];
            const int xu = choice[static_cast<std::size_t>(edge.u)], xv = choice[static_cast<std::size_t>(edge.v)];
            if (where_missed) {
              if (is_exact(i, xu, xv)) {
                continue;
              }
              missed[static_cast<std::size_t>(m_edge_table[i])] = 1;
            }
            for (int x = 0; x < m_problem.domain[static_cast<std::size_t>(edge.u)]; ++x) {
              use(i, x, xv);
            }
            for (int x = 0; x < m_problem.domain[static_cast<std::size_t>(edge.v)]; ++x) {
              use(i, xu, x);
            }
          }
        },
        [&](std::size_t wanted, auto use_move) {
          if (budget <= 0 || m_geometries_timed == 0 || m_pricing_seconds <= 0) {
            return;
          }
          const double rate = static_cast<double>(m_geometries_timed) / m_pricing_seconds; // geometries a second
          const double room = budget * rate - static_cast<double>(wanted);
          std::size_t left = room >= 1 ? static_cast<std::size_t>(room) : 0;
          for (std::size_t t = 0; t < missed.size() && left > 0; ++t) {
            for (std::size_t k = 0; missed[t] != 0 && k < m_table_moves[t].move.size() && left > 0; ++k) {
              left -= use_move(m_table_moves[t].move[k]) ? 1 : 0;
            }
          }
        });
  }
  // Prices every move still holding its bound (a solve that is not exact reads any entry).
  void price_all() {
    std::vector<std::size_t> all;
    for (std::size_t k = 0; k < m_geometry_done.size(); ++k) {
      if (m_geometry_done[k] == 0) {
        all.push_back(k);
      }
    }
    price_geometries(all, 0.3, 0.3);
  }
  // Moves priced, of those the tables hold (the rest hold their bounds), and rounds of pricing.
  std::size_t moves_priced() const { return m_moves_priced; }
  std::size_t moves_listed() const { return m_moves_listed; }
  int pricing_rounds() const { return m_pricing_rounds; }
  // A priced move found below its bound (none, as long as the bound is one): counted, for tests.
  std::size_t bound_misses() const { return m_bound_misses; }
  // Seconds spent solving again after rounds of pricing, besides the geometries those rounds
  // computed (which pricing everything would compute too): the solves, and finding and refilling
  // what each round touches.
  double& resolve_seconds() { return m_resolve_seconds; }
  // Seconds the geometries computed so far took (the rounds' pricing alone).
  double pricing_seconds() const { return m_pricing_seconds; }
  // What pricing every move not priced yet would take, in seconds, at the rate this search's
  // geometries have been computed so far (how long a geometry takes varies with the model, the
  // devices and the machine by more than tenfold: measured, not guessed). It decides only when
  // the search stops solving again and prices the rest at once, never what it returns: the
  // optimum is the same either way, and so is the plan (see solve_priced).
  double unpriced_seconds() const {
    if (m_geometries_timed == 0) {
      return std::numeric_limits<double>::infinity();
    }
    return m_pricing_seconds / static_cast<double>(m_geometries_timed) * static_cast<double>(m_geometries_left);
  }

private:
  // The moves of a table: per configuration of each side its distinct placement, and per pair of
  // distinct placements its move (an index into m_move_cost).
  struct TableMoves {
    std::vector<int> from_slot, to_slot;
    std::vector<std::size_t> first_from, first_to; // per distinct placement, its first configuration
    std::size_t columns = 0;
    dp::HugeVector<std::size_t> move;
  };

  // The move of problem edge `edge`'s entry (a, b); none for a tied weight's table.
  std::optional<std::size_t> move_of(std::size_t edge, int a, int b) const {
    const auto& moves = m_table_moves[static_cast<std::size_t>(m_edge_table[edge])];
    if (moves.move.empty()) {
      return std::nullopt;
    }
    return moves.move[static_cast<std::size_t>(moves.from_slot[static_cast<std::size_t>(a)]) * moves.columns +
                      static_cast<std::size_t>(moves.to_slot[static_cast<std::size_t>(b)])];
  }
  bool is_exact(std::size_t edge, int a, int b) const {
    const auto move = move_of(edge, a, b);
    return !move || m_move_exact[*move] == 1;
  }

  // Table t's entries from its moves' prices (or bounds).
  void fill_table(std::size_t t) {
    const auto& moves = m_table_moves[t];
    auto& costs = m_problem.tables[static_cast<std::size_t>(m_table_index[t])];
    const std::size_t columns = moves.to_slot.size();
    for (std::size_t a = 0; a < moves.from_slot.size(); ++a) {
      const std::size_t* row = moves.move.data() + static_cast<std::size_t>(moves.from_slot[a]) * moves.columns;
      for (std::size_t b = 0; b < columns; ++b) {
        costs[a * columns + b] = m_move_cost[row[moves.to_slot[b]]];
      }
    }
  }

  // Prices the geometries of the moves not priced yet among the entries `entries` lists
  // (use(problem edge, a, b)), and then those of the moves `more` adds (use_move(move), given how
  // many geometries are wanted so far; whether it added one), and with each every move it prices.
  template <class Entries, class More> bool make_exact_entries(Entries entries, More more) {
    std::vector<std::size_t> wanted;
    const auto use_move = [&](std::size_t move) {
      if (m_move_exact[move] == 0) {
        const std::size_t k = m_jobs[m_job_of_move[move]].geometry;
        if (m_geometry_done[k] == 0) {
          m_geometry_done[k] = 2; // wanted in this round
          wanted.push_back(k);
          return true;
        }
      }
      return false;
    };
    entries([&](std::size_t edge, int a, int b) {
      const auto move = move_of(edge, a, b); // none: a tied weight's table, priced whole
      if (move) {
        use_move(*move);
      }
    });
    if (wanted.empty()) {
      return false;
    }
    more(wanted.size(), use_move);
    price_geometries(wanted, -1, 0); // no progress reported: the rounds' count is not known ahead
    return true;
  }
  template <class Entries> bool make_exact_entries(Entries entries) {
    return make_exact_entries(entries, [](std::size_t, auto) {});
  }

  // The jobs of every geometry (m_jobs' indices, in order), where each move's job is, and each
  // geometry's reverse (the same two placements the other way round: an op's output read by the
  // next op and that op's output read back in the same layouts), whose redistributions are its
  // own: one's forward is the other's backward.
  void index_geometries() {
    const std::size_t geometries = m_geometry_job.size();
    m_job_at.assign(geometries + 1, 0);
    for (const Job& job : m_jobs) {
      ++m_job_at[job.geometry + 1];
    }
    std::partial_sum(m_job_at.begin(), m_job_at.end(), m_job_at.begin());
    m_job_list.resize(m_jobs.size());
    std::vector<std::size_t> next(m_job_at.begin(), m_job_at.end() - 1);
    m_job_of_move.assign(m_move_cost.size(), 0);
    for (std::size_t j = 0; j < m_jobs.size(); ++j) {
      m_job_list[next[m_jobs[j].geometry]++] = j;
      m_job_of_move[m_jobs[j].cost] = static_cast<std::uint32_t>(j);
    }
    m_partner.assign(geometries, alone);
    std::vector<std::int64_t> reverse;
    for (std::size_t k = 0; k < geometries; ++k) {
      reversed_key(m_geometry_of.key(k), reverse);
      const std::size_t other = m_geometry_of.find(reverse);
      if (other != KeyIndex::none && other != k) {
        m_partner[k] = other;
      }
    }
    m_geometry_of.clear(); // the keys found the reverses; m_geometry_job keeps what pricing reads
    m_geometry_done.assign(geometries, 0);
    m_geometries_left = geometries;
    // The tables holding each move (a move serves every edge whose tensor and placements it is).
    m_tables_of_move_at.assign(m_move_cost.size() + 1, 0);
    for (const auto& moves : m_table_moves) {
      for (const std::size_t m : moves.move) {
        ++m_tables_of_move_at[m + 1];
      }
    }
    std::partial_sum(m_tables_of_move_at.begin(), m_tables_of_move_at.end(), m_tables_of_move_at.begin());
    m_tables_of_move.resize(m_tables_of_move_at.back());
    std::vector<std::size_t> slot(m_tables_of_move_at.begin(), m_tables_of_move_at.end() - 1);
    for (std::size_t t = 0; t < m_table_moves.size(); ++t) {
      for (const std::size_t m : m_table_moves[t].move) {
        m_tables_of_move[slot[m]++] = static_cast<std::uint32_t>(t);
      }
    }
  }
  std::span<const std::size_t> jobs_of(std::size_t k) const {
    return {m_job_list.data() + m_job_at[k], m_job_at[k + 1] - m_job_at[k]};
  }

  // Computes geometries `wanted` (marked 2, or any not priced yet), each with its reverse where
  // that is not priced yet, prices every move of them, and refills the tables holding those
  // moves; reporting progress from `from` to `from + span` (none where `from` < 0).
  void price_geometries(const std::vector<std::size_t>& wanted, double from, double span) {
    if (wanted.empty()) {
      return;
    }
    ++m_pricing_rounds;
    // The units of work: a geometry, and its reverse along with it where that is not priced.
    std::vector<std::pair<std::size_t, std::size_t>> units; // (geometry, its reverse or `alone`)
    for (const std::size_t k : wanted) {
      if (m_geometry_done[k] == 1) {
        continue;
      }
      const std::size_t other = m_partner[k];
      const bool pair = other != alone && m_geometry_done[other] != 1;
      m_geometry_done[k] = 1;
      if (pair) {
        m_geometry_done[other] = 1;
      }
      units.emplace_back(k, pair ? other : alone);
    }
    // Moves of a class whose tensors have as many units and whose contexts price alike cost the
    // same (as a transformer's many activations of one shape): each such price is computed once.
    std::atomic<std::size_t> misses{0};
    const auto price_jobs = [&](const strategy::MoveGeometry& geometry, std::span<const std::size_t> of) {
      thread_local std::vector<std::tuple<double, int, double>> priced; // scale, context class, seconds
      priced.clear();
      for (const std::size_t j : of) {
        const double scale = m_jobs[j].scale;
        const int context = m_context_class[m_edges[m_jobs[j].edge].context];
        const auto same = std::find_if(priced.begin(), priced.end(), [&](const auto& p) {
          return std::get<0>(p) == scale && std::get<1>(p) == context;
        });
        const double seconds = same != priced.end() ? std::get<2>(*same) : move_seconds(geometry, m_jobs[j]);
        if (same == priced.end()) {
          priced.emplace_back(scale, context, seconds);
        }
        double& cost = m_move_cost[m_jobs[j].cost]; // its bound until now
        if (seconds < cost * (1 - 1e-12) - 1e-18) {
          ++misses;
        }
        cost = seconds;
      }
    };
    const auto started = std::chrono::steady_clock::now();
    parallel(units.size(), from, span, [&](std::size_t u) {
      const auto [k, other] = units[u];
      double producer_shard_bytes = 0;
      thread_local strategy::MoveGeometry geometry;
      compute_geometry(m_jobs, k, producer_shard_bytes, geometry);
      price_jobs(geometry, jobs_of(k));
      if (other != alone) {
        std::swap(geometry.forward, geometry.backward);
        geometry.consumer_shard_bytes = producer_shard_bytes;
        price_jobs(geometry, jobs_of(other));
      }
    });
    m_pricing_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    m_bound_misses += misses;
    // Every move of them priced; the tables holding any, refilled.
    std::vector<char> touched(m_table_moves.size(), 0);
    const auto done = [&](std::size_t k) {
      m_geometries_left -= 1;
      for (const std::size_t j : jobs_of(k)) {
        const std::size_t m = m_jobs[j].cost;
        if (m_move_exact[m] == 0) {
          m_move_exact[m] = 1;
          ++m_moves_priced;
        }
        for (std::size_t t = m_tables_of_move_at[m]; t < m_tables_of_move_at[m + 1]; ++t) {
          touched[m_tables_of_move[t]] = 1;
        }
      }
    };
    for (const auto& [k, other] : units) {
      done(k);
      m_geometries_timed += 1;
      if (other != alone) {
        done(other);
        m_geometries_timed += 1;
      }
    }
    for (std::size_t t = 0; t < touched.size(); ++t) {
      if (touched[t] != 0) {
        fill_table(t);
      }
    }
  }

private:
  // A tie edge's costs, per (other reader's configuration a, first reader's b): the gradient sum
  // between their layouts (strategy::tied_gradient_terms), plus the other reader's copy of the
  // weight's state where the two do not hold the same blocks on the same devices.
  std::vector<double> tie_costs(std::size_t edge) {
    const auto& e = m_edges[edge];
    const auto& pt = tables(e.prod);
    const auto& ct = tables(e.cons);
    std::vector<double> costs(pt.configs.size() * ct.configs.size(), 0.0);
    const auto& context = m_contexts[e.context];
    // The gradient sum depends on the two placements of the weight alone (far fewer than the
    // pairs of configurations): each distinct pair is worked out once, its configurations' state
    // added per entry.
    const auto& from_key = pt.input_key[e.out];
    const auto& to_key = ct.input_key[e.in];
    struct Sum {
      double seconds = 0;
      bool same_blocks = false;
    };
    std::unordered_map<std::uint64_t, Sum> sums;
    for (std::size_t a = 0; a < pt.configs.size(); ++a) {
      check_cancel();
      std::optional<strategy::OpAssignment> pa;
      std::optional<sharding::TensorLayout> from;
      for (std::size_t b = 0; b < ct.configs.size(); ++b) {
        const auto pair = static_cast<std::uint64_t>(static_cast<std::uint32_t>(from_key[a])) << 32 |
                          static_cast<std::uint32_t>(to_key[b]);
        auto [it, fresh] = sums.try_emplace(pair);
        if (fresh) {
          if (!pa) {
            pa = strategy::OpAssignment{pt.configs[a], devices(pt.configs[a])};
            from = sharding::input_layout(m_g, m_sem[static_cast<std::size_t>(e.prod)], pa->config, e.out);
          }
          const strategy::OpAssignment ca{ct.configs[b], devices(ct.configs[b])};
          const auto geometry = strategy::move_geometry(
              *from, *pa, sharding::input_layout(m_g, m_sem[static_cast<std::size_t>(e.cons)], ca.config, e.in), ca);
          it->second.same_blocks = geometry.same_blocks;
          for (const auto& term : strategy::tied_gradient_terms(geometry, context, *m_r.cluster, m_r.setup, false)) {
            it->second.seconds += term.value;
          }
        }
        costs[a * ct.configs.size() + b] = (it->second.same_blocks ? 0.0 : pt.tie_state[a]) + it->second.seconds;
      }
    }
    return costs;
  }

  std::vector<std::size_t> tie_slots(graph::OpId id) const {
    std::vector<std::size_t> out;
    for (const auto& tie : m_tie_inputs[static_cast<std::size_t>(id)]) {
      out.push_back(tie.input);
    }
    return out;
  }

  // Runs work(0 .. count-1) on Request::threads threads (each item on its own, so results do not
  // depend on the thread count), polling the cancel flag between chunks and reporting progress
  // from `from` to `from + span` on the first thread (none where `from` < 0).
  template <class Work> void parallel(std::size_t count, double from, double span, Work work_item) {
    const unsigned hardware = std::max(1U, std::thread::hardware_concurrency());
    const auto wanted = m_r.threads > 0 ? static_cast<std::size_t>(m_r.threads) : hardware;
    const std::size_t threads = std::clamp<std::size_t>(count / 256, 1, wanted);
    std::atomic<std::size_t> next{0};
    std::atomic<bool> stop{false};
    std::exception_ptr failure;
    std::mutex failure_mutex;
    auto work = [&](bool reports) {
      try {
        // Each thread remembers the collectives it prices (a move's groups recur across edges);
        // this one across calls (the rounds of pricing meet the same groups again).
        std::optional<cluster::CollectiveMemo> own;
        if (reports && !m_memo) {
          m_memo = std::make_unique<cluster::CollectiveMemo>(*m_r.cluster);
        }
        cluster::CollectiveMemo& memo = reports ? *m_memo : own.emplace(*m_r.cluster);
        const cluster::CollectiveMemo::Use use(memo);
        constexpr std::size_t chunk = 16; // items between two polls of the cancel flag
        for (;;) {
          const std::size_t begin = next.fetch_add(chunk);
          if (begin >= count || stop.load(std::memory_order_relaxed)) {
            return;
          }
          check_cancel(); // one geometry takes up to a millisecond at 1,024 devices
          for (std::size_t j = begin; j < std::min(count, begin + chunk); ++j) {
            work_item(j);
          }
          if (reports && m_r.progress && from >= 0) {
            m_r.progress(from +
                         span * static_cast<double>(std::min(count, begin + chunk)) / static_cast<double>(count));
          }
        }
      } catch (...) {
        const std::lock_guard lock(failure_mutex);
        if (!failure) {
          failure = std::current_exception();
        }
        stop = true;
      }
    };
    std::vector<std::thread> helpers;
    try {
      for (std::size_t t = 1; t < threads; ++t) {
        helpers.emplace_back(work, false);
      }
    } catch (const std::system_error&) {
      // No more threads to be had: the ones started and this one do everything.
    }
    work(true);
    for (auto& h : helpers) {
      h.join();
    }
    if (failure) {
      std::rethrow_exception(failure);
    }
  }

  // A move to price: an edge's tensor from its producer in configuration a to its consumer in
  // configuration b. Two placements put every block on the same devices whatever the tensor's
  // size, and where each part of a dim is a whole number of the finest part of both sides (the
  // size a multiple of the lcm of both part counts), what moves scales with the size: moves
  // whose tensors differ only by such sizes share one geometry (sharding::redistribute's), kept
  // per unit, and each scales it by its own units and element size.
  struct Job {
    std::size_t edge = 0;
    int a = 0, b = 0;
    std::size_t geometry = 0;
    double scale = 1;     // bytes per unit of the geometry
    std::size_t cost = 0; // the move's entry in m_move_cost
  };
  // A geometry does not depend on the order of the tensor's dims, and a dim that neither side
  // cuts counts for nothing in it (one unit): moves whose cut dims are alike up to their order
  // (with the dims as the geometry sees them: a whole number of units counts as its lcm, another as
  // its size) share one geometry, priced once. Its key: both sides' device counts, then per cut dim
  // the parts and stride on each side and its size, sorted.
  using CutDim = std::array<std::int64_t, 5>; // (parts, stride) of each side, size
  // The key of two device counts and the cut dims (sorted here).
  static void write_key(std::int64_t from_devices, std::int64_t to_devices, std::vector<CutDim>& cut,
                        std::vector<std::int64_t>& key) {
    std::sort(cut.begin(), cut.end());
    key.assign({from_devices, to_devices});
    for (const auto& c : cut) {
      key.insert(key.end(), c.begin(), c.end());
    }
  }
  static void geometry_key(std::span<const std::int64_t> fk, std::span<const std::int64_t> tk,
                           std::span<const std::int64_t> dims, std::vector<std::int64_t>& key) {
    thread_local std::vector<CutDim> cut;
    cut.clear();
    for (std::size_t j = 0; j < dims.size(); ++j) {
      if (fk[2 * j] != 1 || tk[2 * j] != 1) {
        cut.push_back({fk[2 * j], fk[2 * j + 1], tk[2 * j], tk[2 * j + 1], dims[j]});
      }
    }
    write_key(fk.back(), tk.back(), cut, key); // block signatures end with the device count
  }
  // The key of the same move the other way round.
  static void reversed_key(std::span<const std::int64_t> key, std::vector<std::int64_t>& out) {
    thread_local std::vector<CutDim> cut;
    cut.clear();
    for (std::size_t i = 2; i + 5 <= key.size(); i += 5) {
      cut.push_back({key[i + 2], key[i + 3], key[i], key[i + 1], key[i + 4]});
    }
    write_key(key[1], key[0], cut, out);
  }

  // Keys of integers in one buffer, each numbered in the order it came, found by open addressing
  // (a map with a vector per key took more memory than the geometries it indexed).
  class KeyIndex {
  public:
    static constexpr std::size_t none = static_cast<std::size_t>(-1);
    std::size_t size() const { return m_hash.size(); }
    std::span<const std::int64_t> key(std::size_t k) const { return {m_pool.data() + m_at[k], m_at[k + 1] - m_at[k]}; }
    // The number of `key`, and whether it is new (then it is added).
    std::pair<std::size_t, bool> insert(std::span<const std::int64_t> key) {
      if (4 * (size() + 1) > 3 * m_slots.size()) { // at most three quarters full
        rehash(std::max<std::size_t>(64, 2 * m_slots.size()));
      }
      const std::uint64_t h = hash(key);
      std::size_t i = find_slot(key, h);
      if (m_slots[i] != 0) {
        return {m_slots[i] - 1, false};
      }
      if (size() >= std::numeric_limits<std::uint32_t>::max()) {
        throw Error("auto: more than 2^32 geometries to price");
      }
      m_slots[i] = static_cast<std::uint32_t>(size() + 1);
      m_hash.push_back(h);
      m_pool.insert(m_pool.end(), key.begin(), key.end());
      m_at.push_back(m_pool.size());
      return {size() - 1, true};
    }
    std::size_t find(std::span<const std::int64_t> key) const {
      if (m_slots.empty()) {
        return none;
      }
      const std::size_t i = find_slot(key, hash(key));
      return m_slots[i] == 0 ? none : m_slots[i] - 1;
    }
    void clear() {
      m_pool.clear();
      m_at.assign(1, 0);
      m_hash.clear();
      m_slots.clear();
    }
    // Room for `keys` more keys of `words` in all.
    void reserve(std::size_t keys, std::size_t words) {
      m_pool.reserve(m_pool.size() + words);
      m_at.reserve(m_at.size() + keys);
      m_hash.reserve(m_hash.size() + keys);
    }

  private:
    static std::uint64_t hash(std::span<const std::int64_t> key) {
      std::uint64_t h = 0x9E3779B97F4A7C15ULL;
      for (const std::int64_t v : key) {
        h = (h ^ static_cast<std::uint64_t>(v)) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
      }
      h ^= h >> 30; // splitmix64's finalizer: every bit of the slot index depends on every input bit
      h *= 0x94D049BB133111EBULL;
      return h ^ (h >> 31);
    }
    // The slot holding `key`, or the empty slot where it would go.
    std::size_t find_slot(std::span<const std::int64_t> key, std::uint64_t h) const {
      const std::size_t mask = m_slots.size() - 1;
      for (std::size_t i = static_cast<std::size_t>(h) & mask;; i = (i + 1) & mask) {
        const std::uint32_t k = m_slots[i];
        if (k == 0) {
          return i;
        }
        if (m_hash[k - 1] == h) {
          const auto other = this->key(k - 1);
          if (std::equal(other.begin(), other.end(), key.begin(), key.end())) {
            return i;
          }
        }
      }
    }
    void rehash(std::size_t slots) {
      m_slots.assign(slots, 0);
      for (std::size_t k = 0; k < size(); ++k) {
        std::size_t i = static_cast<std::size_t>(m_hash[k]) & (slots - 1);
        while (m_slots[i] != 0) {
          i = (i + 1) & (slots - 1);
        }
        m_slots[i] = static_cast<std::uint32_t>(k + 1);
      }
    }
    dp::HugeVector<std::int64_t> m_pool;
    dp::HugeVector<std::size_t> m_at{0}; // key k: m_pool[m_at[k] .. m_at[k + 1])
    dp::HugeVector<std::uint64_t> m_hash;
    dp::HugeVector<std::uint32_t> m_slots; // 1 + key number, 0 empty
  };

  // A value per (tensor signature, from placement, to placement), the three packed in 63 bits:
  // open addressing in one array of (key, value) slots (the moves number in the millions at 1,024
  // devices; a node per move cost more than the lookup). A lookup in a large table misses the
  // cache (half of listing a search's moves at 64 devices): the caller prefetches the slots of the
  // keys it looks up next.
  class PlacementIndex {
  public:
    static constexpr int field_bits = 21;
    void reserve(std::size_t moves) {
      std::size_t size = 16;
      while (3 * size < 4 * moves) {
        size *= 2;
      }
      if (size > m_slots.size()) {
        rehash(size);
      }
    }
    // The value stored for the key, and whether it was new (then `value` is stored).
    std::pair<std::uint32_t*, bool> try_emplace(int tensor, int from, int to, std::size_t value) {
      if (4 * (m_count + 1) > 3 * m_slots.size()) { // at most three quarters full
        rehash(2 * m_slots.size());
      }
      const std::uint64_t key = pack(tensor, from, to);
      std::size_t i = slot(key);
      while (m_slots[i].key() != empty && m_slots[i].key() != key) {
        i = (i + 1) & (m_slots.size() - 1);
      }
      Slot& s = m_slots[i];
      if (s.key() == key) {
        return {&s.value, false};
      }
      if (value > std::numeric_limits<std::uint32_t>::max()) {
        throw Error("auto: more than 2^32 moves to price");
      }
      s.set(key);
      s.value = static_cast<std::uint32_t>(value);
      ++m_count;
      return {&s.value, true};
    }
    // A hint: the slot where the key's lookup starts, fetched into the cache (the table is never
    // empty). On x86-64 as an instruction of its own: GCC 12 drops __builtin_prefetch of an
    // address hashed this way, at -O2, without a word.
    void prefetch(int tensor, int from, int to) const {
      const auto key = (static_cast<std::uint64_t>(tensor) << (2 * field_bits)) |
                       (static_cast<std::uint64_t>(from) << field_bits) | static_cast<std::uint64_t>(to);
      const Slot* at = m_slots.data() + slot(key);
#if defined(__x86_64__)
      asm volatile("prefetcht0 %0" : : "m"(*reinterpret_cast<const char*>(at)));
#else
      __builtin_prefetch(at);
#endif
    }

  private:
    static constexpr std::uint64_t empty = ~std::uint64_t{0};
    // Twelve bytes: the key in two halves (every bit set: empty), so that a slot's key and value
    // are most often on one cache line and the table (millions of moves at 1,024 devices) takes
    // no more than keys and values apart did.
    struct Slot {
      std::uint32_t low = ~std::uint32_t{0}, high = ~std::uint32_t{0};
      std::uint32_t value = 0;
      std::uint64_t key() const { return (std::uint64_t{high} << 32) | low; }
      void set(std::uint64_t key) {
        low = static_cast<std::uint32_t>(key);
        high = static_cast<std::uint32_t>(key >> 32);
      }
    };
    static_assert(sizeof(Slot) == 12);
    static std::uint64_t pack(int tensor, int from, int to) {
      constexpr std::uint64_t limit = std::uint64_t{1} << field_bits;
      if (static_cast<std::uint64_t>(tensor) >= limit || static_cast<std::uint64_t>(from) >= limit ||
          static_cast<std::uint64_t>(to) >= limit) {
        throw Error(fmt::format("auto: more than {} tensor shapes or placements to price", limit));
      }
      return (static_cast<std::uint64_t>(tensor) << (2 * field_bits)) |
             (static_cast<std::uint64_t>(from) << field_bits) | static_cast<std::uint64_t>(to);
    }
    std::size_t slot(std::uint64_t key) const {
      std::uint64_t h = (key ^ (key >> 30)) * 0xBF58476D1CE4E5B9ULL; // splitmix64's finalizer
      h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
      return static_cast<std::size_t>(h ^ (h >> 31)) & (m_slots.size() - 1);
    }
    void rehash(std::size_t size) {
      auto slots = std::exchange(m_slots, dp::HugeVector<Slot>(size));
      for (const Slot& s : slots) {
        if (s.key() != empty) {
          std::size_t i = slot(s.key());
          while (m_slots[i].key() != empty) {
            i = (i + 1) & (m_slots.size() - 1);
          }
          m_slots[i] = s;
        }
      }
    }
    dp::HugeVector<Slot> m_slots = dp::HugeVector<Slot>(16);
    std::size_t m_count = 0;
  };

  Job move_job(std::size_t edge, int a, int b, int from_key, int to_key, std::size_t cost) {
    const auto& e = m_edges[edge];
    const auto& x = m_g.tensor(m_g.op(e.cons).inputs[e.in]);
    const auto& fk = *m_key_list[static_cast<std::size_t>(from_key)];
    const auto& tk = *m_key_list[static_cast<std::size_t>(to_key)];
    thread_local std::vector<std::int64_t> dims;
    dims.resize(x.shape.size());
    std::int64_t units = 1;
    bool every_whole = true;
    for (std::size_t j = 0; j < x.shape.size(); ++j) {
      const std::int64_t l = std::lcm(fk[2 * j], tk[2 * j]); // a block signature: (parts, stride) per dim
      const bool whole = x.shape[j] % l == 0;
      every_whole = every_whole && whole;
      dims[j] = whole ? l : x.shape[j];
      units *= whole ? x.shape[j] / l : 1;
    }
    Job job{edge, a, b, 0, static_cast<double>(units) * static_cast<double>(graph::dtype_size(x.dtype)), cost};
    ++m_job_count;
    // Where every dim is a whole number of both sides' parts, the key is the two placements' alone
    // (each dim's units, lcm of the two part counts): found by them, without writing the key again
    // (most moves; a tensor of another shape with the same placements meets the same geometry).
    std::uint32_t* known = nullptr;
    if (every_whole) {
      const auto [slot, fresh] = m_geometry_of_placements.try_emplace(0, from_key, to_key, 0);
      if (!fresh) {
        job.geometry = *slot;
        return job;
      }
      known = slot;
    }
    thread_local std::vector<std::int64_t> key;
    geometry_key(fk, tk, dims, key);
    const auto [k, fresh] = m_geometry_of.insert(key);
    if (fresh) {
      m_geometry_job.push_back(m_job_count - 1);
    }
    job.geometry = k;
    if (known != nullptr) {
      *known = static_cast<std::uint32_t>(k); // KeyIndex numbers fewer than 2^32 keys
    }
    return job;
  }

  // Geometry k, computed on its first job's layouts and divided by that job's scale (exact: every
  // count of elements is a whole number of units, and doubles hold such integers exactly); with
  // what one producer device holds, per unit (the reverse's consumer_shard_bytes).
  // Into `geometry`, whose buffers (and the layouts', kept per thread) are reused.
  template <class Jobs>
  void compute_geometry(const Jobs& jobs, std::size_t k, double& producer_shard_bytes,
                        strategy::MoveGeometry& geometry) const {
    const auto& job = jobs[m_geometry_job[k]];
    const auto& e = m_edges[job.edge];
    const auto& pc = tables(e.prod).configs[static_cast<std::size_t>(job.a)];
    const auto& cc = tables(e.cons).configs[static_cast<std::size_t>(job.b)];
    thread_local sharding::TensorLayout from, to;
    sharding::output_layout_into(m_g, m_sem[static_cast<std::size_t>(e.prod)], pc, e.out, from);
    sharding::input_layout_into(m_g, m_sem[static_cast<std::size_t>(e.cons)], cc, e.in, to);
    strategy::priced_move_geometry(from, pc, device_span(pc), to, cc, device_span(cc), *m_r.cluster, geometry);
    scale(geometry, 1.0 / job.scale);
    producer_shard_bytes = from.shard_bytes() / job.scale;
  }

  static void scale(strategy::MoveGeometry& m, double factor) {
    m.consumer_shard_bytes *= factor;
    for (auto* r : {&m.forward, &m.backward}) {
      r->max_bytes_in *= factor;
      r->total_bytes *= factor;
      r->max_block_bytes *= factor;
    }
  }

  // The seconds of a job's move from its class's geometry (per unit): what input_redistribution
  // sums (a tied weight's edges are priced by tie_costs, not by jobs).
  template <class J> double move_seconds(const strategy::MoveGeometry& geometry, const J& job) const {
    return strategy::move_seconds(geometry, job.scale, m_contexts[m_edges[job.edge].context], *m_r.cluster, m_r.setup);
  }

  // A producer-consumer pair through one tensor: an edge of the problem.
  struct Edge {
    graph::OpId prod = -1, cons = -1;
    std::size_t out = 0, in = 0; // the tensor's slot among the producer's outputs, the consumer's inputs
    int tensor = 0;              // tensor_signature
    std::size_t context = 0;     // index into m_contexts
    // A tied weight's gradient sum: `prod` is another reader of the weight (its input slot `out`),
    // `cons` the first (its input slot `in`).
    bool tie = false;
  };
  // Edges whose cost tables are equal: same classes, slots and tensor signature.
  using EdgeMemo = std::tuple<int, std::size_t, int, std::size_t, int>;
  EdgeMemo memo_of(const Edge& e) const {
    return {class_of(e.prod), e.out, class_of(e.cons), e.in, e.tensor};
  }

  // Every edge, consumers in topological order, and per op the edges into it.
  void list_edges() {
    m_edges_into.assign(m_g.ops().size(), {});
    for (const graph::OpId id : m_order) {
      const auto& op = m_g.op(id);
      for (std::size_t in = 0; in < op.inputs.size(); ++in) {
        const graph::TensorId t = op.inputs[in];
        if (t == graph::no_tensor || m_g.tensor(t).producer < 0) {
          continue;
        }
        Edge e;
        e.prod = m_g.tensor(t).producer;
        e.cons = id;
        const auto& outs = m_g.op(e.prod).outputs;
        e.out = static_cast<std::size_t>(std::find(outs.begin(), outs.end(), t) - outs.begin());
        e.in = in;
        e.context = m_contexts.size();
        m_contexts.push_back(strategy::move_context(m_g, id, in, m_r.setup, m_r.search_micro_batches));
        e.tensor = tensor_signature(id, in, m_contexts.back(), false);
        m_edges_into[static_cast<std::size_t>(id)].push_back(m_edges.size());
        m_edges.push_back(e);
      }
    }
    // A tied weight: an edge from each other reader to the first, priced as partita-run sums the
    // gradients (strategy::tied_gradient_terms, on the first reader as evaluate() puts it). An op
    // reading it twice sums with itself, which no edge can hold: evaluate() counts it, the search
    // does not.
    for (const auto& tie : strategy::tied_weights(m_g)) {
      const auto [first, first_input] = tie.readers.front();
      for (std::size_t r = 1; r < tie.readers.size(); ++r) {
        const auto [other, other_input] = tie.readers[r];
        if (other == first) {
          continue;
        }
        Edge e;
        e.tie = true;
        e.prod = other;
        e.cons = first;
        e.out = other_input;
        e.in = first_input;
        e.context = m_contexts.size();
        m_contexts.push_back(strategy::move_context(m_g, first, first_input, m_r.setup, m_r.search_micro_batches));
        e.tensor = tensor_signature(first, first_input, m_contexts.back(), true);
        m_edges_into[static_cast<std::size_t>(first)].push_back(m_edges.size());
        m_edges.push_back(e);
      }
    }
    // The contexts' classes of equal prices: few, so a look through the first of each.
    std::vector<std::size_t> firsts;
    m_context_class.resize(m_contexts.size());
    for (std::size_t c = 0; c < m_contexts.size(); ++c) {
      const auto alike = std::find_if(firsts.begin(), firsts.end(), [&](std::size_t f) {
        return strategy::priced_alike(m_contexts[f], m_contexts[c]);
      });
      m_context_class[c] = static_cast<int>(alike == firsts.end() ? c : *alike);
      if (alike == firsts.end()) {
        firsts.push_back(c);
      }
    }
  }

  const Request& m_r;
  const graph::Graph& m_g;
  std::vector<int> m_all_devices; // 0 .. devices-1
  std::vector<graph::OpSemantics> m_sem;
  std::vector<graph::OpId> m_order;
  std::vector<cost::Saved> m_keep;
  // Per op, the tied weights it reads after their first reader: its input slot, the first reader
  // and that reader's slot.
  struct TieInput {
    std::size_t input = 0;
    graph::OpId first = -1;
    std::size_t first_input = 0;
  };
  std::vector<std::vector<TieInput>> m_tie_inputs;
  std::vector<int> m_class_of;
  std::vector<OpClassTables> m_classes;
  double m_search_work = 0; // check_size's count
  std::vector<Edge> m_edges;
  std::vector<std::vector<std::size_t>> m_edges_into; // per op, indices into m_edges
  std::map<std::vector<std::int64_t>, int> m_keys;
  std::vector<const std::vector<std::int64_t>*> m_key_list; // the keys by interned index
  KeyIndex m_geometry_of;                                   // the geometries (keys: geometry_key)
  PlacementIndex m_geometry_of_placements;    // (0, from key, to key) -> geometry, where every dim is whole
  dp::HugeVector<std::size_t> m_geometry_job; // per geometry, its first job (on whose layouts it is computed)
  std::size_t m_job_count = 0;
  std::map<std::string, int> m_tensor_sigs;
  std::vector<strategy::MoveContext> m_contexts; // per edge
  std::vector<int> m_context_class;              // per context: the first that prices alike (priced_alike)
  PlacementIndex m_moves;                        // into m_move_cost
  // The rows of moves listed: (tensor signature, producer placement, list of consumer placements)
  // -> where its moves start in m_row_moves; the lists of consumer placements, numbered.
  PlacementIndex m_rows;
  KeyIndex m_column_lists;
  dp::HugeVector<std::uint32_t> m_row_moves; // move numbers, each below 2^32 (PlacementIndex)
  dp::HugeVector<double> m_move_cost;        // per move, its price or (not priced yet) a lower bound
  dp::HugeVector<char> m_move_exact;         // per move: 1 priced, 0 its bound
  std::size_t m_moves_listed = 0, m_moves_priced = 0;
  // Every move to price (those whose placements differ), by geometry: m_job_list[m_job_at[k] ..
  // m_job_at[k + 1]) are geometry k's, indices into m_jobs; per move its job; per geometry its
  // reverse (or `alone`) and whether it is priced (1; 2 while wanted in a round).
  dp::HugeVector<Job> m_jobs;
  dp::HugeVector<std::size_t> m_job_at, m_job_list;
  dp::HugeVector<std::uint32_t> m_job_of_move;
  static constexpr std::size_t alone = static_cast<std::size_t>(-1);
  dp::HugeVector<std::size_t> m_partner;
  dp::HugeVector<char> m_geometry_done;
  std::size_t m_geometries_left = 0;
  double m_resolve_seconds = 0, m_pricing_seconds = 0;
  std::size_t m_geometries_timed = 0;
  std::unique_ptr<cluster::CollectiveMemo> m_memo; // the calling thread's, kept between rounds
  int m_pricing_rounds = 0;
  std::size_t m_bound_misses = 0;
  std::vector<TableMoves> m_table_moves; // per distinct edge table (empty for a tied weight's)
  std::vector<int> m_table_index;        // per distinct edge table, its table in m_problem
  std::vector<int> m_edge_table;         // per problem edge, its distinct edge table
  // The tables holding move m: m_tables_of_move[m_tables_of_move_at[m] .. m_tables_of_move_at[m + 1]).
  dp::HugeVector<std::size_t> m_tables_of_move_at;
  dp::HugeVector<std::uint32_t> m_tables_of_move;
  std::vector<int> m_class_table;
  mutable std::vector<strategy::OpAssignment> m_terms_scratch; // terms()'s, every entry empty between calls
  dp::Problem m_problem;
  dp::Workspace m_workspace;
};

// The objective in seconds of a choice: the problem's vertex costs are the ops' times (memory is
// priced only inside solve_priced, which puts them back).
double time_of(CostGraph& cg, const std::vector<int>& choice) {
  cg.make_exact(choice);
  return dp::total_cost(cg.problem(), choice);
}

double additive_memory(const CostGraph& cg, const std::vector<int>& choice) {
  double m = 0;
  for (std::size_t i = 0; i < choice.size(); ++i) {
    m += cg.tables(static_cast<graph::OpId>(i)).memory[static_cast<std::size_t>(choice[i])];
  }
  return m;
}

double peak_workspace(const CostGraph& cg, const std::vector<int>& choice) {
  double w = 0;
  for (std::size_t i = 0; i < choice.size(); ++i) {
    w = std::max(w, cg.tables(static_cast<graph::OpId>(i)).workspace[static_cast<std::size_t>(choice[i])]);
  }
  return w;
}

// The choice of least peak() (each op's memory summed, plus the largest of the ops' workspaces),
// of equal memory the faster configuration. Exact without a search, since memory is per op: for a
// bound w on the workspace, each op takes its least memory among the configurations within w, and
// the least over every w of that sum plus w is the least peak (at the w of the best choice's
// largest workspace the sum is no more than its memory). The bounds are swept in increasing order.
std::vector<int> smallest_footprint(const CostGraph& cg) {
  const std::size_t classes = cg.class_count();
  const std::size_t n = cg.graph().ops().size();
  std::vector<double> ops_of(classes, 0.0);
  std::vector<const OpClassTables*> tables(classes, nullptr);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<std::size_t>(cg.class_of(static_cast<graph::OpId>(i)));
    ops_of[c] += 1;
    tables[c] = &cg.tables(static_cast<graph::OpId>(i));
  }
  struct Entry {
    double workspace;
    std::size_t c;
    int x;
  };
  std::vector<Entry> entries;
  for (std::size_t c = 0; c < classes; ++c) {
    for (std::size_t x = 0; tables[c] != nullptr && x < tables[c]->workspace.size(); ++x) {
      entries.push_back({tables[c]->workspace[x], c, static_cast<int>(x)});
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.workspace < b.workspace; });
  const auto better = [&](std::size_t c, int x, int y) { // x before y: less memory, then less time
    const auto& t = *tables[c];
    const auto i = static_cast<std::size_t>(x), j = static_cast<std::size_t>(y);
    return t.memory[i] != t.memory[j] ? t.memory[i] < t.memory[j] : t.time[i] < t.time[j];
  };
  std::vector<int> pick(classes, -1), best_pick;
  std::size_t missing = 0;
  for (std::size_t c = 0; c < classes; ++c) {
    missing += tables[c] != nullptr ? 1 : 0;
  }
  double sum = 0, least = std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const auto& e = entries[k];
    int& p = pick[e.c];
    if (p < 0 || better(e.c, e.x, p)) {
      sum += ops_of[e.c] * (tables[e.c]->memory[static_cast<std::size_t>(e.x)] -
                            (p < 0 ? 0.0 : tables[e.c]->memory[static_cast<std::size_t>(p)]));
      missing -= p < 0 ? 1 : 0;
      p = e.x;
    }
    const bool last_of_bound = k + 1 == entries.size() || entries[k + 1].workspace != e.workspace;
    if (missing == 0 && last_of_bound && sum + e.workspace < least) {
      least = sum + e.workspace;
      best_pick = pick;
    }
  }
  std::vector<int> choice(n, 0);
  for (std::size_t i = 0; i < n && !best_pick.empty(); ++i) {
    choice[i] = best_pick[static_cast<std::size_t>(cg.class_of(static_cast<graph::OpId>(i)))];
  }
  return choice;
}

// Plans by name, each a configuration index per op.
using Choices = std::vector<std::pair<std::string, std::vector<int>>>;

// Solves with memory priced at `price` seconds per byte (vertex costs time + price x memory), the
// ops' weight-gradient sync counted (1 - sync_discount) times. Where the graph is too wide to solve
// exactly, the bounded search's plan is the best of its own and of each of `seeds` improved by
// the same local search (so that no seed's plan is better).
dp::Solution solve_priced(CostGraph& cg, double price, const Request& r, int& solves, double sync_discount = 0,
                          const Choices& seeds = {}) {
  auto& p = cg.problem();
  std::vector<int> priced(cg.class_count(), -1);
  const auto saved = p.unary;
  const std::size_t saved_tables = p.tables.size();
  if (price > 0 || sync_discount > 0) {
    for (std::size_t i = 0; i < p.unary.size(); ++i) {
      const int c = cg.class_of(static_cast<graph::OpId>(i));
      if (priced[static_cast<std::size_t>(c)] < 0) {
        const auto& t = cg.tables(static_cast<graph::OpId>(i));
        std::vector<double> costs(t.time.size());
        for (std::size_t x = 0; x < costs.size(); ++x) {
          costs[x] = t.time[x] - sync_discount * t.sync[x] + price * t.memory[x];
        }
        priced[static_cast<std::size_t>(c)] = p.add_table(std::move(costs));
      }
      p.unary[i] = priced[static_cast<std::size_t>(c)];
    }
  }
  dp::Options o;
  o.cancel = r.cancel;
  o.workspace = &cg.workspace();
  o.bounded_table_entries = r.bounded_table_entries;
  dp::Solution s;
  try {
    const auto solving = std::chrono::steady_clock::now();
    s = dp::solve(p, o);
    // What the last round took besides pricing (the first: its solve).
    double solve_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - solving).count();
    // Moves the optimum uses that hold only their bounds: priced (with every move of their
    // geometries, and the neighbours in the tables of a move that was missed), and solved again
    // until the optimum uses priced moves alone (then no other choice can be cheaper: each costs
    // at least its bounds). Solving again costs the dynamic program each time: once the solves
    // (and the rounds' bookkeeping) have taken as long as pricing everything left would at the
    // rate measured so far, everything left is priced at once (ski rental: the search then takes
    // at most about twice the better of the two ways). And a round whose solve is dear prices
    // more than the neighbourhoods of the missed entries: further moves of the tables holding
    // them, as many as the last round took besides pricing would price (GPT-3 175B at 1,024
    // devices: 7 solves instead of 14). Which way it goes depends on the machine's
    // speed, never what it returns: the last optimum is the one a solve over every price finds,
    // ties included, to the rounding of a sum (each step of the solution's walk takes the first of
    // its least entries; where the bounds make an entry least that priced is not, the walk ends
    // on a bound, and the loop goes on).
    for (;;) {
      const auto started = std::chrono::steady_clock::now();
      const double pricing_before = cg.pricing_seconds();
      if (!s.exact || !cg.make_exact_around(s.choice, true, r.price_only_what_optima_use ? 0.0 : solve_seconds)) {
        break;
      }
      if (!r.price_only_what_optima_use && cg.resolve_seconds() >= cg.unpriced_seconds()) {
        cg.price_all();
      }
      s = dp::solve(p, o);
      const double round = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      solve_seconds = std::max(0.0, round - (cg.pricing_seconds() - pricing_before));
      cg.resolve_seconds() += solve_seconds;
    }
    for (const auto& seed : s.exact ? Choices{} : seeds) {
      auto c = seed.second;
      s.stats.local_moves += dp::improve(p, c, o);
      const double cost = dp::total_cost(p, c);
      if (cost < s.cost) {
        s.cost = cost;
        s.choice = std::move(c);
      }
    }
  } catch (...) {
    p.unary = saved;
    p.tables.resize(saved_tables);
    throw;
  }
  p.unary = saved;
  p.tables.resize(saved_tables);
  ++solves;
  return s;
}

// The hand-made families that configure every op on its own (no pipeline stages).
constexpr std::array<const char*, 6> per_op_families{"dp", "mp", "owt", "megatron", "hybrid", "gholami"};

// The family's plan for the request; none where the family does not apply.
std::optional<strategy::Strategy> family_plan(const char* name, const Request& r) {
  try {
    return find_optimizer(name).optimize(r);
  } catch (const Cancelled&) {
    throw;
  } catch (const Error&) {
    return std::nullopt;
  }
}

// The request with the model's facts derived once for every family's plans (each family, and the
// hybrid families once per group size, derived every op's semantics again: a twentieth of a search).
Request with_facts(const Request& r) {
  Request out = r;
  if (!out.facts && out.graph != nullptr) {
    out.facts = ModelFacts::of(*out.graph);
  }
  return out;
}

// The plans of the per-op families that lie in the search's space (every op's configuration one of
// its own, on the devices it would give it), as choices, named "dp's plan" and so on.
Choices family_choices(const CostGraph& cg, const Request& r) {
  const std::size_t n = cg.graph().ops().size();
  Request family_request = with_facts(r);
  family_request.progress = nullptr;
  Choices out;
  for (const char* name : per_op_families) {
    const auto plan = family_plan(name, family_request);
    if (!plan) {
      continue;
    }
    const auto& family = *plan;
    std::vector<int> c(n, -1);
    for (std::size_t i = 0; i < n && i < family.ops.size(); ++i) {
      const auto& configs = cg.tables(static_cast<graph::OpId>(i)).configs;
      for (std::size_t x = 0; x < configs.size() && c[i] < 0; ++x) {
        if (configs[x] == family.ops[i].config &&
            cg.assignment(static_cast<graph::OpId>(i), static_cast<int>(x)).devices == family.ops[i].devices) {
          c[i] = static_cast<int>(x);
        }
      }
    }
    if (family.ops.size() == n && !family.pipeline && std::find(c.begin(), c.end(), -1) == c.end()) {
      out.emplace_back(fmt::format("{}'s plan", name), std::move(c));
    }
  }
  return out;
}

std::string bytes_text(double b) {
  return b >= 1024.0 * 1024 * 1024 ? fmt::format("{:.3g} GiB", b / (1024.0 * 1024 * 1024))
                                   : fmt::format("{:.3g} MiB", b / (1024.0 * 1024));
}

// The memory terms of a strategy on its fullest device, largest first.
std::string memory_breakdown(const strategy::Prediction& p) {
  const auto fullest = std::max_element(p.memory.begin(), p.memory.end(),
                                        [](const auto& a, const auto& b) { return a.total() < b.total(); });
  if (fullest == p.memory.end()) {
    return {};
  }
  std::vector<std::pair<double, std::string>> terms{{fullest->parameters, "parameters"},
                                                    {fullest->gradients, "gradients"},
                                                    {fullest->optimizer_state, "optimizer state"},
                                                    {fullest->activations, "activations"},
                                                    {fullest->workspace, "workspace"}};
  std::sort(terms.rbegin(), terms.rend());
  std::string out;
  for (const auto& [v, name] : terms) {
    if (v > 0) {
      out += fmt::format("{}{} {}", out.empty() ? "" : ", ", name, bytes_text(v));
    }
  }
  return out;
}

} // namespace

AutoResult auto_search(const Request& r) {
  CostGraph cg(r);
  const auto& g = cg.graph();
  const std::size_t n = g.ops().size();
  AutoResult result;
  std::vector<int> all_devices(static_cast<std::size_t>(r.devices));
  std::iota(all_devices.begin(), all_devices.end(), 0);
  result.memory_limit = r.memory_limit > 0 ? r.memory_limit : r.cluster->smallest_memory(all_devices);
  int solves = 0;

  auto to_strategy = [&](const std::vector<int>& choice) {
    strategy::Strategy st;
    st.family = "auto";
    st.devices = r.devices;
    for (std::size_t i = 0; i < n; ++i) {
      st.ops.push_back(cg.assignment(static_cast<graph::OpId>(i), choice[i]));
    }
    return st;
  };
  auto peak = [&](const std::vector<int>& choice) { return additive_memory(cg, choice) + peak_workspace(cg, choice); };
  const double limit = result.memory_limit;
  // The least footprint there is, found from the ops' own tables: over the limit, nothing fits at
  // any price, and that is said before any move is priced (a refusal as quick as the ops' tables).
  const auto smallest = smallest_footprint(cg);
  if (peak(smallest) > limit) {
    const auto p = strategy::evaluate(g, *r.cluster, to_strategy(smallest), r.setup);
    throw Error(fmt::format("auto: nothing fits in {} per device on {} devices: the smallest footprint of any "
                            "plan is {} as the search counts it (every op's parameters, gradients, optimizer state "
                            "and activations added up, and the largest workspace); on its fullest device that plan "
                            "holds {} ({}); use more devices, ZeRO, recomputation or a smaller batch",
                            bytes_text(limit), r.devices, bytes_text(peak(smallest)), bytes_text(p.peak_memory),
                            memory_breakdown(p)));
  }
  // Too wide for the exact program: the bounded search reads any entry, so every move is priced,
  // and it starts from the families' plans too, so that it is never slower than any of them. The
  // exact program prices the moves its optima use (solve_priced).
  cg.build_problem(!r.price_every_move);
  const bool wide = dp::widest_table(cg.problem()) > dp::Options{}.max_table_entries;
  if (wide) {
    cg.price_all();
  }
  const Choices seeds = r.bounded_table_entries > 0 && wide ? family_choices(cg, r) : Choices{};

  auto best = solve_priced(cg, 0, r, solves, 0, seeds);
  if (r.progress) {
    r.progress(0.7);
  }
  double bound = best.lower_bound;
  const bool exact = best.exact; // every solve of this graph is exact, or none
  bool priced = false;
  double price = 0; // seconds per byte of the optimum returned (0: the limit does not bind)
  if (peak(best.choice) > limit) {
    // Lagrangian relaxation: min time + price x (memory - limit) is a lower bound on the fastest
    // strategy that fits for every price >= 0; raise the price until the optimum fits, then
    // bisect between the last price that did not fit and the first that did.
    priced = true;
    const double t0 = std::max(best.cost, 1e-12);
    const double m0 = std::max(additive_memory(cg, best.choice), 1.0);
    double lo = 0, hi = t0 / m0;
    std::optional<dp::Solution> fitting;
    double fitting_price = 0;
    // The last solution's time and memory, for the chord below.
    double last_time = 0, last_memory = 0;
    // The fastest strategy ignoring memory bounds every one that fits from below (price 0).
    auto try_price = [&](double price) {
      auto s = solve_priced(cg, price, r, solves, 0, seeds);
      const double time = time_of(cg, s.choice);
      const double mem = additive_memory(cg, s.choice);
      last_time = time;
      last_memory = mem;
      // min over plans of time + price x (memory - limit) is at most the time of any plan that fits.
      bound = std::max(bound, s.exact ? time + price * (mem - limit) : s.lower_bound - price * limit);
      if (peak(s.choice) <= limit) {
        if (!fitting || time < time_of(cg, fitting->choice)) {
          fitting = s;
          fitting_price = price;
        }
        return true;
      }
      return false;
    };
    // The solutions at lo (too large) and hi (fits): time and memory.
    double lo_time = time_of(cg, best.choice), lo_memory = additive_memory(cg, best.choice);
    double hi_time = 0, hi_memory = 0;
    int doublings = 0;
    while (!try_price(hi)) {
      lo = hi;
      lo_time = last_time;
      lo_memory = last_memory;
      hi *= 8;
      if (++doublings > 40) {
        break;
      }
    }
    hi_time = last_time;
    hi_memory = last_memory;
    if (!fitting) {
      // What fits does so by its workspace, which no price on memory reaches: the smallest footprint.
      dp::Solution s;
      s.choice = smallest;
      s.cost = time_of(cg, smallest);
      fitting = std::move(s);
      fitting_price = hi;
    }
    // Between lo and hi: the price where the two solutions' lines (time + price x (memory - limit))
    // cross. Where no solution there is below the crossing, it is the bound's maximum (the
    // Lagrangian dual is the least of such lines, concave): the price that makes the fastest that
    // fits optimal, found exactly, most often in a few solves. Otherwise the solution found there
    // replaces the end it stands for. Where the two do not stand on either side of the limit by
    // their memory alone (the fit decided by the workspace, which the price does not see), the
    // step is the geometric mean instead.
    for (int step = 0; step < 24 && doublings <= 40 && hi > lo * (1 + 1e-3); ++step) {
      const double geometric = lo > 0 ? std::sqrt(lo * hi) : hi / 8;
      const double crossing_price = lo_memory > hi_memory ? (hi_time - lo_time) / (lo_memory - hi_memory) : -1;
      const bool chord = crossing_price > lo && crossing_price < hi && lo_memory > limit && hi_memory <= limit;
      const double mid = chord ? crossing_price : geometric;
      const bool fits = try_price(mid);
      const double crossing = lo_time + mid * (lo_memory - limit);
      if (chord && last_time + mid * (last_memory - limit) >= crossing - 1e-12 * std::abs(crossing)) {
        break; // the dual's breakpoint
      }
      if (fits) {
        hi = mid;
        hi_time = last_time;
        hi_memory = last_memory;
      } else {
        lo = mid;
        lo_time = last_time;
        lo_memory = last_memory;
      }
      if (r.progress) {
        r.progress(0.7 + 0.2 * step / 24.0);
      }
    }
    best = *fitting;
    price = fitting_price;
  }
  // The final ranking, as the simulator predicts (sim::simulate_prediction, the figure `plan`
  // shows): it runs each bucket of weight-gradient sync beside the rest of the backward pass, which
  // no sum of per-op terms can say. So the candidates are the exact optimum, the optima with the
  // gradient sync counted half and not at all (at the same memory price), and the plans of the
  // per-op families where every op's configuration is one of the search's; the distinct ones that
  // fit are simulated and the fastest returned (on a tie, the one listed first).
  std::vector<int> choice = best.choice;
  std::optional<double> chosen_peak; // evaluate()'s peak memory of `choice`, where the ranking took it
  if (r.simulation_budget > 0 || r.simulate_every_candidate) {
    std::vector<std::pair<std::string, std::vector<int>>> optima{
        {exact ? "the exact optimum" : "the bounded search's plan", best.choice}};
    auto consider = [&](std::string name, std::vector<int> c) {
      const bool known = std::any_of(optima.begin(), optima.end(), [&](const auto& o) { return o.second == c; });
      if (!known && peak(c) <= limit) {
        optima.emplace_back(std::move(name), std::move(c));
      }
    };
    for (const double discount : {0.5, 1.0}) {
      auto s = solve_priced(cg, price, r, solves, discount, seeds);
      consider(discount < 1 ? "gradient sync counted half" : "gradient sync not counted", std::move(s.choice));
    }
    for (auto& [name, c] : seeds.empty() ? family_choices(cg, r) : seeds) {
      consider(std::move(name), std::move(c));
    }
    if (optima.size() > 1) {
      std::size_t fastest = 0;
      std::vector<double> peaks;
      // The candidates share most of their ops' configurations: each priced once, as numbers.
      strategy::Evaluator evaluate(g, *r.cluster);
      for (std::size_t k = 0; k < optima.size(); ++k) {
        cg.check_cancel();
        const auto st = to_strategy(optima[k].second);
        auto prediction = evaluate(st, r.setup);
        peaks.push_back(prediction.peak_memory);
        const bool simulated =
            sim::simulate_prediction(g, *r.cluster, st, prediction, {}, sim::max_predicted_tasks).has_value();
        result.ranking.push_back(
            {optima[k].first, time_of(cg, optima[k].second), prediction.iteration_time, simulated, false});
        if (prediction.iteration_time < result.ranking[fastest].predicted) {
          fastest = k;
        }
      }
      result.ranking[fastest].chosen = true;
      choice = optima[fastest].second;
      chosen_peak = peaks[fastest];
    }
  }
  result.objective = time_of(cg, choice);
  result.lower_bound = priced || !exact ? std::min(bound, result.objective) : result.objective;
  result.exact = exact;
  result.memory_priced = priced;
  result.strategy = to_strategy(choice);
  result.peak_memory =
      chosen_peak ? *chosen_peak : strategy::evaluate(g, *r.cluster, result.strategy, r.setup).peak_memory;

  // Per op: the runner-up with every other op as chosen, and what it would cost.
  cg.make_exact_around(choice);
  const auto& p = cg.problem();
  std::vector<std::vector<std::size_t>> edges_of(n);
  for (std::size_t e = 0; e < p.edges.size(); ++e) {
    edges_of[static_cast<std::size_t>(p.edges[e].u)].push_back(e);
    edges_of[static_cast<std::size_t>(p.edges[e].v)].push_back(e);
  }
  result.ops.resize(n);
  double configurations = 0;
  for (std::size_t i = 0; i < n; ++i) {
    cg.check_cancel();
    const auto& t = cg.tables(static_cast<graph::OpId>(i));
    auto& rep = result.ops[i];
    rep.candidates = static_cast<int>(t.configs.size());
    configurations += rep.candidates;
    auto local = [&](int x) {
      double c = t.time[static_cast<std::size_t>(x)];
      for (std::size_t e : edges_of[i]) {
        const auto& edge = p.edges[e];
        const auto& table = p.tables[static_cast<std::size_t>(edge.table)];
        const int xu = edge.u == static_cast<int>(i) ? x : choice[static_cast<std::size_t>(edge.u)];
        const int xv = edge.v == static_cast<int>(i) ? x : choice[static_cast<std::size_t>(edge.v)];
        c += table[static_cast<std::size_t>(xu) * static_cast<std::size_t>(p.domain[static_cast<std::size_t>(edge.v)]) +
                   static_cast<std::size_t>(xv)];
      }
      return c;
    };
    const double chosen = local(choice[i]);
    int runner = -1;
    double runner_cost = std::numeric_limits<double>::infinity();
    for (int x = 0; x < rep.candidates; ++x) {
      if (x == choice[i] || (priced && peak(choice) - t.memory[static_cast<std::size_t>(choice[i])] +
                                               t.memory[static_cast<std::size_t>(x)] >
                                           limit)) {
        continue;
      }
      const double c = local(x);
      if (c < runner_cost) {
        runner_cost = c;
        runner = x;
      }
    }
    if (runner >= 0) {
      rep.has_runner_up = true;
      rep.runner_up = t.configs[static_cast<std::size_t>(runner)];
      rep.runner_up_delta = runner_cost - chosen;
      rep.chosen_terms = cg.terms(static_cast<graph::OpId>(i), choice[i], choice);
      rep.runner_up_terms = cg.terms(static_cast<graph::OpId>(i), runner, choice);
    }
  }
  if (r.progress) {
    r.progress(1.0);
  }
  result.stats.ops = static_cast<int>(n);
  result.stats.configurations = configurations;
  result.stats.distinct_ops = static_cast<int>(cg.class_count());
  result.stats.edges = static_cast<int>(p.edges.size());
  result.stats.distinct_edge_tables = static_cast<int>(p.tables.size() - cg.class_count());
  result.stats.search_work = cg.search_work();
  for (const auto& table : p.tables) {
    result.stats.table_bytes += static_cast<double>(table.size()) * sizeof(double);
  }
  result.stats.solves = solves;
  result.stats.moves = static_cast<double>(cg.moves_listed());
  result.stats.moves_priced = static_cast<double>(cg.moves_priced());
  result.stats.pricing_rounds = cg.pricing_rounds();
  result.stats.bound_misses = cg.bound_misses();
  result.stats.dp = best.stats;

  std::string memory_text =
      priced ? fmt::format(" The fastest strategy does not fit in {} per device, so memory was priced (a Lagrangian "
                           "sweep, {} dynamic programs): the one returned needs {} and is at most {:.3g}% slower than "
                           "the fastest that fits.",
                           bytes_text(limit), solves, bytes_text(result.peak_memory),
                           result.lower_bound > 0 ? 100.0 * (result.objective / result.lower_bound - 1) : 0.0)
             : fmt::format(" It fits: {} of {} per device.", bytes_text(result.peak_memory), bytes_text(limit));
  const double gap = result.lower_bound > 0 ? 100.0 * (result.objective / result.lower_bound - 1) : 0.0;
  if (exact) {
    result.strategy.explanation = fmt::format(
        "The fastest configuration of every op for the whole graph at once, found exactly by dynamic programming over "
        "a vertex ordering (PaSE): {} configurations of {} ops ({} distinct, repeated blocks priced once), {} "
        "edges; the widest dependent set held {} ops and the largest table {:.3g} entries. Predicted objective {:.4g} "
        "ms (op costs plus redistributions).{}",
        configurations, n, cg.class_count(), p.edges.size(), best.stats.width, best.stats.largest_table,
        result.objective * 1e3, memory_text);
  } else {
    // Too wide for the exact program: say so, how the plan was found, and how far it can be off.
    result.strategy.explanation = fmt::format(
        "A configuration of every op for the whole graph at once, by a bounded dynamic program: {} configurations of "
        "{} ops ({} distinct), {} edges, whose dependent sets are too wide to search exactly (the exact program's "
        "ordering needs a table of {:.3g} entries, the limit is {:.3g}: ops whose outputs many later ops read, as a "
        "DenseNet block's concatenations do). So {} of its steps summed their costs in several tables of at most "
        "{:.3g} entries instead of one (mini-buckets), which bounds the optimum from below; the plan read back "
        "through them and the hand-made families' plans were improved op by op ({} moves in all) and the best "
        "kept. Predicted objective {:.4g} ms (op costs plus "
        "redistributions), at most {:.3g}% slower than the optimum{} (bound {:.4g} ms).{}",
        configurations, n, cg.class_count(), p.edges.size(), best.stats.too_wide_table, dp::Options{}.max_table_entries,
        best.stats.split_steps, r.bounded_table_entries, best.stats.local_moves, result.objective * 1e3, gap,
        priced ? " that fits" : "", result.lower_bound * 1e3, memory_text);
  }
  if (!result.ranking.empty()) {
    std::string ranked;
    for (const auto& o : result.ranking) {
      ranked += fmt::format("{}{}: {:.4g} ms{} (terms added up {:.4g} ms){}", ranked.empty() ? "" : "; ", o.candidate,
                            o.predicted * 1e3, o.simulated ? " simulated" : "", o.objective * 1e3,
                            o.chosen ? ", chosen" : "");
    }
    result.strategy.explanation += fmt::format(
        " The simulator overlaps gradient sync with the backward pass, which a sum of terms cannot say: {}, the "
        "optima with gradient sync counted half and not at all, and the per-op families' plans were ranked by their "
        "simulated iteration: {}.",
        exact ? "the exact optimum" : "the bounded search's plan", ranked);
  }
  return result;
}

FamilyComparison compare_with_families(const Request& given, const strategy::Strategy& st) {
  const Request request = with_facts(given);
  FamilyComparison out;
  std::size_t fewest = std::numeric_limits<std::size_t>::max();
  strategy::Evaluator evaluate(*request.graph, *request.cluster); // the families share most configurations
  for (const char* name : per_op_families) {
    const auto plan = family_plan(name, request);
    if (!plan) {
      continue;
    }
    const auto& family = *plan;
    auto p = evaluate(family, request.setup);
    if (request.simulation_budget > 0 || request.simulate_every_candidate) {
      sim::simulate_prediction(*request.graph, *request.cluster, family, p, {}, sim::max_predicted_tasks);
    }
    out.table += fmt::format("{}{} {:.4g} ms", out.table.empty() ? "" : ", ", name, p.iteration_time * 1e3);
    if (out.best_family.empty() || p.iteration_time < out.best_family_time) {
      out.best_family = name;
      out.best_family_time = p.iteration_time;
    }
    std::vector<graph::OpId> different;
    for (std::size_t i = 0; i < st.ops.size() && i < family.ops.size(); ++i) {
      if (st.ops[i].config != family.ops[i].config || st.ops[i].devices != family.ops[i].devices) {
        different.push_back(static_cast<graph::OpId>(i));
      }
    }
    if (different.size() < fewest) {
      fewest = different.size();
      out.closest = name;
      out.different = std::move(different);
    }
  }
  return out;
}

} // namespace partita::search
