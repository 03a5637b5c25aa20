// Published runs against Partita's predictions: Narayanan et al., "Efficient Large-Scale Language
// Model Training on GPU Clusters Using Megatron-LM" (SC21), Table 1 (weak scaling of GPT models on
// DGX A100 80 GB nodes; the configurations are those of NVIDIA/Megatron-LM examples/sc21). Each
// row is planned as Megatron-LM ran it, typed as it is written (`megatron --tp TP --pp PP
// --micro-batch-size MB [--schedule interleaved --chunks V]`): tensor parallel inside a node, PP
// pipeline stages of contiguous layers (1F1B, or interleaved with V model chunks per stage where the
// paper's table gives layers per chunk: V = layers / (PP x layers per chunk)), data parallel over the rest, the global
// batch in micro-batches of the published size (gradient accumulation when PP = 1), fp16 mixed precision, Adam, full
// activation recomputation, on the `dgx-a100` preset as shipped. The preset is never tuned per row.
//
// Achieved teraFLOP/s per GPU counts F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) per iteration, as
// the paper does (B the global batch, s the sequence, l layers, h hidden, V the vocabulary), so a
// predicted iteration time T gives F / (T x GPUs).
//
// The prediction is the simulated iteration (sim::simulate_prediction, as `partita plan` shows
// it: gradient buckets all-reduced during the backward pass on a stream of their own, the pipeline
// schedule run micro-batch by micro-batch); the terms added up (evaluate()) are printed beside it.
// The largest rows have millions of tasks, more than `partita plan` simulates by default: the
// bench lifts that limit.
// Usage: partita_bench_published [--cluster PRESET]   (default dgx-a100; nodes are added per row)

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/search/optimizer.h"
#include "partita/sim/simulate.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"
#include "sc21_rows.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace {

int run(int argc, char** argv) {
  using namespace partita;
  std::string preset = "dgx-a100";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cluster" && i + 1 < argc) {
      preset = argv[++i];
    } else {
      throw Error(fmt::format("unknown argument '{}'\nusage: partita_bench_published [--cluster PRESET]", a));
    }
  }
  fmt::print("{:<6} {:>5} {:>3} {:>3} {:>5} {:>6} {:>6} {:>2} {:>11} {:>10} {:>10} {:>8} {:>10} {:>10} {:>5} {:>8}\n",
             "model", "GPUs", "TP", "PP", "DP", "batch", "micro", "V", "iteration s", "predicted", "published", "error",
             "additive", "memory GiB", "fits", "plan s");
  double sum_error = 0, largest = 0, sum_additive = 0, largest_additive = 0;
  int fitting = 0;
  for (const Row& row : rows) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto model = zoo::load(fmt::format("zoo:gpt3?layers={}&hidden={}&heads={}&seq={}&batch={}&vocab={}",
                                             row.layers, row.hidden, row.heads, sequence, row.batch, vocabulary));
    const auto nodes = (row.gpus + 7) / 8;
    const auto cluster = cluster::load_cluster(fmt::format("{}?nodes={}", preset, nodes));
    const int dp = row.gpus / (row.tp * row.pp);
    search::Request r;
    r.graph = &model.graph;
    r.cluster = &cluster;
    r.devices = row.gpus;
    r.setup.precision = cluster::Precision::fp16;
    r.setup.optimizer = cost::Optimizer::adam;
    r.setup.recompute = cost::Recompute::full;
    // As the run was typed: megatron --tp TP --pp PP --micro-batch-size MB.
    r.tensor_parallel = row.tp;
    r.pipeline_parallel = row.pp;
    r.micro_batch_size = row.micro_batch;
    const int chunks = row.layers_per_chunk > 0 ? row.layers / (row.pp * row.layers_per_chunk) : 1;
    if (chunks > 1) { // --schedule interleaved --chunks V
      r.schedule = strategy::Schedule::interleaved;
      r.chunks = chunks;
    }
    const auto plan = search::find_optimizer("megatron").optimize(r);
    auto p = strategy::evaluate(model.graph, cluster, plan, r.setup);
    sim::simulate_prediction(model.graph, cluster, plan, p, {}, 20'000'000);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double l = row.layers, h = row.hidden, s = sequence, v = vocabulary;
    const double flops = 96.0 * row.batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h));
    const double predicted = flops / (p.iteration_time * row.gpus) / 1e12;
    const double error = (predicted - row.published) / row.published;
    sum_error += std::abs(error);
    largest = std::max(largest, std::abs(error));
    const double additive = (flops / (p.additive_time * row.gpus) / 1e12 - row.published) / row.published;
    sum_additive += std::abs(additive);
    largest_additive = std::max(largest_additive, std::abs(additive));
    const bool fits = p.peak_memory <= cluster.device.memory_capacity;
    fitting += fits ? 1 : 0;
    fmt::print(
        "{:<6} {:>5} {:>3} {:>3} {:>5} {:>6} {:>6} {:>2} {:>11.2f} {:>10.1f} {:>10.0f} {:>7.1f}% {:>9.1f}% {:>10.1f} "
        "{:>5} {:>8.2f}\n",
        row.name, row.gpus, row.tp, row.pp, dp, row.batch, row.micro_batch, chunks, p.iteration_time, predicted,
        row.published, 100 * error, 100 * additive, p.peak_memory / (1024.0 * 1024 * 1024), fits ? "yes" : "NO",
        seconds);
    std::fflush(stdout);
  }
  const auto n = static_cast<double>(std::size(rows));
  fmt::print("\nteraFLOP/s per GPU: mean absolute error {:.1f}%, largest {:.1f}% (the terms added up: {:.1f}%, "
             "{:.1f}%); {} of {} rows fit in {:.0f} GiB\n",
             100 * sum_error / n, 100 * largest, 100 * sum_additive / n, 100 * largest_additive, fitting,
             std::size(rows), cluster::load_cluster(preset).device.memory_capacity / (1024.0 * 1024 * 1024));
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "partita_bench_published: {}\n", e.what());
    return 1;
  }
}
