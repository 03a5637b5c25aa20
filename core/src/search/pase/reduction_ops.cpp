// The reference's ops that reduce, stack or recur: ReduceMean, Softmax, SoftmaxCrossEntropy,
// Stack, Unstack, LSTM.

#include "model_builder.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <numeric>

namespace partita::search::pase::detail {

int ModelBuilder::reduce_mean(const std::string& name, int in, const std::vector<int>& axes, bool keepdims) {
  const Shape dom = shape(in);
  Layer l = layer(name, "ReduceMean", letters(dom.size()), dom);
  std::vector<bool> reduced(dom.size(), false);
  for (int a : axes) {
    reduced.at(static_cast<std::size_t>(a)) = true;
  }
  Shape out;
  std::vector<int> kept;
  for (std::size_t i = 0; i < dom.size(); ++i) {
    if (!reduced[i]) {
      out.push_back(dom[i]);
      kept.push_back(static_cast<int>(i));
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  if (out.empty()) {
    out.push_back(1);
  }
  Layouts out_l;
  out_l.rank = static_cast<int>(out.size());
  for (const auto& cfg : l.configs) {
    for (std::size_t i = 0; i < dom.size(); ++i) {
      if (!reduced[i]) {
        out_l.split.push_back(cfg[i]);
      } else if (keepdims) {
        out_l.split.push_back(1.0);
      }
    }
    if (kept.empty() && !keepdims) {
      out_l.split.push_back(1.0);
    }
  }
  const auto all = iota_dims(dom.size());
  for (std::size_t c = 0; c < l.configs.size(); ++c) {
    std::int64_t procs = 1;
    for (int a : axes) {
      procs *= l.configs[c][static_cast<std::size_t>(a)];
    }
    l.costs.push_back(allreduce_cost(m_ratio, product(parts(l, c)), static_cast<double>(procs)));
  }
  auto in_l = select(l.configs, all);
  return add(std::move(l), {{in, std::move(in_l)}}, single(out, std::move(out_l)))[0];
}

int ModelBuilder::softmax(const std::string& name, int in, int axis) {
  const Shape dom = shape(in);
  const auto ax = static_cast<std::size_t>(axis);
  Layer l = layer(name, "Softmax", letters(dom.size()), dom);
  const auto all = iota_dims(dom.size());
  const auto rest = without(dom.size(), ax);
  const auto axis_size = static_cast<double>(dom.at(ax));
  for (std::size_t c = 0; c < l.configs.size(); ++c) {
    const auto p = parts(l, c);
    const auto split = static_cast<double>(l.configs[c][ax]);
    // An exponent (3) and a sum forward, a product per element of the row backward; partial sums
    // reduced forward, the rows gathered and reduced backward.
    double cost = 4.0 * product(p, all);
    cost += product(p, all) * axis_size;
    const double elems = product(p, rest);
    cost += allreduce_cost(m_ratio, elems, split);
    cost += allreduce_cost(m_ratio, elems * axis_size, split);
    cost += allreduce_cost(m_ratio, elems, split);
    l.costs.push_back(cost);
  }
  auto in_l = select(l.configs, all);
  auto out_l = in_l;
  return add(std::move(l), {{in, std::move(in_l)}}, single(dom, std::move(out_l)))[0];
}

int ModelBuilder::softmax_cross_entropy(const std::string& name, int in) {
  const Shape dom = shape(in);
  Layer l = layer(name, "SoftmaxCrossEntropy", letters(dom.size()), dom);
  const auto all = iota_dims(dom.size());
  const auto rows = without(dom.size(), dom.size() - 1);
  for (std::size_t c = 0; c < l.configs.size(); ++c) {
    const auto p = parts(l, c);
    const double batch = product(p, rows);
    // Softmax forward (exponent + sum) and one subtraction backward, the loss averaged; the
    // partial sums and labels exchanged when the classes are split.
    double cost = 4.0 * product(p, all);
    cost += batch;
    cost += batch;
    if (l.configs[c].back() > 1) {
      cost += m_ratio * (2.0 * batch);
    }
    l.costs.push_back(cost);
  }
  auto in_l = select(l.configs, all);
  auto out_l = in_l;
  return add(std::move(l), {{in, std::move(in_l)}}, single(dom, std::move(out_l)))[0];
}

int ModelBuilder::stack(const std::string& name, const std::vector<int>& ins, int axis) {
  const Shape item = shape(ins.at(0));
  const auto ax = static_cast<std::size_t>(axis);
  Shape dom = item;
  dom.insert(dom.begin() + static_cast<std::ptrdiff_t>(ax), 1); // never split along the stack
  Shape out = item;
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(ax), static_cast<std::int64_t>(ins.size()));
  Layer l = layer(name, "Stack", letters(dom.size()), dom);
  const auto each = select(l.configs, without(dom.size(), ax));
  std::vector<Io> inputs;
  for (int t : ins) {
    if (shape(t) != item) {
      throw Error(fmt::format("pase: {}: stacked tensors differ in shape", name));
    }
    inputs.push_back({t, each});
  }
  auto out_l = select(l.configs, iota_dims(dom.size()));
  return add(std::move(l), inputs, single(out, std::move(out_l)))[0];
}

std::vector<int> ModelBuilder::unstack(const std::string& name, int in, int axis) {
  const Shape x = shape(in);
  const auto ax = static_cast<std::size_t>(axis);
  Shape dom = x;
  dom[ax] = 1; // never split along the stack
  Shape item = x;
  item.erase(item.begin() + static_cast<std::ptrdiff_t>(ax));
  Layer l = layer(name, "Unstack", letters(dom.size()), dom);
  auto in_l = select(l.configs, iota_dims(dom.size()));
  const auto each = select(l.configs, without(dom.size(), ax));
  std::vector<std::pair<Shape, Layouts>> outs(static_cast<std::size_t>(x[ax]), {item, each});
  return add(std::move(l), {{in, std::move(in_l)}}, std::move(outs));
}

int ModelBuilder::lstm(const std::string& name, int in, std::int64_t units, std::int64_t layers) {
  const Shape x = shape(in);
  if (x.size() != 3 || x[2] != units) {
    throw Error(fmt::format("pase: {}: an LSTM reads batch x sequence x units", name));
  }
  const auto batch = x[0], seq = x[1];
  // Layers and steps stacked as a batch dim of one GEMM that fuses the four gates (n) and reads
  // input and hidden state (k); the sequence is never split.
  Layer l = layer(name, "LSTM", "lsbnk", {layers, seq, batch, units, units});
  l.configs = configurations({layers, 1, batch, units, units}, m_procs, m_cutoff);
  for (const auto& cfg : l.configs) {
    const double dom[] = {static_cast<double>(layers), static_cast<double>(seq * batch), static_cast<double>(4 * units),
                          static_cast<double>(2 * units)};
    const double split[] = {static_cast<double>(cfg[0]), static_cast<double>(cfg[1] * cfg[2]),
                            static_cast<double>(cfg[3]), static_cast<double>(cfg[4])};
    double cost = gemm_cost(m_ratio, dom, split, 3);
    // Each cell's output (b x n) re-laid out as the next cell's input (b x k), once per layer and
    // step.
    const double out_part[] = {static_cast<double>(batch) / cfg[2], static_cast<double>(units) / cfg[3]};
    const double in_part[] = {static_cast<double>(batch) / cfg[2], static_cast<double>(units) / cfg[4]};
    const double words =
        area_needed(out_part, in_part, static_cast<double>(cfg[2] * cfg[3]), static_cast<double>(cfg[2] * cfg[4]));
    cost += static_cast<double>(layers * seq) * (m_ratio * words);
    l.costs.push_back(cost);
  }
  const int in_dims[] = {2, 1, 4};
  const int out_dims[] = {2, 1, 3};
  auto in_l = select(l.configs, in_dims);
  auto out_l = select(l.configs, out_dims);
  return add(std::move(l), {{in, std::move(in_l)}}, single(x, std::move(out_l)))[0];
}

} // namespace partita::search::pase::detail
