// The bounded search for problems whose dependent sets are too wide for exact elimination:
// mini-bucket elimination (Dechter & Rish, "Mini-buckets: a general scheme for bounded inference",
// JACM 2003) for a lower bound and a first plan, then a local search for a better plan. Exact where
// no step is split.

#include "partita/graph/error.h"
#include "partita/search/dp.h"
#include "search/dp_detail.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <vector>

namespace partita::search::dp {
namespace {

// A cost table over `scope` (row-major: the last vertex of the scope varies fastest): an edge's
// table read where the problem holds it, or one of the search's own.
struct Table {
  std::vector<int> scope;
  std::vector<double> owned;
  const double* data = nullptr;
  std::size_t size = 0;
};

Table owned_table(std::vector<int> scope, std::vector<double> costs) {
  Table t{std::move(scope), std::move(costs), nullptr, 0};
  t.data = t.owned.data();
  t.size = t.owned.size();
  return t;
}

class MiniBuckets {
public:
  MiniBuckets(const Problem& p, double bound, const Options& o) : m_p(p), m_o(o), m_n(p.domain.size()) {
    m_unary.resize(m_n);
    m_tables_of.resize(m_n);
    m_bucket.resize(m_n);
    for (std::size_t v = 0; v < m_n; ++v) {
      const auto d = static_cast<std::size_t>(p.domain[v]);
      if (p.unary[v] >= 0) {
        const auto& own = p.tables[static_cast<std::size_t>(p.unary[v])];
        m_unary[v].assign(own.begin(), own.end());
      } else {
        m_unary[v].assign(d, 0.0);
      }
    }
    m_bound = bound;
    for (const auto& e : p.edges) {
      const auto& costs = p.tables[static_cast<std::size_t>(e.table)];
      const auto du = static_cast<std::size_t>(p.domain[static_cast<std::size_t>(e.u)]);
      const auto dv = static_cast<std::size_t>(p.domain[static_cast<std::size_t>(e.v)]);
      if (du == 1 || dv == 1) { // no choice at one end: a cost of the other end alone (as solve() does)
        if (du == 1 && dv == 1) {
          m_constant += costs[0];
        } else {
          auto& target = m_unary[static_cast<std::size_t>(du == 1 ? e.v : e.u)];
          for (std::size_t x = 0; x < target.size(); ++x) {
            target[x] += costs[x];
          }
        }
        continue;
      }
      add(Table{{e.u, e.v}, {}, costs.data(), costs.size()});
      // Every edge's table fits in one mini-bucket, whatever the bound.
      m_bound = std::max(m_bound, static_cast<double>(std::max(du, dv)));
    }
  }

  Solution run() {
    std::set<std::pair<double, int>> queue;
    std::vector<double> size(m_n);
    for (std::size_t v = 0; v < m_n; ++v) {
      size[v] = step_size(static_cast<int>(v));
      queue.insert({size[v], static_cast<int>(v)});
    }
    std::vector<int> order;
    double constant = m_constant;
    while (!queue.empty()) {
      const int v = queue.begin()->second;
      queue.erase(queue.begin());
      const auto touched = neighbours(v);
      constant += eliminate(v);
      order.push_back(v);
      for (const int u : touched) {
        const auto ui = static_cast<std::size_t>(u);
        queue.erase({size[ui], u});
        size[ui] = step_size(u);
        queue.insert({size[ui], u});
      }
      if (m_o.progress && (order.size() % 64 == 0 || order.size() == m_n)) {
        m_o.progress(0.9 * static_cast<double>(order.size()) / static_cast<double>(m_n));
      }
    }
    // The choices, last eliminated first, each the best value given its bucket's tables (every
    // other vertex they read is decided by then).
    Solution s;
    s.choice.assign(m_n, 0);
    std::vector<double> sum;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const auto vi = static_cast<std::size_t>(*it);
      sum = m_unary[vi];
      for (const auto& t : m_bucket[vi]) {
        add_row(*t, *it, s.choice, sum);
      }
      s.choice[vi] = static_cast<int>(std::min_element(sum.begin(), sum.end()) - sum.begin());
    }
    s.stats = m_stats;
    s.stats.local_moves = improve(m_p, s.choice, m_o);
    s.cost = total_cost(m_p, s.choice);
    s.lower_bound = std::min(constant, s.cost);
    s.exact = m_stats.split_steps == 0;
    if (s.exact) {
      s.lower_bound = s.cost; // the same sums, summed in another order: equal but for rounding
    }
    return s;
  }

private:
  void add(Table t) {
    auto shared = std::make_shared<Table>(std::move(t));
    const int id = static_cast<int>(m_tables.size());
    for (const int u : shared->scope) {
      m_tables_of[static_cast<std::size_t>(u)].push_back(id);
    }
    m_live_bytes += static_cast<double>(shared->owned.size()) * sizeof(double);
    m_tables.push_back(std::move(shared));
    m_alive.push_back(true);
  }

