#include "partita/graph/graph.h"

#include "partita/graph/error.h"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <queue>

namespace partita::graph {

std::int64_t Tensor::elements() const {
  return element_count(shape, "tensor '" + name + "'");
}

std::int64_t Tensor::bytes() const {
  const std::int64_t n = elements();
  const std::int64_t size = dtype_size(dtype);
  if (size != 0 && n > std::numeric_limits<std::int64_t>::max() / size) {
    throw Error(fmt::format("tensor '{}': byte size of shape {} overflows int64", name, shape_string(shape)));
  }
  return n * size;
}

std::int64_t Op::attr_int(const std::string& key, std::int64_t fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) {
    return fallback;
  }
  if (const auto* v = std::get_if<std::int64_t>(&it->second)) {
    return *v;
  }
  throw Error(fmt::format("node '{}' ({}): attribute '{}' is not an integer", name, type, key));
}

double Op::attr_float(const std::string& key, double fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) {
    return fallback;
  }
  if (const auto* v = std::get_if<double>(&it->second)) {
    return *v;
  }
  if (const auto* v = std::get_if<std::int64_t>(&it->second)) {
    return static_cast<double>(*v);
  }
  throw Error(fmt::format("node '{}' ({}): attribute '{}' is not a float", name, type, key));
}

std::string Op::attr_string(const std::string& key, const std::string& fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) {
    return fallback;
  }
  if (const auto* v = std::get_if<std::string>(&it->second)) {
    return *v;
  }
  throw Error(fmt::format("node '{}' ({}): attribute '{}' is not a string", name, type, key));
}

std::vector<std::int64_t> Op::attr_ints(const std::string& key, std::vector<std::int64_t> fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) {
    return fallback;
  }
  if (const auto* v = std::get_if<std::vector<std::int64_t>>(&it->second)) {
    return *v;
  }
  if (const auto* v = std::get_if<std::int64_t>(&it->second)) {
    return {*v};
  }
  throw Error(fmt::format("node '{}' ({}): attribute '{}' is not a list of integers", name, type, key));
}

TensorId Graph::add_tensor(Tensor t) {
  if (m_by_name.count(t.name) != 0) {
    throw Error(fmt::format("graph '{}': tensor '{}' is defined twice", name, t.name));
  }
  const auto id = static_cast<TensorId>(m_tensors.size());
  m_by_name.emplace(t.name, id);
  m_tensors.push_back(std::move(t));
  return id;
}

OpId Graph::add_op(Op op) {
  const auto id = static_cast<OpId>(m_ops.size());
  // Check everything before changing anything, so that a refused op leaves the graph as it was.
  for (TensorId t : op.inputs) {
    if (t != no_tensor && (t < 0 || static_cast<std::size_t>(t) >= m_tensors.size())) {
      throw Error(fmt::format("node '{}' ({}): input tensor id {} does not exist", op.name, op.type, t));
    }
  }
  for (std::size_t i = 0; i < op.outputs.size(); ++i) {
    const TensorId t = op.outputs[i];
    if (t == no_tensor) {
      continue; // an omitted optional output
    }
    if (t < 0 || static_cast<std::size_t>(t) >= m_tensors.size()) {
      throw Error(fmt::format("node '{}' ({}): output tensor id {} does not exist", op.name, op.type, t));
    }
    const Tensor& out = m_tensors[static_cast<std::size_t>(t)];
    if (std::find(op.outputs.begin(), op.outputs.begin() + static_cast<std::ptrdiff_t>(i), t) !=
        op.outputs.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw Error(fmt::format("node '{}' ({}): output '{}' is listed twice", op.name, op.type, out.name));
    }
    if (out.producer != -1) {
      throw Error(fmt::format("node '{}' ({}): output '{}' is already produced by node '{}'", op.name, op.type,
                              out.name, m_ops[static_cast<std::size_t>(out.producer)].name));
    }
  }
  for (TensorId t : op.inputs) {
    if (t == no_tensor) {
      continue;
    }
    auto& consumers = m_tensors[static_cast<std::size_t>(t)].consumers;
    if (std::find(consumers.begin(), consumers.end(), id) == consumers.end()) {
      consumers.push_back(id);
    }
  }
  for (TensorId t : op.outputs) {
    if (t != no_tensor) {
      m_tensors[static_cast<std::size_t>(t)].producer = id;
    }
  }
  m_ops.push_back(std::move(op));
  return id;
}

