#pragma once

// The CPU backend's recurrent layers (Backend::recurrent_forward / recurrent_backward) on oneDNN
// 2.x's LSTM, GRU, linear-before-reset GRU and vanilla RNN primitives.

#include "backend.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <vector>

namespace partita::runtime::cpu {

void recurrent_forward(const dnnl::engine& engine, dnnl::stream& stream, const RecurrentShape& s,
                       const RecurrentInputs& in, const RecurrentOutputs& out, Floats& saved);
void recurrent_backward(const dnnl::engine& engine, dnnl::stream& stream, const RecurrentShape& s,
                        const RecurrentInputs& in, const Floats& saved, const RecurrentOutputGradients& d_out,
                        const RecurrentInputGradients& d_in);

} // namespace partita::runtime::cpu
