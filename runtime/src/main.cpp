// partita-run: executes a plan for real over MPI.
//   mpirun -np P partita-run plan.json [--warmup N] [--iterations N] [--verify] [--trace FILE]
//                                     [--measurements FILE] [--timeout SECONDS] [--backend cpu|cpu-guarded|cuda]
//                                     [--host-check FILE]

#include "backends.h"
#include "collectives.h"
#include "executor.h"
#include "op_kernels.h"
#include "pipeline_executor.h"
#include "plan_loading.h"
#include "sweeps.h"
#include "trace.h"
#include "validators.h"
#include "verify.h"
#include "watchdog.h"

#include "partita/graph/error.h"
#include "partita/io/checksum.h"
#include "partita/io/json_file.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

namespace {

using namespace partita;
using namespace partita::runtime;

struct Options {
  std::string plan;
  int warmup = 1;
  int iterations = 5;
  bool verify = false;
  std::optional<double> tolerance; // none: default_tolerance(precision)
  std::string precision;           // empty: the plan's
  std::string trace;
  std::string measurements;
  int threads = 1;
  std::string backend = "cpu";
  std::string reference_backend; // empty: --backend's
  double timeout = 300;
  std::string inject_fault;
  bool overlap_gradients = false;
  double bucket_mb = 25;
  std::string host_check;
};

// What a failing rank needs to leave its partial results behind: set once the plan is loaded.
struct FailureContext {
  const Options* options = nullptr;
  const graph::Graph* graph = nullptr;
  const Recorder* recorder = nullptr;
  RunInfo info;
  int rank = 0;
};
FailureContext g_failure;

// "dir/trace.json" -> "dir/trace.rank1.partial.json".
std::filesystem::path partial_path(const std::string& file, int rank) {
  const std::filesystem::path p(file);
  return p.parent_path() / fmt::format("{}.rank{}.partial{}", p.stem().string(), rank, p.extension().string());
}

// Writes this rank's records (the Chrome trace and the RunResult, where asked for) and says where.
// Never throws: it runs on the way out of a failure.
void write_partial_results(const std::string& failure) {
  const auto& c = g_failure;
  if (c.options == nullptr || c.recorder == nullptr) {
    return;
  }
  try {
    const auto mine = c.recorder->copy();
    if (!c.options->trace.empty()) {
      const auto path = partial_path(c.options->trace, c.rank);
      io::write_file_atomically(path, chrome_trace_json(*c.graph, mine));
      std::fprintf(stderr, "partita-run: rank %d: partial trace written to %s\n", c.rank, path.c_str());
    }
    if (!c.options->measurements.empty()) {
      const auto path = partial_path(c.options->measurements, c.rank);
      io::write_json_file(path, partial_result(mine, c.info, c.rank, failure));
      std::fprintf(stderr, "partita-run: rank %d: partial measurements written to %s\n", c.rank, path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "partita-run: rank %d: could not write partial results: %s\n", c.rank, e.what());
  }
  std::fflush(stderr);
}

double peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0; // Linux reports KiB
}

// Every rank's memory, on rank 0.
std::vector<proto::RankMemory> gather_memory(double tensor_bytes, int rank, int size) {
  const double mine[2] = {tensor_bytes, peak_resident_bytes()};
  std::vector<double> all(rank == 0 ? static_cast<std::size_t>(2 * size) : 0);
  check_mpi(MPI_Gather(mine, 2, MPI_DOUBLE, all.data(), 2, MPI_DOUBLE, 0, MPI_COMM_WORLD), "MPI_Gather");
  std::vector<proto::RankMemory> out;
  for (int r = 0; rank == 0 && r < size; ++r) {
    proto::RankMemory m;
    m.set_rank(r);
    m.set_tensor_bytes(all[static_cast<std::size_t>(2 * r)]);
    m.set_peak_resident_bytes(all[static_cast<std::size_t>(2 * r + 1)]);
    out.push_back(m);
  }
  return out;
}

// A check every rank makes before anything starts: when any rank fails it, the lowest such rank
// prints its reason and every rank returns false, so the job ends cleanly rather than hanging.
bool agree(const std::optional<std::string>& failure, int rank, const char* what) {
  const int mine = failure ? rank : INT32_MAX;
  int first = INT32_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == INT32_MAX) {
    return true;
  }
  if (rank == first) {
    std::fprintf(stderr, "partita-run: %s (rank %d): %s\n", what, rank, failure->c_str());
    std::fflush(stderr);
  }
  return false;
}

