// ONNX's recurrent layers on cuDNN 9's RNN API: cudnnRNNForward in training mode with a reserve
// space, then cudnnRNNBackwardData_v8 and cudnnRNNBackwardWeights_v8. What differs between the
// two, and is converted here:
// - Cells: cuDNN's GRU applies the reset gate to R h + Rb (ONNX's linear_before_reset = 1) and its
//   vanilla RNN is tanh or ReLU; ONNX's default GRU (reset gate applied to h before R), a sigmoid
//   RNN and LSTM peepholes have no cuDNN cell and are refused.
// - Weights: cuDNN's weight space holds one [hidden, cols] row-major matrix and one bias per gate,
//   the input's (W, Wb) apart from the recurrent one's (R, Rb), where cudnnGetRNNWeightParams says.
//   ONNX's gate blocks are copied there: LSTM i, o, f, c as cuDNN's i, f, c, o; GRU z, r, h as
//   cuDNN's r, z, h. With CUDNN_RNN_DOUBLE_BIAS cuDNN's two biases per gate are ONNX's Wb and Rb.
// - Direction: cuDNN's bidirectional layer is ONNX's (the second direction reads X from its last
//   step and writes Y at the step it read). cuDNN has no reverse-only layer: a reverse layer runs
//   the forward one on X with its time axis reversed, and reverses Y and dX back.
// - Y: cuDNN's [seq, batch, dirs, hidden] against ONNX's [seq, dirs, batch, hidden] (the same bytes
//   for one direction). States [dirs, batch, hidden] are cuDNN's hx / hy layout.
// What the forward pass keeps in `saved`: cuDNN's reserve space, then its y.

#include "cuda_recurrent.h"

#include "cuda_kernels.h"
#include "cuda_support.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <memory>
#include <vector>

