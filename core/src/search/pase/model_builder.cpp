// The reference's ops (nn_ops.py): domain, configurations, costs, and the layouts of their tensors.

#include "model_builder.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <unordered_map>

namespace partita::search::pase::detail {

namespace {

double int_product(const std::vector<int>& c, std::span<const int> dims) {
  std::int64_t p = 1;
  for (int d : dims) {
    p *= c[static_cast<std::size_t>(d)];
  }
  return static_cast<double>(p);
}

std::size_t adjust_axis(int axis, std::size_t rank) {
  const int r = static_cast<int>(rank);
  const int a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r) {
    throw Error(fmt::format("pase: axis {} out of range for rank {}", axis, rank));
  }
  return static_cast<std::size_t>(a);
}

// A reshape keeps a configuration only when it splits the tensor contiguously: the leading
// dimensions split completely, then one split in part, the rest whole.
bool contiguous(const Shape& dom, const std::vector<int>& cfg) {
  std::size_t i = 0;
  while (i < dom.size() && dom[i] == cfg[i]) {
    ++i;
  }
  for (++i; i < dom.size(); ++i) {
    if (cfg[i] != 1) {
      return false;
    }
  }
  return true;
}

Layouts products(const std::vector<std::vector<int>>& configs) {
  Layouts l;
  l.rank = 1;
  for (const auto& c : configs) {
    std::int64_t p = 1;
    for (int x : c) {
      p *= x;
    }
    l.split.push_back(static_cast<double>(p));
  }
  return l;
}

std::int64_t conv_size(std::int64_t h, std::int64_t r, std::int64_t stride, std::int64_t pad) {
  return (h - r + 2 * pad) / stride + 1;
}

} // namespace

ModelBuilder::ModelBuilder(std::string graph, const Options& options)
    : m_graph(std::move(graph)), m_procs(options.procs), m_ratio(comm_ratio(options)) {}

int ModelBuilder::input(Shape shape) {
  m_tensors.push_back({std::move(shape), -1, 0});
  return static_cast<int>(m_tensors.size()) - 1;
}

Layer ModelBuilder::layer(const std::string& name, std::string op, std::string dims, Shape domain) const {
  Layer l;
  l.name = name;
  l.op = std::move(op);
  l.dims = std::move(dims);
  l.domain = std::move(domain);
  l.configs = configurations(l.domain, m_procs, m_cutoff);
  return l;
}

std::vector<std::pair<Shape, Layouts>> ModelBuilder::single(Shape shape, Layouts layouts) {
  std::vector<std::pair<Shape, Layouts>> v;
  v.emplace_back(std::move(shape), std::move(layouts));
  return v;
}

std::vector<int> ModelBuilder::add(Layer layer, const std::vector<Io>& inputs,
                                   std::vector<std::pair<Shape, Layouts>> outputs) {
  const int id = static_cast<int>(m_nodes.size());
  if (layer.costs.empty()) {
    layer.costs.assign(layer.configs.size(), 0.0);
  }
  Node node;
  node.layer = std::move(layer);
  std::vector<int> ids;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    m_tensors.push_back({std::move(outputs[k].first), id, static_cast<int>(k)});
    ids.push_back(static_cast<int>(m_tensors.size()) - 1);
    node.outputs.push_back(std::move(outputs[k].second));
  }
  m_nodes.push_back(std::move(node));
  for (const auto& in : inputs) {
    const Tensor& t = m_tensors[static_cast<std::size_t>(in.tensor)];
    if (t.producer < 0) {
      continue;
    }
    const Layouts& src = m_nodes[static_cast<std::size_t>(t.producer)].outputs[static_cast<std::size_t>(t.output)];
    m_edges[{t.producer, id}] = edge_costs(m_ratio, t.shape, src, in.layouts);
  }
  return ids;
}

int ModelBuilder::conv(const std::string& name, int img, const Shape& filter, Pair stride, Pair pad,
                       int pointwise_ops) {
  const Shape in = shape(img);
  const auto b = in[0], c = in[1], n = filter[0], r = filter[2], s = filter[3];
  if (in.size() != 4 || filter.size() != 4 || c != filter[1]) {
    throw Error(fmt::format("pase: {}: image and filter do not match", name));
  }
  const auto h = conv_size(in[2], r, stride[0], pad[0]);
  const auto w = conv_size(in[3], s, stride[1], pad[1]);
  Layer l = layer(name, "Conv", "bchwrsn", {b, c, h, w, r, s, n});
  // No halo exchange: the output's h and w are never split.
  l.configs = configurations({b, c, 1, 1, r, s, n}, m_procs, m_cutoff);
  for (const auto& cfg : l.configs) {
    const double dom[] = {static_cast<double>(b * h * w), static_cast<double>(n), static_cast<double>(c * r * s)};
    const double split[] = {static_cast<double>(cfg[0] * cfg[2] * cfg[3]), static_cast<double>(cfg[6]),
                            static_cast<double>(cfg[1] * cfg[4] * cfg[5])};
    l.costs.push_back(gemm_cost(m_ratio, dom, split, pointwise_ops));
  }
  const int in_dims[] = {0, 1, 2, 3};
  const int out_dims[] = {0, 6, 2, 3};
  auto in_l = select(l.configs, in_dims);
  auto out_l = select(l.configs, out_dims);
  return add(std::move(l), {{img, std::move(in_l)}}, single(Shape{b, n, h, w}, std::move(out_l)))[0];
}

