#include "pipeline_schedule.h"

#include <algorithm>

namespace partita::runtime {

std::vector<PipelineStep> schedule(strategy::Schedule kind, int stage, int stages, int micro_batches) {
  std::vector<PipelineStep> out;
  if (kind == strategy::Schedule::gpipe) {
    for (int j = 0; j < micro_batches; ++j) {
      out.push_back({true, j});
    }
    for (int j = 0; j < micro_batches; ++j) {
      out.push_back({false, j});
    }
    return out;
  }
  const int warmup = std::min(stages - stage - 1, micro_batches);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) {
    out.push_back({true, next_forward});
  }
  while (next_forward < micro_batches) {
    out.push_back({true, next_forward++});
    out.push_back({false, next_backward++});
  }
  while (next_backward < micro_batches) {
    out.push_back({false, next_backward++});
  }
  return out;
}

} // namespace partita::runtime
