#pragma once

// What the GUI shows is computed here, by calling the core exactly as the CLI does: load the
// model, the cluster, run one strategy family and evaluate its strategy. The result is an
// immutable value that the Qt models read; nothing here is a cost formula.

#include "partita/cluster/cluster.h"
#include "partita/cost/setup.h"
#include "partita/graph/op_semantics.h"
#include "partita/graph/summary.h"
#include "partita/onnx/import.h"
#include "partita/search/auto_search.h"
#include "partita/search/optimizer.h"
#include "partita/search/sweep.h"
#include "partita/search/three_d.h"
#include "partita/sim/simulate.h"
#include "partita/strategy/strategy.h"

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace partita::proto {
class Cluster;
class TrainingSetup;
} // namespace partita::proto

namespace partita::gui {

// Everything the side panel chooses.
struct AnalysisInput {
  std::string model = "zoo:resnet50?batch=32"; // "zoo:NAME?a=1&b=2" or an ONNX file path
  std::string dims;                            // ONNX files: symbolic dimensions "batch=32&seq=128"
  std::string values; // ONNX files: inputs that are settings (the CLI's --value), "sr=16000 use_cache_branch=false"
  std::string cluster = "dgx-a100"; // preset or file; an edited cluster's name
  // An edited cluster (the cluster editor): partita.proto's Cluster as JSON (io::to_json), used
  // instead of `cluster` when not empty. Its node count is its own.
  std::string custom_cluster;
  int nodes = 1;
  int devices = 8;
  std::string family = "auto";
  std::string precision = "fp32";
  std::string optimizer = "adam";
  int zero_stage = 0;
  std::string recompute = "none";
  bool sequence_parallel = false; // Megatron-LM's (--sequence-parallel)
  bool fp32_gradients = false;    // mixed precision: gradients kept and reduced in fp32
  // Parallelism the families read, as the CLI's options (0: the family's default): the
  // tensor-parallel width (--tp), pipeline stages (--stages; megatron's --pp), micro-batches,
  // the schedule (gpipe, 1f1b, interleaved) and the interleaved schedule's chunks per stage, and
  // how the pipeline family cuts its stages (--balance: time, layers, speed, even; megatron reads
  // speed alone).
  int tensor_parallel = 0;
  int stages = 0;
  int micro_batches = 0;
  std::string schedule = "1f1b";
  int chunks = 2;
  std::string balance = "time";
  std::string stage_layout; // pipeline: "" (data parallel, or Megatron's with --tp), "searched" or "auto"

  bool operator==(const AnalysisInput&) const = default;
};

// Whether two inputs import the same graph (model, dimension values, input values).
inline bool same_model(const AnalysisInput& a, const AnalysisInput& b) {
  return a.model == b.model && a.dims == b.dims && a.values == b.values;
}

// The import options of an input's model: its dimension values and input values, refused with
// the field named.
onnx_import::ImportOptions input_import_options(const AnalysisInput& input);

// One row of the layer table: one op, in topological order.
struct LayerResult {
  graph::OpId op = -1;
  std::string type;
  std::string name;
  std::string output_shape;
  std::string configuration; // sharding::to_string, with " x<n> copies"
  // Plans with a pipeline: the stage whose devices run the op (0-based), and under the
  // interleaved schedule its model chunk on that stage; -1 without a pipeline.
  int stage = -1;
  int chunk = -1;
  double compute = 0;       // seconds
  double communication = 0; // intra-op communication and gradient sync, without redistribution
  double redistribution = 0;
  double time = 0;
  double memory = 0; // bytes per device
  double share = 0;  // of the iteration time
  // The auto family only: the best other configuration of this op (every other op as chosen) and
  // how much the iteration grows with it; empty when the op had one configuration.
  std::string runner_up;
  double runner_up_delta = 0;
  // The auto family only: configured otherwise than the closest hand-made family.
  bool differs_from_family = false;
};

// The predicted iteration as the event simulator runs it: sim::simulate with its default options
// (communication overlapped with compute).
struct SimulatedIteration {
  sim::TaskGraph tasks;
  sim::Result result;
};

// Larger iterations are not simulated (the prediction adds up its terms), as in `partita plan`.
inline constexpr std::size_t max_simulated_tasks = sim::max_predicted_tasks;

struct Analysis {
  AnalysisInput input;
  std::string model_label; // what the window shows as the model's name
  onnx_import::ImportResult model;
  cluster::Cluster cluster;
  cost::TrainingSetup setup;
  std::vector<graph::OpSemantics> semantics; // per op
  graph::ModelSummary summary;
  std::string family_title;
  strategy::Strategy strategy;
  strategy::Prediction prediction;
  std::vector<LayerResult> layers;
  // The auto family only: the search (runner-ups, optimality gap, its size) and how its plan
  // differs from the hand-made families.
  std::optional<search::AutoResult> search;
  std::optional<search::FamilyComparison> families;
  // The 3d family only: the search (the choice, the runner-up, the Pareto front of iteration time
  // against memory per device).
  std::optional<search::three_d::Result> three_d;
  // Absent when the iteration was not simulated; simulation_note then says why.
  std::optional<SimulatedIteration> simulation;
  std::string simulation_note;