int ModelBuilder::pooling(const std::string& name, int img, Pair filter, Pair stride, Pair pad) {
  const Shape in = shape(img);
  const Shape dom = {in[0], in[1], conv_size(in[2], filter[0], stride[0], pad[0]),
                     conv_size(in[3], filter[1], stride[1], pad[1])};
  Layer l = layer(name, "Pooling", "bchw", dom);
  auto all = select(l.configs, iota_dims(4));
  const std::vector<double> tensor(in.begin(), in.end());
  for (std::size_t c = 0; c < l.configs.size(); ++c) {
    double cost = product(parts(l, c));
    cost += ghost_cost(m_ratio, tensor, all.row(c), static_cast<double>(filter[0]), static_cast<double>(filter[1]));
    l.costs.push_back(cost);
  }
  auto out = all;
  return add(std::move(l), {{img, std::move(all)}}, single(dom, std::move(out)))[0];
}

int ModelBuilder::fc(const std::string& name, int in, std::int64_t units, int pointwise_ops) {
  const Shape x = shape(in);
  const std::size_t r = x.size();
  Shape dom(x.begin(), x.end() - 1);
  dom.push_back(units);
  dom.push_back(x.back());
  Layer l = layer(name, "FC", (r == 2 ? std::string("b") : r == 3 ? std::string("bl") : letters(r - 1)) + "nk", dom);
  for (const auto& cfg : l.configs) {
    std::int64_t m = 1, cm = 1;
    for (std::size_t i = 0; i + 2 < dom.size(); ++i) {
      m *= dom[i];
      cm *= cfg[i];
    }
    const double d[] = {static_cast<double>(m), static_cast<double>(units), static_cast<double>(x.back())};
    const double s[] = {static_cast<double>(cm), static_cast<double>(cfg[r - 1]), static_cast<double>(cfg[r])};
    l.costs.push_back(gemm_cost(m_ratio, d, s, pointwise_ops));
  }
  auto in_l = select(l.configs, without(r + 1, r - 1));
  auto out_l = select(l.configs, iota_dims(r));
  return add(std::move(l), {{in, std::move(in_l)}}, single(Shape(dom.begin(), dom.end() - 1), std::move(out_l)))[0];
}

int ModelBuilder::einsum(const std::string& name, const std::string& equation, int in1, int in2, int pointwise_ops) {
  const auto arrow = equation.find("->");
  const auto comma = equation.find(',');
  const std::string a = equation.substr(0, comma);
  const std::string bdims = equation.substr(comma + 1, arrow - comma - 1);
  const std::string out = equation.substr(arrow + 2);
  const Shape& sa = shape(in1);
  const Shape& sb = shape(in2);
  if (sa.size() != a.size() || sb.size() != bdims.size()) {
    throw Error(fmt::format("pase: {}: '{}' does not fit its operands", name, equation));
  }
  std::unordered_map<char, std::int64_t> size;
  for (std::size_t i = 0; i < a.size(); ++i) {
    size[a[i]] = sa[i];
  }
  for (std::size_t i = 0; i < bdims.size(); ++i) {
    size[bdims[i]] = sb[i];
  }
  auto in = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
  std::string batch, m, n, reduction;
  for (char c : out) {
    if (in(a, c) && in(bdims, c)) {
      batch += c;
    }
  }
  for (char c : a) {
    if (in(bdims, c) && !in(out, c)) {
      reduction += c;
    } else if (!in(bdims, c)) {
      m += c;
    }
  }
  for (char c : bdims) {
    if (!in(a, c)) {
      n += c;
    }
  }
  if (m.empty() || n.empty()) {
    throw Error(fmt::format("pase: {}: '{}' has no m or no n dimension", name, equation));
  }
  // The domain: the output's dims, then the reduced ones.
  const std::string dims = out + reduction;
  Shape dom;
  for (char c : dims) {
    dom.push_back(size[c]);
  }
  auto index = [&](const std::string& s) {
    std::vector<int> idx;
    for (char c : s) {
      idx.push_back(static_cast<int>(dims.find(c)));
    }
    return idx;
  };
  const auto bi = index(batch), mi = index(m), ni = index(n), ki = index(reduction);
  Layer l = layer(name, "Einsum", dims, dom);
  for (const auto& cfg : l.configs) {
    std::vector<double> d, s;
    for (int i : bi) {
      d.push_back(static_cast<double>(dom[static_cast<std::size_t>(i)]));
      s.push_back(static_cast<double>(cfg[static_cast<std::size_t>(i)]));
    }
    for (const auto* group : {&mi, &ni, &ki}) {
      std::int64_t size_product = 1;
      for (int i : *group) {
        size_product *= dom[static_cast<std::size_t>(i)];
      }
      d.push_back(static_cast<double>(size_product));
      s.push_back(int_product(cfg, *group));
    }
    l.costs.push_back(gemm_cost(m_ratio, d, s, pointwise_ops));
  }
  auto l1 = select(l.configs, index(a));
  auto l2 = select(l.configs, index(bdims));
  auto lo = select(l.configs, index(out));
  Shape out_shape;
  for (char c : out) {
    out_shape.push_back(size[c]);
  }
  return add(std::move(l), {{in1, std::move(l1)}, {in2, std::move(l2)}}, single(out_shape, std::move(lo)))[0];
}

