#pragma once

// Reading a plan on every rank and checking, before anything starts, that it can run here: the
// model it names loads, the plan matches it (strategy::from_plan), its devices are this job's
// ranks, and it uses nothing partita-run does not execute yet.

#include "partita/cost/setup.h"
#include "partita/onnx/import.h"
#include "partita/strategy/strategy.h"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace partita::runtime {

struct LoadedPlan {
  std::string model; // the spec or path the plan names
  std::string family;
  int devices = 0;
  onnx_import::ImportResult imported;
  strategy::Strategy strategy;
  cost::TrainingSetup setup;
  double predicted_iteration_seconds = 0;
  std::vector<std::string> notes; // what runs differently from the plan's setup (fp32, no recomputation)
  // Float Constant values by tensor name (the graph keeps only integer contents).
  std::map<std::string, std::vector<float>, std::less<>> constants;
  // A pipeline with several micro-batches: the model at the micro-batch size (a zoo model built
  // again with batch / micro-batches) and its constants; the strategy fits both.
  std::optional<onnx_import::ImportResult> micro;
  std::map<std::string, std::vector<float>, std::less<>> micro_constants;
  bool pipelined() const { return strategy.pipeline && strategy.pipeline->stages > 1; }
};

// Throws partita::Error naming the file and the reason.
LoadedPlan load_plan(const std::filesystem::path& path, int ranks);

// The same model on one device, every op unsplit: the reference of --verify.
strategy::Strategy single_device(const graph::Graph& g);

} // namespace partita::runtime
