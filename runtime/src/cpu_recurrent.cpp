// ONNX's recurrent layers on oneDNN 2.x's RNN primitives (training forward with a workspace, and
// backward). What differs between the two, and is converted here:
// - Weights: ONNX's W [dirs, gates * hidden, input] has the bytes of oneDNN's ldgoi
//   ([1, dirs, gates, hidden, input] in memory) once the gate blocks are in oneDNN's order: LSTM
//   i, f, c, o from ONNX's i, o, f, c; GRU u, r, o is ONNX's z, r, h. The primitive reorders ldgoi
//   into the layout it wants.
// - Biases: oneDNN has one bias per gate, ONNX two (Wb, Rb): their sum, except in a
//   linear-before-reset GRU, whose candidate gate keeps Rbh apart (r * (R h + Rbh)): oneDNN's
//   fourth bias.
// - Peepholes: ONNX's P [dirs, 3 * hidden] is i, o, f; oneDNN's [1, dirs, 3, hidden] is i, f, o.
// - Y: ONNX's [seq, dirs, batch, hidden] against oneDNN's dst_layer [seq, batch, dirs * hidden]
//   (bidirectional_concat); the same bytes for one direction. States [dirs, batch, hidden] are
//   oneDNN's ldnc with one layer.

#include "cpu_recurrent.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_map>