namespace partita::runtime::cuda {
namespace {

std::size_t sz(std::int64_t n) {
  return static_cast<std::size_t>(n);
}

std::size_t floats_for(std::size_t bytes) {
  return (bytes + sizeof(float) - 1) / sizeof(float);
}

// A cuDNN descriptor destroyed with its scope.
template <class T> using Owned = std::unique_ptr<T, cudnnStatus_t (*)(T*)>;

template <class T> Owned<T> created(cudnnStatus_t (*create)(T**), cudnnStatus_t (*destroy)(T*), const char* what) {
  T* p = nullptr;
  check(create(&p), what);
  return Owned<T>(p, destroy);
}

void check_inputs(const RecurrentShape& s, const RecurrentInputs& in) {
  if (in.x == nullptr || in.w == nullptr || in.r == nullptr) {
    throw Error("a recurrent layer needs X, W and R");
  }
  if (s.seq < 1 || s.batch < 1 || s.input < 1 || s.hidden < 1) {
    throw Error(fmt::format("recurrent layer of seq {}, batch {}, input {}, hidden {}: every extent must be positive",
                            s.seq, s.batch, s.input, s.hidden));
  }
  // What cuDNN's cells cannot compute as ONNX defines it.
  if (in.p != nullptr) {
    throw Error("LSTM peepholes (input P) are not supported by the CUDA backend: cuDNN's LSTM cell has none");
  }
  if (s.cell == Cell::gru) {
    throw Error("GRU with linear_before_reset = 0 (ONNX's default) is not supported by the CUDA backend: cuDNN's GRU "
                "applies the reset gate after the recurrent product (r * (R h + Rb), linear_before_reset = 1) and has "
                "no cell that applies it to h before");
  }
  if (s.cell == Cell::rnn_sigmoid) {
    throw Error("RNN with a Sigmoid activation is not supported by the CUDA backend: cuDNN's RNN cells are tanh and "
                "ReLU");
  }
}

cudnnRNNMode_t cudnn_mode(Cell cell) {
  switch (cell) {
  case Cell::lstm: return CUDNN_LSTM;
  case Cell::gru_linear_before_reset: return CUDNN_GRU;
  case Cell::rnn_relu: return CUDNN_RNN_RELU;
  case Cell::rnn_tanh: return CUDNN_RNN_TANH;
  case Cell::gru:
  case Cell::rnn_sigmoid: break; // refused by check_inputs
  }
  throw Error("recurrent cell without a cuDNN mode");
}

// cuDNN's gate (its linear layer among the input matrices) that ONNX's gate `gate` is.
int cudnn_gate(Cell cell, std::int64_t gate) {
  constexpr int lstm[] = {0, 3, 1, 2}; // i, o, f, c -> i, f, c, o
  constexpr int gru[] = {1, 0, 2};     // z, r, h -> r, z, h
  if (cell == Cell::lstm) {
    return lstm[gate];
  }
  return cell == Cell::gru_linear_before_reset ? gru[gate] : 0;
}

// The descriptors of one layer's shape, and the sizes of cuDNN's buffers for it.
struct Setup {
  Owned<cudnnRNNStruct> rnn;
  Owned<cudnnDropoutStruct> dropout;
  Owned<cudnnRNNDataStruct> x, y;
  Owned<cudnnTensorStruct> h; // hx, hy, cx, cy, and their gradients
  std::size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;
};

Setup setup(cudnnHandle_t dnn, const RecurrentShape& s) {
  Setup u{created(cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor, "cudnnCreateRNNDescriptor"),
          created(cudnnCreateDropoutDescriptor, cudnnDestroyDropoutDescriptor, "cudnnCreateDropoutDescriptor"),
          created(cudnnCreateRNNDataDescriptor, cudnnDestroyRNNDataDescriptor, "cudnnCreateRNNDataDescriptor"),
          created(cudnnCreateRNNDataDescriptor, cudnnDestroyRNNDataDescriptor, "cudnnCreateRNNDataDescriptor"),
          created(cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor, "cudnnCreateTensorDescriptor")};
  // No dropout (it is between layers, and this is one layer): no states, no random numbers.
  check(cudnnSetDropoutDescriptor(u.dropout.get(), dnn, 0.F, nullptr, 0, 0), "cudnnSetDropoutDescriptor");
  const int seq = as_int(s.seq, "recurrent seq"), batch = as_int(s.batch, "recurrent batch");
  const int input = as_int(s.input, "recurrent input"), hidden = as_int(s.hidden, "recurrent hidden");
  const int dirs = static_cast<int>(s.directions());
  // fp32 data and math, no tensor cores (TF32): as the CPU computes it.
  check(cudnnSetRNNDescriptor_v8(u.rnn.get(), CUDNN_RNN_ALGO_STANDARD, cudnn_mode(s.cell), CUDNN_RNN_DOUBLE_BIAS,
                                 dirs == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT,
                                 CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH, input, hidden, hidden, 1,
                                 u.dropout.get(), CUDNN_RNN_PADDED_IO_DISABLED),
        "cudnnSetRNNDescriptor_v8");
  // Every sequence has the full length, so the packed layout is the dense [seq, batch, vector].
  const std::vector<int> lengths(sz(batch), seq);
  check(cudnnSetRNNDataDescriptor(u.x.get(), CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, seq, batch,
                                  input, lengths.data(), nullptr),
        "cudnnSetRNNDataDescriptor (x)");
  check(cudnnSetRNNDataDescriptor(u.y.get(), CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, seq, batch,
                                  dirs * hidden, lengths.data(), nullptr),
        "cudnnSetRNNDataDescriptor (y)");
  const int dims[3] = {dirs, batch, hidden};
  const int strides[3] = {batch * hidden, hidden, 1};
  check(cudnnSetTensorNdDescriptor(u.h.get(), CUDNN_DATA_FLOAT, 3, dims, strides), "cudnnSetTensorNdDescriptor (h)");
  check(cudnnGetRNNWeightSpaceSize(dnn, u.rnn.get(), &u.weight_bytes), "cudnnGetRNNWeightSpaceSize");
  check(
      cudnnGetRNNTempSpaceSizes(dnn, u.rnn.get(), CUDNN_FWD_MODE_TRAINING, u.x.get(), &u.work_bytes, &u.reserve_bytes),
      "cudnnGetRNNTempSpaceSizes");
  return u;
}

// `saved`: the reserve space, then y (cuDNN's layout) from a 256-byte boundary.
struct SavedLayout {
  std::size_t y = 0, total = 0;
};

SavedLayout saved_layout(const RecurrentShape& s, const Setup& u) {
  SavedLayout l;
  l.y = (floats_for(u.reserve_bytes) + 63) / 64 * 64;
  l.total = l.y + sz(s.seq * s.batch * s.directions() * s.hidden);
  return l;
}

// Where a gate's matrix and bias lie in cuDNN's weight space (or its gradient), in floats.
struct Slot {
  std::size_t matrix = 0, bias = 0;
};
// Per direction and ONNX gate ([dirs * gates]): W's and Wb's slots, R's and Rb's.
struct WeightMap {
  std::vector<Slot> input, recurrent;
};

std::int64_t elements(cudnnTensorDescriptor_t d, const char* what) {
  cudnnDataType_t type{};
  int rank = 0, dims[8] = {}, strides[8] = {};
  check(cudnnGetTensorNdDescriptor(d, 8, &type, &rank, dims, strides), what);
  std::int64_t n = 1;
  for (int k = 0; k < rank; ++k) {
    n *= dims[k];
  }
  return n;
}

WeightMap weight_map(cudnnHandle_t dnn, const Setup& u, const RecurrentShape& s, const float* space) {
  const auto m = created(cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor, "cudnnCreateTensorDescriptor");
  const auto b = created(cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor, "cudnnCreateTensorDescriptor");
  const std::int64_t gates = s.gates();
  WeightMap map;
  map.input.resize(sz(s.directions() * gates));
  map.recurrent.resize(map.input.size());
  const auto offset = [&](const void* at) {
    return sz((static_cast<const char*>(at) - reinterpret_cast<const char*>(space)) /
              static_cast<std::ptrdiff_t>(sizeof(float)));
  };
  for (std::int64_t d = 0; d < s.directions(); ++d) {
    for (std::int64_t g = 0; g < gates; ++g) {
      for (const bool recurrent : {false, true}) {
        const int layer = cudnn_gate(s.cell, g) + (recurrent ? static_cast<int>(gates) : 0);
        void* matrix = nullptr;
        void* bias = nullptr;
        // In a bidirectional layer pseudo-layer 1 is the reverse direction.
        check(cudnnGetRNNWeightParams(dnn, u.rnn.get(), static_cast<int>(d), u.weight_bytes, space, layer, m.get(),
                                      &matrix, b.get(), &bias),
              "cudnnGetRNNWeightParams");
        const std::int64_t cols = recurrent ? s.hidden : s.input;
        const std::int64_t got_matrix = elements(m.get(), "cudnnGetTensorNdDescriptor (RNN matrix)");
        const std::int64_t got_bias = elements(b.get(), "cudnnGetTensorNdDescriptor (RNN bias)");
        if (matrix == nullptr || bias == nullptr || got_matrix != s.hidden * cols || got_bias != s.hidden) {
          throw Error(fmt::format("cuDNN's weight space has a {}-element matrix and a {}-element bias for gate {} of "
                                  "direction {}, not [{}, {}] and [{}]",
                                  got_matrix, got_bias, layer, d, s.hidden, cols, s.hidden));
        }
        (recurrent ? map.recurrent : map.input)[sz(d * gates + g)] = {offset(matrix), offset(bias)};
      }
    }
  }
  return map;
}

// Device memory on both sides (cudaMemcpyDefault: the driver knows where each lies).
void copy(cudaStream_t stream, float* to, const float* from, std::int64_t floats) {
  check(cudaMemcpyAsync(to, from, sz(floats) * sizeof(float), cudaMemcpyDefault, stream),
        "cudaMemcpyAsync (recurrent weights)");
}

// ONNX's W, R and B into cuDNN's weight space (biases zero without B).
void pack(cudaStream_t stream, const RecurrentShape& s, const WeightMap& map, const Setup& u, const RecurrentInputs& in,
          float* space) {
  check(cudaMemsetAsync(space, 0, u.weight_bytes, stream), "cudaMemsetAsync (recurrent weights)");
  const std::int64_t gates = s.gates(), H = s.hidden;
  for (std::int64_t d = 0; d < s.directions(); ++d) {
    for (std::int64_t g = 0; g < gates; ++g) {
      const Slot& wi = map.input[sz(d * gates + g)];
      const Slot& ri = map.recurrent[sz(d * gates + g)];
      copy(stream, space + wi.matrix, in.w + (d * gates + g) * H * s.input, H * s.input);
      copy(stream, space + ri.matrix, in.r + (d * gates + g) * H * H, H * H);
      if (in.b != nullptr) {
        const float* wb = in.b + d * 2 * gates * H;
        copy(stream, space + wi.bias, wb + g * H, H);
        copy(stream, space + ri.bias, wb + (gates + g) * H, H);
      }
    }
  }
}

// cuDNN's weight gradient back into ONNX's dW, dR and dB (those wanted).
void unpack(cudaStream_t stream, const RecurrentShape& s, const WeightMap& map, const float* space,
            const RecurrentInputGradients& d_in) {
  const std::int64_t gates = s.gates(), H = s.hidden;
  for (std::int64_t d = 0; d < s.directions(); ++d) {
    for (std::int64_t g = 0; g < gates; ++g) {
      const Slot& wi = map.input[sz(d * gates + g)];
      const Slot& ri = map.recurrent[sz(d * gates + g)];
      if (d_in.dw != nullptr) {
        copy(stream, d_in.dw + (d * gates + g) * H * s.input, space + wi.matrix, H * s.input);
      }
      if (d_in.dr != nullptr) {
        copy(stream, d_in.dr + (d * gates + g) * H * H, space + ri.matrix, H * H);
      }
      if (d_in.db != nullptr) {
        float* dwb = d_in.db + d * 2 * gates * H;
        copy(stream, dwb + g * H, space + wi.bias, H);
        copy(stream, dwb + (gates + g) * H, space + ri.bias, H);
      }
    }
  }
}

// What both passes set up: descriptors, the packed weights, the sequence lengths cuDNN reads on
// the device, and X as cuDNN reads it (time reversed for a reverse layer).
struct Layer {
  Setup u;
  SavedLayout saved;
  Scratch weights, lengths, reversed_x, work;
  WeightMap map;
  bool reverse = false;
  const float* x = nullptr;

