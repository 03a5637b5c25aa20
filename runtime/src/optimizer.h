#pragma once

// The plan's optimizer (TrainingSetup::optimizer: SGD, SGD with momentum, Adam) as partita-run
// steps it: the hyper-parameters, the state kept per weight shard (or per ZeRO slice of it), and
// the one step every executor calls, each a fused element-wise kernel of the backend.

#include "backend.h"
#include "tensor_memory.h"

#include "partita/cost/setup.h"

#include <cstdint>

namespace partita::runtime {

struct OptimizerSettings {
  cost::Optimizer kind = cost::Optimizer::sgd;
  float learning_rate = 0.01F; // SGD and momentum; Adam's is adam.learning_rate
  float momentum = 0.9F;
  AdamParameters adam;
};

// The hyper-parameters of `kind`, defaults kept here and only here (TrainingSetup has no fields for
// them): SGD and momentum at learning rate 0.01, momentum 0.9; Adam at 1e-3, betas 0.9 and 0.999,
// epsilon 1e-8.
OptimizerSettings default_optimizer_settings(cost::Optimizer kind);

// How the executors train: the optimizer, the ZeRO stage (0: none; 1: optimizer state sharded
// over a weight's data-parallel replicas; 2: gradients too; 3: parameters too; executor.h) and the
// arithmetic of matrix products and convolutions (backend.h: fp32, or mixed precision).
struct Training {
  OptimizerSettings optimizer;
  int zero_stage = 0;
  Rounding matrix = Rounding::none;
  // Sequence parallelism: partial sums whose reader keeps slices of them, and input gradients
  // whose producer does, are reduce-scattered (strategy::output_reduce_scatters); otherwise they
  // are all-reduced, as the cost model prices the plan.
  bool sequence_parallel = false;
};
// Throws partita::Error for a precision partita-run has no kernels for (fp8).
Training training_of(const cost::TrainingSetup& setup);
// The rounding of a plan's precision: fp32 none, tf32/fp16/bf16 theirs; throws for fp8.
Rounding rounding_of(cluster::Precision p);

// A weight's optimizer state over n elements, from tensor_memory(): momentum's velocity (first),
// Adam's m and v (first, second); nothing for SGD. Zero-initialized.
struct OptimizerState {
  Floats first, second;
  double bytes() const { return static_cast<double>((first.size() + second.size()) * sizeof(float)); }
};
OptimizerState make_optimizer_state(const OptimizerSettings& settings, std::int64_t n);

// One step of n weights with their gradient; `step` counts from 1 (Adam's bias correction).
void optimizer_step(Backend& backend, const OptimizerSettings& settings, int step, std::int64_t n,
                    const float* gradient, float* weights, OptimizerState& state);

} // namespace partita::runtime