namespace partita::runtime::cpu {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using md = dnnl::memory::desc;

std::size_t sz(std::int64_t n) {
  return static_cast<std::size_t>(n);
}

void* mut(const float* p) {
  return const_cast<float*>(p);
} // oneDNN takes non-const handles

struct Geometry {
  std::int64_t seq = 1, batch = 1, input = 1, hidden = 1, dirs = 1, gates = 1, biases = 1;
  bool lstm = false, peepholes = false;
  std::int64_t state() const { return dirs * batch * hidden; }
  std::int64_t y() const { return seq * dirs * batch * hidden; }
};

Geometry geometry(const RecurrentShape& s, bool peepholes) {
  if (peepholes && s.cell != Cell::lstm) {
    throw Error("peepholes are LSTM's only");
  }
  Geometry g;
  g.seq = s.seq;
  g.batch = s.batch;
  g.input = s.input;
  g.hidden = s.hidden;
  g.dirs = s.directions();
  g.gates = s.gates();
  g.biases = s.cell == Cell::gru_linear_before_reset ? 4 : g.gates;
  g.lstm = s.cell == Cell::lstm;
  g.peepholes = peepholes;
  return g;
}

// The ONNX gate that oneDNN's gate `gate` is.
std::int64_t onnx_gate(Cell cell, std::int64_t gate) {
  constexpr std::int64_t lstm[] = {0, 2, 3, 1}; // i, f, c, o <- i, o, f, c
  return cell == Cell::lstm ? lstm[gate] : gate;
}

// The ONNX peephole that oneDNN's peephole `k` (i, f, o) is (ONNX: i, o, f).
std::int64_t onnx_peephole(std::int64_t k) {
  constexpr std::int64_t map[] = {0, 2, 1};
  return map[k];
}

// ONNX [dirs, gates * hidden, cols] <-> oneDNN ldgoi bytes [dirs, gates, hidden, cols].
void convert_weights(const Geometry& g, Cell cell, std::int64_t cols, const float* from, float* to, bool to_onnx) {
  const std::int64_t block = g.hidden * cols;
  for (std::int64_t d = 0; d < g.dirs; ++d) {
    for (std::int64_t gate = 0; gate < g.gates; ++gate) {
      const std::int64_t dnnl_at = (d * g.gates + gate) * block;
      const std::int64_t onnx_at = (d * g.gates + onnx_gate(cell, gate)) * block;
      std::copy_n(from + (to_onnx ? dnnl_at : onnx_at), block, to + (to_onnx ? onnx_at : dnnl_at));
    }
  }
}

// ONNX B [dirs, 2 * gates * hidden] -> oneDNN's bias [dirs, biases, hidden].
std::vector<float> dnnl_bias(const Geometry& g, Cell cell, const float* b) {
  std::vector<float> out(sz(g.dirs * g.biases * g.hidden), 0.F);
  if (b == nullptr) {
    return out;
  }
  const std::int64_t H = g.hidden;
  for (std::int64_t d = 0; d < g.dirs; ++d) {
    const float* wb = b + d * 2 * g.gates * H;
    const float* rb = wb + g.gates * H;
    for (std::int64_t gate = 0; gate < g.gates; ++gate) {
      const std::int64_t og = onnx_gate(cell, gate);
      const bool apart = cell == Cell::gru_linear_before_reset && gate == 2;
      for (std::int64_t h = 0; h < H; ++h) {
        out[sz((d * g.biases + gate) * H + h)] = wb[og * H + h] + (apart ? 0.F : rb[og * H + h]);
        if (apart) {
          out[sz((d * g.biases + 3) * H + h)] = rb[og * H + h];
        }
      }
    }
  }
  return out;
}

// oneDNN's bias gradient -> ONNX's dB: Wb and Rb get the gradient of the bias they were added to.
void onnx_bias_gradient(const Geometry& g, Cell cell, const float* dbias, float* db) {
  const std::int64_t H = g.hidden;
  for (std::int64_t d = 0; d < g.dirs; ++d) {
    float* dwb = db + d * 2 * g.gates * H;
    float* drb = dwb + g.gates * H;
    for (std::int64_t gate = 0; gate < g.gates; ++gate) {
      const std::int64_t og = onnx_gate(cell, gate);
      const bool apart = cell == Cell::gru_linear_before_reset && gate == 2;
      for (std::int64_t h = 0; h < H; ++h) {
        dwb[og * H + h] = dbias[(d * g.biases + gate) * H + h];
        drb[og * H + h] = dbias[(d * g.biases + (apart ? 3 : gate)) * H + h];
      }
    }
  }
}

// ONNX P [dirs, 3 * hidden] <-> oneDNN's [dirs, 3, hidden].
void convert_peepholes(const Geometry& g, const float* from, float* to, bool to_onnx) {
  for (std::int64_t d = 0; d < g.dirs; ++d) {
    for (std::int64_t k = 0; k < 3; ++k) {
      const std::int64_t dnnl_at = (d * 3 + k) * g.hidden;
      const std::int64_t onnx_at = (d * 3 + onnx_peephole(k)) * g.hidden;
      std::copy_n(from + (to_onnx ? dnnl_at : onnx_at), g.hidden, to + (to_onnx ? onnx_at : dnnl_at));
    }
  }
}

// Y: oneDNN [seq, batch, dirs, hidden] <-> ONNX [seq, dirs, batch, hidden].
void convert_y(const Geometry& g, const float* from, float* to, bool to_onnx) {
  if (g.dirs == 1) {
    std::copy_n(from, g.y(), to);
    return;
  }
  for (std::int64_t t = 0; t < g.seq; ++t) {
    for (std::int64_t n = 0; n < g.batch; ++n) {
      for (std::int64_t d = 0; d < g.dirs; ++d) {
        const std::int64_t dnnl_at = ((t * g.batch + n) * g.dirs + d) * g.hidden;
        const std::int64_t onnx_at = ((t * g.dirs + d) * g.batch + n) * g.hidden;
        std::copy_n(from + (to_onnx ? dnnl_at : onnx_at), g.hidden, to + (to_onnx ? onnx_at : dnnl_at));
      }
    }
  }
}

struct Descs {
  md src_layer, src_iter, src_iter_c, weights_layer, weights_iter, peephole, bias, dst_layer, dst_iter, dst_iter_c;
  md weights_layer_user, weights_iter_user; // ldgoi: ONNX's bytes, gates permuted
};

Descs descs(const Geometry& g) {
  Descs m;
  m.src_layer = md({g.seq, g.batch, g.input}, dt::f32, tag::tnc);
  m.src_iter = md({1, g.dirs, g.batch, g.hidden}, dt::f32, tag::ldnc);
  m.dst_iter = m.src_iter;
  if (g.lstm) {
    m.src_iter_c = m.src_iter;
    m.dst_iter_c = m.src_iter;
  }
  m.weights_layer = md({1, g.dirs, g.input, g.gates, g.hidden}, dt::f32, tag::any);
  m.weights_iter = md({1, g.dirs, g.hidden, g.gates, g.hidden}, dt::f32, tag::any);
  m.weights_layer_user = md({1, g.dirs, g.input, g.gates, g.hidden}, dt::f32, tag::ldgoi);
  m.weights_iter_user = md({1, g.dirs, g.hidden, g.gates, g.hidden}, dt::f32, tag::ldgoi);
  if (g.peepholes) {
    m.peephole = md({1, g.dirs, 3, g.hidden}, dt::f32, tag::ldgo);
  }
  m.bias = md({1, g.dirs, g.biases, g.hidden}, dt::f32, tag::ldgo);
  m.dst_layer = md({g.seq, g.batch, g.dirs * g.hidden}, dt::f32, tag::tnc);
  return m;
}

dnnl::rnn_direction dnnl_direction(RecurrentDirection d) {
  switch (d) {
  case RecurrentDirection::forward: return dnnl::rnn_direction::unidirectional_left2right;
  case RecurrentDirection::reverse: return dnnl::rnn_direction::unidirectional_right2left;
  case RecurrentDirection::bidirectional: return dnnl::rnn_direction::bidirectional_concat;
  }
  throw Error("unknown recurrent direction");
}

dnnl::algorithm rnn_activation(Cell cell) {
  switch (cell) {
  case Cell::rnn_relu: return dnnl::algorithm::eltwise_relu;
  case Cell::rnn_sigmoid: return dnnl::algorithm::eltwise_logistic;
  default: return dnnl::algorithm::eltwise_tanh;
  }
}

struct Pds {
  dnnl::rnn_primitive_desc_base forward, backward;
};

// The training forward primitive descriptor, and with `backward` the backward one hinted by it.
// Diff tensors have the layouts of their tensors (weights: `any`, oneDNN's choice).
Pds primitive_descs(const dnnl::engine& e, const RecurrentShape& s, const Descs& m, bool backward) {
  const auto dir = dnnl_direction(s.direction);
  constexpr auto fwd = dnnl::prop_kind::forward_training;
  constexpr auto bwd = dnnl::prop_kind::backward;
  Pds p;
  switch (s.cell) {
  case Cell::lstm: {
    const dnnl::lstm_forward::primitive_desc f(dnnl::lstm_forward::desc(fwd, dir, m.src_layer, m.src_iter, m.src_iter_c,
                                                                        m.weights_layer, m.weights_iter, m.peephole,
                                                                        m.bias, m.dst_layer, m.dst_iter, m.dst_iter_c),
                                               e);
    p.forward = f;
    if (backward) {
      p.backward = dnnl::lstm_backward::primitive_desc(
          dnnl::lstm_backward::desc(bwd, dir, m.src_layer, m.src_iter, m.src_iter_c, m.weights_layer, m.weights_iter,
                                    m.peephole, m.bias, m.dst_layer, m.dst_iter, m.dst_iter_c, m.src_layer, m.src_iter,
                                    m.src_iter_c, m.weights_layer, m.weights_iter, m.peephole, m.bias, m.dst_layer,
                                    m.dst_iter, m.dst_iter_c),
          e, f);
    }
    break;
  }
  case Cell::gru: {
    const dnnl::gru_forward::primitive_desc f(dnnl::gru_forward::desc(fwd, dir, m.src_layer, m.src_iter,
                                                                      m.weights_layer, m.weights_iter, m.bias,
                                                                      m.dst_layer, m.dst_iter),
                                              e);
    p.forward = f;
    if (backward) {
      p.backward = dnnl::gru_backward::primitive_desc(
          dnnl::gru_backward::desc(bwd, dir, m.src_layer, m.src_iter, m.weights_layer, m.weights_iter, m.bias,
                                   m.dst_layer, m.dst_iter, m.src_layer, m.src_iter, m.weights_layer, m.weights_iter,
                                   m.bias, m.dst_layer, m.dst_iter),
          e, f);
    }
    break;
  }
  case Cell::gru_linear_before_reset: {
    const dnnl::lbr_gru_forward::primitive_desc f(dnnl::lbr_gru_forward::desc(fwd, dir, m.src_layer, m.src_iter,
                                                                              m.weights_layer, m.weights_iter, m.bias,
                                                                              m.dst_layer, m.dst_iter),
                                                  e);
    p.forward = f;
    if (backward) {
      p.backward = dnnl::lbr_gru_backward::primitive_desc(
          dnnl::lbr_gru_backward::desc(bwd, dir, m.src_layer, m.src_iter, m.weights_layer, m.weights_iter, m.bias,
                                       m.dst_layer, m.dst_iter, m.src_layer, m.src_iter, m.weights_layer,
                                       m.weights_iter, m.bias, m.dst_layer, m.dst_iter),
          e, f);
    }
    break;
  }
  case Cell::rnn_tanh:
  case Cell::rnn_relu:
  case Cell::rnn_sigmoid: {
    const auto act = rnn_activation(s.cell);
    const dnnl::vanilla_rnn_forward::primitive_desc f(
        dnnl::vanilla_rnn_forward::desc(fwd, act, dir, m.src_layer, m.src_iter, m.weights_layer, m.weights_iter, m.bias,
                                        m.dst_layer, m.dst_iter),
        e);
    p.forward = f;
    if (backward) {
      p.backward = dnnl::vanilla_rnn_backward::primitive_desc(
          dnnl::vanilla_rnn_backward::desc(bwd, act, dir, m.src_layer, m.src_iter, m.weights_layer, m.weights_iter,
                                           m.bias, m.dst_layer, m.dst_iter, m.src_layer, m.src_iter, m.weights_layer,
                                           m.weights_iter, m.bias, m.dst_layer, m.dst_iter),
          e, f);
    }
    break;
  }
  }
  return p;
}

// What the forward pass keeps for the backward pass, in `saved`: the workspace, then dst_layer
// (oneDNN's layout), dst_iter and dst_iter_c.
struct SavedLayout {
  std::size_t workspace = 0, dst_layer = 0, dst_iter = 0, dst_iter_c = 0, total = 0;
};

SavedLayout saved_layout(const Geometry& g, const dnnl::rnn_primitive_desc_base& forward) {
  SavedLayout l;
  const std::size_t ws_floats = (forward.workspace_desc().get_size() + sizeof(float) - 1) / sizeof(float);
  l.dst_layer = ws_floats;
  l.dst_iter = l.dst_layer + sz(g.y());
  l.dst_iter_c = l.dst_iter + sz(g.state());
  l.total = l.dst_iter_c + (g.lstm ? sz(g.state()) : 0);
  return l;
}

// `user` in the layout `want`: itself, or a reordered copy.
dnnl::memory as(const dnnl::engine& e, dnnl::stream& st, const md& want, dnnl::memory user) {
  if (want == user.get_desc()) {
    return user;
  }
  dnnl::memory m(want, e);
  dnnl::reorder(user, m).execute(st, user, m);
  return m;
}

dnnl::memory zeroed(const dnnl::engine& e, const md& d) {
  dnnl::memory m(d, e);
  std::memset(m.get_data_handle(), 0, d.get_size());
  return m;
}

// oneDNN's weights (in the primitive's layout) back to ONNX's: reorder to ldgoi, permute gates.
void onnx_weights(const dnnl::engine& e, dnnl::stream& st, const Geometry& g, Cell cell, std::int64_t cols,
                  dnnl::memory from, const md& user, float* to) {
  std::vector<float> ldgoi(sz(g.dirs * g.gates * g.hidden * cols));
  dnnl::memory u(user, e, ldgoi.data());
  dnnl::reorder(from, u).execute(st, from, u);
  st.wait();
  convert_weights(g, cell, cols, ldgoi.data(), to, true);
}

// The forward pass's inputs as oneDNN memories (weights still in ONNX's bytes, ldgoi).
struct InputMemories {
  std::vector<float> w, r, bias, peephole, zeros;
  dnnl::memory src_layer, src_iter, src_iter_c, weights_layer, weights_iter, bias_m, peephole_m;
};

void prepare_inputs(const dnnl::engine& e, const Geometry& g, Cell cell, const Descs& m, const RecurrentInputs& in,
                    InputMemories& im) {
  im.w.resize(sz(g.dirs * g.gates * g.hidden * g.input));
  im.r.resize(sz(g.dirs * g.gates * g.hidden * g.hidden));
  convert_weights(g, cell, g.input, in.w, im.w.data(), false);
  convert_weights(g, cell, g.hidden, in.r, im.r.data(), false);
  im.bias = dnnl_bias(g, cell, in.b);
  im.zeros.assign(sz(g.state()), 0.F);
  im.src_layer = dnnl::memory(m.src_layer, e, mut(in.x));
  im.src_iter = dnnl::memory(m.src_iter, e, in.initial_h != nullptr ? mut(in.initial_h) : im.zeros.data());
  if (g.lstm) {
    im.src_iter_c = dnnl::memory(m.src_iter_c, e, in.initial_c != nullptr ? mut(in.initial_c) : im.zeros.data());
  }
  im.weights_layer = dnnl::memory(m.weights_layer_user, e, im.w.data());
  im.weights_iter = dnnl::memory(m.weights_iter_user, e, im.r.data());
  im.bias_m = dnnl::memory(m.bias, e, im.bias.data());
  if (g.peepholes) {
    im.peephole.resize(sz(g.dirs * 3 * g.hidden));
    convert_peepholes(g, in.p, im.peephole.data(), false);
    im.peephole_m = dnnl::memory(m.peephole, e, im.peephole.data());
  }
}

void check(const RecurrentShape& s, const RecurrentInputs& in) {
  if (in.x == nullptr || in.w == nullptr || in.r == nullptr) {
    throw Error("a recurrent layer needs X, W and R");
  }
  if (s.seq < 1 || s.batch < 1 || s.input < 1 || s.hidden < 1) {
    throw Error(fmt::format("recurrent layer of seq {}, batch {}, input {}, hidden {}: every extent must be positive",
                            s.seq, s.batch, s.input, s.hidden));
  }
}

} // namespace