std::string optimizer_text(const OptimizerSettings& o) {
  switch (o.kind) {
  case cost::Optimizer::sgd: return fmt::format("sgd (learning rate {:g})", o.learning_rate);
  case cost::Optimizer::momentum:
    return fmt::format("momentum (learning rate {:g}, momentum {:g})", o.learning_rate, o.momentum);
  case cost::Optimizer::adam:
    return fmt::format("adam (learning rate {:g}, betas {:g}/{:g}, epsilon {:g}, bias-corrected)", o.adam.learning_rate,
                       o.adam.beta1, o.adam.beta2, o.adam.epsilon);
  }
  return "?";
}

// --verify's default tolerance for a precision: fp32's 1e-4 of the largest magnitude; for mixed
// precision, checked against fp32 by the rms error, 0.1 for tf32 and fp16 and 0.5 for bf16 (8
// significant bits). Measured on the tests' small models after one iteration (rms): up to 0.05
// with 11 significant bits and 0.35 with bf16's 8, on the scale gradient of a BatchNorm, a sum of
// dy * xhat over the batch and pixels whose terms cancel (its error grows as the square root of
// their count over the sum); most tensors 1e-3 to 1e-2.
double default_tolerance(Rounding r) {
  switch (r) {
  case Rounding::none: return 1e-4;
  case Rounding::tf32:
  case Rounding::fp16: return 0.1;
  case Rounding::bf16: return 0.5;
  }
  return 1e-4;
}

std::optional<cluster::Precision> precision_named(std::string_view name) {
  for (const auto p : {cluster::Precision::fp32, cluster::Precision::tf32, cluster::Precision::fp16,
                       cluster::Precision::bf16, cluster::Precision::fp8}) {
    if (cluster::precision_name(p) == name) {
      return p;
    }
  }
  return std::nullopt;
}

// fp16's dynamic loss scaling, as PyTorch's GradScaler does it: the loss gradient (and so every
// gradient) is multiplied by the scale, so that small gradients survive fp16's range; once the
// gradients are synchronized they are divided by it and checked on every rank. A step with an
// infinite or NaN gradient anywhere is skipped and the scale halved; 2000 steps in a row without
// one double it.
struct LossScaler {
  static constexpr float initial = 65536.F;
  static constexpr int growth_interval = 2000;
  float scale = initial;
  int good_steps = 0;
  int skipped = 0;
  bool skip_next = false;
};

// The plan's executor: one Executor over every rank, or a pipeline of stages.
struct Runner {
  std::optional<Executor> flat;
  std::unique_ptr<PipelineExecutor> pipeline;
  Backend* backend = nullptr;
  std::optional<LossScaler> scaler; // fp16 only
  Floats overflow;                  // the scaler's flag, one float of tensor memory

  void forward_backward() {
    if (scaler) {
      pipeline ? pipeline->set_loss_scale(scaler->scale) : flat->set_loss_scale(scaler->scale);
    }
    if (pipeline) {
      pipeline->forward_backward();
    } else {
      flat->forward();
      flat->backward();
    }
  }
  // Then, under loss scaling, the gradients unscaled and checked, every rank agreeing.
  void synchronize_gradients() {
    pipeline ? pipeline->synchronize_gradients() : flat->synchronize_gradients();
    if (!scaler) {
      return;
    }
    if (overflow.empty()) {
      overflow = uninitialized_floats(1);
    }
    backend->fill(1, 0.F, overflow.data());
    const float factor = 1.F / scaler->scale;
    pipeline ? pipeline->unscale_gradients(factor, overflow.data()) : flat->unscale_gradients(factor, overflow.data());
    backend->synchronize();
    float flag = 0;
    to_host(overflow, 0, std::span<float>(&flag, 1));
    int mine = flag != 0 ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    scaler->skip_next = any != 0;
  }
  void step() {
    if (scaler && scaler->skip_next) {
      scaler->skip_next = false;
      ++scaler->skipped;
      scaler->scale /= 2;
      scaler->good_steps = 0;
      return;
    }
    pipeline ? pipeline->step() : flat->step();
    if (scaler && ++scaler->good_steps == LossScaler::growth_interval) {
      scaler->scale *= 2;
      scaler->good_steps = 0;
    }
  }
  void poison_gradients() { pipeline ? pipeline->poison_gradients() : flat->poison_gradients(); }
  void set_gradient_overlap(double bucket_bytes) {
    pipeline ? pipeline->set_gradient_overlap(bucket_bytes) : flat->set_gradient_overlap(bucket_bytes);
  }
  int overlapped_sums() const { return pipeline ? pipeline->overlapped_sums() : flat->overlapped_sums(); }
  std::vector<Snapshot> snapshot() { return pipeline ? pipeline->snapshot() : flat->snapshot(); }
  std::vector<Snapshot> weight_snapshot() const {
    return pipeline ? pipeline->weight_snapshot() : flat->weight_snapshot();
  }
  int communicators() const { return pipeline ? pipeline->communicators() : flat->communicators(); }
  double held_bytes() const { return pipeline ? pipeline->held_bytes() : flat->held_bytes(); }
  const std::vector<std::pair<graph::OpId, std::string>>& stand_ins() const {
    return pipeline ? pipeline->stand_ins() : flat->stand_ins();
  }
  void iteration() {
    forward_backward();
    synchronize_gradients();
    step();
  }
};

