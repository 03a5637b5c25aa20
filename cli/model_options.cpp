#include "model_options.h"
#include "validators.h"

#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "partita/strategy/plan_file.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace partita::cli {

onnx_import::ImportOptions parse_dims(const std::vector<std::string>& dims) {
  onnx_import::ImportOptions o;
  for (const auto& d : dims) {
    try {
      for (const auto& [name, value] : onnx_import::parse_dims(d).dims) {
        o.dims[name] = value;
      }
    } catch (const Error& e) {
      throw Error(fmt::format("--dim: {}", e.what()));
    }
  }
  return o;
}

void ModelOptions::add_to(CLI::App& cmd) {
  cmd.add_option("model", model, "an ONNX file, or a built-in model such as zoo:resnet50?batch=64")->required();
  cmd.add_option("--dim", dims,
                 "value of a dynamic dimension of the model's inputs: NAME=VALUE for a named one, INPUT:AXIS=VALUE "
                 "for any, e.g. X:0=8 (repeatable)");
  cmd.add_option("--value", values,
                 "contents of an integer or boolean input that is a setting, not data: INPUT=VALUE or "
                 "INPUT=[V1,V2,...], e.g. sr=16000 or use_cache_branch=false; what follows from it folds, and an If "
                 "on it is replaced by the branch it takes (repeatable)");
  cmd.add_option("--batch", batch,
                 "batch size (a zoo model's batch parameter; for a file, the dimension 'batch', else axis 0 of "
                 "every input where it is dynamic)")
      ->check(whole(1, std::int64_t{1} << 30, "samples"));
}

std::string ModelOptions::spec() const {
  if (batch > 0 && model.rfind("zoo:", 0) == 0) {
    return model + (model.find('?') == std::string::npos ? "?" : "&") + fmt::format("batch={}", batch);
  }
  return model;
}

onnx_import::ImportOptions ModelOptions::import_options() const {
  auto options = parse_dims(dims);
  for (const auto& v : values) {
    try {
      onnx_import::add_value(options, v);
    } catch (const Error& e) {
      throw Error(fmt::format("--value: {}", e.what()));
    }
  }
  if (!options.values.empty() && model.rfind("zoo:", 0) == 0) {
    throw Error("--value: a built-in model (zoo:) has no inputs to fix; --value is for ONNX files");
  }
  if (batch > 0 && model.rfind("zoo:", 0) != 0) {
    options.dims["batch"] = batch;
  }
  return options;
}

void ModelOptions::check_output(const std::string& output, std::string_view option) const {
  if (output.empty()) {
    return;
  }
  std::error_code ec;
  if (model.rfind("zoo:", 0) != 0 && std::filesystem::equivalent(model, output, ec) && !ec) {
    throw Error(fmt::format("{} {} is the model being read: writing it would replace the model; name another file",
                            option, output));
  }
  io::check_writable(output);
}

onnx_import::ImportResult ModelOptions::load() const {
  return zoo::load(spec(), import_options());
}

Planned make_plan(const graph::Graph& g, const cluster::Cluster& cluster, int devices, const SetupOptions& setup,
                  const std::string& family, const ModelOptions& model, const std::optional<sim::Options>& simulation) {
  // A plan file is evaluated as the 'given' strategy, whatever the command's default family.
  if (!setup.plan.empty() && family != "given" && setup.strategy_option != nullptr &&
      setup.strategy_option->count() > 0) {
    throw Error(fmt::format("--plan {} is evaluated as the 'given' strategy; --strategy {} asks for another: give "
                            "one of them",
                            setup.plan, family));
  }
  const std::string planned = setup.plan.empty() ? family : "given";
  search::find_optimizer(planned); // an unknown family is named before any of its options
  setup.check_read_by({planned}, setup.plan.empty() ? "--strategy " + family : "--plan (the 'given' strategy)");
  search::Request request;
  request.graph = &g;
  request.cluster = &cluster;
  request.devices = devices;
  setup.fill(request);
  Planned out;
  if (setup.plan.empty() && family == "auto") {
    out.search = search::auto_search(request);
    out.strategy = out.search->strategy;
  } else if (setup.plan.empty() && family == "3d") {
    out.strategy = search::three_d::optimize(request, &out.three_d.emplace());
  } else {
    out.strategy = search::find_optimizer(setup.plan.empty() ? family : "given").optimize(request);
  }
  out.prediction = strategy::evaluate(g, cluster, out.strategy, request.setup);
  if (simulation) {
    sim::simulate_prediction(g, cluster, out.strategy, out.prediction, *simulation);
  }
  out.plan = strategy::to_plan(g, cluster, out.strategy, out.prediction, request.setup, model.spec());
  const auto options = model.import_options();
  for (const auto& [name, value] : options.dims) {
    (*out.plan.mutable_dims())[name] = value;
  }
  for (const auto& [name, contents] : options.values) {
    out.plan.add_values(onnx_import::format_value(name, contents));
  }
  return out;
}

