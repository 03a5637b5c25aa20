#include "sweeps.h"

#include "collectives.h"
#include "op_kernels.h"

#include "partita/graph/error.h"
#include "partita/graph/statistics.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <new>

namespace partita::runtime {

double time_per_call(MPI_Comm comm, const SweepBudget& budget, const std::function<void()>& f,
                     const std::function<void()>& finish) {
  const auto done = [&] {
    if (finish) {
      finish();
    }
  };
  f(); // warm-up: first-touch pages, oneDNN's primitive cache, MPI's connections
  done();
  MPI_Barrier(comm);
  double t0 = MPI_Wtime();
  f();
  done();
  double one = MPI_Wtime() - t0;
  double slowest = 0;
  check_mpi(MPI_Allreduce(&one, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm), "MPI_Allreduce");
  // Every rank must make the same number of calls: the count follows the agreed slowest estimate.
  const int calls = static_cast<int>(std::clamp(std::ceil(budget.target_seconds / std::max(slowest, 1e-9)), 1.0,
                                                static_cast<double>(budget.max_calls)));
  std::vector<double> trials;
  for (int t = 0; t < budget.trials; ++t) {
    MPI_Barrier(comm);
    t0 = MPI_Wtime();
    for (int i = 0; i < calls; ++i) {
      f();
    }
    done();
    const double mine = (MPI_Wtime() - t0) / calls;
    double worst = 0;
    check_mpi(MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, comm), "MPI_Allreduce");
    trials.push_back(worst);
  }
  std::sort(trials.begin(), trials.end());
  return trials[trials.size() / 2];
}

