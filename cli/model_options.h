#pragma once

// Options shared by the commands that read a model, a cluster and a training set-up.

#include "partita/cluster/cluster.h"
#include "partita/cost/setup.h"
#include "partita/onnx/import.h"
#include "partita/proto/partita.pb.h"
#include "partita/search/auto_search.h"
#include "partita/search/optimizer.h"
#include "partita/search/three_d.h"
#include "partita/sim/simulate.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace partita::cli {

struct ModelOptions {
  std::string model;
  std::vector<std::string> dims;
  std::vector<std::string> values; // --value INPUT=VALUE
  int batch = 0;                   // 0: as the model says

  void add_to(CLI::App& cmd);
  // The model with --batch applied (a zoo spec's batch parameter, or the symbolic dim "batch").
  onnx_import::ImportResult load() const;
  // The symbolic dimension values load() uses (--dim, and --batch for a file's 'batch').
  onnx_import::ImportOptions import_options() const;
  // The model as a plan file names it: a zoo spec with --batch applied, or the file path.
  std::string spec() const;
  // Throws partita::Error where `output` (the file an option writes) could not be written, or is
  // the model file itself (which writing it would replace): checked before anything is planned.
  void check_output(const std::string& output, std::string_view option) const;
};

struct SetupOptions {
  std::string cluster = "dgx-a100";
  std::string precision = "fp32";
  std::string optimizer = "adam";
  int zero = 0;
  bool distributed_optimizer = false; // Megatron-LM's: ZeRO-1 over the data-parallel replicas
  bool fp32_gradients = false;
  bool sequence_parallel = false;
  std::string recompute = "none";
  int tensor_parallel = 0;
  int stages = 0;
  int micro_batches = 0;
  std::string schedule = "1f1b";
  int chunks = 0; // interleaved schedule: model chunks per stage (0: the default, 2)
  std::string balance = "time";
  std::string stage_layout;
  std::vector<int> cuts;
  std::string plan; // a plan file: the "given" strategy
  // auto: all divisors as split factors, the smallest piece of a split dim, memory limit in GiB.
  bool all_divisors = false;
  std::int64_t min_piece = 1;
  double memory_limit_gib = 0;
  double search_limit = search::Request{}.max_search_work;
  double bounded_tables = search::Request{}.bounded_table_entries;
  int search_threads = search::Request{}.threads;
  std::int64_t simulation_budget = static_cast<std::int64_t>(search::Request{}.simulation_budget);
  int pipeline_parallel = 0;
  int micro_batch_size = 0;
  // Whether the user gave these (the 3d family holds what was given and searches the rest).
  CLI::Option* zero_option = nullptr;
  CLI::Option* distributed_optimizer_option = nullptr;
  CLI::Option* recompute_option = nullptr;
  CLI::Option* sequence_parallel_option = nullptr;
  CLI::Option* schedule_option = nullptr;
  CLI::App* command = nullptr; // where add_to added them

  CLI::Option* strategy_option = nullptr; // the command's --strategy, where it has one

  void add_to(CLI::App& cmd);
  // Throws partita::Error naming the first option typed that none of `families` reads
  // (search::Optimizer::options) and the families that do; `asked` names how they were chosen
  // ("--strategy dp").
  void check_read_by(const std::vector<std::string>& families, const std::string& asked) const;
  cost::TrainingSetup setup() const;
  // Everything but the model, cluster and device count.
  void fill(search::Request& request) const;
};

onnx_import::ImportOptions parse_dims(const std::vector<std::string>& dims);

// The cluster of --cluster with at least `devices` devices: a preset grows by whole nodes; a file
// or a preset with ?nodes= must already hold them (else partita::Error).
cluster::Cluster cluster_for(const std::string& spec, int devices);

// A family's strategy for a model on `devices` devices of a cluster, its prediction and the plan
// file (what `partita plan` prints and writes, and `partita run` executes).
struct Planned {
  strategy::Strategy strategy;
  std::optional<search::AutoResult> search;       // the auto family's search, with its runner-ups
  std::optional<search::three_d::Result> three_d; // the 3d family's search, with its Pareto front
  strategy::Prediction prediction;                // its iteration simulated when make_plan was given simulation options
  proto::Plan plan;
};
// With `simulation`, the prediction's iteration is the simulator's (sim::simulate_prediction);
// without, the terms added up.
Planned make_plan(const graph::Graph& g, const cluster::Cluster& cluster, int devices, const SetupOptions& setup,
                  const std::string& family, const ModelOptions& model,
                  const std::optional<sim::Options>& simulation = sim::Options{});

} // namespace partita::cli