void SetupOptions::add_to(CLI::App& cmd) {
  cmd.add_option("--cluster", cluster,
                 "a cluster preset (dgx1, dgx-a100, dgx-h100, pcie-8gpu, localhost-cpu; "
                 "?nodes=N for more nodes) or a cluster JSON file")
      ->capture_default_str();
  cmd.add_option("--precision", precision,
                 "fp32, tf32, or mixed precision fp16, bf16 or fp8 (fp8 priced at the device's fp8 rate, or its "
                 "fp16 rate where it has none; partita-run computes fp32, tf32, fp16 and bf16)")
      ->capture_default_str();
  cmd.add_option("--optimizer", optimizer, "sgd, momentum or adam")->capture_default_str();
  zero_option = cmd.add_option("--zero", zero, "ZeRO stage 0-3 (3d: searched unless given)")->capture_default_str();
  recompute_option = cmd.add_option("--recompute", recompute, "none, selective or full (3d: searched unless given)")
                         ->capture_default_str();
  distributed_optimizer_option =
      cmd.add_flag("--distributed-optimizer", distributed_optimizer,
                   "Megatron-LM's distributed optimizer: fp32 master weights and optimizer state sharded over the "
                   "data-parallel replicas (ZeRO-1; the same as --zero 1)");
  sequence_parallel_option = cmd.add_flag(
      "--sequence-parallel", sequence_parallel,
      "Megatron-LM's sequence parallelism (Korthikanti et al. 2022): megatron splits LayerNorm, dropout and "
      "the residual adds along the sequence inside the tensor-parallel group, and a partial sum whose one "
      "reader keeps a slice on each device is reduce-scattered (its gradient too), not all-reduced");
  cmd.add_flag("--fp32-gradients", fp32_gradients,
               "mixed precision: weight gradients kept and reduced in fp32 (Megatron-LM's main_grad, its default "
               "under bf16: --accumulate-allreduce-grads-in-fp32)");
  cmd.add_option("--tp", tensor_parallel,
                 "tensor-parallel degree for megatron (default: devices per node), and inside the stages of pipeline "
                 "and bapipe (default: 1)");
  cmd.add_option("--stages", stages,
                 "pipeline stages (pipeline: 4 if they divide the devices, else 2; bapipe: searched)");
  cmd.add_option("--micro-batches", micro_batches,
                 "pipeline micro-batches (pipeline: 4 x stages, at most the batch per replica; bapipe: the most the "
                 "batch allows, and a count that does not divide it is refused; megatron: the batch's micro-batches, "
                 "gradient accumulation without --pp; 3d: held, a shape whose replica's batch it does not divide is "
                 "skipped)");
  cmd.add_option("--pp", pipeline_parallel,
                 "megatron: pipeline stages of contiguous layers (Megatron-LM's --pipeline-model-parallel-size), "
                 "1F1B")
      ->check(CLI::Range(1, 65536).description("an integer >= 1"));
  cmd.add_option("--micro-batch-size", micro_batch_size,
                 "megatron: samples per micro-batch on each data-parallel replica (gradient accumulation; a size "
                 "that does not divide the batch is refused)")
      ->check(CLI::Range(1, 1 << 30).description("an integer >= 1"));
  schedule_option =
      cmd.add_option("--schedule", schedule,
                     "pipeline schedule: gpipe, 1f1b, or interleaved (1F1B with model chunks per stage, Megatron-LM's "
                     "virtual pipeline; 3d: 1f1b and interleaved searched unless given)")
          ->capture_default_str();
  cmd.add_option("--chunks", chunks, "interleaved schedule: model chunks per pipeline stage (default 2)")
      ->check(whole(2, 1024, "chunks"));
  cmd.add_option(
         "--balance", balance,
         "pipeline family's cuts: time (balanced by each stage's time on its own devices and what it receives), "
         "layers (the repeated "
         "blocks shared out evenly, as Megatron-LM does), speed (the repeated blocks shared out by each stage's "
         "speed on a cluster of mixed nodes; megatron too) or even (by op count)")
      ->capture_default_str();
  cmd.add_option("--stage-layout", stage_layout,
                 "pipeline: how each stage splits its ops: searched (the per-layer search on one stage's devices, "
                 "every stage alike), auto (the searched layout or Megatron's stage layouts, whichever pipeline "
                 "simulates fastest); by default data parallel, or Megatron's layout with --tp")
      ->check(CLI::IsMember({"auto", "searched"}));
  cmd.add_option("--cuts", cuts, "pipeline cut points: op indices (in the plan's order) that start a stage")
      ->delimiter(',');
  cmd.add_option("--plan", plan, "a plan file (partita plan -o) to evaluate as the 'given' strategy");
  cmd.add_flag("--all-divisors", all_divisors, "auto: try every split factor, not only powers of two");
  cmd.add_option("--min-piece", min_piece, "auto: the fewest elements a split may leave of a dimension")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40).description("an integer >= 1"))
      ->capture_default_str();
  cmd.add_option("--search-limit", search_limit,
                 "auto: the largest search run (pairs of distinct layouts its tables price x devices); a larger one is "
                 "refused at once with its size")
      ->check(real(1, 1e18, "units of work"))
      ->capture_default_str();
  cmd.add_option("--bounded-tables", bounded_tables,
                 "auto: where the dependent sets are too wide to search exactly (a DenseNet's concatenations), "
                 "the bounded search's largest table in entries: larger, a tighter bound in more time; 0 refuses "
                 "such graphs")
      ->check(real(0, 6e7, "table entries"))
      ->capture_default_str();
  cmd.add_option("--search-threads", search_threads,
                 "auto: threads that price its layout pairs (0: one per hardware thread); the plan is the same "
                 "whatever the count")
      ->check(CLI::Range(0, 1024).description("an integer from 0 to 1024"))
      ->capture_default_str();
  cmd.add_option("--simulation-budget", simulation_budget,
                 "3d, bapipe, pipeline (--stage-layout auto): the most their final ranking simulates, in tasks plus "
                 "the NICs each transfer shares; "
                 "auto: any but 0 ranks its few candidates by simulation (0: rank by the terms added up)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 50).description("an integer >= 0"))
      ->capture_default_str();
  cmd.add_option("--memory-limit", memory_limit_gib,
                 "auto, bapipe, 3d, pipeline (--stage-layout auto): GiB per device the plan must fit in (default: the "
                 "cluster's device memory)")
      ->check(real(1e-6, 1e9, "GiB"));
  command = &cmd;
}