// The host's speed as partita-calibrate --probe times it (a GEMM of each family, the memory-bound
// kernels of two sizes, the all-reduce inside a node from 8 B up with the sizes of 128 KiB and more
// kept): before the warm-up and after the timed iterations, so that a caller can tell whether this
// run met the host at its calibrated speed. On this project's 2-vCPU virtual machine the
// shared-memory collectives run at one of two speeds about 2.5x apart, switching from one process
// to the next, and the whole host has slow spells (another tenant) in which every kernel of a run
// takes 1.3-1.5 times its calibrated time; a run measured so measures the host, not the model
// (bench/runtime_bench.py runs such a case again). Every rank calls it; it runs no collective when
// a node holds one rank. Each row carries `when`.
struct HostCheck {
  nlohmann::json compute = nlohmann::json::array(), memory = nlohmann::json::array(),
                 collectives = nlohmann::json::array();
};

void time_host(Backend& backend, const char* when, HostCheck& out) {
  const SweepBudget budget{};
  const auto tag = [when](nlohmann::json rows, nlohmann::json& into) {
    for (auto& row : rows) {
      row["when"] = when;
      into.push_back(std::move(row));
    }
  };
  tag(kernels_json(gemm_sweep(backend, MPI_COMM_WORLD, budget, 8.5, 8.5, 4), true), out.compute);
  tag(kernels_json(memory_sweep(backend, MPI_COMM_WORLD, budget, 6.5, 7, 2), false), out.memory);
  MPI_Comm local = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  int per_node = 1;
  MPI_Comm_size(local, &per_node);
  if (per_node > 1) {
    auto timed = collective_sweep(cluster::Collective::all_reduce, local, budget, 8, 2.0 * 1024 * 1024, 4);
    for (const auto& r : timed) {
      if (r.bytes >= 128.0 * 1024) {
        out.collectives.push_back({{"when", when},
                                   {"collective", std::string(cluster::collective_name(r.collective))},
                                   {"ranks", per_node},
                                   {"bytes", r.bytes},
                                   {"seconds", r.seconds}});
      }
    }
  }
  MPI_Comm_free(&local);
}

