// LSTM, GRU and RNN on local shards (op_kernels.h says how shards relate to the op). ONNX's
// defaults run on the backend's recurrent kernels; what oneDNN's primitives cannot compute (cell
// clipping, other activations, coupled input and forget gates) is refused with the reason (the
// CUDA backend refuses, besides, what cuDNN's cells cannot: cuda_recurrent.cpp), and
// sequence_lens is accepted when every sequence has the full length (checked on the data).
// layout 1 (batch first) is transposed to time-major and back around the kernels.

#include "op_kernels_rnn.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>

namespace partita::runtime::rnn {
namespace {

enum Slot : std::size_t { x_in = 0, w_in = 1, r_in = 2, b_in = 3, lens_in = 4, h0_in = 5, c0_in = 6, p_in = 7 };
enum Out : std::size_t { y_out = 0, y_h_out = 1, y_c_out = 2 };

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::int64_t directions(const graph::Op& op) {
  return op.attr_string("direction", "forward") == "bidirectional" ? 2 : 1;
}

std::vector<std::string> activations(const graph::Op& op) {
  const auto it = op.attrs.find("activations");
  if (it == op.attrs.end()) {
    return {};
  }
  const auto* list = std::get_if<std::vector<std::string>>(&it->second);
  return list != nullptr ? *list : std::vector<std::string>{"?"};
}

// The activations ONNX defaults to, per direction.
std::vector<std::string> default_activations(const std::string& type) {
  if (type == "LSTM") {
    return {"sigmoid", "tanh", "tanh"};
  }
  if (type == "GRU") {
    return {"sigmoid", "tanh"};
  }
  return {"tanh"};
}

// Empty when the op's attributes are ones the kernels compute; otherwise why not.
std::string unsupported(const graph::Op& op) {
  const auto direction = op.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    return fmt::format("direction '{}'", direction);
  }
  if (const auto layout = op.attr_int("layout", 0); layout != 0 && layout != 1) {
    return fmt::format("layout {}", layout);
  }
  if (op.has_attr("clip")) {
    return "clip (cell clipping; oneDNN's RNN primitives have none)";
  }
  if (op.has_attr("activation_alpha") || op.has_attr("activation_beta")) {
    return "activation_alpha / activation_beta (only parameterless activations)";
  }
  if (op.type == "LSTM" && op.attr_int("input_forget", 0) != 0) {
    return "input_forget (coupled input and forget gates)";
  }
  const auto given = activations(op);
  if (given.empty()) {
    return {};
  }
  const auto dirs = static_cast<std::size_t>(directions(op));
  std::vector<std::string> want = default_activations(op.type);
  if (op.type == "RNN") { // one activation per direction, the same for both: Tanh, Relu or Sigmoid
    const auto first = lower(given.front());
    if (first != "tanh" && first != "relu" && first != "sigmoid") {
      return fmt::format("activation {} (RNN: Tanh, Relu or Sigmoid)", given.front());
    }
    want = {first};
  }
  std::vector<std::string> all;
  for (std::size_t d = 0; d < dirs; ++d) {
    all.insert(all.end(), want.begin(), want.end());
  }
  std::vector<std::string> got(given.size());
  std::transform(given.begin(), given.end(), got.begin(), lower);
  if (got != all) {
    return fmt::format("activations [{}] (supported: ONNX's defaults [{}])", fmt::join(given, ", "),
                       fmt::join(all, ", "));
  }
  return {};
}

Cell cell_of(const graph::Op& op) {
  if (op.type == "LSTM") {
    return Cell::lstm;
  }
  if (op.type == "GRU") {
    return op.attr_int("linear_before_reset", 0) != 0 ? Cell::gru_linear_before_reset : Cell::gru;
  }
  const auto given = activations(op);
  const auto a = given.empty() ? std::string("tanh") : lower(given.front());
  return a == "relu" ? Cell::rnn_relu : a == "sigmoid" ? Cell::rnn_sigmoid : Cell::rnn_tanh;
}

const Shard* optional_input(const OpBuffers& buf, std::size_t i) {
  return i < buf.inputs.size() ? buf.inputs[i] : nullptr;
}

Shard* optional_output(const OpBuffers& buf, std::size_t k) {
  return k < buf.outputs.size() ? buf.outputs[k] : nullptr;
}

// dst[...] = src[...] with dst's axis k being src's axis perm[k] (small ranks), a strided copy on
// the backend (nothing on the host touches tensor memory).
Floats permuted(Backend& backend, const float* src, const Dims& dims, const std::vector<std::size_t>& perm) {
  const std::size_t rank = dims.size();
  Dims out_dims(rank), src_strides(rank, 1), read(rank);
  for (std::size_t d = rank - 1; d > 0; --d) {
    src_strides[d - 1] = src_strides[d] * dims[d];
  }
  std::int64_t total = 1;
  for (std::size_t k = 0; k < rank; ++k) {
    out_dims[k] = dims[perm[k]];
    read[k] = src_strides[perm[k]];
    total *= out_dims[k];
  }
  Floats out = uninitialized_floats(static_cast<std::size_t>(total));
  if (total > 0) {
    backend.copy(strided_copy(out_dims, read, row_major_strides(out_dims)), src, out.data(), false);
  }
  return out;
}

// One op on this rank's shards: the kernel's shape, and ONNX's layout-1 tensors made time-major.
struct Plan {
  RecurrentShape shape;
  bool batch_first = false;
  Floats x, initial_h, initial_c; // time-major copies (layout 1 only)
  RecurrentInputs inputs;
};

Plan plan(Backend& backend, const graph::Graph& g, const graph::Op& op, const OpBuffers& buf) {
  if (const auto why = unsupported(op); !why.empty()) {
    throw Error(fmt::format("op '{}' ({}): {} is not supported", op.name, op.type, why));
  }
  Plan p;
  p.batch_first = op.attr_int("layout", 0) != 0;
  const Shard& x = *buf.inputs[x_in];
  const Shard& w = *buf.inputs[w_in];
  const Dims xe = x.extents(), we = w.extents();
  auto& s = p.shape;
  s.cell = cell_of(op);
  s.seq = p.batch_first ? xe[1] : xe[0];
  s.batch = p.batch_first ? xe[0] : xe[1];
  s.input = xe[2];
  s.hidden = buf.inputs[r_in]->extents()[2];
  const std::int64_t gates = s.gates();
  if (we[1] != gates * s.hidden || we[2] != s.input) {
    throw Error(fmt::format("op '{}' ({}): this rank's W block [{}] is not whole gates ({} x hidden {}) by input {}: "
                            "the gates and hidden units of a recurrent layer are never split",
                            op.name, op.type, fmt::join(we, ", "), gates, s.hidden, s.input));
  }
  const auto& full_x = g.tensor(op.inputs[x_in]).shape;
  if (s.seq != (p.batch_first ? full_x[1] : full_x[0])) {
    throw Error(fmt::format("op '{}' ({}): this rank holds {} of {} time steps; time is a recurrence and is never "
                            "split",
                            op.name, op.type, s.seq, p.batch_first ? full_x[1] : full_x[0]));
  }
  // One direction of a bidirectional layer: the first is forward, the second reverse.
  const std::int64_t dirs = directions(op);
  if (we[0] == dirs) {
    const auto d = op.attr_string("direction", "forward");
    s.direction = d == "bidirectional" ? RecurrentDirection::bidirectional
                  : d == "reverse"     ? RecurrentDirection::reverse
                                       : RecurrentDirection::forward;
  } else {
    s.direction = w.block.begin[0] == 0 ? RecurrentDirection::forward : RecurrentDirection::reverse;
  }

  if (const Shard* lens = optional_input(buf, lens_in)) {
    for (std::size_t i = 0; i < lens->data.size(); ++i) {
      const auto len = static_cast<std::int64_t>(std::llround(lens->data[i]));
      if (len != s.seq) {
        throw Error(fmt::format("op '{}' ({}): sequence_lens holds {} for batch element {} but the sequence has {} "
                                "steps: sequences of different lengths are not supported",
                                op.name, op.type, len, lens->block.begin[0] + static_cast<std::int64_t>(i), s.seq));
      }
    }
  }

  auto& in = p.inputs;
  const auto data = [&](std::size_t i) {
    const Shard* sh = optional_input(buf, i);
    return sh != nullptr ? sh->data.data() : nullptr;
  };
  in.w = w.data.data();
  in.r = data(r_in);
  in.b = data(b_in);
  in.p = data(p_in);
  if (in.p != nullptr && s.cell != Cell::lstm) {
    throw Error(fmt::format("op '{}' ({}): peepholes are LSTM's only", op.name, op.type));
  }
  if (!p.batch_first) {
    in.x = x.data.data();
    in.initial_h = data(h0_in);
    in.initial_c = data(c0_in);
    return p;
  }
  p.x = permuted(backend, x.data.data(), xe, {1, 0, 2});
  in.x = p.x.data();
  if (const Shard* h0 = optional_input(buf, h0_in)) {
    p.initial_h = permuted(backend, h0->data.data(), h0->extents(), {1, 0, 2});
    in.initial_h = p.initial_h.data();
  }
  if (const Shard* c0 = optional_input(buf, c0_in)) {
    p.initial_c = permuted(backend, c0->data.data(), c0->extents(), {1, 0, 2});
    in.initial_c = p.initial_c.data();
  }
  return p;
}

Dims y_dims(const RecurrentShape& s) {
  return {s.seq, s.directions(), s.batch, s.hidden};
}

Dims state_dims(const RecurrentShape& s) {
  return {s.directions(), s.batch, s.hidden};
}

Floats& saved_of(const graph::Op& op, const OpBuffers& buf) {
  if (buf.saved == nullptr) {
    throw Error(
        fmt::format("op '{}' ({}): no room to keep the forward pass's states for the backward pass", op.name, op.type));
  }
  return *buf.saved;
}

} // namespace

