// partita-run: executes a plan for real over MPI (DESIGN.md section 5).
//   mpirun -np P partita-run plan.json [--warmup N] [--iterations N] [--verify] [--trace FILE]
//                                     [--measurements FILE]

#include "backend.h"
#include "executor.h"
#include "op_kernels.h"
#include "pipeline_executor.h"
#include "plan_loading.h"
#include "trace.h"
#include "verify.h"

#include "partita/graph/error.h"
#include "partita/io/json_file.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <optional>

namespace {

using namespace partita;
using namespace partita::runtime;

struct Options {
  std::string plan;
  int warmup = 1;
  int iterations = 5;
  bool verify = false;
  double tolerance = 1e-4;
  std::string trace;
  std::string measurements;
  int threads = 1;
  float learning_rate = 0.01F;
};

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

// The plan's executor: one Executor over every rank, or a pipeline of stages.
struct Runner {
  std::optional<Executor> flat;
  std::unique_ptr<PipelineExecutor> pipeline;

  void forward_backward() {
    if (pipeline) {
      pipeline->forward_backward();
    } else {
      flat->forward();
      flat->backward();
    }
  }
  void synchronize_gradients() { pipeline ? pipeline->synchronize_gradients() : flat->synchronize_gradients(); }
  void step(float lr) { pipeline ? pipeline->step(lr) : flat->step(lr); }
  std::vector<Snapshot> snapshot() { return pipeline ? pipeline->snapshot() : flat->snapshot(); }
  int communicators() const { return pipeline ? pipeline->communicators() : flat->communicators(); }
  const std::vector<std::pair<graph::OpId, std::string>>& stand_ins() const {
    return pipeline ? pipeline->stand_ins() : flat->stand_ins();
  }
  void iteration(float lr) {
    forward_backward();
    synchronize_gradients();
    step(lr);
  }
};

int run(const Options& opt, int rank, int size) {
  std::optional<LoadedPlan> loaded;
  std::optional<std::string> failure;
  try {
    loaded = load_plan(opt.plan, size);
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
  const graph::Graph& g = loaded->imported.graph;
  auto backend = make_cpu_backend(opt.threads);
  Recorder recorder;
  Runner ex;
  if (loaded->pipelined()) {
    const graph::Graph& micro = loaded->micro ? loaded->micro->graph : g;
    ex.pipeline = std::make_unique<PipelineExecutor>(g, micro, loaded->strategy, MPI_COMM_WORLD, *backend, recorder,
                                                     loaded->micro ? loaded->micro_constants : loaded->constants);
  } else {
    ex.flat.emplace(g, loaded->strategy, MPI_COMM_WORLD, *backend, recorder, loaded->constants);
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
    ex.forward_backward();
    ex.synchronize_gradients();
    const auto snaps = ex.snapshot();
    std::optional<Executor> reference;
    Recorder unused;
    const auto single = single_device(g);
    if (rank == 0) {
      reference.emplace(g, single, MPI_COMM_SELF, *backend, unused, loaded->constants);
      reference->forward();
      reference->backward();
      reference->synchronize_gradients();
    }
    const auto result = verify(g, snaps, reference ? &*reference : nullptr, MPI_COMM_WORLD, opt.tolerance);
    int ok = result.passed ? 1 : 0;
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    passed = ok != 0;
    if (rank == 0) {
      fmt::print(
          "verify against the single-device reference (tolerance {:g} of max(|reference|, 1e-3)):\n{}verify: {}\n",
          opt.tolerance, result.report, passed ? "PASSED" : "FAILED");
      std::fflush(stdout);
    }
    ex.step(opt.learning_rate);
  }

  for (int i = 0; i < opt.warmup; ++i) {
    ex.iteration(opt.learning_rate);
  }
  recorder.enable(true);
  MPI_Barrier(MPI_COMM_WORLD);
  recorder.set_origin(MPI_Wtime());
  for (int i = 0; i < opt.iterations; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    recorder.set_iteration(i);
    const double t0 = MPI_Wtime();
    ex.iteration(opt.learning_rate);
    recorder.add(rank, -1, Phase::iteration, t0, MPI_Wtime());
  }
  const auto all = gather_records(recorder.records(), MPI_COMM_WORLD);
  if (rank == 0) {
    const auto summary = summarize(g, all, opt.iterations);
    fmt::print("{}", text_summary(g, summary));
    if (loaded->predicted_iteration_seconds > 0) {
      fmt::print("predicted iteration time (plan): {:.4f} ms\n", loaded->predicted_iteration_seconds * 1e3);
    }
    if (!opt.trace.empty()) {
      io::write_file_atomically(opt.trace, chrome_trace_json(g, all));
      fmt::print("trace written to {}\n", opt.trace);
    }
    if (!opt.measurements.empty()) {
      io::write_file_atomically(opt.measurements, measurements_json(g, summary, loaded->model, loaded->family, size));
      fmt::print("measurements written to {}\n", opt.measurements);
    }
    std::fflush(stdout);
  }
  return passed ? 0 : 3;
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
  app.add_option("--warmup", opt.warmup, "untimed iterations first")->check(CLI::NonNegativeNumber);
  app.add_option("--iterations", opt.iterations, "timed iterations")->check(CLI::PositiveNumber);
  app.add_flag("--verify", opt.verify, "compare one iteration with the unsharded single-device reference");
  app.add_option("--tolerance", opt.tolerance, "relative tolerance of --verify");
  app.add_option("--trace", opt.trace, "Chrome Trace Event JSON written by rank 0");
  app.add_option("--measurements", opt.measurements,
                 "per-op mean times and iteration mean/min/max as JSON, written by rank 0 (read by partita run)");
  app.add_option("--threads", opt.threads, "compute threads per rank")->check(CLI::PositiveNumber);
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