bool Graph::is_graph_output(TensorId t) const {
  return std::find(graph_outputs.begin(), graph_outputs.end(), t) != graph_outputs.end();
}

TensorId Graph::find_tensor(const std::string& tensor_name) const {
  auto it = m_by_name.find(tensor_name);
  return it == m_by_name.end() ? no_tensor : it->second;
}

std::vector<OpId> Graph::topological_order() const {
  using G = boost::adjacency_list<boost::setS, boost::vecS, boost::bidirectionalS>;
  G g(m_ops.size());
  for (std::size_t i = 0; i < m_ops.size(); ++i) {
    for (TensorId t : m_ops[i].outputs) {
      if (t == no_tensor) {
        continue;
      }
      for (OpId c : m_tensors[static_cast<std::size_t>(t)].consumers) {
        boost::add_edge(i, static_cast<std::size_t>(c), g);
      }
    }
  }
  // Kahn's algorithm, always taking the lowest-numbered ready op: the order stays as close to
  // the file's (or builder's) order as the dataflow allows, which is how people read a model.
  std::vector<std::size_t> pending(m_ops.size(), 0);
  for (std::size_t i = 0; i < m_ops.size(); ++i) {
    pending[i] = boost::in_degree(i, g);
  }
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t i = 0; i < m_ops.size(); ++i) {
    if (pending[i] == 0) {
      ready.push(i);
    }
  }
  std::vector<OpId> order;
  order.reserve(m_ops.size());
  while (!ready.empty()) {
    const std::size_t i = ready.top();
    ready.pop();
    order.push_back(static_cast<OpId>(i));
    for (auto [e, end] = boost::out_edges(i, g); e != end; ++e) {
      const std::size_t j = boost::target(*e, g);
      if (--pending[j] == 0) {
        ready.push(j);
      }
    }
  }
  if (order.size() == m_ops.size()) {
    return order;
  }
  // Name the ops on a cycle: strongly connected components of size > 1, or self loops.
  std::vector<int> component(m_ops.size());
  const int count = boost::strong_components(g, component.data());
  std::vector<int> size(static_cast<std::size_t>(count), 0);
  for (int c : component) {
    ++size[static_cast<std::size_t>(c)];
  }
  std::vector<std::string> names;
  for (std::size_t i = 0; i < m_ops.size() && names.size() < 8; ++i) {
    const bool self_loop = boost::edge(i, i, g).second;
    if (size[static_cast<std::size_t>(component[i])] > 1 || self_loop) {
      names.push_back("'" + m_ops[i].name + "'");
    }
  }
  throw Error(fmt::format("graph '{}': the ops form a cycle through {}", name, fmt::join(names, ", ")));
}

void Graph::validate() const {
  for (const Tensor& t : m_tensors) {
    // Empty integer tensors are ordinary shape plumbing (an empty axes list, an unused roi);
    // an empty tensor of values is not.
    const bool may_be_empty = t.role == TensorRole::constant || !is_floating(t.dtype);
    for (std::int64_t d : t.shape) {
      if (d < 0 || (d == 0 && !may_be_empty)) {
        std::string where =
            t.producer >= 0 ? fmt::format(" (output of node '{}')", m_ops[static_cast<std::size_t>(t.producer)].name)
                            : std::string();
        throw Error(fmt::format("tensor '{}'{}: dimension {} in shape {} is not positive", t.name, where, d,
                                shape_string(t.shape)));
      }
    }
    (void)t.bytes(); // throws on overflow
  }
  for (const Op& op : m_ops) {
    for (TensorId id : op.inputs) {
      if (id == no_tensor) {
        continue;
      }
      const Tensor& t = m_tensors[static_cast<std::size_t>(id)];
      if (t.producer == -1 && t.role == TensorRole::activation) {
        throw Error(
            fmt::format("node '{}' ({}): input '{}' is produced by no node and is not a graph input or initializer",
                        op.name, op.type, t.name));
      }
    }
  }
  (void)topological_order();
}

} // namespace partita::graph