bool handles(const std::string& type) {
  return type == "LSTM" || type == "GRU" || type == "RNN";
}

std::string missing_kernel(const graph::Graph& g, graph::OpId id) {
  const graph::Op& op = g.op(id);
  if (op.inputs.size() < 3 || op.inputs[x_in] == graph::no_tensor || op.inputs[w_in] == graph::no_tensor ||
      op.inputs[r_in] == graph::no_tensor) {
    return fmt::format("{} without X, W and R", op.type);
  }
  if (g.tensor(op.inputs[x_in]).shape.size() != 3) {
    return fmt::format("{} of a rank-{} input", op.type, g.tensor(op.inputs[x_in]).shape.size());
  }
  if (const auto why = unsupported(op); !why.empty()) {
    return fmt::format("{} with {}", op.type, why);
  }
  return {};
}

void forward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buf) {
  const graph::Op& op = g.op(id);
  auto p = plan(backend, g, op, buf);
  const auto& s = p.shape;
  Shard* y = optional_output(buf, y_out);
  Shard* y_h = optional_output(buf, y_h_out);
  Shard* y_c = optional_output(buf, y_c_out);
  if (!p.batch_first) {
    backend.recurrent_forward(s, p.inputs,
                              {y != nullptr ? y->data.data() : nullptr, y_h != nullptr ? y_h->data.data() : nullptr,
                               y_c != nullptr ? y_c->data.data() : nullptr},
                              saved_of(op, buf));
    return;
  }
  // Time-major results, then ONNX's layout 1: Y [batch, seq, dirs, hidden], states [batch, dirs, hidden].
  Floats ty(y != nullptr ? static_cast<std::size_t>(s.seq * s.directions() * s.batch * s.hidden) : 0);
  Floats th(static_cast<std::size_t>(s.directions() * s.batch * s.hidden)), tc(th.size());
  backend.recurrent_forward(s, p.inputs, {y != nullptr ? ty.data() : nullptr, th.data(), tc.data()}, saved_of(op, buf));
  if (y != nullptr) {
    y->data = permuted(backend, ty.data(), y_dims(s), {2, 0, 1, 3});
  }
  if (y_h != nullptr) {
    y_h->data = permuted(backend, th.data(), state_dims(s), {1, 0, 2});
  }
  if (y_c != nullptr) {
    y_c->data = permuted(backend, tc.data(), state_dims(s), {1, 0, 2});
  }
}

