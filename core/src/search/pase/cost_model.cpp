// PaSE's cost model (nn_ops.py of the reference): computation counted in FLOPs, communication in
// words times the FLOPs a device does while one word crosses the interconnect. The arithmetic is
// the reference's, operation for operation, so that the doubles round alike.

#include "model_builder.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace partita::search::pase::detail {

namespace {

// Factors above procs never fit, so the search stops there (factor 1 fits whenever any does).
std::vector<int> factors_at_least(std::int64_t d, int cutoff, int procs) {
  std::vector<int> out;
  for (std::int64_t f = 1; f <= std::min<std::int64_t>(d, procs); ++f) {
    if (d % f == 0 && d >= static_cast<std::int64_t>(cutoff) * f) {
      out.push_back(static_cast<int>(f));
    }
  }
  if (out.empty()) {
    out.push_back(1);
  }
  return out;
}

void enumerate(const std::vector<std::vector<int>>& choices, std::size_t dim, std::int64_t product, int procs,
               std::vector<int>& current, std::vector<std::vector<int>>& out) {
  if (dim == choices.size()) {
    out.push_back(current);
    return;
  }
  for (int f : choices[dim]) {
    if (product * f > procs) {
      break; // choices are ascending
    }
    current[dim] = f;
    enumerate(choices, dim + 1, product * f, procs, current, out);
  }
}

} // namespace

std::vector<int> iota_dims(std::size_t n) {
  std::vector<int> d(n);
  std::iota(d.begin(), d.end(), 0);
  return d;
}

std::vector<int> without(std::size_t n, std::size_t skip) {
  std::vector<int> d;
  for (std::size_t i = 0; i < n; ++i) {
    if (i != skip) {
      d.push_back(static_cast<int>(i));
    }
  }
  return d;
}

std::string letters(std::size_t n) {
  return std::string("abcdefghij").substr(0, n);
}

std::vector<double> parts(const Layer& layer, std::size_t config) {
  std::vector<double> p(layer.domain.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] = static_cast<double>(layer.domain[i]) / static_cast<double>(layer.configs[config][i]);
  }
  return p;
}

double product(std::span<const double> values, std::span<const int> dims) {
  double p = 1.0;
  for (int d : dims) {
    p *= values[static_cast<std::size_t>(d)];
  }
  return p;
}

double product(std::span<const double> values) {
  double p = 1.0;
  for (double x : values) {
    p *= x;
  }
  return p;
}

std::vector<std::vector<int>> configurations(const Shape& domain, int procs, int cutoff) {
  std::vector<std::vector<int>> choices;
  choices.reserve(domain.size());
  for (auto d : domain) {
    choices.push_back(factors_at_least(d, cutoff, procs));
  }
  std::vector<std::vector<int>> out;
  std::vector<int> current(domain.size(), 1);
  enumerate(choices, 0, 1, procs, current, out);
  return out;
}

Layouts select(const std::vector<std::vector<int>>& configs, std::span<const int> dims) {
  Layouts l;
  l.rank = static_cast<int>(dims.size());
  l.split.reserve(configs.size() * dims.size());
  for (const auto& c : configs) {
    for (int d : dims) {
      l.split.push_back(static_cast<double>(c[static_cast<std::size_t>(d)]));
    }
  }
  return l;
}

// Ring all-reduce: 2 (P - 1) steps of words / P each.
double allreduce_cost(double ratio, double words, double procs) {
  const double chunks = words / procs;
  const double steps = 2.0 * (procs - 1.0);
  return ratio * (chunks * steps);
}

double gemm_cost(double ratio, std::span<const double> dom, std::span<const double> split, int pointwise_ops) {
  const std::size_t n = dom.size();
  std::vector<double> part(n);
  for (std::size_t i = 0; i < n; ++i) {
    part[i] = dom[i] / split[i];
  }
  const double batches = product(std::span<const double>(part).first(n - 3));
  const double m = part[n - 3];
  const double nn = part[n - 2];
  const double k = part[n - 1];
  // One GEMM forward, two backward; per pointwise op a forward and a backward derivative and a
  // Hadamard product on the output.
  double comp = ((m * nn) * k) * 3.0;
  if (pointwise_ops > 0) {
    comp += static_cast<double>(3 * pointwise_ops) * (m * nn);
  }
  // Reductions: the output over k (forward), the input gradient over n, the weight gradient over m.
  double comm = allreduce_cost(ratio, m * nn, split[n - 1]);
  comm += allreduce_cost(ratio, m * k, split[n - 2]);
  comm += allreduce_cost(ratio, nn * k, split[n - 3]);
  return batches * (comp + comm);
}

double ghost_cost(double ratio, std::span<const double> tensor, std::span<const double> split, double r, double s) {
  const double b = tensor[0] / split[0];
  const double c = tensor[1] / split[1];
  const double h = tensor[2] / split[2];
  const double w = tensor[3] / split[3];
  const double hg = split[2] > 1.0 ? h + r : h;
  const double wg = split[3] > 1.0 ? w + s : w;
  double ghost = hg * wg - h * w;
  ghost *= b;
  ghost *= c;
  return ratio * ghost;
}

double area_needed(std::span<const double> src_part, std::span<const double> tgt_part, double src_procs,
                   double tgt_procs) {
  const double tgt_area = product(tgt_part);
  double intersection = 0.0;
  if (!(tgt_procs > src_procs)) {
    intersection = 1.0;
    for (std::size_t i = 0; i < tgt_part.size(); ++i) {
      intersection *= std::min(tgt_part[i], src_part[i]);
    }
  }
  return std::max(tgt_area - intersection, 0.0);
}

std::vector<double> edge_costs(double ratio, const Shape& tensor, const Layouts& src, const Layouts& tgt) {
  const std::size_t rank = tensor.size();
  auto parts = [&](const Layouts& l, std::vector<double>& part, std::vector<double>& procs) {
    const std::size_t n = l.count();
    part.resize(n * rank);
    procs.resize(n);
    for (std::size_t c = 0; c < n; ++c) {
      const auto row = l.row(c);
      procs[c] = product(row);
      for (std::size_t j = 0; j < rank; ++j) {
        part[c * rank + j] = static_cast<double>(tensor[j]) / row[j];
      }
    }
  };
  std::vector<double> src_part, src_procs, tgt_part, tgt_procs;
  parts(src, src_part, src_procs);
  parts(tgt, tgt_part, tgt_procs);
  const std::size_t ns = src_procs.size();
  const std::size_t nt = tgt_procs.size();
  std::vector<double> costs(ns * nt);
  for (std::size_t i = 0; i < ns; ++i) {
    const std::span<const double> s(src_part.data() + i * rank, rank);
    for (std::size_t j = 0; j < nt; ++j) {
      const std::span<const double> t(tgt_part.data() + j * rank, rank);
      // Forward: the producer's output to the consumer; backward: its gradient back.
      costs[i * nt + j] = ratio * (area_needed(s, t, src_procs[i], tgt_procs[j]) * 2.0);
    }
  }
  return costs;
}

} // namespace partita::search::pase::detail