int run(const Options& opt, int rank, int size) {
  if (!agree(backend_unavailable(opt.backend), rank, fmt::format("--backend {}", opt.backend).c_str())) {
    return 2;
  }
  if (!opt.reference_backend.empty()) {
    std::optional<std::string> why = backend_unavailable(opt.reference_backend);
    if (!why && !opt.verify) {
      why = "it is the backend of --verify's reference, and --verify was not given";
    }
    if (!agree(why, rank, fmt::format("--reference-backend {}", opt.reference_backend).c_str())) {
      return 2;
    }
  }
  std::optional<LoadedPlan> loaded;
  std::optional<std::string> failure;
  std::uint64_t plan_hash = 0; // of the bytes this rank read: every rank must run the same plan
  try {
    plan_hash = io::fnv1a64(io::read_text_file(opt.plan));
    loaded = load_plan(opt.plan, size);
    if (!opt.precision.empty()) {
      const auto p = precision_named(opt.precision);
      if (!p) {
        throw Error(fmt::format("--precision {}: not a precision (fp32, tf32, fp16 or bf16)", opt.precision));
      }
      if (*p != loaded->setup.precision) {
        loaded->notes.push_back(fmt::format("--precision {} instead of the plan's {}: the plan's prediction is for {}",
                                            opt.precision, cluster::precision_name(loaded->setup.precision),
                                            cluster::precision_name(loaded->setup.precision)));
      }
      loaded->setup.precision = *p;
    }
    (void)rounding_of(loaded->setup.precision); // fp8 is refused here, on every rank alike
    if (rank == 0) {
      // Rank 0 writes these at the end: a path that cannot take them is found now, not after the run.
      for (const auto* out : {&opt.trace, &opt.measurements, &opt.host_check}) {
        if (!out->empty()) {
          io::check_writable(*out);
        }
      }
    }
    if (opt.verify) {
      std::string missing;
      for (std::size_t id = 0; id < loaded->imported.graph.ops().size(); ++id) {
        const auto why = missing_kernel(loaded->imported.graph, static_cast<graph::OpId>(id));
        if (!why.empty()) {
          missing += fmt::format("\n  op '{}': {}", loaded->imported.graph.op(static_cast<graph::OpId>(id)).name, why);
        }
      }
      if (!missing.empty()) {
        throw Error("--verify needs a kernel for every op (stand-ins prove nothing); missing:" + missing);
      }
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!agree(failure, rank, "plan refused")) {
    return 2;
  }
  // Ranks on other hosts read their own copy of the plan file: the same plan everywhere, or none starts.
  {
    std::vector<std::uint64_t> hashes(static_cast<std::size_t>(size));
    MPI_Allgather(&plan_hash, 1, MPI_UINT64_T, hashes.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    std::optional<std::string> differs;
    for (int r = 1; r < size && rank == 0 && !differs; ++r) {
      if (hashes[static_cast<std::size_t>(r)] != hashes[0]) {
        differs = fmt::format("rank {} read another plan from '{}' than rank 0 (checksum {} against {}): every host "
                              "must hold the same plan file",
                              r, opt.plan, io::checksum_text(hashes[static_cast<std::size_t>(r)]),
                              io::checksum_text(hashes[0]));
      }
    }
    if (!agree(differs, rank, "plan refused")) {
      return 2;
    }
  }
  const graph::Graph& g = loaded->imported.graph;
  const Training training = training_of(loaded->setup);
  const double tolerance = opt.tolerance.value_or(default_tolerance(training.matrix));
  auto backend = make_backend(opt.backend, opt.threads, MPI_COMM_WORLD);
  // --verify's reference on the backend named (another instance, even of the same kind): rank 0 alone runs it. Tensor
  // memory stays what the run's backend made it; a reference on the CPU keeps its own tensors in host memory (below).
  std::unique_ptr<Backend> reference_backend;
  if (opt.verify && rank == 0 && !opt.reference_backend.empty()) {
    const TensorMemoryScope keep(tensor_memory()); // making the reference's backend leaves the run's memory in place
    reference_backend = make_backend(opt.reference_backend, opt.threads, MPI_COMM_SELF);
  }
  Recorder recorder;
  g_failure = {&opt, &g, &recorder,
               RunInfo{loaded->model, loaded->family, std::string(backend->name()), size, opt.threads,
                       loaded->predicted_iteration_seconds},
               rank};
  Watchdog watchdog(opt.timeout, [&](const Heartbeat& last) {
    const std::string where =
        last.op < 0 ? fmt::format("no step completed yet, during {}", last.activity)
                    : fmt::format("last completed step: {} of op '{}' ({}{})", phase_name(last.phase),
                                  g.op(last.op).name, last.activity,
                                  last.activity == "timed iterations" ? fmt::format(", iteration {}", last.iteration)
                                                                      : std::string());
    const std::string reason = fmt::format("no progress for {:.0f} s (--timeout {:g}); {}; ending the job",
                                           last.idle_seconds, opt.timeout, where);
    std::fprintf(stderr, "partita-run: rank %d: %s\n", rank, reason.c_str());
    std::fflush(stderr);
    write_partial_results(reason);
    std::_Exit(4); // mpirun sees a rank end without MPI_Finalize and ends the others
  });
  // g_failure points into this frame: cleared before the frame goes.
  struct Clear {
    ~Clear() { g_failure = {}; }
  } clear_on_exit;
  watchdog.set_activity("start-up");
  std::optional<Fault> fault;
  if (!opt.inject_fault.empty()) {
    fault = parse_fault(opt.inject_fault);
  }
  recorder.set_step_hook([&](graph::OpId op, Phase phase) {
    watchdog.beat(op, phase, recorder.iteration());
    if (fault) {
      inject(*fault, g, rank, op, phase, recorder.enabled() ? recorder.iteration() : -1);
    }
  });
  // Any failure from here on leaves this rank's partial results before the job ends.
  try {
    Runner ex;
    ex.backend = backend.get();
    if (training.matrix == Rounding::fp16) {
      ex.scaler.emplace();
    }
    if (loaded->pipelined()) {
      const graph::Graph& micro = loaded->micro ? loaded->micro->graph : g;
      ex.pipeline =
          std::make_unique<PipelineExecutor>(g, micro, loaded->strategy, MPI_COMM_WORLD, *backend, recorder, training,
                                             loaded->micro ? loaded->micro_constants : loaded->constants);
    } else {
      ex.flat.emplace(g, loaded->strategy, MPI_COMM_WORLD, *backend, recorder, training, loaded->constants);
    }
    if (opt.overlap_gradients) {
      ex.set_gradient_overlap(opt.bucket_mb * 1e6);
    }
    if (rank == 0) {
      fmt::print("partita-run: {} ({} strategy) on {} ranks, backend {}, {} thread(s) per rank, {} sub-communicators\n",
                 loaded->model, loaded->family, size, backend->name(), opt.threads, ex.communicators());
      if (loaded->pipelined()) {
        const auto& pipe = *loaded->strategy.pipeline;
        fmt::print("  pipeline: {} stages of {} ranks, {} micro-batches of {} samples, {} schedule\n", pipe.stages,
                   size / pipe.stages, pipe.micro_batches, strategy::batch_size(g) / pipe.micro_batches,
                   strategy::schedule_name(pipe.schedule));
      }
      fmt::print("  precision: {}\n",
                 training.matrix == Rounding::none
                     ? std::string("fp32")
                     : fmt::format("{} matrix products and convolutions (operands rounded to {}, fp32 accumulation "
                                   "and results; tensors, recurrent layers, normalizations and the optimizer in "
                                   "fp32){}",
                                   cluster::precision_name(loaded->setup.precision),
                                   cluster::precision_name(loaded->setup.precision),
                                   ex.scaler ? fmt::format(", dynamic loss scaling from {:g}", LossScaler::initial)
                                             : std::string()));
      fmt::print("  optimizer: {}{}\n", optimizer_text(training.optimizer),
                 training.zero_stage > 0
                     ? fmt::format(", ZeRO-{} over each weight's data-parallel replicas", training.zero_stage)
                     : std::string());
      if (opt.overlap_gradients) {
        fmt::print("  gradients: summed over their replicas during the backward pass, in buckets of {:g} MB{}\n",
                   opt.bucket_mb,
                   backend->name().starts_with("cpu") ? " (MPI moves the sums on between the backward kernels)" : "");
      }
      for (const auto& note : loaded->notes) {
        fmt::print("  note: {}\n", note);
      }
      for (const auto& [op, why] : ex.stand_ins()) {
        fmt::print("  op '{}' runs a memory-bound stand-in: {}\n", g.op(op).name, why);
      }
      std::fflush(stdout);
    }

    bool passed = true;
    if (opt.verify) {
      watchdog.set_activity("verify");
      // One iteration, step included: outputs and gradients are compared, then the weights after
      // the optimizer step (ZeRO's all-gather included). The gradient buffers start as NaN, as
      // a timed iteration finds them full of the last one's values.
      ex.poison_gradients();
      ex.forward_backward();
      ex.synchronize_gradients();
      auto snaps = ex.snapshot();
      if (ex.scaler) { // activation gradients still carry the loss scale (weight gradients were unscaled)
        for (auto& snap : snaps) {
          if (snap.kind == Held::input_gradient) {
            for (auto& v : snap.shard.data) {
              v /= ex.scaler->scale;
            }
          }
        }
      }
      ex.step();
      for (auto& w : ex.weight_snapshot()) {
        snaps.push_back(std::move(w));
      }
      std::optional<Executor> reference;
      Recorder unused;
      const auto single = single_device(g);
      // A reference on the CPU beside a GPU run keeps its tensors in host memory.
      std::optional<TensorMemoryScope> on_host;
      if (reference_backend && reference_backend->kernels_on_host()) {
        on_host.emplace(host_memory());
      }
      if (rank == 0) {
        // The same optimizer on one device: nothing to shard, ZeRO or not.
        // fp32 whatever the run's precision: mixed precision is checked against fp32.
        reference.emplace(g, single, MPI_COMM_SELF, reference_backend ? *reference_backend : *backend, unused,
                          Training{training.optimizer, 0, Rounding::none}, loaded->constants);
        reference->forward();
        reference->backward();
        reference->synchronize_gradients();
        reference->step();
      }
      const auto result = verify(g, snaps, reference ? &*reference : nullptr, MPI_COMM_WORLD, tolerance,
                                 training.optimizer.kind == cost::Optimizer::adam ? &training.optimizer.adam : nullptr,
                                 training.matrix == Rounding::none ? VerifyNorm::max : VerifyNorm::rms);
      int ok = result.passed ? 1 : 0;
      MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
      passed = ok != 0;
      if (rank == 0) {
        fmt::print("verify against the single-device {}reference{} (tolerance {:g} {}):\n{}verify: {}\n",
                   training.matrix != Rounding::none ? "fp32 " : "",
                   reference_backend ? fmt::format(" on backend {}", reference_backend->name()) : std::string(),
                   tolerance,
                   training.matrix != Rounding::none ? "of the rms error over max(rms of the reference, 1e-3)"
                                                     : "of max(|reference|, 1e-3)",
                   result.report, passed ? "PASSED" : "FAILED");
        std::fflush(stdout);
      }
    }

    HostCheck host_check;
    if (!opt.host_check.empty()) {
      watchdog.set_activity("the host check before the warm-up");
      time_host(*backend, "before", host_check);
    }
    watchdog.set_activity("warm-up");
    // Rank 0 says where the run is, one line per iteration (the GUI's and `partita run`'s progress).
    const auto progress = [&](const char* what, int i, int n) {
      if (rank == 0) {
        fmt::print("progress: {} {}/{}\n", what, i, n);
        std::fflush(stdout);
      }
    };
    for (int i = 0; i < opt.warmup; ++i) {
      ex.iteration();
      progress("warm-up", i + 1, opt.warmup);
    }
    watchdog.set_activity("timed iterations");
    recorder.enable(true);
    MPI_Barrier(MPI_COMM_WORLD);
    recorder.set_origin(MPI_Wtime());
    for (int i = 0; i < opt.iterations; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      recorder.set_iteration(i);
      const double t0 = MPI_Wtime();
      ex.iteration();
      recorder.add(rank, -1, Phase::iteration, t0, MPI_Wtime());
      progress("timed", i + 1, opt.iterations);
    }
    if (!opt.host_check.empty()) {
      watchdog.set_activity("the host check after the timed iterations");
      time_host(*backend, "after", host_check);
      if (rank == 0) {
        io::write_file_atomically(opt.host_check, nlohmann::json{{"format", "partita-run host check 2"},
                                                                 {"compute", host_check.compute},
                                                                 {"memory", host_check.memory},
                                                                 {"collectives", host_check.collectives}}
                                                          .dump(1) +
                                                      "\n");
      }
    }
    watchdog.set_activity("gathering the records");
    const auto all = gather_records(recorder.records(), MPI_COMM_WORLD);
    const auto memory = gather_memory(ex.held_bytes(), rank, size);
    int overlapped = 0;
    const int mine = ex.overlapped_sums();
    MPI_Reduce(&mine, &overlapped, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      const auto summary = summarize(g, all, opt.iterations);
      fmt::print("{}", text_summary(g, summary));
      if (opt.overlap_gradients) {
        fmt::print("gradient sums started during the backward pass: {} (every rank, every iteration{})\n", overlapped,
                   opt.verify ? ", --verify's included" : "");
      }
      double most_tensor = 0, most_resident = 0;
      for (const auto& m : memory) {
        most_tensor = std::max(most_tensor, m.tensor_bytes());
        most_resident = std::max(most_resident, m.peak_resident_bytes());
      }
      fmt::print("memory (largest rank): tensors held {:.2f} MiB, peak resident {:.1f} MiB\n", most_tensor / 1048576.0,
                 most_resident / 1048576.0);
      if (loaded->predicted_iteration_seconds > 0) {
        fmt::print("predicted iteration time (plan): {:.4f} ms\n", loaded->predicted_iteration_seconds * 1e3);
      }
      if (!opt.trace.empty()) {
        io::write_file_atomically(opt.trace, chrome_trace_json(g, all));
        fmt::print("trace written to {}\n", opt.trace);
      }
      if (!opt.measurements.empty()) {
        io::write_json_file(opt.measurements, run_result(g, summary, all, g_failure.info, memory));
        fmt::print("measurements written to {}\n", opt.measurements);
      }
      std::fflush(stdout);
    }
    return passed ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "partita-run: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    write_partial_results(fmt::format("rank {}: {}", rank, e.what()));
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  CLI::App app{"partita-run: execute a Partita plan over MPI (start with mpirun -np P)"};
  Options opt;
  app.add_option("plan", opt.plan, "plan file written by `partita plan -o`")->required();
  app.add_option("--warmup", opt.warmup, "untimed iterations first")
      ->check(partita::cli::whole(0, 1000000, "iterations"));
  app.add_option("--iterations", opt.iterations, "timed iterations")
      ->check(partita::cli::whole(1, 1000000, "iterations"));
  app.add_flag("--verify", opt.verify,
               "compare one iteration (outputs, gradients, and the weights after the optimizer step) with the "
               "unsharded single-device reference");
  app.add_option("--tolerance", opt.tolerance,
                 "relative tolerance of --verify (default 1e-4; with mixed precision, which is checked against an "
                 "fp32 reference, 1e-2 for tf32 and fp16, 5e-2 for bf16)")
      ->check(partita::cli::real(1e-12, 1, "(relative)"));
  app.add_option("--precision", opt.precision,
                 "arithmetic of matrix products and convolutions (default: the plan's): fp32, or mixed precision "
                 "tf32, fp16 (with dynamic loss scaling) or bf16: operands rounded to it, fp32 accumulation, fp32 "
                 "tensors and master weights");
  app.add_option("--trace", opt.trace, "Chrome Trace Event JSON written by rank 0");
  app.add_option("--measurements", opt.measurements,
                 "per-op mean times and iteration mean/min/max as JSON, written by rank 0 (read by partita run)");
  app.add_option("--threads", opt.threads, "compute threads per rank")->check(partita::cli::whole(1, 1024, "threads"));
  app.add_option("--backend", opt.backend,
                 fmt::format("kernels and collectives: cpu (oneDNN, MPI), cpu-guarded (the same with tensor "
                             "memory closed to the host outside kernels, as a GPU's is: finds host accesses) or cuda "
                             "(cuBLAS/cuDNN, NCCL; one GPU per rank); this binary has: {}",
                             fmt::join(backend_names(), ", ")));
  app.add_option(
      "--reference-backend", opt.reference_backend,
      "the backend --verify's single-device reference runs on (default: --backend's): `--backend cuda "
      "--reference-backend cpu` checks the CUDA kernels against oneDNN's on the same plan, weights and inputs");
  app.add_option("--timeout", opt.timeout,
                 "seconds without progress after which a rank ends the job, writing its partial trace (0: never)")
      ->check(partita::cli::real(0, 7 * 24 * 3600, "seconds"));
  auto* overlap =
      app.add_flag("--overlap-gradients", opt.overlap_gradients,
                   "sum each weight's gradient over its replicas during the backward pass, as PyTorch DDP does: "
                   "gradients in buckets (--bucket-mb) started as the backward pass fills them; default: all summed "
                   "after the backward pass");
  app.add_option("--bucket-mb", opt.bucket_mb,
                 "--overlap-gradients: start a bucket's sums once it holds this many MB of gradients (DDP's 25)")
      ->check(partita::cli::real(1e-6, 1e6, "MB"))
      ->needs(overlap);
  app.add_option("--host-check", opt.host_check,
                 "time the host as partita-calibrate --probe does (a GEMM of each family, the memory-bound kernels "
                 "of two sizes, the all-reduce inside a node) before the warm-up and after the timed iterations, "
                 "outside the timed iterations, and write the times to FILE (rank 0): which speed the host ran at "
                 "during this run");
  app.add_option("--inject-fault", opt.inject_fault,
                 "for testing robustness: fail:RANK:OP[:ITERATION] throws, hang:RANK:OP[:ITERATION] blocks, in the "
                 "forward of op OP in that timed iteration (default 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 1);
    MPI_Finalize();
    return code;
  }

  int code = 0;
  try {
    code = run(opt, rank, size);
  } catch (const std::exception& e) {
    // Any rank's failure ends the whole job with the rank and the reason; never a hang.
    std::fprintf(stderr, "partita-run: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}
