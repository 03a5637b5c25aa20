#pragma once

// The recurrent ops of op_kernels.h: ONNX LSTM, GRU and RNN in training mode, on the backend's
// recurrent kernels. A shard holds a part of the batch and one or both directions (core's
// description splits b and d; time, gates and hidden units stay whole): a rank holding the
// second direction of a bidirectional layer runs it as a reverse layer.

#include "op_kernels.h"

#include <string>

namespace partita::runtime::rnn {

bool handles(const std::string& type);
std::string missing_kernel(const graph::Graph& g, graph::OpId id);
void forward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buffers);
void backward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buffers,
              const std::vector<const Shard*>& d_outputs, const std::vector<Shard*>& d_inputs);

} // namespace partita::runtime::rnn