void recurrent_forward(const dnnl::engine& engine, dnnl::stream& stream, const RecurrentShape& s,
                       const RecurrentInputs& in, const RecurrentOutputs& out, Floats& saved) {
  check(s, in);
  const auto g = geometry(s, in.p != nullptr);
  const auto m = descs(g);
  const auto pd = primitive_descs(engine, s, m, false).forward;
  InputMemories im;
  prepare_inputs(engine, g, s.cell, m, in, im);
  const auto layout = saved_layout(g, pd);
  if (saved.size() != static_cast<std::size_t>(layout.total)) {
    saved = Floats(static_cast<std::size_t>(layout.total)); // zeroed, made where the tensor memory is
  }
  float* dst_layer = saved.data() + layout.dst_layer;
  float* dst_iter = saved.data() + layout.dst_iter;
  float* dst_iter_c = saved.data() + layout.dst_iter_c;
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC_LAYER, im.src_layer},
      {DNNL_ARG_SRC_ITER, im.src_iter},
      {DNNL_ARG_WEIGHTS_LAYER, as(engine, stream, pd.weights_layer_desc(), im.weights_layer)},
      {DNNL_ARG_WEIGHTS_ITER, as(engine, stream, pd.weights_iter_desc(), im.weights_iter)},
      {DNNL_ARG_BIAS, im.bias_m},
      {DNNL_ARG_DST_LAYER, dnnl::memory(m.dst_layer, engine, dst_layer)},
      {DNNL_ARG_DST_ITER, dnnl::memory(m.dst_iter, engine, dst_iter)},
      {DNNL_ARG_WORKSPACE, dnnl::memory(pd.workspace_desc(), engine, saved.data())}};
  if (g.lstm) {
    args.emplace(DNNL_ARG_SRC_ITER_C, im.src_iter_c);
    args.emplace(DNNL_ARG_DST_ITER_C, dnnl::memory(m.dst_iter_c, engine, dst_iter_c));
  }
  if (g.peepholes) {
    args.emplace(DNNL_ARG_WEIGHTS_PEEPHOLE, im.peephole_m);
  }
  dnnl::primitive(pd).execute(stream, args);
  stream.wait();
  if (out.y != nullptr) {
    convert_y(g, dst_layer, out.y, true);
  }
  if (out.y_h != nullptr) {
    std::copy_n(dst_iter, g.state(), out.y_h);
  }
  if (out.y_c != nullptr && g.lstm) {
    std::copy_n(dst_iter_c, g.state(), out.y_c);
  }
}

