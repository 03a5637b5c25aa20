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
  auto check_table = [&](int t, double expected, const std::string& what) {
    if (t < 0 || static_cast<std::size_t>(t) >= p.tables.size()) {
      throw Error(fmt::format("search problem: {} refers to table {}, there are {}", what, t, p.tables.size()));
    }
    const auto& table = p.tables[static_cast<std::size_t>(t)];
    if (static_cast<double>(table.size()) != expected) {
      throw Error(fmt::format("search problem: {} has {} costs, its domains need {}", what, table.size(), expected));
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
      throw Error(fmt::format("search problem: {} holds the cost {}; costs must be finite and >= 0", what, *bad));
    }
  };
  for (std::size_t v = 0; v < n; ++v) {
    if (p.domain[v] < 1) {
      throw Error(fmt::format("search problem: {} has {} values; it needs at least one",
                              vertex_name(p, static_cast<int>(v)), p.domain[v]));
    }
    if (p.unary[v] >= 0) {
      check_table(p.unary[v], p.domain[v], "the cost of " + vertex_name(p, static_cast<int>(v)));
    }
  }
  for (const auto& e : p.edges) {
    if (e.u < 0 || e.v < 0 || static_cast<std::size_t>(e.u) >= n || static_cast<std::size_t>(e.v) >= n || e.u == e.v) {
      throw Error(fmt::format("search problem: an edge joins vertices {} and {} of {}", e.u, e.v, n));
    }
    check_table(e.table,
                static_cast<double>(p.domain[static_cast<std::size_t>(e.u)]) * p.domain[static_cast<std::size_t>(e.v)],
                "the edge " + vertex_name(p, e.u) + " - " + vertex_name(p, e.v));
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
  const auto moved = scope_with_last(scope, v);
  const std::size_t r = scope.size();
  // Per position of the old scope: its domain, its stride in the new layout, and its counter.
  std::vector<std::size_t> work(3 * r, 0);
  std::size_t* const domain = work.data();
  std::size_t* const target_stride = domain + r;
  std::size_t* const counter = target_stride + r;
  std::size_t size = 1;
  for (std::size_t j = 0; j < r; ++j) {
    domain[j] = static_cast<std::size_t>(p.domain[static_cast<std::size_t>(scope[j])]);
    size *= domain[j];
  }
  std::size_t s = 1;
  for (std::size_t j = r; j-- > 0;) { // the new layout's positions, fastest first
    const auto old = static_cast<std::size_t>(std::find(scope.begin(), scope.end(), moved[j]) - scope.begin());
    target_stride[old] = s;
    s *= domain[old];
  }
  std::size_t at = 0;
  for (std::size_t i = 0; i < size; ++i) {
    out[at] = data[i];
    for (std::size_t j = r; j-- > 0;) {
      at += target_stride[j];
      if (++counter[j] < domain[j]) {
        break;
      }
      at -= target_stride[j] * counter[j];
      counter[j] = 0;
    }
  }
}

} // namespace detail

} // namespace partita::search::dp
