#include "pipeline_schedule.h"

namespace partita::runtime {

std::vector<PipelineStep> schedule(strategy::Schedule kind, int stage, int stages, int micro_batches) {
  strategy::Pipeline p;
  p.stages = stages;
  p.micro_batches = micro_batches;
  p.schedule = kind;
  return strategy::pipeline_program(p, stage);
}

} // namespace partita::runtime
