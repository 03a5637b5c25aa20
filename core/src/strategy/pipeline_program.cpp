// The programs of pipeline schedules: which micro-batch's forward or backward pass each stage runs
// next. One definition for the simulator, partita-run and the memory they hold.

#include "partita/graph/error.h"
#include "partita/strategy/strategy.h"

#include <fmt/format.h>

#include <algorithm>

namespace partita::strategy {

namespace {

void check_pipeline(const Pipeline& p, int stage) {
  check_schedule(p);
  if (stage < 0 || stage >= p.stages) {
    throw Error(fmt::format("pipeline: there is no stage {} of {}", stage, p.stages));
  }
}

} // namespace

void check_schedule(const Pipeline& p) {
  if (p.stages < 1 || p.micro_batches < 1 || p.chunks < 1) {
    throw Error(fmt::format("pipeline: {} stages, {} micro-batches and {} chunks per stage; each must be at least 1",
                            p.stages, p.micro_batches, p.chunks));
  }
  if (p.chunks > 1 && p.schedule != Schedule::interleaved) {
    throw Error(fmt::format("pipeline: {} chunks per stage need the interleaved schedule, not {}", p.chunks,
                            schedule_name(p.schedule)));
  }
  if (p.schedule == Schedule::interleaved && p.chunks < 2) {
    throw Error("pipeline: the interleaved schedule needs at least 2 chunks per stage (with one, it is 1f1b)");
  }
  if (p.schedule == Schedule::interleaved && p.micro_batches % p.stages != 0) {
    throw Error(fmt::format("pipeline: the interleaved schedule runs micro-batches in groups of the {} stages; {} "
                            "micro-batches are not a multiple of {}",
                            p.stages, p.micro_batches, p.stages));
  }
}

namespace {

// Megatron-LM's warm-up forwards of a stage under the interleaved schedule, at most all of them.
int interleaved_warmup(const Pipeline& p, int stage) {
  const int total = p.micro_batches * p.chunks;
  return std::min((p.stages - stage - 1) * 2 + (p.chunks - 1) * p.stages, total);
}

} // namespace

std::vector<PipelineStep> pipeline_program(const Pipeline& p, int stage) {
  check_pipeline(p, stage);
  const int micro = p.micro_batches;
  std::vector<PipelineStep> out;
  if (p.schedule == Schedule::gpipe) {
    for (int j = 0; j < micro; ++j) {
      out.push_back({true, j, 0});
    }
    for (int j = 0; j < micro; ++j) {
      out.push_back({false, j, 0});
    }
    return out;
  }
  if (p.schedule == Schedule::one_f_one_b) {
    const int warmup = std::min(p.stages - stage - 1, micro);
    int next_forward = 0, next_backward = 0;
    for (; next_forward < warmup; ++next_forward) {
      out.push_back({true, next_forward, 0});
    }
    while (next_forward < micro) {
      out.push_back({true, next_forward++, 0});
      out.push_back({false, next_backward++, 0});
    }
    while (next_backward < micro) {
      out.push_back({false, next_backward++, 0});
    }
    return out;
  }
  // Interleaved: the k-th forward of a stage is micro-batch (k / (stages V)) stages + k % stages
  // through chunk (k / stages) % V; the k-th backward the same micro-batch through chunk
  // V - 1 - (k / stages) % V.
  const int v = p.chunks, group = p.stages;
  const int total = micro * v;
  auto step = [&](int k, bool forward) {
    const int chunk = (k / group) % v;
    return PipelineStep{forward, (k / (group * v)) * group + k % group, forward ? chunk : v - 1 - chunk};
  };
  const int warmup = interleaved_warmup(p, stage);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) {
    out.push_back(step(next_forward, true));
  }
  while (next_forward < total) {
    out.push_back(step(next_forward++, true));
    out.push_back(step(next_backward++, false));
  }
  while (next_backward < total) {
    out.push_back(step(next_backward++, false));
  }
  return out;
}

double micro_batches_in_flight(const Pipeline& p, int stage) {
  check_pipeline(p, stage);
  switch (p.schedule) {
  case Schedule::gpipe: return p.micro_batches;
  case Schedule::one_f_one_b: return std::min(p.stages - stage, p.micro_batches);
  case Schedule::interleaved:
    return std::min<double>(static_cast<double>(interleaved_warmup(p, stage) + 1) / p.chunks, p.micro_batches);
  }
  return p.micro_batches;
}

} // namespace partita::strategy
