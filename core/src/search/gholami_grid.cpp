// The Pr x Pc process grid of Gholami et al. (SPAA 2018, arXiv 1712.04432): model parallelism
// (or, for convolutions, spatial-domain parallelism) along Pr, batch parallelism along Pc.
// Per layer with weights W and input activations of d values per sample, for batch B, their
// communication analysis counts, per process:
//   model along Pr:  (Pr-1)/Pr * B d/Pc     forward all-gather of the input over Pr
//                  + 2(Pr-1)/Pr * B d/Pc    backward all-reduce of the input gradient over Pr
//                  + 2(Pc-1)/Pc * |W|/Pr    weight-gradient all-reduce over Pc
//   domain along Pr (convolutions): 2 * 2 * halo(B/Pc)   forward and backward halo exchange
//                  + 2(P-1)/P * |W|         weight-gradient all-reduce over all P
// The grid with the least total volume is chosen; for each convolution the smaller of model and
// domain. The one rule of DESIGN 3.2.1 then produces exactly these collectives in the cost model.

#include "search/families.h"

#include <limits>

namespace partita::search::detail {

namespace {

struct LayerVolume {
  double model = 0;  // elements per process with model parallelism along Pr
  double domain = 0; // with domain parallelism (convolutions), +inf otherwise
};

double weight_elements(const graph::Graph& g, graph::OpId id) {
  double w = 0;
  for (graph::TensorId t : g.op(id).inputs) {
    if (t != graph::no_tensor && g.tensor(t).role == graph::TensorRole::parameter) {
      w += static_cast<double>(g.tensor(t).elements());
    }
  }
  return w;
}

LayerVolume layer_volume(const Builder& b, graph::OpId id, int pr, int pc) {
  const auto& g = b.graph();
  const auto& s = b.semantics(id);
  const double p = static_cast<double>(pr) * pc;
  const double w = weight_elements(g, id);
  const auto& x = g.tensor(g.op(id).inputs.front());
  const double batch_in = static_cast<double>(x.elements()); // B x d
  LayerVolume v;
  v.model = 3.0 * (pr - 1) / pr * batch_in / pc + 2.0 * (pc - 1) / pc * w / pr;
  v.domain = std::numeric_limits<double>::infinity();
  if (s.op_class == graph::OpClass::convolution && x.shape.size() >= 3) {
    // Halo: (k-1) rows of the input per boundary, on the first spatial dim.
    const int kh = s.find_dim(s.find_dim("kh") >= 0 ? "kh" : s.find_dim("kl") >= 0 ? "kl" : "kd");
    const double k = kh >= 0 ? static_cast<double>(s.dims[static_cast<std::size_t>(kh)].size) : 1.0;
    const double row = batch_in / static_cast<double>(x.shape[2]); // one input row across the batch
    const double halo = pr > 1 ? (k - 1) * row / pc : 0.0;
    v.domain = 4.0 * halo + 2.0 * (p - 1) / p * w;
  }
  return v;
}

bool is_layer(const Builder& b, graph::OpId id) {
  const auto c = b.semantics(id).op_class;
  return has_weight(b.graph(), id) && (c == graph::OpClass::contraction || c == graph::OpClass::convolution) &&
         !b.graph().op(id).inputs.empty() && b.graph().op(id).inputs.front() != graph::no_tensor;
}

// Total volume of a grid, in bytes per process (fp32 values).
double grid_volume(const Builder& b, int pr, int pc) {
  double total = 0;
  for (graph::OpId id : b.order()) {
    if (is_layer(b, id)) {
      const auto v = layer_volume(b, id, pr, pc);
      total += std::min(v.model, v.domain);
    }
  }
  return 4.0 * total;
}

} // namespace

strategy::Strategy gholami_with_grid(const Request& r, int pr, int pc) {
  Builder b(r, "gholami");
  int model = 0, domain = 0;
  for (graph::OpId id : b.order()) {
    b.check_cancel();
    const auto& s = b.semantics(id);
    if (!is_layer(b, id)) {
      b.follow(id);
      continue;
    }
    const auto v = layer_volume(b, id, pr, pc);
    const int spatial = s.find_dim(s.find_dim("oh") >= 0 ? "oh" : s.find_dim("ol") >= 0 ? "ol" : "od");
    if (v.domain < v.model && spatial >= 0) {
      b.assign(id, b.split(id, {{b.batch_dim(id), pc}, {spatial, pr}}));
      ++domain;
    } else {
      b.assign(id, b.split(id, {{b.batch_dim(id), pc}, {feature_dim(b.graph(), s, id), pr}}));
      ++model;
    }
  }
  return b.finish(fmt::format("{} layers model-parallel and {} convolutions domain-parallel along Pr={}, batch along "
                              "Pc={}.",
                              model, domain, pr, pc));
}

strategy::Strategy gholami(const Request& r) {
  Builder probe(r, "gholami");
  double best = std::numeric_limits<double>::infinity();
  int best_pr = 1;
  std::string table;
  for (int pr = 1; pr <= r.devices; ++pr) { // every grid Pr x Pc = P (on 2^k devices, the powers of two)
    if (r.devices % pr != 0) {
      continue;
    }
    const double v = grid_volume(probe, pr, r.devices / pr);
    table += fmt::format("{}{}x{}: {:.4g} MB", table.empty() ? "" : ", ", pr, r.devices / pr, v / 1e6);
    if (v < best) {
      best = v;
      best_pr = pr;
    }
  }
  auto st = gholami_with_grid(r, best_pr, r.devices / best_pr);
  st.explanation = fmt::format("Process grid Pr x Pc = {} x {}, the least communication per process by the paper's "
                               "analysis (Pr x Pc: {}). {}",
                               best_pr, r.devices / best_pr, table, st.explanation);
  return st;
}

} // namespace partita::search::detail