int ModelBuilder::embedding(const std::string& name, int in, std::int64_t vocab, std::int64_t dim) {
  Shape one_hot = shape(in);
  if (m_tensors[static_cast<std::size_t>(in)].producer >= 0) {
    throw Error(fmt::format("pase: {}: an embedding reads a graph input", name));
  }
  const std::size_t r = one_hot.size();
  one_hot.push_back(vocab);
  const std::string names = letters(r + 2);
  const std::string eq =
      names.substr(0, r + 1) + "," + names.substr(r, 2) + "->" + names.substr(0, r) + names.substr(r + 1, 1);
  return einsum(name, eq, input(one_hot), input({vocab, dim}));
}

int ModelBuilder::elementwise(const std::string& name, int a, int b, int pointwise_ops) {
  const Shape dom = shape(a);
  if (dom != shape(b)) {
    throw Error(fmt::format("pase: {}: operands differ in shape", name));
  }
  Layer l = layer(name, "Elementwise", letters(dom.size()), dom);
  for (std::size_t c = 0; c < l.configs.size(); ++c) {
    l.costs.push_back(static_cast<double>(1 + pointwise_ops) * product(parts(l, c)));
  }
  auto all = select(l.configs, iota_dims(dom.size()));
  auto second = all;
  auto out = all;
  return add(std::move(l), {{a, std::move(all)}, {b, std::move(second)}}, single(dom, std::move(out)))[0];
}

int ModelBuilder::ravel(const std::string& name, int in) {
  const Shape dom = shape(in);
  Layer l = layer(name, "Ravel", letters(dom.size()), dom);
  std::erase_if(l.configs, [&](const std::vector<int>& c) { return !contiguous(dom, c); });
  auto in_l = select(l.configs, iota_dims(dom.size()));
  auto out_l = products(l.configs);
  const auto elems = std::accumulate(dom.begin(), dom.end(), std::int64_t{1}, std::multiplies<>());
  return add(std::move(l), {{in, std::move(in_l)}}, single(Shape{elems}, std::move(out_l)))[0];
}

int ModelBuilder::unravel(const std::string& name, int in, const Shape& dom) {
  Layer l = layer(name, "Unravel", letters(dom.size()), dom);
  std::erase_if(l.configs, [&](const std::vector<int>& c) { return !contiguous(dom, c); });
  auto in_l = products(l.configs);
  auto out_l = select(l.configs, iota_dims(dom.size()));
  return add(std::move(l), {{in, std::move(in_l)}}, single(dom, std::move(out_l)))[0];
}

int ModelBuilder::reshape(const std::string& name, int in, const Shape& shape) {
  return unravel(name + "/unravel", ravel(name + "/ravel", in), shape);
}

int ModelBuilder::concat(const std::string& name, const std::vector<int>& ins, int axis) {
  Shape dom = shape(ins.at(0));
  const std::size_t ax = adjust_axis(axis, dom.size());
  Shape out = dom;
  out[ax] = 0;
  for (int t : ins) {
    out[ax] += shape(t)[ax];
  }
  dom[ax] = 1; // never split along the concatenated axis
  Layer l = layer(name, "Concat", letters(dom.size()), dom);
  auto all = select(l.configs, iota_dims(dom.size()));
  std::vector<Io> inputs;
  inputs.reserve(ins.size());
  for (int t : ins) {
    inputs.push_back({t, all});
  }
  return add(std::move(l), inputs, single(out, std::move(all)))[0];
}

int ModelBuilder::norm(const std::string& name, int in, int axis) {
  const Shape dom = shape(in);
  const std::size_t ax = adjust_axis(axis, dom.size());
  Layer l = layer(name, ax == 0 ? "BatchNorm" : "Norm", letters(dom.size()), dom);
  const auto rest = without(dom.size(), ax);
  for (std::size_t c = 0; c < l.configs.size(); ++c) {
    const auto p = parts(l, c);
    const double elems = product(p);
    const auto split = static_cast<double>(l.configs[c][ax]);
    // Mean and variance reduced across the split of the axis (2 forward, 2 backward), the scale
    // and bias across the other splits.
    double cost = 16.0 * elems;
    cost += 4.0 * allreduce_cost(m_ratio, elems / p[ax], split);
    cost += 4.0 * allreduce_cost(m_ratio, p[ax], int_product(l.configs[c], rest));
    l.costs.push_back(cost);
  }
  auto all = select(l.configs, iota_dims(dom.size()));
  auto out = all;
  return add(std::move(l), {{in, std::move(all)}}, single(dom, std::move(out)))[0];
}

} // namespace partita::search::pase::detail
