#pragma once

// The CUDA backend's recurrent layers (Backend::recurrent_forward / recurrent_backward) on cuDNN
// 9's RNN API: LSTM, linear-before-reset GRU and tanh / ReLU RNN cells. Everything is queued on
// `stream`, which `dnn` is bound to.

#include "backend.h"

#include <cuda_runtime.h>
#include <cudnn.h>

namespace partita::runtime::cuda {

void recurrent_forward(cudnnHandle_t dnn, cudaStream_t stream, const RecurrentShape& s, const RecurrentInputs& in,
                       const RecurrentOutputs& out, Floats& saved);
void recurrent_backward(cudnnHandle_t dnn, cudaStream_t stream, const RecurrentShape& s, const RecurrentInputs& in,
                        const Floats& saved, const RecurrentOutputGradients& d_out,
                        const RecurrentInputGradients& d_in);

} // namespace partita::runtime::cuda
