#pragma once

// How the model is trained, as far as cost and memory depend on it.

#include "partita/cluster/cluster.h"

#include <string_view>

namespace partita::cost {

enum class Optimizer : std::uint8_t { sgd, momentum, adam };
std::string_view optimizer_name(Optimizer o);

enum class Recompute : std::uint8_t {
  none,      // every output a backward pass reads is kept
  selective, // the attention core (scores, softmax, dropout) is recomputed (Korthikanti et al. 2022)
  full,      // only the tensors that cut the graph (a layer's inputs) are kept; the rest is recomputed
};
std::string_view recompute_name(Recompute r);

struct TrainingSetup {
  // Arithmetic of matrix products and convolutions. fp16/bf16 means mixed precision: fp16/bf16
  // weights, activations and gradients, with fp32 master weights in the optimizer.
  cluster::Precision precision = cluster::Precision::fp32;
  Optimizer optimizer = Optimizer::adam;
  int zero_stage = 0; // 0: none; 1: optimizer state sharded; 2: + gradients; 3: + parameters
  Recompute recompute = Recompute::none;
  // Mixed precision only: gradients accumulated, stored and reduced in fp32 beside the 2-byte
  // weights (Megatron-LM's main_grad buffers, its default under bf16:
  // --accumulate-allreduce-grads-in-fp32), 4 bytes per value instead of 2.
  bool fp32_gradients = false;
  // Megatron-LM's sequence parallelism (Korthikanti et al. 2022): a partial sum (or a replicated
  // input's gradient) whose single reader keeps only a distinct slice of it on each device of the
  // group is reduce-scattered, not all-reduced (strategy::evaluate). The megatron family then
  // splits LayerNorm, dropout and the residual adds along the sequence inside the group.
  bool sequence_parallel = false;

  bool mixed() const { return precision == cluster::Precision::fp16 || precision == cluster::Precision::bf16; }
  // Bytes per element of weights, activations and gradients as stored.
  double value_bytes() const { return mixed() ? 2.0 : 4.0; }
  // Bytes per element of weight gradients as stored and reduced.
  double gradient_bytes() const { return mixed() && !fp32_gradients ? 2.0 : 4.0; }
  // Optimizer bytes per parameter: state (momentum 4, Adam 8) plus fp32 master weights when mixed.
  double optimizer_bytes() const;
  // Bytes one optimizer step moves per parameter: it reads the weight and its gradient and writes
  // the weight (SGD), and reads and writes its state (momentum 4, Adam 8) in fp32.
  double optimizer_step_bytes() const;
};

} // namespace partita::cost
