// The CPU backend's LSTM (oneDNN) on one thread, forward (training mode) and backward, in GFLOP/s
// counted as core counts them: 2 * seq * batch * 4 * hidden * (input + hidden) forward, twice that
// backward (data and weight gradients). GNMT's layer shapes: hidden 1024, input 1024 (2048 for
// the layers reading the attention context), batch 64 and 128, 50 steps.
// Run: build/ci/bench/partita_bench_recurrent

#include "backend.h"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using partita::runtime::Cell;
using partita::runtime::RecurrentDirection;
using partita::runtime::RecurrentShape;

std::vector<float> random_values(std::int64_t n) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-0.05F, 0.05F);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& e : v) {
    e = dist(rng);
  }
  return v;
}

struct Layer {
  RecurrentShape s;
  std::vector<float> x, w, r, b, y, y_h, y_c, saved, dy, dx, dw, dr, db;
  explicit Layer(const RecurrentShape& shape) : s(shape) {
    const std::int64_t gh = s.gates() * s.hidden, d = s.directions();
    x = random_values(s.seq * s.batch * s.input);
    w = random_values(d * gh * s.input);
    r = random_values(d * gh * s.hidden);
    b = random_values(d * 2 * gh);
    y.resize(static_cast<std::size_t>(s.seq * d * s.batch * s.hidden));
    y_h.resize(static_cast<std::size_t>(d * s.batch * s.hidden));
    y_c = y_h;
    dy = random_values(s.seq * d * s.batch * s.hidden);
    dx.resize(x.size());
    dw.resize(w.size());
    dr.resize(r.size());
    db.resize(b.size());
  }
  double forward_flops() const {
    return 2.0 * static_cast<double>(s.seq * s.directions() * s.batch * s.gates() * s.hidden) *
           static_cast<double>(s.input + s.hidden);
  }
};

RecurrentShape shape(const benchmark::State& state) {
  RecurrentShape s;
  s.cell = Cell::lstm;
  s.direction = state.range(3) != 0 ? RecurrentDirection::bidirectional : RecurrentDirection::forward;
  s.seq = 50;
  s.batch = state.range(0);
  s.input = state.range(1);
  s.hidden = state.range(2);
  return s;
}

void lstm_forward(benchmark::State& state) {
  auto backend = partita::runtime::make_cpu_backend(1);
  Layer l(shape(state));
  for (auto _ : state) {
    backend->recurrent_forward(l.s, {l.x.data(), l.w.data(), l.r.data(), l.b.data()},
                               {l.y.data(), l.y_h.data(), l.y_c.data()}, l.saved);
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(l.forward_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void lstm_backward(benchmark::State& state) {
  auto backend = partita::runtime::make_cpu_backend(1);
  Layer l(shape(state));
  backend->recurrent_forward(l.s, {l.x.data(), l.w.data(), l.r.data(), l.b.data()},
                             {l.y.data(), l.y_h.data(), l.y_c.data()}, l.saved);
  for (auto _ : state) {
    backend->recurrent_backward(l.s, {l.x.data(), l.w.data(), l.r.data(), l.b.data()}, l.saved, {l.dy.data()},
                                {l.dx.data(), l.dw.data(), l.dr.data(), l.db.data()});
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2 * l.forward_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// batch, input, hidden, bidirectional
void gnmt_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "input", "hidden", "bidir"});
  b->Args({64, 1024, 1024, 0})->Args({128, 1024, 1024, 0})->Args({64, 2048, 1024, 0})->Args({64, 1024, 1024, 1});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
}

BENCHMARK(lstm_forward)->Apply(gnmt_shapes);
BENCHMARK(lstm_backward)->Apply(gnmt_shapes);

} // namespace

BENCHMARK_MAIN();
