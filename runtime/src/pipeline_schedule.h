#pragma once

// The order in which one pipeline stage runs its micro-batches' forward and backward passes:
// core's strategy::pipeline_program, the one the simulator replays.

#include "partita/strategy/strategy.h"

#include <vector>

namespace partita::runtime {

using strategy::PipelineStep;

// GPipe or 1F1B (one chunk per stage) for stage `stage` of `stages`.
std::vector<PipelineStep> schedule(strategy::Schedule kind, int stage, int stages, int micro_batches);

} // namespace partita::runtime