void SetupOptions::check_read_by(const std::vector<std::string>& families, const std::string& asked) const {
  if (command == nullptr) {
    return;
  }
  // The families' tables name options of this command: a name it lacks is a typo in a table,
  // which would let the option pass unread.
  for (const auto& family : search::optimizers()) {
    for (const auto name : family->options()) {
      if (command->get_option_no_throw(std::string(name)) == nullptr) {
        throw Error(fmt::format("internal: family {} reads {}, which '{}' does not define", family->name(), name,
                                command->get_name()));
      }
    }
  }
  for (const auto* option : command->get_options()) {
    const std::string name = option->get_name(false, true);
    if (option->count() == 0 || name.rfind("--", 0) != 0) {
      continue;
    }
    const auto readers = search::families_reading(name);
    bool read = false;
    for (const auto& f : families) {
      read = read || std::find(readers.begin(), readers.end(), f) != readers.end();
    }
    // Options no family reads are the model's, the cluster's and the setup's, read by all.
    if (!read && !readers.empty()) {
      std::string by(readers.front());
      for (std::size_t i = 1; i < readers.size(); ++i) {
        by += fmt::format("{}{}", i + 1 == readers.size() ? " and " : ", ", readers[i]);
      }
      throw Error(fmt::format("{} is not read by {}, only by {}: drop it, or choose {}", name, asked, by,
                              readers.size() == 1 ? "that family" : "one of those"));
    }
  }
}

void SetupOptions::fill(search::Request& request) const {
  request.setup = setup();
  request.tensor_parallel = tensor_parallel;
  request.stages = stages;
  request.micro_batches = micro_batches;
  request.pipeline_parallel = pipeline_parallel;
  request.micro_batch_size = micro_batch_size;
  if (schedule == "gpipe") {
    request.schedule = strategy::Schedule::gpipe;
  } else if (schedule == "1f1b") {
    request.schedule = strategy::Schedule::one_f_one_b;
  } else if (schedule == "interleaved") {
    request.schedule = strategy::Schedule::interleaved;
  } else {
    throw Error(fmt::format("--schedule '{}': expected gpipe, 1f1b or interleaved", schedule));
  }
  request.chunks = chunks;
  const auto given = [](const CLI::Option* o) { return o != nullptr && o->count() > 0; };
  request.held.zero = given(zero_option) || given(distributed_optimizer_option);
  request.held.recompute = given(recompute_option);
  request.held.sequence_parallel = given(sequence_parallel_option);
  request.held.schedule = given(schedule_option) || chunks > 0;
  request.balance = balance;
  request.stage_layout = stage_layout;
  request.cuts = cuts;
  request.plan_file = plan;
  request.all_divisors = all_divisors;
  request.min_piece = min_piece;
  request.memory_limit = memory_limit_gib * 1024.0 * 1024.0 * 1024.0;
  request.max_search_work = search_limit;
  request.bounded_table_entries = bounded_tables;
  request.simulation_budget = static_cast<std::size_t>(simulation_budget);
  request.threads = search_threads;
}

cost::TrainingSetup SetupOptions::setup() const {
  proto::TrainingSetup p;
  p.set_precision(precision);
  p.set_optimizer(optimizer);
  if (distributed_optimizer && zero != 0 && zero != 1) {
    throw Error(fmt::format("--distributed-optimizer shards the optimizer state only (ZeRO-1); --zero {} asks for "
                            "more: give one of them",
                            zero));
  }
  p.set_zero_stage(distributed_optimizer ? 1 : zero);
  p.set_recompute(recompute);
  p.set_fp32_gradients(fp32_gradients);
  p.set_sequence_parallel(sequence_parallel);
  return strategy::setup_from_proto(p, "command line");
}

} // namespace partita::cli
