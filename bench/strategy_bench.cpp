// How long each strategy family takes to choose a strategy and evaluate it (the time a front end
// waits after a click). Run: build/ci/bench/partita_bench_strategy

#include "partita/cluster/cluster.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/strategy.h"
#include "partita/zoo/zoo.h"

#include <benchmark/benchmark.h>

#include <string>

namespace {

struct Case {
  const char* model;
  const char* cluster;
  int devices;
};

const Case cases[] = {
    {"zoo:resnet50?batch=256", "dgx-a100", 8},
    {"zoo:bert?size=large&batch=256&seq=512", "dgx-a100?nodes=8", 64},
    {"zoo:gpt3?size=175b&batch=1536", "dgx-a100?nodes=128", 1024},
};

void family(benchmark::State& state, const std::string& name) {
  const auto& c = cases[state.range(0)];
  const auto model = partita::zoo::load(c.model);
  const auto cluster = partita::cluster::load_cluster(c.cluster);
  partita::search::Request r;
  r.graph = &model.graph;
  r.cluster = &cluster;
  r.devices = c.devices;
  const auto& optimizer = partita::search::find_optimizer(name);
  for (auto _ : state) {
    const auto st = optimizer.optimize(r);
    benchmark::DoNotOptimize(partita::strategy::evaluate(model.graph, cluster, st, r.setup));
  }
  state.SetLabel(std::string(c.model) + " on " + std::to_string(c.devices));
  state.counters["ops"] = static_cast<double>(model.graph.ops().size());
}

} // namespace

BENCHMARK_CAPTURE(family, dp, std::string("dp"))->DenseRange(0, 2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(family, megatron, std::string("megatron"))->DenseRange(0, 2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(family, hybrid, std::string("hybrid"))->DenseRange(0, 2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(family, gholami, std::string("gholami"))->DenseRange(0, 2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(family, pipeline, std::string("pipeline"))->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
