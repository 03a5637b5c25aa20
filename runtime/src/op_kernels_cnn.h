#pragma once

// The convolutional ops of op_kernels.h: Conv, MaxPool, AveragePool, GlobalAveragePool,
// GlobalMaxPool and BatchNormalization (training mode, statistics synchronized over a split
// batch or spatial dim).

#include "op_kernels.h"

#include <string>

namespace partita::runtime::cnn {

bool handles(const std::string& type);
std::string missing_kernel(const graph::Graph& g, graph::OpId id);
sharding::Block window_input_region(const graph::Graph& g, graph::OpId id, const sharding::Block& x_block,
                                    const sharding::Block& y_block);
void forward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buffers);
void backward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buffers,
              const std::vector<const Shard*>& d_outputs, const std::vector<Shard*>& d_inputs);

} // namespace partita::runtime::cnn
