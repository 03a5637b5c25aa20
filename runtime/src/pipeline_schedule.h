#pragma once

// The order in which one pipeline stage runs its micro-batches' forward and backward passes.

#include "partita/strategy/strategy.h"

#include <vector>

namespace partita::runtime {

// One micro-batch's step on one stage, in execution order.
struct PipelineStep {
  bool forward = true;
  int micro_batch = 0;
  friend bool operator==(const PipelineStep&, const PipelineStep&) = default;
};
// GPipe: every forward, then every backward. 1F1B (PipeDream-Flush): min(stages - stage - 1,
// micro-batches) forwards to warm up, then one forward and one backward in turn, then the
// remaining backwards: at most stages - stage micro-batches in flight, as evaluate() assumes.
std::vector<PipelineStep> schedule(strategy::Schedule kind, int stage, int stages, int micro_batches);

} // namespace partita::runtime
