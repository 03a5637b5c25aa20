// Recurrent layers (LSTM, GRU, RNN). Each step multiplies [x_t, h_{t-1}] by the stacked gate
// weights, so the iteration space is s (time), d (directions), b (batch), g (gates x hidden) and
// k (input + hidden, summed over). Time is a recurrence and is never split; k is not split either,
// since it spans two tensors (X's features and the hidden state) that no one tensor dim indexes.
//
// g is not splittable either. Every step needs the whole h_{t-1} of every gate, so a split of the
// hidden units would need an all-gather of h_t inside the op at every step, which no layout or
// redistribution between ops can express; and a block split of W's [gates * hidden] rows would
// give a device whole gates (LSTM's i and o on one device, f and c on the other), not a share of
// the hidden units of every gate. Splitting b (data parallelism) and d (the two directions of a
// bidirectional layer on different devices, X read by both) is what partita-run executes.
//
// Tensor dims sized hidden (Y, Y_h, Y_c, initial states) or a multiple of it (B, P) still map to
// g, so that the layouts say that they are whole wherever g is.

#include "graph/op_helpers.h"

namespace partita::graph::detail {
namespace {

// Per gate element per step: two bias adds and a sigmoid or tanh (4, as in ops_elementwise.cpp).
constexpr double gate_fwd = 6;
constexpr double gate_bwd = 12;

template <int Gates> void describe_recurrent(const Op& op, const Graph& g, OpSemantics& s) {
  const Tensor& x = input(op, g, 0);
  const Tensor& w = input(op, g, 1);
  const Tensor& r = input(op, g, 2);
  if (x.shape.size() != 3 || w.shape.size() != 3 || r.shape.size() != 3) {
    fail(op, fmt::format("X {}, W {} and R {} must have rank 3", shape_string(x.shape), shape_string(w.shape),
                         shape_string(r.shape)));
  }
  const bool batch_first = op.attr_int("layout", 0) != 0;
  const std::string direction = op.attr_string("direction", "forward");
  const std::int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    fail(op, fmt::format("unknown direction '{}'", direction));
  }
  const std::int64_t hidden = op.attr_int("hidden_size", r.shape[2]);
  const std::int64_t seq = batch_first ? x.shape[1] : x.shape[0];
  const std::int64_t batch = batch_first ? x.shape[0] : x.shape[1];
  const std::int64_t in = x.shape[2];
  const Shape w_want{dirs, Gates * hidden, in};
  const Shape r_want{dirs, Gates * hidden, hidden};
  if (w.shape != w_want || r.shape != r_want) {
    fail(op, fmt::format("W {} and R {} do not match {} and {} for hidden_size {} and {} direction(s)",
                         shape_string(w.shape), shape_string(r.shape), shape_string(w_want), shape_string(r_want),
                         hidden, dirs));
  }
  const int ds = add_dim(s, "s", seq, false, false);
  const int dd = add_dim(s, "d", dirs);
  const int db = add_dim(s, "b", batch);
  const int dg = add_dim(s, "g", Gates * hidden, false, false);
  add_dim(s, "k", in + hidden, true, false);

  // [dirs, batch, hidden], or [batch, dirs, hidden] with layout 1.
  const std::vector<int> state = batch_first ? std::vector<int>{db, dd, dg} : std::vector<int>{dd, db, dg};
  map_input(op, g, s, 0, batch_first ? std::vector<int>{db, ds, -1} : std::vector<int>{ds, db, -1});
  map_input(op, g, s, 1, {dd, dg, -1});
  map_input(op, g, s, 2, {dd, dg, -1});
  map_input(op, g, s, 3, {dd, dg});
  map_input(op, g, s, 4, {db});
  map_input(op, g, s, 5, state);
  map_input(op, g, s, 6, state);    // LSTM initial_c
  map_input(op, g, s, 7, {dd, dg}); // LSTM peepholes
  for (std::size_t k = 0; k < op.outputs.size(); ++k) {
    if (op.outputs[k] == no_tensor) {
      continue;
    }
    map_output(op, g, s, k,
               k == 0 ? (batch_first ? std::vector<int>{db, ds, dd, dg} : std::vector<int>{ds, dd, db, dg}) : state);
  }

  const double gate_points = static_cast<double>(seq) * static_cast<double>(dirs) * static_cast<double>(batch) * Gates *
                             static_cast<double>(hidden);
  const double mac_x = gate_points * static_cast<double>(in);
  const double mac_h = gate_points * static_cast<double>(hidden);
  s.macs = mac_x + mac_h;
  s.fwd_flops = 2 * s.macs + gate_fwd * gate_points;
  add_grad_flops(op, g, s, 0, 2 * mac_x);                   // dX = dgates . W
  add_grad_flops(op, g, s, 1, 2 * mac_x);                   // dW = dgates^T . X
  add_grad_flops(op, g, s, 2, 2 * mac_h);                   // dR = dgates^T . h
  add_grad_flops(op, g, s, 3, 2 * gate_points);             // dB: sums over time and batch
  add_grad_flops(op, g, s, 7, 2 * gate_points * 3 / Gates); // dP: 3 x hidden per step
  // The backward recurrence (dh_{t-1} = dgates . R, and the gate derivatives) is needed for any
  // gradient. It is data-gradient work when X needs a gradient and weight-gradient work otherwise,
  // so a recurrent layer reading a graph input reports no data-gradient FLOPs, like a first Conv.
  const double through_time = 2 * mac_h + gate_bwd * gate_points;
  if (gets_gradient(x)) {
    s.bwd_data_flops += through_time;
  } else if (s.bwd_weight_flops > 0) {
    s.bwd_weight_flops += through_time;
  }
  // Step by step: h_t needs h_{t-1}, so each step's product with R (and its gate functions) waits
  // for the step before, forward and, through time, backward; X's projection (W), dX, dW and dR
  // take every step at once. Each step reads R again.
  s.steps = seq;
  s.step_fwd_flops = 2 * mac_h + gate_fwd * gate_points;
  s.step_bwd_flops = gets_gradient(x) || s.bwd_weight_flops > 0 ? through_time : 0.0;
  s.step_input = 2;
  // The gate functions of a step: forward, the pre-activations of every gate read and kept for the
  // backward pass, the cell state read, the hidden (and cell) state written; backward, the kept
  // gates and states read with the state gradients, the gates' gradients written.
  const double state_points = gate_points / Gates;
  s.step_fwd_bytes = 4 * (2 * gate_points + 3 * state_points);
  s.step_bwd_bytes = s.step_bwd_flops > 0 ? 4 * (2 * gate_points + 4 * state_points) : 0.0;
}

constexpr InputSlot D = InputSlot::data;
constexpr InputSlot W = InputSlot::weight;
constexpr InputSlot I = InputSlot::index;

const OpDescriptor table[] = {
    {"LSTM", OpClass::recurrent, {D, W, W, W, I, D, D, W}, describe_recurrent<4>},
    {"GRU", OpClass::recurrent, {D, W, W, W, I, D}, describe_recurrent<3>},
    {"RNN", OpClass::recurrent, {D, W, W, W, I, D}, describe_recurrent<1>},
};

} // namespace

std::span<const OpDescriptor> recurrent_ops() {
  return table;
}

} // namespace partita::graph::detail
