// How long it takes to get from a model to its per-layer table: building a zoo model as ONNX,
// importing it (wire filter, node-by-node shape inference, graph), and describing every op.
// Run: build/ci/bench/partita_bench_import

#include "partita/graph/summary.h"
#include "partita/onnx/import.h"
#include "partita/zoo/zoo.h"

#include <benchmark/benchmark.h>
#include <onnx/onnx_pb.h>

#include <string>

namespace {

const char* const specs[] = {"resnet50?batch=32", "bert?size=large&batch=8&seq=512", "gpt2?size=xl&batch=8",
                             "gpt3?size=175b&batch=1"};

void build_model(benchmark::State& state) {
  const std::string spec = specs[state.range(0)];
  for (auto _ : state) {
    benchmark::DoNotOptimize(partita::zoo::build(spec));
  }
  state.SetLabel(spec);
}

void import_model(benchmark::State& state) {
  const std::string spec = specs[state.range(0)];
  const onnx::ModelProto model = partita::zoo::build(spec);
  std::size_t ops = 0;
  for (auto _ : state) {
    auto r = partita::onnx_import::import_model(model, spec);
    ops = r.graph.ops().size();
    benchmark::DoNotOptimize(r);
  }
  state.counters["ops"] = static_cast<double>(ops);
  state.SetLabel(spec);
}

void summarize_model(benchmark::State& state) {
  const std::string spec = specs[state.range(0)];
  const auto r = partita::zoo::load("zoo:" + spec);
  for (auto _ : state) {
    benchmark::DoNotOptimize(partita::graph::summarize(r.graph));
  }
  state.counters["ops"] = static_cast<double>(r.graph.ops().size());
  state.SetLabel(spec);
}

BENCHMARK(build_model)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);
BENCHMARK(import_model)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);
BENCHMARK(summarize_model)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