double time_each_call(MPI_Comm comm, const SweepBudget& budget, const std::function<void(int)>& prepare,
                      const std::function<void(int)>& call) {
  prepare(0);
  call(0); // warm-up: first-touch pages, MPI's connections and protocol buffers
  // The number of calls follows the first timed one, agreed by all ranks.
  const auto timed = [&](int i) {
    prepare(i);
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    call(i);
    const double mine = MPI_Wtime() - t0;
    double fastest = 0;
    check_mpi(MPI_Allreduce(&mine, &fastest, 1, MPI_DOUBLE, MPI_MIN, comm), "MPI_Allreduce");
    return fastest;
  };
  std::vector<double> times{timed(1)};
  const double total = budget.target_seconds * budget.trials;
  const int calls = static_cast<int>(
      std::clamp(std::ceil(total / std::max(times.front(), 1e-9)), 9.0, static_cast<double>(budget.max_calls)));
  for (int i = 1; i < calls; ++i) {
    times.push_back(timed(i + 1));
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

namespace {

// A training step's working set (activations kept for the backward pass, weights, optimizer
// state) is many times the last-level cache, so its kernels and collectives mostly find their
// operands in memory, not in cache. The sweeps rotate their operands through arenas of at least
// this many bytes, so that each call is timed cold, as a step meets it.
constexpr std::size_t cold = 64 << 20;

// Slots of `elements` floats, 64-byte aligned, in an arena of `arena` floats (at least
// `at_least` of them): call i works at offset(i).
struct Slots {
  std::size_t stride, count;
  Slots(std::size_t elements, std::size_t arena, std::size_t at_least = 1)
      : stride((elements + 15) / 16 * 16), count(std::max(at_least, arena / stride)) {}
  std::size_t floats() const { return stride * count; }
  std::size_t offset(std::size_t i) const { return i % count * stride; }
};

std::vector<double> work_points(double lo, double hi, int per_decade) {
  std::vector<double> out;
  const int steps = static_cast<int>(std::lround((hi - lo) * per_decade));
  for (int i = 0; i <= steps; ++i) {
    out.push_back(std::pow(10.0, lo + static_cast<double>(i) / per_decade));
  }
  return out;
}

std::int64_t at_least_one(double x) {
  return std::max<std::int64_t>(1, std::llround(x));
}

} // namespace

bool fill_everywhere(MPI_Comm comm, std::initializer_list<std::pair<Floats*, float>> buffers, std::size_t n) {
  int ok = 1;
  try {
    for (const auto& [buffer, value] : buffers) {
      refill(*buffer, n, value);
    }
  } catch (const std::bad_alloc&) {
    ok = 0;
  } catch (const Error&) { // a GPU backend's memory refusing a buffer larger than the device has free
    ok = 0;
  }
  if (!ok) {
    for (const auto& [buffer, value] : buffers) {
      Floats().swap(*buffer);
    }
  }
  int all = ok;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
  return all != 0;
}

namespace {

// A GEMM dimension as models have them: from 256 on a multiple of 64 (hidden sizes, heads x head
// size, batch x sequence). Odd sizes run slower on a GPU's tiles: on an H200 the calibration's
// 3041^3 product reached 44-47 TFLOP/s where a 2048x4096x4096 one of a wide MLP, of about the same
// FLOPs, reached 51.5, and the curve fitted on odd sizes priced the models' products too slow.
std::int64_t model_dim(double x) {
  const std::int64_t d = at_least_one(x);
  return d >= 256 ? std::max<std::int64_t>(256, (d + 32) / 64 * 64) : d;
}

} // namespace

std::vector<KernelTiming> gemm_sweep(Backend& backend, MPI_Comm comm, const SweepBudget& budget, double lo, double hi,
                                     int per_decade, const SweepExtension& beyond) {
  struct Family {
    const char* name;
    double m, n, k; // shape relative to a size s
    bool trans_b;
  };
  // Square; tall and skinny (many rows, a small weight: a fully-connected layer on a large batch);
  // square reading B transposed (dX = dY W^T in a backward pass); wide (a large weight on few rows:
  // data parallelism on a wide layer, whose weight's bytes cost time on top of the FLOPs, which
  // tells core's calibration the operand bandwidth apart from the rate curve).
  const Family families[] = {{"gemm", 1, 1, 1, false},
                             {"gemm tall", 8, 1, 1, false},
                             {"gemm B^T", 1, 1, 1, true},
                             {"gemm wide", 0.125, 2, 2, false}};
  // In a training step a matrix product finds its operands in memory, not in cache: the activation
  // was written many kernels ago (or by another rank) and a weight is read once a pass. So each
  // call multiplies the next slices of `cold` arenas (on operands kept in cache GPT-2's products
  // ran 10-15% faster here than in partita-run).
  std::vector<KernelTiming> out;
  Floats a, b, c; // tensor memory: where a GPU backend's kernels can read them
  const auto finish = [&] { backend.synchronize(); };
  const bool extend = beyond.max_call_seconds > 0 && beyond.to > hi;
  for (const auto& f : families) {
    double best_rate = 0; // FLOP/s, this family's highest so far
    for (const double work : work_points(lo, extend ? beyond.to : hi, per_decade)) {
      const bool past = work > std::pow(10.0, hi) * 1.0001;
      if (past && (best_rate <= 0 || work / best_rate > beyond.max_call_seconds)) {
        break;
      }
      const double s = std::cbrt(work / (2 * f.m * f.n * f.k));
      const MatmulShape shape{1, model_dim(f.m * s), model_dim(f.n * s), model_dim(f.k * s)};
      const auto na = static_cast<std::size_t>(shape.m * shape.k), nb = static_cast<std::size_t>(shape.k * shape.n),
                 nc = static_cast<std::size_t>(shape.m * shape.n);
      const Slots slots(std::max({na, nb, nc}), cold / 4, 2);
      if (past) {
        // A size some rank has no room for ends the family, on every rank alike.
        if (!fill_everywhere(comm, {{&a, 0.5F}, {&b, 0.25F}, {&c, 0.0F}}, slots.floats())) {
          break;
        }
      } else {
        refill(a, slots.floats(), 0.5F);
        refill(b, slots.floats(), 0.25F);
        refill(c, slots.floats(), 0.0F);
      }
      for (const auto* v : {&a, &b, &c}) {
        backend.prefetch(v->data(), static_cast<std::int64_t>(v->size()));
      }
      std::size_t turn = 0;
      const double seconds = time_per_call(
          comm, budget,
          [&] {
            const std::size_t o = slots.offset(turn++);
            backend.matmul(shape, a.data() + o, false, b.data() + o, f.trans_b, c.data() + o);
          },
          finish);
      const double flops = 2.0 * static_cast<double>(shape.m * shape.n * shape.k);
      const double bytes = 4.0 * static_cast<double>(na + nb + nc);
      best_rate = std::max(best_rate, flops / seconds);
      KernelTiming row{fmt::format("{} {}x{}x{}", f.name, shape.m, shape.n, shape.k), flops, bytes, seconds};
      row.operand_bytes = 4.0 * static_cast<double>(na + nb);
      out.push_back(std::move(row));
    }
  }
  return out;
}

std::vector<KernelTiming> product_sweep(Backend& backend, MPI_Comm comm, const SweepBudget& budget,
                                        const std::vector<MatmulShape>& shapes) {
  std::vector<KernelTiming> out;
  Floats a, b, dy, da, db;
  const auto finish = [&] { backend.synchronize(); };
  for (const auto& shape : shapes) {
    const auto na = static_cast<std::size_t>(shape.batch * shape.m * shape.k),
               nb = static_cast<std::size_t>(shape.batch * shape.k * shape.n),
               nc = static_cast<std::size_t>(shape.batch * shape.m * shape.n);
    const Slots slots(std::max({na, nb, nc}), cold / 4, 2);
    if (!fill_everywhere(comm, {{&a, 0.5F}, {&b, 0.25F}, {&dy, 0.125F}, {&da, 0.0F}, {&db, 0.0F}}, slots.floats())) {
      throw Error(fmt::format("partita-calibrate: no memory on some rank for the operands of the {}x{}x{}x{} product "
                              "(batch x m x n x k)",
                              shape.batch, shape.m, shape.n, shape.k));
    }
    for (const auto* v : {&a, &b, &dy, &da, &db}) {
      backend.prefetch(v->data(), static_cast<std::int64_t>(v->size()));
    }
    const double flops = 2.0 * static_cast<double>(shape.batch * shape.m * shape.n * shape.k);
    const auto name = fmt::format("product {}x{}x{}x{}", shape.batch, shape.m, shape.n, shape.k);
    std::size_t turn = 0;
    // One product x (op) y -> z at this call's slice of the arenas, timed as the sweeps time theirs.
    const auto time_product = [&](const MatmulShape& s, const Floats& x, bool tx, const Floats& y, bool ty, Floats& z) {
      return time_per_call(
          comm, budget,
          [&] {
            const std::size_t o = slots.offset(turn++);
            backend.matmul(s, x.data() + o, tx, y.data() + o, ty, z.data() + o);
          },
          finish);
    };
    // As partita-run runs a MatMul: Y = A B, then dA = dY B^T, dB = A^T dY (op_kernels.cpp).
    const double forward = time_product(shape, a, false, b, false, da);
    const double data_gradient = time_product({shape.batch, shape.m, shape.k, shape.n}, dy, false, b, true, da);
    const double weight_gradient = time_product({shape.batch, shape.k, shape.n, shape.m}, a, true, dy, false, db);
    const double bytes = 4.0 * static_cast<double>(na + nb + nc);
    KernelTiming f{name + " forward", flops, bytes, forward};
    f.operand_bytes = 4.0 * static_cast<double>(na + nb);
    KernelTiming d{name + " data gradient", flops, bytes, data_gradient};
    d.compute_class = graph::ComputeClass::matmul_backward;
    d.operand_bytes = 4.0 * static_cast<double>(nb + nc);
    KernelTiming w{name + " weight gradient", flops, bytes, weight_gradient};
    w.compute_class = graph::ComputeClass::matmul_backward;
    w.operand_bytes = 4.0 * static_cast<double>(na + nc);
    out.push_back(std::move(f));
    out.push_back(std::move(d));
    out.push_back(std::move(w));
  }
  return out;
}

std::vector<KernelTiming> gemm_backward_sweep(Backend& backend, MPI_Comm comm, const SweepBudget& budget, double lo,
                                              double hi, int per_decade, const SweepExtension& beyond) {
  struct Family {
    const char* name;
    double m, n, k; // the forward product's shape relative to a size s; batched: m, n, k as they are
    bool batched;
  };
  // The forward sweep's square, tall and wide shapes, and attention's batched products (a batch of
  // 128 x 128 x 64 ones, the batch grown with the work: the scores' Q K^T of a 64-wide head).
  const Family families[] = {{"gemm backward", 1, 1, 1, false},
                             {"gemm backward tall", 8, 1, 1, false},
                             {"gemm backward wide", 0.125, 2, 2, false},
                             {"gemm backward batched", 128, 128, 64, true}};
  std::vector<KernelTiming> out;
  Floats a, b, dy, da, db;
  const auto finish = [&] { backend.synchronize(); };
  const bool extend = beyond.max_call_seconds > 0 && beyond.to > hi;
  for (const auto& f : families) {
    double best_rate = 0;
    MatmulShape last{};
    for (const double work : work_points(lo, extend ? beyond.to : hi, per_decade)) {
      const bool past = work > std::pow(10.0, hi) * 1.0001;
      if (past && (best_rate <= 0 || 2 * work / best_rate > beyond.max_call_seconds)) {
        break;
      }
      MatmulShape shape{};
      if (f.batched) {
        shape = {at_least_one(work / (2 * f.m * f.n * f.k)), static_cast<std::int64_t>(f.m),
                 static_cast<std::int64_t>(f.n), static_cast<std::int64_t>(f.k)};
      } else {
        const double s = std::cbrt(work / (2 * f.m * f.n * f.k));
        shape = {1, model_dim(f.m * s), model_dim(f.n * s), model_dim(f.k * s)};
      }
      if (shape.batch == last.batch && shape.m == last.m && shape.n == last.n && shape.k == last.k) {
        continue; // a batch of one below the first point's work: timed already
      }
      last = shape;
      const auto na = static_cast<std::size_t>(shape.batch * shape.m * shape.k),
                 nb = static_cast<std::size_t>(shape.batch * shape.k * shape.n),
                 nc = static_cast<std::size_t>(shape.batch * shape.m * shape.n);
      const Slots slots(std::max({na, nb, nc}), cold / 4, 2);
      const std::initializer_list<std::pair<Floats*, float>> buffers{
          {&a, 0.5F}, {&b, 0.25F}, {&dy, 0.125F}, {&da, 0.0F}, {&db, 0.0F}};
      if (past) {
        if (!fill_everywhere(comm, buffers, slots.floats())) {
          break;
        }
      } else {
        for (const auto& [buffer, value] : buffers) {
          refill(*buffer, slots.floats(), value);
        }
      }
      for (const auto* v : {&a, &b, &dy, &da, &db}) {
        backend.prefetch(v->data(), static_cast<std::int64_t>(v->size()));
      }
      std::size_t turn = 0;
      // As partita-run runs a product's backward pass (op_kernels.cpp): dA = dY B^T, then
      // dB = A^T dY through the backend's way of reading A transposed.
      const double pair = time_per_call(
          comm, budget,
          [&] {
            const std::size_t o = slots.offset(turn++);
            backend.matmul({shape.batch, shape.m, shape.k, shape.n}, dy.data() + o, false, b.data() + o, true,
                           da.data() + o);
            backend.matmul({shape.batch, shape.k, shape.n, shape.m}, a.data() + o, true, dy.data() + o, false,
                           db.data() + o);
          },
          finish);
      // One row per product, their mean: the cost model prices each of a backward pass's products
      // at its own size (the forward's FLOPs). Its operand bytes are what the sweep reads from
      // memory (B and dY for dA, A and dY for dB), so that the fit takes them off as it does the
      // GEMMs'; in a step dY is fresh from the consumers' backward pass, and the cost model charges
      // A and B alone.
      const double flops = 2.0 * static_cast<double>(shape.batch * shape.m * shape.n * shape.k);
      best_rate = std::max(best_rate, 2 * flops / pair);
      KernelTiming row{fmt::format("{} {}x{}x{}x{}", f.name, shape.batch, shape.m, shape.n, shape.k), flops,
                       4.0 * static_cast<double>(na + nb + nc), pair / 2};
      row.compute_class =
          f.batched ? graph::ComputeClass::matmul_batched_backward : graph::ComputeClass::matmul_backward;
      row.operand_bytes = 4.0 * (static_cast<double>(na + nb) / 2 + static_cast<double>(nc));
      out.push_back(std::move(row));
    }
  }
  return out;
}

namespace {

// One op of `type` on whole tensors of the given shapes, run through run_forward as partita-run
// runs it; `fill` sets the inputs (an index tensor's values).
struct OneOpGraph {
  // Spare buffers of every input and output, swapped in before each call (cycle()), so that
  // successive calls touch other memory: cold, as in a training step (see memory_sweep).
  std::vector<std::vector<Floats>> spares;
  std::size_t turn = 0;

  graph::Graph g;
  std::vector<Shard> inputs, outputs;
  OpBuffers buffers;

  OneOpGraph(const std::string& type, const std::vector<graph::Shape>& in, const std::vector<graph::Shape>& out,
             std::map<std::string, graph::Attribute> attrs) {
    graph::Op op;
    op.name = type;
    op.type = type;
    op.attrs = std::move(attrs);
    const auto tensor = [](std::string name, graph::Shape shape) {
      graph::Tensor t;
      t.name = std::move(name);
      t.shape = std::move(shape);
      return t;
    };
    for (std::size_t i = 0; i < in.size(); ++i) {
      op.inputs.push_back(g.add_tensor(tensor(fmt::format("x{}", i), in[i])));
      inputs.push_back(make_shard(whole(in[i])));
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
      op.outputs.push_back(g.add_tensor(tensor(fmt::format("y{}", i), out[i])));
      outputs.push_back(make_shard(whole(out[i])));
    }
    g.add_op(std::move(op));
    for (const auto& x : inputs) {
      buffers.inputs.push_back(&x);
    }
    for (auto& y : outputs) {
      buffers.outputs.push_back(&y);
    }
  }
  // Copies of the buffers (inputs with their values: a gather's indices) to cycle through, up to
  // about `cold` bytes in all and at most 4096.
  void make_spares(Backend& backend) {
    const auto count = std::clamp<std::size_t>(static_cast<std::size_t>(static_cast<double>(cold) / bytes()), 1, 4096);
    for (auto* list : {&inputs, &outputs}) {
      for (const auto& x : *list) {
        auto& copies = spares.emplace_back();
        for (std::size_t i = 0; i < count; ++i) {
          copies.push_back(copy_of(x.data));
        }
        backend.prefetch(x.data.data(), static_cast<std::int64_t>(x.data.size()));
        for (const auto& spare : spares.back()) {
          backend.prefetch(spare.data(), static_cast<std::int64_t>(spare.size()));
        }
      }
    }
  }
  void cycle() {
    if (spares.empty()) {
      return;
    }
    std::size_t k = 0;
    for (auto* list : {&inputs, &outputs}) {
      for (auto& x : *list) {
        std::swap(x.data, spares[k++][turn]);
      }
    }
    turn = (turn + 1) % spares.front().size();
  }
  double bytes() const {
    double b = 0;
    for (const auto* list : {&inputs, &outputs}) {
      for (const auto& x : *list) {
        b += 4.0 * static_cast<double>(x.elements());
      }
    }
    return b;
  }
};

} // namespace

std::vector<KernelTiming> memory_sweep(Backend& backend, MPI_Comm comm, const SweepBudget& budget, double lo, double hi,
                                       int per_decade) {
  using graph::KernelClass;
  std::vector<KernelTiming> out;
  const auto sizes = work_points(lo, hi, per_decade);
  constexpr std::int64_t width = 256; // a transformer's hidden size, order of magnitude
  // Memory-bound kernels meet cold operands too: partita-run measured a 1 MB bias add at a quarter
  // of the rate that calls on the same cached buffers reach. So each call here works on the next
  // slice of arenas of at least `cold` bytes, and a small kernel is timed as a step meets it.
  const auto largest = std::max(static_cast<std::size_t>(sizes.back() / 4) + width + 1, cold / 4);
  // Tensor memory, where a GPU backend's kernels can read them.
  Floats x = filled_floats(largest, 0.5F), y(largest), z(std::max(largest / 3 + 1, cold / 4)),
         v(z.size()); // Adam's second moment (z its first)
  const auto finish = [&] { backend.synchronize(); };
  for (const auto* buffer : {&x, &y, &z, &v}) {
    backend.prefetch(buffer->data(), static_cast<std::int64_t>(buffer->size()));
  }
  std::size_t offset = 0;
  // The offset of the next call's operands of n floats in every arena (64-byte aligned).
  const auto next = [&](std::int64_t n) {
    const auto step = (static_cast<std::size_t>(n) + 15) / 16 * 16;
    offset += step;
    if (offset + step > z.size()) {
      offset = 0;
    }
    return offset;
  };
  const auto time = [&](const char* kernel, KernelClass k, double bytes, const std::function<void()>& f) {
    offset = 0;
    out.push_back({kernel, 0, bytes, time_per_call(comm, budget, f, finish), k});
  };
  for (const double bytes : sizes) {
    // ReLU reads and writes n floats; add reads two and writes one. The executor's memory-bound
    // stand-in (a plain copy) is left out: it runs only for ops without a kernel, and without
    // oneDNN's per-call cost it would pull the curve away from the kernels that do run.
    const std::int64_t n_relu = at_least_one(bytes / 8), n_add = at_least_one(bytes / 12);
    time("relu", KernelClass::eltwise, 8.0 * static_cast<double>(n_relu), [&] {
      const auto o = next(n_relu);
      backend.eltwise_forward(Eltwise::relu, n_relu, x.data() + o, y.data() + o);
    });
    const Dims d{n_add};
    time("add", KernelClass::eltwise, 12.0 * static_cast<double>(n_add), [&] {
      const auto o = next(n_add);
      backend.binary(Binary::add, d, x.data() + o, d, y.data() + o, d, z.data() + o);
    });
    // ReLU's gradient (x and dy read, dx written): the backward family of the piecewise-linear
    // activations, a kernel of its own (oneDNN's eltwise backward), not ReLU's forward pass.
    time("relu backward", KernelClass::activation_backward, 12.0 * static_cast<double>(n_add), [&] {
      const auto o = next(n_add);
      backend.eltwise_backward(Eltwise::relu, n_add, x.data() + o, y.data() + o, z.data() + o);
    });
    // A gradient added in place into another (dst += src: the sum of a tensor's readers'
    // gradients, a gradient coming back through a redistribution), as partita-run adds them
    // (Backend::copy accumulating): it reads two and writes one, over what it read.
    time("accumulate", KernelClass::accumulate, 12.0 * static_cast<double>(n_add), [&] {
      const auto o = next(n_add);
      backend.copy(contiguous_copy(n_add), x.data() + o, z.data() + o, true);
    });
    // The same two kernels on inputs the call before has just written, as a step's kernels mostly
    // meet them (GELU's Div, Erf, Add and Mul each read what the one before wrote; a backward
    // kernel reads the gradient the one before wrote): a 2 MB ReLU ran a quarter faster so. Each
    // is timed call by call, the fresh call after its inputs are written (untimed), against the
    // same calls on inputs in memory; the calibration fits Device::fresh_read from the ratio.
    // Measured where the host writes what the kernels read next (the CPU backend): a GPU's kernels
    // find the inputs another kernel wrote in its L2, which a host write cannot stand in for.
    if (bytes <= 1e8 && backend.kernels_on_host()) {
      const auto fresh = [&](const char* kernel, KernelClass k, std::int64_t n, int inputs, double kernel_bytes,
                             const std::function<void(std::size_t)>& call) {
        const Slots slots(static_cast<std::size_t>(n), z.size());
        const auto write = [&](int i) {
          const auto o = slots.offset(static_cast<std::size_t>(i));
          fill_floats(x, o, static_cast<std::size_t>(n), 0.5F);
          if (inputs > 1) {
            fill_floats(y, o, static_cast<std::size_t>(n), 0.25F);
          }
        };
        const auto run = [&](int i) { call(slots.offset(static_cast<std::size_t>(i))); };
        const double cold_seconds = time_each_call(
            comm, budget, [](int) {}, run);
        const double seconds = time_each_call(comm, budget, write, run);
        out.push_back({kernel, 0, kernel_bytes, seconds, k, graph::ComputeClass::matmul,
                       4.0 * static_cast<double>(inputs * n), cold_seconds});
      };
      fresh("relu fresh", KernelClass::eltwise, n_relu, 1, 8.0 * static_cast<double>(n_relu),
            [&](std::size_t o) { backend.eltwise_forward(Eltwise::relu, n_relu, x.data() + o, z.data() + o); });
      fresh("add fresh", KernelClass::eltwise, n_add, 2, 12.0 * static_cast<double>(n_add),
            [&](std::size_t o) { backend.binary(Binary::add, d, x.data() + o, d, y.data() + o, d, z.data() + o); });
      // Erf after the Div that wrote its input, as GELU runs it: how much of a fresh read's saving
      // a kernel that computes on its bytes keeps depends on the host's arithmetic (little on an
      // AVX2 EPYC), so it is timed, not assumed.
      fresh("erf fresh", KernelClass::transcendental, n_relu, 1, 8.0 * static_cast<double>(n_relu),
            [&](std::size_t o) { backend.eltwise_forward(Eltwise::erf, n_relu, x.data() + o, z.data() + o); });
    }
    // Erf, which transformers' GELU runs (an exported GELU is Div, Erf, Add, Mul): our own
    // vectorized loop (vector_kernels.cpp), as oneDNN has none.
    time("erf", KernelClass::transcendental, 8.0 * static_cast<double>(n_relu), [&] {
      const auto o = next(n_relu);
      backend.eltwise_forward(Eltwise::erf, n_relu, x.data() + o, y.data() + o);
    });
    // Its gradient, dx = dy 2/sqrt(pi) exp(-x^2): another function over more bytes (x and dy read,
    // dx written), a family of its own.
    time("erf backward", KernelClass::transcendental_backward, 12.0 * static_cast<double>(n_add), [&] {
      const auto o = next(n_add);
      backend.eltwise_backward(Eltwise::erf, n_add, x.data() + o, y.data() + o, z.data() + o);
    });
    // Rows of `width` summed over the rows: a bias gradient, the reduction training runs most. (A
    // sum along the rows runs an order of magnitude faster through oneDNN; the family follows the
    // common case.)
    const std::int64_t rows = std::max<std::int64_t>(1, at_least_one(bytes / 4) / width);
    const Dims full{rows, width}, bias{1, width};
    if (rows >= 2) { // one row would be a copy
      time("bias gradient", KernelClass::reduction, 4.0 * static_cast<double>(rows * width + width), [&] {
        const auto o = next(rows * width);
        backend.reduce_sum(full, x.data() + o, bias, y.data() + o);
      });
    }
    const std::int64_t norm_rows = std::max<std::int64_t>(1, at_least_one(bytes / 8) / width);
    const Dims rows_dims{norm_rows, width};
    time("softmax", KernelClass::softmax, 8.0 * static_cast<double>(norm_rows * width), [&] {
      const auto o = next(norm_rows * width);
      backend.softmax_forward(rows_dims, 1, x.data() + o, y.data() + o);
    });
    const Floats scale = filled_floats(width, 1.F), shift(width);
    time("layer norm", KernelClass::normalization, 8.0 * static_cast<double>(norm_rows * width), [&] {
      const auto o = next(norm_rows * width);
      backend.layer_norm_forward(norm_rows, width, 1e-5F, x.data() + o, scale.data(), shift.data(), y.data() + o,
                                 nullptr, nullptr);
    });
    // Its backward pass: the statistics again, then x and dy read and dx written (12 bytes an
    // element, as op_cost counts them), the scale's and shift's gradients summed over the rows.
    const std::int64_t back_rows = std::max<std::int64_t>(1, at_least_one(bytes / 12) / width);
    Floats d_scale(width), d_shift(width);
    time("layer norm backward", KernelClass::normalization_backward, 12.0 * static_cast<double>(back_rows * width),
         [&] {
           const auto o = next(back_rows * width);
           backend.layer_norm_backward(back_rows, width, 1e-5F, x.data() + o, scale.data(), y.data() + o, z.data() + o,
                                       d_scale.data(), d_shift.data());
         });
    // The weight update, as partita-run steps each weight shard: SGD reads the weight and its
    // gradient and writes the weight; momentum also reads and writes a velocity, Adam m and v.
    const std::int64_t n_sgd = at_least_one(bytes / 12), n_momentum = at_least_one(bytes / 20),
                       n_adam = at_least_one(bytes / 28);
    Floats& w = y;
    time("sgd step", KernelClass::optimizer, 12.0 * static_cast<double>(n_sgd), [&] {
      const auto o = next(n_sgd);
      backend.sgd_update(n_sgd, 1e-6F, x.data() + o, w.data() + o);
    });
    time("momentum step", KernelClass::optimizer, 20.0 * static_cast<double>(n_momentum), [&] {
      const auto o = next(n_momentum);
      backend.momentum_update(n_momentum, 1e-6F, 0.9F, x.data() + o, z.data() + o, w.data() + o);
    });
    int step = 0;
    time("adam step", KernelClass::optimizer, 28.0 * static_cast<double>(n_adam), [&] {
      const auto o = next(n_adam);
      backend.adam_update(n_adam, AdamParameters{}, ++step, x.data() + o, z.data() + o, v.data() + o, w.data() + o);
    });
    if (bytes > 3e7) {
      continue; // Gather, Transpose and Split add little above this size
    }
    // Gather: `picked` rows of a table with as many rows, read in a scattered order.
    const std::int64_t picked = std::max<std::int64_t>(1, at_least_one(bytes / 8) / width);
    OneOpGraph gather("Gather", {{picked, width}, {picked}}, {{picked, width}}, {{"axis", std::int64_t{0}}});
    HostView indices(gather.inputs[1].data, HostView::write_only);
    for (std::int64_t i = 0; i < picked; ++i) {
      indices[static_cast<std::size_t>(i)] = static_cast<float>((i * 7919) % picked);
    }
    indices.commit();
    gather.make_spares(backend);
    time("gather rows", KernelClass::gather, gather.bytes(), [&] {
      gather.cycle();
      run_forward(backend, gather.g, 0, gather.buffers);
    });
    // A transpose that moves the last dim, [rows / 64, 64, width] to [.., width, 64] (a weight's
    // W^T, attention's K^T): every element crosses the rows.
    const std::int64_t blocks = std::max<std::int64_t>(1, picked / 64);
    OneOpGraph transpose("Transpose", {{blocks, 64, width}}, {{blocks, width, 64}},
                         {{"perm", std::vector<std::int64_t>{0, 2, 1}}});
    transpose.make_spares(backend);
    time("transpose", KernelClass::transpose, transpose.bytes(), [&] {
      transpose.cycle();
      run_forward(backend, transpose.g, 0, transpose.buffers);
    });
    // Copies of rows: attention's heads transpose ([.., 64, 4, 64] to [.., 4, 64, 64], the last dim
    // stays) and a Split in two along the rows (Q, K, V out of one product).
    const std::int64_t heads = 4;
    OneOpGraph heads_transpose("Transpose", {{blocks, 64, heads, width / heads}}, {{blocks, heads, 64, width / heads}},
                               {{"perm", std::vector<std::int64_t>{0, 2, 1, 3}}});
    heads_transpose.make_spares(backend);
    time("heads transpose", KernelClass::copy, heads_transpose.bytes(), [&] {
      heads_transpose.cycle();
      run_forward(backend, heads_transpose.g, 0, heads_transpose.buffers);
    });
    OneOpGraph split("Split", {{picked, 2 * width}}, {{picked, width}, {picked, width}}, {{"axis", std::int64_t{1}}});
    split.make_spares(backend);
    time("split", KernelClass::copy, split.bytes(), [&] {
      split.cycle();
      run_forward(backend, split.g, 0, split.buffers);
    });
  }
  return out;
}

std::vector<CollectiveTiming> collective_sweep(cluster::Collective c, MPI_Comm comm, const SweepBudget& budget,
                                               double min_bytes, double max_bytes, double step) {
  using cluster::Collective;
  int rank = 0, p = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &p);
  // A training step's collectives meet their buffers as the kernel that produced them left them:
  // written moments ago by this rank, at an address not used since the last iteration. Timed
  // on one hot buffer in a loop, as nccl-tests and the OSU benchmarks do, a shared-memory
  // all-reduce of 256 KB to 1 MB ran 2-3 times faster than partita-run measured the same sizes
  // (its gradient syncs and input-gradient reduces). So each call here takes the next slot of
  // arenas of at least `cold` bytes and writes its send buffer first (untimed).
  const auto arena = std::max(static_cast<std::size_t>(max_bytes / 4) + static_cast<std::size_t>(p), cold / 4);
  std::vector<float> send(arena, 0.0F), recv(arena, 0.0F);
  std::vector<CollectiveTiming> out;
  for (double bytes = min_bytes; bytes <= max_bytes * (1 + 1e-9); bytes *= step) {
    auto count = static_cast<std::int64_t>(bytes / 4);
    // all-gather, reduce-scatter and all-to-all move count / p per rank: a whole multiple of p.
    if (c == Collective::all_gather || c == Collective::reduce_scatter || c == Collective::all_to_all) {
      count = std::max<std::int64_t>(p, count / p * p);
    }
    count = std::max<std::int64_t>(count, 1);
    if (count > INT_MAX) {
      throw Error(fmt::format("{}: {} elements exceed MPI's int count", cluster::collective_name(c), count));
    }
    const int n = static_cast<int>(count), part = n / p;
    const Slots slots(static_cast<std::size_t>(count), arena);
    const auto at = [&](std::vector<float>& v, int i) { return v.data() + slots.offset(static_cast<std::size_t>(i)); };
    // The producer's write, with the ordinary stores kernels make (a fill of zeros becomes a
    // memset, whose streaming stores leave the buffer in memory, not in the cache: an all-reduce
    // of 1 MB then ran twice as slowly). Rewritten before every call, an in-place all-reduce's
    // values stay bounded.
    const auto prepare = [&](int i) { std::fill_n(at(send, i), count, 1.0F); };
    std::function<void(int)> call;
    switch (c) {
    case Collective::all_reduce: call = [&](int i) { all_reduce_sum(comm, at(send, i), count); }; break;
    case Collective::all_gather:
      call = [&](int i) {
        check_mpi(MPI_Allgather(at(send, i), part, MPI_FLOAT, at(recv, i), part, MPI_FLOAT, comm), "MPI_Allgather");
      };
      break;
    case Collective::reduce_scatter: // as partita-run sums a gradient's slices (reduce_scatter_sum)
      call = [&, parts = std::vector<std::int64_t>(static_cast<std::size_t>(p), part)](int i) {
        reduce_scatter_sum(comm, at(send, i), parts, at(recv, i));
      };
      break;
    case Collective::all_to_all:
      call = [&](int i) {
        check_mpi(MPI_Alltoall(at(send, i), part, MPI_FLOAT, at(recv, i), part, MPI_FLOAT, comm), "MPI_Alltoall");
      };
      break;
    case Collective::broadcast:
      call = [&](int i) { check_mpi(MPI_Bcast(at(send, i), n, MPI_FLOAT, 0, comm), "MPI_Bcast"); };
      break;
    case Collective::send_recv:
      // nccl-tests' sendrecv: every rank sends to the next and receives from the previous at once.
      call = [&](int i) {
        check_mpi(MPI_Sendrecv(at(send, i), n, MPI_FLOAT, (rank + 1) % p, 0, at(recv, i), n, MPI_FLOAT,
                               (rank + p - 1) % p, 0, comm, MPI_STATUS_IGNORE),
                  "MPI_Sendrecv");
      };
      break;
    }
    out.push_back({c, 4.0 * static_cast<double>(count), count, time_each_call(comm, budget, prepare, call)});
  }
  return out;
}

namespace {

// Rows of every pass, checked to be the same rows (`same`, `name` for the error), with their times
// replaced by the median over the passes (`times`: the fields to combine).
template <typename Row, typename Same, typename Name>
std::vector<Row> median_rows(const std::vector<std::vector<Row>>& passes, Same same, Name name,
                             std::initializer_list<double Row::*> times) {
  if (passes.empty()) {
    return {};
  }
  std::vector<Row> out = passes.front();
  for (std::size_t i = 0; i < out.size(); ++i) {
    for (std::size_t p = 1; p < passes.size(); ++p) {
      const auto& rows = passes[p];
      if (rows.size() != out.size() || !same(rows[i], out[i])) {
        throw Error(
            fmt::format("sweep pass {} differs from the first at row {} ({} rows, the first {}; {} there, {} in "
                        "the first)",
                        p + 1, i, rows.size(), out.size(), i < rows.size() ? name(rows[i]) : "nothing", name(out[i])));
      }
    }
    for (const auto field : times) {
      std::vector<double> t;
      for (const auto& rows : passes) {
        t.push_back(rows[i].*field);
      }
      out[i].*field = median(std::move(t));
    }
  }
  return out;
}

} // namespace

std::vector<KernelTiming> median_of_passes(const std::vector<std::vector<KernelTiming>>& passes) {
  return median_rows(
      passes, [](const KernelTiming& a, const KernelTiming& b) { return a.kernel == b.kernel; },
      [](const KernelTiming& r) { return fmt::format("'{}'", r.kernel); },
      {&KernelTiming::seconds, &KernelTiming::cold_seconds});
}

std::vector<CollectiveTiming> median_of_passes(const std::vector<std::vector<CollectiveTiming>>& passes) {
  return median_rows(
      passes,
      [](const CollectiveTiming& a, const CollectiveTiming& b) {
        return a.collective == b.collective && a.bytes == b.bytes;
      },
      [](const CollectiveTiming& r) {
        return fmt::format("{} of {} B", cluster::collective_name(r.collective), r.bytes);
      },
      {&CollectiveTiming::seconds});
}

std::string nccl_table(cluster::Collective c, int ranks, const std::vector<CollectiveTiming>& rows) {
  using cluster::Collective;
  const bool reduces = c == Collective::all_reduce || c == Collective::reduce_scatter;
  std::string out = fmt::format("#\n# {} over {} ranks (bus factor {:.3g})\n#\n", cluster::collective_name(c), ranks,
                                cluster::bus_factor(c, ranks));
  out += fmt::format("# {:>12} {:>12} {:>6} {:>6} {:>5} {:>12} {:>8} {:>8}\n", "size", "count", "type", "redop", "root",
                     "time", "algbw", "busbw");
  out += fmt::format("# {:>12} {:>12} {:>6} {:>6} {:>5} {:>12} {:>8} {:>8}\n", "(B)", "(elements)", "", "", "", "(us)",
                     "(GB/s)", "(GB/s)");
  for (const auto& r : rows) {
    const double algbw = r.bytes / r.seconds / 1e9;
    out += fmt::format("  {:>12.0f} {:>12} {:>6} {:>6} {:>5} {:>12.2f} {:>8.2f} {:>8.2f}\n", r.bytes, r.count, "float",
                       reduces ? "sum" : "none", c == Collective::broadcast ? "0" : "-1", r.seconds * 1e6, algbw,
                       algbw * cluster::bus_factor(c, ranks));
  }
  return out;
}

std::string kernel_table(const std::vector<KernelTiming>& rows, bool flops) {
  std::string out = fmt::format("# {:<30} {:>12} {:>12} {:>12} {:>10}\n", "kernel", "FLOP", "bytes", "time (us)",
                                flops ? "GFLOP/s" : "GB/s");
  for (const auto& r : rows) {
    out += fmt::format("  {:<30} {:>12.4g} {:>12.4g} {:>12.2f} {:>10.2f}\n", r.kernel, r.flops, r.bytes,
                       r.seconds * 1e6, (flops ? r.flops : r.bytes) / r.seconds / 1e9);
  }
  return out;
}

nlohmann::json kernels_json(const std::vector<KernelTiming>& rows, bool compute) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json row{{"kernel", r.kernel},
                       {"class", std::string(graph::kernel_class_name(r.kernel_class))},
                       {"flops", r.flops},
                       {"bytes", r.bytes},
                       {"seconds", r.seconds}};
    if (compute) {
      row["compute_class"] = std::string(graph::compute_class_name(r.compute_class));
    }
    if (r.operand_bytes > 0) {
      row["operand_bytes"] = r.operand_bytes;
    }
    if (r.fresh_bytes > 0) {
      row["fresh_bytes"] = r.fresh_bytes;
      row["cold_seconds"] = r.cold_seconds;
    }
    out.push_back(std::move(row));
  }
  return out;
}

} // namespace partita::runtime
