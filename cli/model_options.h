#pragma once

// Options shared by the commands that read a model, a cluster and a training set-up.

#include "partita/cluster/cluster.h"
#include "partita/cost/setup.h"
#include "partita/onnx/import.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

namespace partita::cli {

struct ModelOptions {
  std::string model;
  std::vector<std::string> dims;
  int batch = 0; // 0: as the model says

  void add_to(CLI::App& cmd);
  // The model with --batch applied (a zoo spec's batch parameter, or the symbolic dim "batch").
  onnx_import::ImportResult load() const;
};

struct SetupOptions {
  std::string cluster = "dgx-a100";
  std::string precision = "fp32";
  std::string optimizer = "adam";
  int zero = 0;
  std::string recompute = "none";
  int tensor_parallel = 0;

  void add_to(CLI::App& cmd);
  cost::TrainingSetup setup() const;
};

onnx_import::ImportOptions parse_dims(const std::vector<std::string>& dims);

} // namespace partita::cli