void backward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buf,
              const std::vector<const Shard*>& d_out, const std::vector<Shard*>& d_in) {
  const graph::Op& op = g.op(id);
  auto p = plan(backend, g, op, buf);
  const auto& s = p.shape;
  const auto grad_out = [&](std::size_t k) {
    return k < d_out.size() && d_out[k] != nullptr ? d_out[k]->data.data() : nullptr;
  };
  const auto grad_in = [&](std::size_t i) {
    return i < d_in.size() && d_in[i] != nullptr ? d_in[i]->data.data() : nullptr;
  };
  RecurrentInputGradients gi{grad_in(x_in), grad_in(w_in),  grad_in(r_in), grad_in(b_in),
                             grad_in(p_in), grad_in(h0_in), grad_in(c0_in)};
  if (!p.batch_first) {
    backend.recurrent_backward(s, p.inputs, saved_of(op, buf), {grad_out(y_out), grad_out(y_h_out), grad_out(y_c_out)},
                               gi);
    return;
  }
  // Layout 1: gradients arriving made time-major, those leaving (dX, d initial states) put back.
  Floats dy, dh, dc;
  if (const float* v = grad_out(y_out)) {
    dy = permuted(backend, v, {s.batch, s.seq, s.directions(), s.hidden}, {1, 2, 0, 3});
  }
  if (const float* v = grad_out(y_h_out)) {
    dh = permuted(backend, v, {s.batch, s.directions(), s.hidden}, {1, 0, 2});
  }
  if (const float* v = grad_out(y_c_out)) {
    dc = permuted(backend, v, {s.batch, s.directions(), s.hidden}, {1, 0, 2});
  }
  const auto or_null = [](const Floats& v) { return v.empty() ? nullptr : v.data(); };
  Floats dx(gi.dx != nullptr ? static_cast<std::size_t>(s.seq * s.batch * s.input) : 0);
  Floats dh0(gi.d_initial_h != nullptr ? static_cast<std::size_t>(s.directions() * s.batch * s.hidden) : 0);
  Floats dc0(gi.d_initial_c != nullptr ? dh0.size() : 0);
  float* dx_out = gi.dx;
  float* dh0_out = gi.d_initial_h;
  float* dc0_out = gi.d_initial_c;
  gi.dx = dx.empty() ? nullptr : dx.data();
  gi.d_initial_h = dh0.empty() ? nullptr : dh0.data();
  gi.d_initial_c = dc0.empty() ? nullptr : dc0.data();
  backend.recurrent_backward(s, p.inputs, saved_of(op, buf), {or_null(dy), or_null(dh), or_null(dc)}, gi);
  // Put back in layout 1, straight into the gradient buffers.
  const auto put_back = [&](const Floats& from, const Dims& dims, float* to) {
    const Dims out_dims{dims[1], dims[0], dims[2]};
    const Dims strides = row_major_strides(dims);
    backend.copy(strided_copy(out_dims, {strides[1], strides[0], strides[2]}, row_major_strides(out_dims)), from.data(),
                 to, false);
  };
  if (dx_out != nullptr) {
    put_back(dx, {s.seq, s.batch, s.input}, dx_out);
  }
  if (dh0_out != nullptr) {
    put_back(dh0, state_dims(s), dh0_out);
  }
  if (dc0_out != nullptr) {
    put_back(dc0, state_dims(s), dc0_out);
  }
}

} // namespace partita::runtime::rnn