  const LayerResult* layer_of(graph::OpId id) const;
};

// One family's result in a comparison.
struct FamilyResult {
  std::string family;
  std::string title;
  strategy::Prediction prediction;
  std::string error; // non-empty when the family could not apply
};

struct Comparison {
  AnalysisInput input;
  std::string model_label;
  std::vector<FamilyResult> families; // offered_families() order
};

// Every selected family at every device count (search::sweep, as `partita compare --devices`).
struct Sweep {
  AnalysisInput input;
  std::string model_label;
  std::string cluster_name;
  std::vector<int> devices;          // ascending
  std::vector<std::string> families; // in the order asked
  std::vector<std::string> titles;   // per family
  std::vector<search::SweepCell> cells;

  // nullptr when the family was not swept at that count.
  const search::SweepCell* cell(const std::string& family, int devices) const;
};

// The second configuration of the side-by-side view: the first with these replaced.
struct SideBySideChoice {
  std::string family = "dp";
  std::string cluster;        // preset or file; empty: the first configuration's cluster
  std::string custom_cluster; // an edited cluster (JSON), used instead of `cluster` when set
  int nodes = 1;
  int devices = 0; // 0: the first configuration's count

  bool operator==(const SideBySideChoice&) const = default;
};

struct SideBySide {
  std::shared_ptr<const Analysis> a, b; // same model, same op order
};

using ProgressFn = std::function<void(double)>;

// The families the GUI offers: search::optimizers() except those needing input the GUI does not
// collect yet ("given" reads a plan file).
std::vector<const search::Optimizer*> offered_families();

// The cluster of the input (edited, preset or file, with its node count); throws partita::Error
// when it has fewer devices than requested.
cluster::Cluster load_input_cluster(const AnalysisInput& input);
// The input's cluster as partita.proto's Cluster (what the cluster editor starts from), with the
// input's node count for a preset.
proto::Cluster input_cluster_proto(const AnalysisInput& input);
// The node count a preset needs for input.devices (at least input.nodes); input.nodes for files.
int nodes_for(const AnalysisInput& input);
// Throws partita::Error naming the field when the parallelism options cannot be used (a schedule
// other than gpipe, 1f1b or interleaved, chunks outside 2-1024, negative counts).
void check_parallelism(const AnalysisInput& input);
// The training set-up's fields as partita.proto's TrainingSetup (what sessions store), and checked.
proto::TrainingSetup input_setup_proto(const AnalysisInput& input);
cost::TrainingSetup input_setup(const AnalysisInput& input);
onnx_import::ImportResult load_input_model(const AnalysisInput& input);

// Throws partita::Error (partita::Cancelled when `cancel` is set).
std::shared_ptr<const Analysis> run_analysis(const AnalysisInput& input, const std::atomic<bool>* cancel = nullptr,
                                             const ProgressFn& progress = {});
std::shared_ptr<const Comparison> run_comparison(const AnalysisInput& input, const std::atomic<bool>* cancel = nullptr,
                                                 const ProgressFn& progress = {});

// 1, 2, 4, ... up to `max` (and `max` itself when it is not a power of two).
std::vector<int> default_sweep_devices(int max);
// "1,2,4, 8" -> {1, 2, 4, 8}, sorted and without repeats; throws partita::Error naming the bad item.
std::vector<int> parse_device_list(const std::string& text);
// `input` at each count of `devices` (a preset grows by nodes as the evaluation's does).
std::shared_ptr<const Sweep> run_sweep(const AnalysisInput& input, const std::vector<std::string>& families,
                                       const std::vector<int>& devices, const std::atomic<bool>* cancel = nullptr,
                                       const ProgressFn& progress = {});

AnalysisInput second_input(const AnalysisInput& first, const SideBySideChoice& choice);
std::shared_ptr<const SideBySide> run_side_by_side(const AnalysisInput& first, const SideBySideChoice& choice,
                                                   const std::atomic<bool>* cancel = nullptr,
                                                   const ProgressFn& progress = {});

} // namespace partita::gui
