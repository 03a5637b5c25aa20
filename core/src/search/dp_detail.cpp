// What the exact and the bounded solvers share (search/dp_detail.h), compiled apart from their
// hot loops.

#include "search/dp_detail.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace partita::search::dp {

namespace detail {

std::string vertex_name(const Problem& p, int v) {
  const auto i = static_cast<std::size_t>(v);
  return i < p.names.size() && !p.names[i].empty() ? fmt::format("'{}'", p.names[i]) : fmt::format("vertex {}", v);
}

void validate(const Problem& p) {
  const std::size_t n = p.domain.size();
  if (p.unary.size() != n) {
    throw Error(fmt::format("search problem: {} unary entries for {} vertices", p.unary.size(), n));
  }
  // A table's costs are read once however many vertices and edges share it (a repeated block's
  // tables are shared by every copy), in one pass without a branch per cost; the first bad one is
  // looked for only when there is one.
  std::vector<char> costs_checked(p.tables.size(), 0);
  // `what()` names the table's owner, only for an error: building the names of every vertex and
  // edge at each solve was a tenth of what a solve of a small graph allocated.
  auto check_table = [&](int t, double expected, const auto& what) {
    if (t < 0 || static_cast<std::size_t>(t) >= p.tables.size()) {
      throw Error(fmt::format("search problem: {} refers to table {}, there are {}", what(), t, p.tables.size()));
    }
    const auto& table = p.tables[static_cast<std::size_t>(t)];
    if (static_cast<double>(table.size()) != expected) {
      throw Error(fmt::format("search problem: {} has {} costs, its domains need {}", what(), table.size(), expected));
    }
    if (costs_checked[static_cast<std::size_t>(t)] != 0) {
      return;
    }
    costs_checked[static_cast<std::size_t>(t)] = 1;
    constexpr double infinity = std::numeric_limits<double>::infinity();
    bool good = true;
    for (const double c : table) {
      good &= (c >= 0) & (c < infinity); // false for NaN too
    }
    if (!good) {
      const auto bad = std::find_if(table.begin(), table.end(), [](double c) { return !(c >= 0 && c < infinity); });
      throw Error(fmt::format("search problem: {} holds the cost {}; costs must be finite and >= 0", what(), *bad));
    }
  };
  for (std::size_t v = 0; v < n; ++v) {
    if (p.domain[v] < 1) {
      throw Error(fmt::format("search problem: {} has {} values; it needs at least one",
                              vertex_name(p, static_cast<int>(v)), p.domain[v]));
    }
    if (p.unary[v] >= 0) {
      check_table(p.unary[v], p.domain[v], [&] { return "the cost of " + vertex_name(p, static_cast<int>(v)); });
    }
  }
  for (const auto& e : p.edges) {
    if (e.u < 0 || e.v < 0 || static_cast<std::size_t>(e.u) >= n || static_cast<std::size_t>(e.v) >= n || e.u == e.v) {
      throw Error(fmt::format("search problem: an edge joins vertices {} and {} of {}", e.u, e.v, n));
    }
    check_table(e.table,
                static_cast<double>(p.domain[static_cast<std::size_t>(e.u)]) * p.domain[static_cast<std::size_t>(e.v)],
                [&] { return "the edge " + vertex_name(p, e.u) + " - " + vertex_name(p, e.v); });
  }
}

std::vector<int> scope_with_last(const std::vector<int>& scope, int v) {
  std::vector<int> out;
  for (const int u : scope) {
    if (u != v) {
      out.push_back(u);
    }
  }
  out.push_back(v);
  return out;
}

void copy_with_last(const Problem& p, const std::vector<int>& scope, const double* data, int v, double* out) {
  // The scope is (before, v, after), each of the two a run of vertices whose order stays: per
  // value of `before`, a (v x after) matrix is transposed into (after x v), in tiles that both
  // sides read and write a few cache lines at a time.
  const auto at = static_cast<std::size_t>(std::find(scope.begin(), scope.end(), v) - scope.begin());
  std::size_t before = 1, after = 1;
  for (std::size_t j = 0; j < scope.size(); ++j) {
    const auto d = static_cast<std::size_t>(p.domain[static_cast<std::size_t>(scope[j])]);
    (j < at ? before : after) *= j == at ? 1 : d;
  }
  const auto dv = static_cast<std::size_t>(p.domain[static_cast<std::size_t>(v)]);
  constexpr std::size_t tile = 16;
  for (std::size_t b = 0; b < before; ++b) {
    const double* from = data + b * dv * after;
    double* to = out + b * dv * after;
    for (std::size_t a0 = 0; a0 < after; a0 += tile) {
      const std::size_t a1 = std::min(after, a0 + tile);
      for (std::size_t x0 = 0; x0 < dv; x0 += tile) {
        const std::size_t x1 = std::min(dv, x0 + tile);
        for (std::size_t a = a0; a < a1; ++a) {
          for (std::size_t x = x0; x < x1; ++x) {
            to[a * dv + x] = from[x * after + a];
          }
        }
      }
    }
  }
}

} // namespace detail

} // namespace partita::search::dp