  Layer(cudnnHandle_t dnn, cudaStream_t stream, const RecurrentShape& s, const RecurrentInputs& in)
      : u(setup(dnn, s)), saved(saved_layout(s, u)), weights(stream, floats_for(u.weight_bytes)),
        lengths(stream, sz(s.batch)), // int32 elements, as wide as floats
        reversed_x(stream, s.direction == RecurrentDirection::reverse ? sz(s.seq * s.batch * s.input) : 0),
        work(stream, floats_for(u.work_bytes)), map(weight_map(dnn, u, s, weights.get())),
        reverse(s.direction == RecurrentDirection::reverse) {
    pack(stream, s, map, u, in, weights.get());
    fill(stream, s.batch, static_cast<std::int32_t>(s.seq), seq_lengths());
    x = in.x;
    if (reverse) {
      sequence_transpose(stream, s.seq, s.batch, 1, s.input, true, in.x, reversed_x.get());
      x = reversed_x.get();
    }
  }
  std::int32_t* seq_lengths() const { return reinterpret_cast<std::int32_t*>(lengths.get()); }
};

} // namespace

void recurrent_forward(cudnnHandle_t dnn, cudaStream_t stream, const RecurrentShape& s, const RecurrentInputs& in,
                       const RecurrentOutputs& out, Floats& saved) {
  check_inputs(s, in);
  const Layer layer(dnn, stream, s, in);
  const Setup& u = layer.u;
  if (saved.size() != static_cast<std::size_t>(layer.saved.total)) {
    saved = Floats(static_cast<std::size_t>(layer.saved.total)); // zeroed, in device memory
  }
  float* y = saved.data() + layer.saved.y;
  const bool lstm = s.cell == Cell::lstm;
  check(cudnnRNNForward(dnn, u.rnn.get(), CUDNN_FWD_MODE_TRAINING, layer.seq_lengths(), u.x.get(), layer.x, u.y.get(),
                        y, u.h.get(), in.initial_h, out.y_h, u.h.get(), lstm ? in.initial_c : nullptr,
                        lstm ? out.y_c : nullptr, u.weight_bytes, layer.weights.get(), u.work_bytes, layer.work.get(),
                        u.reserve_bytes, saved.data()),
        "cudnnRNNForward");
  if (out.y != nullptr) { // [seq, batch, dirs, hidden] -> [seq, dirs, batch, hidden], in ONNX's time order
    sequence_transpose(stream, s.seq, s.batch, s.directions(), s.hidden, layer.reverse, y, out.y);
  }
}

void recurrent_backward(cudnnHandle_t dnn, cudaStream_t stream, const RecurrentShape& s, const RecurrentInputs& in,
                        const Floats& saved, const RecurrentOutputGradients& d_out,
                        const RecurrentInputGradients& d_in) {
  check_inputs(s, in);
  const Layer layer(dnn, stream, s, in);
  const Setup& u = layer.u;
  if (saved.size() != layer.saved.total) {
    throw Error("recurrent backward without its forward pass (nothing saved, or saved for other extents)");
  }
  const float* y = saved.data() + layer.saved.y;
  // The backward data pass writes into the reserve space (the weight pass reads what it left): a
  // copy keeps `saved` as the forward pass left it.
  const Scratch reserve(stream, floats_for(u.reserve_bytes));
  check(cudaMemcpyAsync(reserve.get(), saved.data(), u.reserve_bytes, cudaMemcpyDefault, stream),
        "cudaMemcpyAsync (reserve space)");

  // dY in cuDNN's layout and time order; zeros when not given.
  const std::int64_t y_floats = s.seq * s.batch * s.directions() * s.hidden;
  const Scratch dy(stream, sz(y_floats));
  if (d_out.dy != nullptr) {
    sequence_transpose(stream, s.seq, s.directions(), s.batch, s.hidden, layer.reverse, d_out.dy, dy.get());
  } else {
    check(cudaMemsetAsync(dy.get(), 0, sz(y_floats) * sizeof(float), stream), "cudaMemsetAsync (dy)");
  }
  // cuDNN always writes dX: into the caller's buffer when it is in ONNX's time order, else scratch.
  const bool dx_direct = d_in.dx != nullptr && !layer.reverse;
  const Scratch dx_scratch(stream, dx_direct ? 0 : sz(s.seq * s.batch * s.input));
  float* dx = dx_direct ? d_in.dx : dx_scratch.get();
  const bool lstm = s.cell == Cell::lstm;
  check(cudnnRNNBackwardData_v8(dnn, u.rnn.get(), layer.seq_lengths(), u.y.get(), y, dy.get(), u.x.get(), dx, u.h.get(),
                                in.initial_h, d_out.dy_h, d_in.d_initial_h, u.h.get(), lstm ? in.initial_c : nullptr,
                                lstm ? d_out.dy_c : nullptr, lstm ? d_in.d_initial_c : nullptr, u.weight_bytes,
                                layer.weights.get(), u.work_bytes, layer.work.get(), u.reserve_bytes, reserve.get()),
        "cudnnRNNBackwardData_v8");
  if (d_in.dx != nullptr && layer.reverse) {
    sequence_transpose(stream, s.seq, s.batch, 1, s.input, true, dx, d_in.dx);
  }

  if (d_in.dw == nullptr && d_in.dr == nullptr && d_in.db == nullptr) {
    return;
  }
  // cuDNN adds the weight gradient to what the buffer holds (the mode it supports throughout).
  const Scratch dweights(stream, floats_for(u.weight_bytes));
  check(cudaMemsetAsync(dweights.get(), 0, u.weight_bytes, stream), "cudaMemsetAsync (weight gradient)");
  check(cudnnRNNBackwardWeights_v8(dnn, u.rnn.get(), CUDNN_WGRAD_MODE_ADD, layer.seq_lengths(), u.x.get(), layer.x,
                                   u.h.get(), in.initial_h, u.y.get(), y, u.weight_bytes, dweights.get(), u.work_bytes,
                                   layer.work.get(), u.reserve_bytes, reserve.get()),
        "cudnnRNNBackwardWeights_v8");
  // Same layout as the weight space: the map of the packed weights, offsets from the start.
  unpack(stream, s, layer.map, dweights.get(), d_in);
}

} // namespace partita::runtime::cuda
