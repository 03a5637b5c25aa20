// A built graph as a dp::Problem: a vertex per op, an edge per producer-consumer pair. Repeated
// blocks (ResNet's bottlenecks, the Transformer's layers) have identical tables, stored once.

#include "model_builder.h"

#include <cstring>
#include <unordered_map>

namespace partita::search::pase::detail {

namespace {

class TableStore {
public:
  explicit TableStore(dp::Problem& problem) : m_problem(problem) {}

  int add(std::vector<double> costs) {
    const std::size_t h = hash(costs);
    auto [first, last] = m_index.equal_range(h);
    for (auto it = first; it != last; ++it) {
      const auto& t = m_problem.tables[static_cast<std::size_t>(it->second)];
      if (t.size() == costs.size() && std::memcmp(t.data(), costs.data(), costs.size() * sizeof(double)) == 0) {
        return it->second;
      }
    }
    const int id = m_problem.add_table(std::move(costs));
    m_index.emplace(h, id);
    return id;
  }

private:
  static std::size_t hash(const std::vector<double>& v) {
    std::uint64_t h = 1469598103934665603ULL ^ v.size();
    for (double x : v) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &x, sizeof bits);
      h = (h ^ bits) * 1099511628211ULL;
    }
    return static_cast<std::size_t>(h);
  }

  dp::Problem& m_problem;
  std::unordered_multimap<std::size_t, int> m_index;
};

} // namespace

Model ModelBuilder::finish() {
  Model m;
  m.graph = m_graph;
  TableStore store(m.problem);
  for (auto& node : m_nodes) {
    const int v = m.problem.add_vertex(static_cast<int>(node.layer.configs.size()), node.layer.name);
    m.problem.unary[static_cast<std::size_t>(v)] = store.add(node.layer.costs);
    m.layers.push_back(std::move(node.layer));
  }
  for (auto& [key, costs] : m_edges) {
    m.problem.edges.push_back({key.first, key.second, store.add(std::move(costs))});
  }
  m_nodes.clear();
  m_edges.clear();
  return m;
}

} // namespace partita::search::pase::detail