void recurrent_backward(const dnnl::engine& engine, dnnl::stream& stream, const RecurrentShape& s,
                        const RecurrentInputs& in, const Floats& saved, const RecurrentOutputGradients& d_out,
                        const RecurrentInputGradients& d_in) {
  check(s, in);
  const auto g = geometry(s, in.p != nullptr);
  const auto m = descs(g);
  const auto pds = primitive_descs(engine, s, m, true);
  const auto& pd = pds.backward;
  const auto layout = saved_layout(g, pds.forward);
  if (saved.size() != layout.total) {
    throw Error("recurrent backward without its forward pass (nothing saved, or saved for other extents)");
  }
  InputMemories im;
  prepare_inputs(engine, g, s.cell, m, in, im);
  auto* kept = const_cast<float*>(saved.data()); // oneDNN takes non-const handles; it only reads these

  // Gradients arriving: Y's in oneDNN's layout, zeros for those not given.
  std::vector<float> dy(sz(g.y()), 0.F);
  if (d_out.dy != nullptr) {
    convert_y(g, d_out.dy, dy.data(), false);
  }
  const float* dy_h = d_out.dy_h != nullptr ? d_out.dy_h : im.zeros.data();
  const float* dy_c = d_out.dy_c != nullptr ? d_out.dy_c : im.zeros.data();

  // Gradients leaving: into the caller's buffers or scratch.
  std::vector<float> dx_scratch(d_in.dx == nullptr ? sz(s.seq * s.batch * s.input) : 0);
  std::vector<float> dh_scratch(sz(g.state())), dc_scratch(sz(g.state()));
  auto dwl = zeroed(engine, pd.diff_weights_layer_desc());
  auto dwi = zeroed(engine, pd.diff_weights_iter_desc());
  auto dbias = zeroed(engine, pd.diff_bias_desc());

  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC_LAYER, im.src_layer},
      {DNNL_ARG_SRC_ITER, im.src_iter},
      {DNNL_ARG_WEIGHTS_LAYER, as(engine, stream, pd.weights_layer_desc(), im.weights_layer)},
      {DNNL_ARG_WEIGHTS_ITER, as(engine, stream, pd.weights_iter_desc(), im.weights_iter)},
      {DNNL_ARG_BIAS, im.bias_m},
      {DNNL_ARG_DST_LAYER, dnnl::memory(m.dst_layer, engine, kept + layout.dst_layer)},
      {DNNL_ARG_DST_ITER, dnnl::memory(m.dst_iter, engine, kept + layout.dst_iter)},
      {DNNL_ARG_WORKSPACE, dnnl::memory(pd.workspace_desc(), engine, kept)},
      {DNNL_ARG_DIFF_SRC_LAYER, dnnl::memory(m.src_layer, engine, d_in.dx != nullptr ? d_in.dx : dx_scratch.data())},
      {DNNL_ARG_DIFF_SRC_ITER,
       dnnl::memory(m.src_iter, engine, d_in.d_initial_h != nullptr ? d_in.d_initial_h : dh_scratch.data())},
      {DNNL_ARG_DIFF_WEIGHTS_LAYER, dwl},
      {DNNL_ARG_DIFF_WEIGHTS_ITER, dwi},
      {DNNL_ARG_DIFF_BIAS, dbias},
      {DNNL_ARG_DIFF_DST_LAYER, dnnl::memory(m.dst_layer, engine, dy.data())},
      {DNNL_ARG_DIFF_DST_ITER, dnnl::memory(m.dst_iter, engine, mut(dy_h))}};
  if (g.lstm) {
    args.emplace(DNNL_ARG_SRC_ITER_C, im.src_iter_c);
    args.emplace(DNNL_ARG_DST_ITER_C, dnnl::memory(m.dst_iter_c, engine, kept + layout.dst_iter_c));
    args.emplace(
        DNNL_ARG_DIFF_SRC_ITER_C,
        dnnl::memory(m.src_iter_c, engine, d_in.d_initial_c != nullptr ? d_in.d_initial_c : dc_scratch.data()));
    args.emplace(DNNL_ARG_DIFF_DST_ITER_C, dnnl::memory(m.dst_iter_c, engine, mut(dy_c)));
  }
  std::optional<dnnl::memory> dpeep;
  if (g.peepholes) {
    dpeep = zeroed(engine, pd.diff_weights_peephole_desc());
    args.emplace(DNNL_ARG_WEIGHTS_PEEPHOLE, im.peephole_m);
    args.emplace(DNNL_ARG_DIFF_WEIGHTS_PEEPHOLE, *dpeep);
  }
  dnnl::primitive(pd).execute(stream, args);
  stream.wait();

  if (d_in.dw != nullptr) {
    onnx_weights(engine, stream, g, s.cell, g.input, dwl, m.weights_layer_user, d_in.dw);
  }
  if (d_in.dr != nullptr) {
    onnx_weights(engine, stream, g, s.cell, g.hidden, dwi, m.weights_iter_user, d_in.dr);
  }
  if (d_in.db != nullptr) {
    std::vector<float> plain(sz(g.dirs * g.biases * g.hidden));
    dnnl::memory u(m.bias, engine, plain.data());
    dnnl::reorder(dbias, u).execute(stream, dbias, u);
    stream.wait();
    onnx_bias_gradient(g, s.cell, plain.data(), d_in.db);
  }
  if (d_in.dp != nullptr && dpeep) {
    std::vector<float> plain(sz(g.dirs * 3 * g.hidden));
    dnnl::memory u(m.peephole, engine, plain.data());
    dnnl::reorder(*dpeep, u).execute(stream, *dpeep, u);
    stream.wait();
    convert_peepholes(g, plain.data(), d_in.dp, true);
  }
}

} // namespace partita::runtime::cpu
