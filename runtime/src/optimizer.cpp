#include "optimizer.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

namespace partita::runtime {

OptimizerSettings default_optimizer_settings(cost::Optimizer kind) {
  OptimizerSettings s;
  s.kind = kind;
  s.learning_rate = 0.01F;
  s.momentum = 0.9F;
  s.adam = AdamParameters{1e-3F, 0.9F, 0.999F, 1e-8F};
  return s;
}

Rounding rounding_of(cluster::Precision p) {
  switch (p) {
  case cluster::Precision::fp32: return Rounding::none;
  case cluster::Precision::tf32: return Rounding::tf32;
  case cluster::Precision::fp16: return Rounding::fp16;
  case cluster::Precision::bf16: return Rounding::bf16;
  case cluster::Precision::fp8: break;
  }
  throw Error(fmt::format("precision {}: partita-run has no {} kernels (fp32, tf32, fp16 and bf16 run)",
                          cluster::precision_name(p), cluster::precision_name(p)));
}

Training training_of(const cost::TrainingSetup& setup) {
  return {default_optimizer_settings(setup.optimizer), setup.zero_stage, rounding_of(setup.precision),
          setup.sequence_parallel};
}

OptimizerState make_optimizer_state(const OptimizerSettings& settings, std::int64_t n) {
  OptimizerState state;
  const auto size = static_cast<std::size_t>(n);
  switch (settings.kind) {
  case cost::Optimizer::sgd: break;
  case cost::Optimizer::momentum: state.first = Floats(size); break; // zeroed
  case cost::Optimizer::adam:
    state.first = Floats(size);
    state.second = Floats(size);
    break;
  }
  return state;
}

void optimizer_step(Backend& backend, const OptimizerSettings& settings, int step, std::int64_t n,
                    const float* gradient, float* weights, OptimizerState& state) {
  const auto needs = [&](const Floats& buffer, const char* what) {
    if (static_cast<std::int64_t>(buffer.size()) != n) {
      throw Error(fmt::format("{} optimizer: {} holds {} values for {} weights", cost::optimizer_name(settings.kind),
                              what, buffer.size(), n));
    }
  };
  switch (settings.kind) {
  case cost::Optimizer::sgd: backend.sgd_update(n, settings.learning_rate, gradient, weights); return;
  case cost::Optimizer::momentum:
    needs(state.first, "the velocity");
    backend.momentum_update(n, settings.learning_rate, settings.momentum, gradient, state.first.data(), weights);
    return;
  case cost::Optimizer::adam:
    needs(state.first, "m");
    needs(state.second, "v");
    backend.adam_update(n, settings.adam, step, gradient, state.first.data(), state.second.data(), weights);
    return;
  }
}

} // namespace partita::runtime