  // The other vertices of v's live tables, in increasing order.
  std::vector<int> neighbours(int v) const {
    std::vector<int> out;
    for (const int id : m_tables_of[static_cast<std::size_t>(v)]) {
      if (m_alive[static_cast<std::size_t>(id)]) {
        for (const int u : m_tables[static_cast<std::size_t>(id)]->scope) {
          if (u != v) {
            out.push_back(u);
          }
        }
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  double entries(const std::vector<int>& scope) const {
    double e = 1;
    for (const int u : scope) {
      e *= m_p.domain[static_cast<std::size_t>(u)];
    }
    return e;
  }

  // The exact step's work, as solve() orders its steps: the table over v's neighbours times v's values.
  double step_size(int v) const { return entries(neighbours(v)) * m_p.domain[static_cast<std::size_t>(v)]; }

  void check_cancel() const {
    if (m_o.cancel != nullptr && m_o.cancel->load(std::memory_order_relaxed)) {
      throw Cancelled();
    }
  }

  // Adds t's costs at every value of v, the rest of its scope as in `choice`, to sum.
  void add_row(const Table& t, int v, const std::vector<int>& choice, std::vector<double>& sum) const {
    std::size_t base = 0, stride_v = 0, stride = 1;
    for (std::size_t j = t.scope.size(); j-- > 0;) {
      const auto u = static_cast<std::size_t>(t.scope[j]);
      if (t.scope[j] == v) {
        stride_v = stride;
      } else {
        base += static_cast<std::size_t>(choice[u]) * stride;
      }
      stride *= static_cast<std::size_t>(m_p.domain[u]);
    }
    for (std::size_t x = 0; x < sum.size(); ++x) {
      sum[x] += t.data[base + x * stride_v];
    }
  }

  // Eliminates v: its live tables, split into groups (mini-buckets) whose joint scope without v
  // holds at most m_bound entries, each group summed and minimized over v into a table of its own.
  // Returns the part that no longer depends on any vertex.
  double eliminate(int v) {
    check_cancel();
    const auto vi = static_cast<std::size_t>(v);
    std::vector<std::shared_ptr<const Table>> tables;
    for (const int id : m_tables_of[vi]) {
      if (m_alive[static_cast<std::size_t>(id)]) {
        m_alive[static_cast<std::size_t>(id)] = false;
        tables.push_back(m_tables[static_cast<std::size_t>(id)]);
      }
    }
    m_tables_of[vi].clear();
    // The widest tables first, each into the first group it fits.
    std::stable_sort(tables.begin(), tables.end(), [](const auto& a, const auto& b) { return a->size > b->size; });
    struct Group {
      std::vector<int> scope; // without v, increasing
      std::vector<const Table*> tables;
    };
    std::vector<Group> groups;
    std::vector<int> joined;
    for (const auto& t : tables) {
      std::vector<int> own;
      for (const int u : t->scope) {
        if (u != v) {
          own.push_back(u);
        }
      }
      std::sort(own.begin(), own.end());
      Group* home = nullptr;
      for (auto& g : groups) {
        joined.clear();
        std::set_union(g.scope.begin(), g.scope.end(), own.begin(), own.end(), std::back_inserter(joined));
        if (entries(joined) <= m_bound) {
          g.scope = joined;
          home = &g;
          break;
        }
      }
      if (home == nullptr) {
        groups.push_back({own, {}});
        home = &groups.back();
      }
      home->tables.push_back(t.get());
    }
    if (groups.empty()) {
      groups.push_back({});
    }
    if (groups.size() > 1) {
      ++m_stats.split_steps;
    }
    double constant = 0;
    for (std::size_t k = 0; k < groups.size(); ++k) {
      auto& g = groups[k];
      m_stats.width = std::max(m_stats.width, static_cast<int>(g.scope.size()));
      const double n = entries(g.scope);
      m_stats.largest_table = std::max(m_stats.largest_table, n);
      m_stats.work += n * m_p.domain[vi];
      // v's own costs go with the first group only: each cost is summed once.
      auto message = minimize(v, g.scope, g.tables, k == 0 ? &m_unary[vi] : nullptr);
      if (g.scope.empty()) {
        constant += message[0];
      } else if (g.scope.size() == 1) {
        auto& target = m_unary[static_cast<std::size_t>(g.scope[0])];
        for (std::size_t x = 0; x < target.size(); ++x) {
          target[x] += message[x];
        }
      } else {
        add(owned_table(g.scope, std::move(message)));
      }
    }
    m_bucket[vi] = std::move(tables); // kept for reading the choices back
    m_stats.peak_bytes = std::max(m_stats.peak_bytes, m_live_bytes);
    return constant;
  }

  // A copy of t with v moved to the end of its scope (the others in their order).
  Table with_last(const Table& t, int v) const {
    auto out = owned_table(detail::scope_with_last(t.scope, v), std::vector<double>(t.size));
    detail::copy_with_last(m_p, t.scope, t.data, v, out.owned.data());
    return out;
  }

  // min over v of (own[v] +) the sum of `tables`, for every assignment of `scope` (v not in it).
  std::vector<double> minimize(int v, const std::vector<int>& scope, const std::vector<const Table*>& tables,
                               const std::vector<double>* own) {
    const auto dv = static_cast<std::size_t>(m_p.domain[static_cast<std::size_t>(v)]);
    const std::size_t k = scope.size(), nt = tables.size();
    std::size_t n = 1;
    for (const int u : scope) {
      n *= static_cast<std::size_t>(m_p.domain[static_cast<std::size_t>(u)]);
    }
    // Each table with v's values side by side (v last in its scope), so that the sums below run
    // along contiguous rows; per table its stride for each position of `scope` (0 where it does not
    // read it).
    std::vector<Table> moved;
    moved.reserve(nt);
    std::vector<const Table*> rows(nt);
    for (std::size_t t = 0; t < nt; ++t) {
      if (tables[t]->scope.back() == v) {
        rows[t] = tables[t];
      } else {
        moved.push_back(with_last(*tables[t], v));
        rows[t] = &moved.back();
      }
    }
    std::vector<std::vector<std::size_t>> stride(nt, std::vector<std::size_t>(k, 0));
    std::vector<std::size_t> base(nt, 0);
    for (std::size_t t = 0; t < nt; ++t) {
      std::size_t s = dv;
      const auto& ts = rows[t]->scope;
      for (std::size_t j = ts.size() - 1; j-- > 0;) {
        const auto at = static_cast<std::size_t>(std::lower_bound(scope.begin(), scope.end(), ts[j]) - scope.begin());
        stride[t][at] = s;
        s *= static_cast<std::size_t>(m_p.domain[static_cast<std::size_t>(ts[j])]);
      }
    }
    // The tables that do not read the scope's last (fastest) position are summed once per run of
    // it, with v's own costs; the others at every entry.
    std::vector<std::size_t> slow, fast;
    for (std::size_t t = 0; t < nt; ++t) {
      (k > 0 && stride[t][k - 1] != 0 ? fast : slow).push_back(t);
    }
    const std::size_t run = k > 0 ? static_cast<std::size_t>(m_p.domain[static_cast<std::size_t>(scope[k - 1])]) : 1;
    std::vector<double> out(n), partial(dv), sum(dv);
    std::vector<std::size_t> counter(k, 0);
    for (std::size_t i = 0; i < n; ++i) {
      if ((i & 0xffff) == 0) {
        check_cancel();
      }
      if (i % run == 0) {
        double* const p = partial.data();
        if (own != nullptr) {
          std::copy(own->begin(), own->end(), partial.begin());
        } else {
          std::fill(partial.begin(), partial.end(), 0.0);
        }
        for (const std::size_t t : slow) {
          const double* row = rows[t]->data + base[t];
          for (std::size_t x = 0; x < dv; ++x) {
            p[x] += row[x];
          }
        }
      }
      double* const total = sum.data();
      std::copy(partial.begin(), partial.end(), sum.begin());
      for (const std::size_t t : fast) {
        const double* row = rows[t]->data + base[t];
        for (std::size_t x = 0; x < dv; ++x) {
          total[x] += row[x];
        }
      }
      double least = total[0];
      for (std::size_t x = 1; x < dv; ++x) {
        least = std::min(least, total[x]);
      }
      out[i] = least;
      for (std::size_t j = k; j-- > 0;) { // the next assignment: the last position fastest
        ++counter[j];
        for (std::size_t t = 0; t < nt; ++t) {
          base[t] += stride[t][j];
        }
        if (counter[j] < static_cast<std::size_t>(m_p.domain[static_cast<std::size_t>(scope[j])])) {
          break;
        }
        for (std::size_t t = 0; t < nt; ++t) {
          base[t] -= stride[t][j] * counter[j];
        }
        counter[j] = 0;
      }
    }
    return out;
  }

  const Problem& m_p;
  const Options& m_o;
  std::size_t m_n;
  double m_bound = 0;
  double m_constant = 0;
  std::vector<std::vector<double>> m_unary;
  std::vector<std::shared_ptr<const Table>> m_tables;
  std::vector<bool> m_alive;
  std::vector<std::vector<int>> m_tables_of;
  std::vector<std::vector<std::shared_ptr<const Table>>> m_bucket; // per vertex: the tables it summed
  Stats m_stats;
  double m_live_bytes = 0;
};

} // namespace

int improve(const Problem& p, std::vector<int>& choice, const Options& o) {
  struct Side {
    const Costs* table;
    int other;
    bool first; // the vertex is the edge's u (rows), else its v (columns)
  };
  const std::size_t n = p.domain.size();
  if (choice.size() != n) {
    throw Error(fmt::format("search problem: {} choices for {} vertices", choice.size(), n));
  }
  for (std::size_t v = 0; v < n; ++v) {
    if (choice[v] < 0 || choice[v] >= p.domain[v]) {
      throw Error(
          fmt::format("search problem: {} has no value {}", detail::vertex_name(p, static_cast<int>(v)), choice[v]));
    }
  }
  std::vector<std::vector<Side>> sides(n);
  for (const auto& e : p.edges) {
    const auto* t = &p.tables[static_cast<std::size_t>(e.table)];
    sides[static_cast<std::size_t>(e.u)].push_back({t, e.v, true});
    sides[static_cast<std::size_t>(e.v)].push_back({t, e.u, false});
  }
  int moves = 0;
  std::vector<double> cost;
  for (int pass = 0; pass < 100; ++pass) {
    if (o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed)) {
      throw Cancelled();
    }
    bool changed = false;
    for (std::size_t v = 0; v < n; ++v) {
      const auto d = static_cast<std::size_t>(p.domain[v]);
      if (d == 1) {
        continue;
      }
      cost.assign(d, 0.0);
      if (p.unary[v] >= 0) {
        const auto& u = p.tables[static_cast<std::size_t>(p.unary[v])];
        std::copy(u.begin(), u.end(), cost.begin());
      }
      for (const auto& s : sides[v]) {
        const auto other = static_cast<std::size_t>(s.other);
        const auto d_other = static_cast<std::size_t>(p.domain[other]);
        const auto xo = static_cast<std::size_t>(choice[other]);
        for (std::size_t x = 0; x < d; ++x) {
          cost[x] += s.first ? (*s.table)[x * d_other + xo] : (*s.table)[xo * d + x];
        }
      }
      const auto best = static_cast<std::size_t>(std::min_element(cost.begin(), cost.end()) - cost.begin());
      // Strictly better by more than rounding: a tie never moves, so the passes end.
      const double now = cost[static_cast<std::size_t>(choice[v])];
      if (cost[best] < now - 1e-12 * std::max(1.0, std::abs(now))) {
        choice[v] = static_cast<int>(best);
        changed = true;
        ++moves;
      }
    }
    if (!changed) {
      break;
    }
  }
  return moves;
}

Solution solve_bounded(const Problem& problem, double table_entries, const Options& options) {
  detail::validate(problem);
  if (!(table_entries >= 1)) {
    throw Error(fmt::format("search: a bounded search needs tables of at least one entry, not {}", table_entries));
  }
  MiniBuckets m(problem, table_entries, options);
  return m.run();
}

} // namespace partita::search::dp
