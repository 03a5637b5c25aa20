// partita-calibrate: the measurements `partita calibrate` fits a cluster profile on.
// Compute (GEMMs, convolutions) and memory sweeps of the CPU backend on every rank at
// once, then collective sweeps inside a node and, when the job spans nodes, between nodes (one
// rank per node). The sweeps run in several passes (kernels, collectives, kernels, collectives, ...)
// and every timing keeps its median pass: a shared host has slow spells (GEMMs seen at half their
// rate for minutes) and its shared-memory collectives swing by up to twice from one moment to the
// next; a training step meets them at their typical speed.
//   mpirun -np P partita-calibrate -o measurements.json [--quick] [--threads N] [--passes N]
//   mpirun -np P partita-calibrate --probe -o probe.json   (the GEMMs of 10^8.5 FLOPs, the memory-bound
//                                                           kernels of 10^6.5 and 10^7 bytes and the all-reduce
//                                                           of 128 KiB, 512 KiB and 2 MiB alone: is the host at
//                                                           its calibrated speed now?)

#include "backend.h"
#include "backends.h"
#include "collectives.h"
#include "sweeps.h"
#include "tensor_memory.h"
#include "validators.h"

#include "partita/graph/error.h"
#include "partita/io/json_file.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <exception>
#include <numeric>

namespace {

using namespace partita;
using namespace partita::runtime;
using cluster::Collective;

struct Options {
  std::string output;
  bool quick = false;
  int threads = 1;
  int passes = 0; // 0: 3, or 1 with --quick
  bool probe = false;
  // Which sweeps run (--sweeps): all three by default; a caller retakes one part of an earlier
  // calibration with the others left out, and merges it into that calibration's measurements.
  bool sweep_compute = true, sweep_memory = true, sweep_collectives = true;
  double max_bytes = 256.0 * 1024 * 1024;
  std::string backend = "cpu";
  std::string products; // a JSON list of product shapes to time (--products), or empty
};

// Where every rank runs: nodes are MPI's shared-memory domains. Devices of the calibrated
// cluster are numbered node-major, so ranks must be placed node by node (mpirun's default).
struct Placement {
  int nodes = 1, per_node = 1;
  int node = 0, local_rank = 0;
  MPI_Comm local = MPI_COMM_NULL;   // this node's ranks
  MPI_Comm leaders = MPI_COMM_NULL; // local rank 0 of every node
};

// The devices of one node, as the calibrated cluster numbers them: 0 .. per_node - 1.
std::vector<int> node_devices(const Placement& where) {
  std::vector<int> devices(static_cast<std::size_t>(where.per_node));
  std::iota(devices.begin(), devices.end(), 0);
  return devices;
}

// The communicators place() created.
void release(Placement where) {
  MPI_Comm_free(&where.local);
  if (where.leaders != MPI_COMM_NULL) {
    MPI_Comm_free(&where.leaders);
  }
}

Placement place(int rank, int size) {
  Placement p;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &p.local),
            "MPI_Comm_split_type");
  MPI_Comm_rank(p.local, &p.local_rank);
  MPI_Comm_size(p.local, &p.per_node);
  int leader = p.local_rank == 0 ? 1 : 0, nodes = 0;
  check_mpi(MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  p.nodes = nodes;
  int first = rank; // the node's lowest world rank
  check_mpi(MPI_Bcast(&first, 1, MPI_INT, 0, p.local), "MPI_Bcast");
  std::vector<int> sizes(static_cast<std::size_t>(size));
  check_mpi(MPI_Allgather(&p.per_node, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  const bool uniform = std::all_of(sizes.begin(), sizes.end(), [&](int s) { return s == sizes[0]; });
  if (!uniform || size % p.nodes != 0 || first != rank - p.local_rank || first % p.per_node != 0) {
    throw Error(fmt::format("ranks must be placed node by node with the same number on every node (rank {} is "
                            "local rank {} of {} on a node starting at rank {}); use mpirun's default --map-by slot",
                            rank, p.local_rank, p.per_node, first));
  }
  p.node = first / p.per_node;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, p.local_rank == 0 ? 0 : MPI_UNDEFINED, rank, &p.leaders), "MPI_Comm_split");
  return p;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", &tm);
  return text;
}

// The rows of one collective's sweep over `devices`, as measurements.json lists them.
void append_collectives(nlohmann::json& out, const std::vector<CollectiveTiming>& rows,
                        const std::vector<int>& devices) {
  for (const auto& r : rows) {
    out.push_back({{"collective", std::string(cluster::collective_name(r.collective))},
                   {"devices", devices},
                   {"bytes", r.bytes},
                   {"seconds", r.seconds}});
  }
}

// Kernel sweep results of one pass: GEMMs and convolutions, memory-bound kernels.
struct KernelSweeps {
  std::vector<KernelTiming> compute, memory;
  std::vector<KernelTiming> products; // three rows per --products shape (product_sweep)
};

// The shapes of --products (a JSON list of {"batch", "m", "n", "k"}), read by rank 0 and sent to
// every rank, so that all time the same products; errors name the file and the entry.
std::vector<MatmulShape> read_product_shapes(const std::string& path, int rank) {
  std::string text;
  if (rank == 0) {
    text = io::read_text_file(path);
  }
  auto length = static_cast<unsigned long long>(text.size());
  check_mpi(MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD), "MPI_Bcast");
  text.resize(static_cast<std::size_t>(length));
  check_mpi(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  std::vector<MatmulShape> shapes;
  std::string where = path;
  try {
    const auto doc = nlohmann::json::parse(text);
    if (!doc.is_array()) {
      throw Error(fmt::format("{}: a list of product shapes ({{\"batch\", \"m\", \"n\", \"k\"}}) was expected", path));
    }
    for (std::size_t i = 0; i < doc.size(); ++i) {
      where = fmt::format("{}: entry {}", path, i);
      MatmulShape shape{doc[i].at("batch").get<std::int64_t>(), doc[i].at("m").get<std::int64_t>(),
                        doc[i].at("n").get<std::int64_t>(), doc[i].at("k").get<std::int64_t>()};
      for (const auto& [value, name] :
           {std::pair{shape.batch, "batch"}, {shape.m, "m"}, {shape.n, "n"}, {shape.k, "k"}}) {
        if (value < 1 || value > (std::int64_t{1} << 31)) {
          throw Error(fmt::format("{}: field '{}' must be a whole number from 1 to 2^31, got {}", where, name, value));
        }
      }
      shapes.push_back(shape);
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  return shapes;
}

// How the last pass of one part compared with the first: "median x1.02, from x0.97 to x1.85".
std::string against_first(const std::vector<KernelSweeps>& passes, std::vector<KernelTiming> KernelSweeps::*part) {
  const auto& first = passes.front().*part;
  const auto& last = passes.back().*part;
  std::vector<double> ratios;
  for (std::size_t i = 0; i < first.size() && i < last.size(); ++i) {
    ratios.push_back(last[i].seconds / first[i].seconds);
  }
  if (ratios.empty()) {
    return "no kernels";
  }
  std::sort(ratios.begin(), ratios.end());
  return fmt::format("median x{:.2f}, from x{:.2f} to x{:.2f}", ratios[ratios.size() / 2], ratios.front(),
                     ratios.back());
}

// The sweeps a run took (its file's "sweeps"), in the order the file lists their rows.
std::vector<std::string> sweep_names(const Options& opt) {
  std::vector<std::string> names;
  for (const auto& [on, name] : {std::pair{opt.sweep_compute, "compute"}, std::pair{opt.sweep_memory, "memory"},
                                 std::pair{opt.sweep_collectives, "collectives"}}) {
    if (on) {
      names.emplace_back(name);
    }
  }
  return names;
}

void say(int rank, const std::string& text) {
  if (rank == 0) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
}

int run(const Options& opt, int rank, int size) {
  const Placement where = place(rank, size);
  auto backend = make_backend(opt.backend, opt.threads, MPI_COMM_WORLD); // as partita-run makes it
  const SweepBudget budget = opt.quick ? SweepBudget{0.002, 3, 500} : SweepBudget{0.01, 5, 2000};
  say(rank, fmt::format("partita-calibrate: {} ranks on {} node(s), backend {}, {} thread(s) per rank{}\n", size,
                        where.nodes, backend->name(), opt.threads, opt.quick ? ", quick" : ""));
  if (opt.probe) {
    // One size of each GEMM family, named as the full sweep names it, so that a caller can set
    // these times against a calibration's (bench/runtime_bench.py waits out a slow spell so).
    // The host's memory speed drifts apart from its compute speed (another tenant's streams): the
    // memory-bound kernels of two sizes, 10^6.5 and 10^7 bytes, are probed beside them. And the
    // shared-memory collectives drift apart from both (an all-reduce of 1 MB ran a third faster in
    // one calibration than in the steps of the benchmark that followed it): the all-reduce inside
    // a node, of three sizes the full and the quick sweep both time (8 x 4^k bytes).
    const auto gemms = gemm_sweep(*backend, MPI_COMM_WORLD, budget, 8.5, 8.5, 4);
    say(rank, kernel_table(gemms, true));
    const auto memory = memory_sweep(*backend, MPI_COMM_WORLD, budget, 6.5, 7, 2);
    say(rank, kernel_table(memory, false));
    nlohmann::json reduces = nlohmann::json::array();
    if (where.per_node > 1) {
      // Every node's ranks at once, as the sweep runs them; node 0 reports. From 8 B up, as the
      // quick sweep runs it: the three sizes timed first, on pages no collective had used yet, ran
      // 128 KiB 2.5 times slower than the sweep does.
      auto rows = collective_sweep(Collective::all_reduce, where.local, budget, 8, 2.0 * 1024 * 1024, 4);
      std::erase_if(rows, [](const CollectiveTiming& r) { return r.bytes < 128.0 * 1024; });
      say(rank, nccl_table(Collective::all_reduce, where.per_node, rows).insert(1, " inside a node:"));
      append_collectives(reduces, rows, node_devices(where));
    }
    if (rank == 0 && !opt.output.empty()) {
      io::write_file_atomically(opt.output, nlohmann::json{{"format", "partita-calibrate probe 3"},
                                                           {"compute", kernels_json(gemms, true)},
                                                           {"memory", kernels_json(memory, false)},
                                                           {"collectives", reduces}}
                                                    .dump(1) +
                                                "\n");
    }
    release(where);
    return 0;
  }
  const int passes = opt.passes > 0 ? opt.passes : (opt.quick ? 1 : 3);
  const std::vector<MatmulShape> product_shapes =
      opt.products.empty() ? std::vector<MatmulShape>{} : read_product_shapes(opt.products, rank);
  // The compute sweeps of one pass (GEMMs, their backward passes, convolutions); `show` prints.
  const auto compute_sweeps = [&](const auto& show) {
    show("\n# compute: GEMMs on every rank at once (time: slowest rank, median of trials)\n");
    // Past 10^10 FLOPs while a call lasts at most 10 ms (SweepExtension): where a fast device's
    // rate still grows.
    const SweepExtension beyond{12, opt.quick ? 0.0 : 0.01};
    std::vector<KernelTiming> out = opt.quick ? gemm_sweep(*backend, MPI_COMM_WORLD, budget, 5, 9, 2)
                                              : gemm_sweep(*backend, MPI_COMM_WORLD, budget, 5, 10, 4, beyond);
    show(kernel_table(out, true));
    // A product's backward pass reads an operand transposed in each of its two products, at a rate
    // of its own, a batch of small products at another again (on a 2-vCPU EPYC a batch of 128 x 128
    // x 64 ones ran backward at 50-70 GFLOP/s, square products of the same FLOPs at 75-96).
    show("\n# compute: the backward passes of products on every rank at once (dA = dY B^T, dB = A^T dY; a row "
         "is their mean)\n");
    const auto backward = opt.quick ? gemm_backward_sweep(*backend, MPI_COMM_WORLD, budget, 5, 9, 1)
                                    : gemm_backward_sweep(*backend, MPI_COMM_WORLD, budget, 5, 10, 2, beyond);
    show(kernel_table(backward, true));
    out.insert(out.end(), backward.begin(), backward.end());
    // Convolutions reach another fraction of peak than GEMMs of the same FLOPs: a curve of their own.
    show("\n# compute: convolutions on every rank at once (fwd: forward; bwd: backward data + weights, one "
         "pass; a stem has no data gradient)\n");
    // The larger layers: the same ones on batches of 128 and 512 (VGG-16's 3x3 convolutions at
    // batch 32 do 10^11 FLOPs).
    const auto convs = opt.quick ? conv_sweep(*backend, MPI_COMM_WORLD, budget, conv_cases(5, 9, {1, 2}))
                                 : conv_sweep(*backend, MPI_COMM_WORLD, budget, conv_cases(5, 10, {1, 8, 32}),
                                              conv_cases(10.5, 12, {128, 512}), beyond);
    show(kernel_table(convs, true));
    out.insert(out.end(), convs.begin(), convs.end());
    return out;
  };
  // One pass of the kernel sweeps; the first prints its tables.
  const auto kernel_sweeps = [&](bool print) {
    const auto show = [&](const std::string& text) {
      if (print) {
        say(rank, text);
      }
    };
    KernelSweeps out;
    if (opt.sweep_compute) {
      out.compute = compute_sweeps(show);
      if (!product_shapes.empty()) {
        show(fmt::format("\n# compute: the models' own products ({} shapes, --products) on every rank at once: "
                         "forward, data gradient, weight gradient\n",
                         product_shapes.size()));
        out.products = product_sweep(*backend, MPI_COMM_WORLD, budget, product_shapes);
        show(kernel_table(out.products, true));
      }
    }
    if (opt.sweep_memory) {
      show("\n# memory-bound kernels on every rank at once\n");
      out.memory = opt.quick ? memory_sweep(*backend, MPI_COMM_WORLD, budget, 3, 8, 2)
                             : memory_sweep(*backend, MPI_COMM_WORLD, budget, 3, 9, 4);
      show(kernel_table(out.memory, false));
    }
    return out;
  };
  const bool kernels = opt.sweep_compute || opt.sweep_memory;
  std::vector<KernelSweeps> kernel_passes;
  if (kernels) {
    kernel_passes.push_back(kernel_sweeps(true));
  }

  const Collective collectives[] = {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                                    Collective::broadcast,  Collective::send_recv,  Collective::all_to_all};
  const double max_bytes = opt.quick ? std::min(opt.max_bytes, 4.0 * 1024 * 1024) : opt.max_bytes;
  const double step = opt.quick ? 4 : 2;
  // Per link class and collective, in sweep order: what every pass timed.
  struct Swept {
    std::vector<int> devices;
    std::string where;
    Collective collective;
    std::vector<std::vector<CollectiveTiming>> passes;
  };
  std::vector<Swept> swept;
  const auto collective_pass = [&](bool print) {
    std::size_t k = 0;
    const auto sweep_on = [&](MPI_Comm comm, const std::vector<int>& devices, const std::string& where_text) {
      // Every node's group runs at once (links inside a node are per node); node 0 reports.
      for (const auto c : collectives) {
        std::vector<CollectiveTiming> rows;
        if (comm != MPI_COMM_NULL) {
          rows = collective_sweep(c, comm, budget, 8, max_bytes, step);
        }
        if (print) {
          say(rank, nccl_table(c, static_cast<int>(devices.size()), rows).insert(1, " " + where_text));
        }
        if (k == swept.size()) {
          swept.push_back({devices, where_text, c, {}});
        }
        swept[k++].passes.push_back(std::move(rows));
        MPI_Barrier(MPI_COMM_WORLD);
      }
    };
    if (where.per_node > 1) {
      sweep_on(where.local, node_devices(where), "inside a node:");
    }
    if (where.nodes > 1) {
      std::vector<int> devices;
      for (int n = 0; n < where.nodes; ++n) {
        devices.push_back(n * where.per_node);
      }
      sweep_on(where.leaders, devices, "between nodes, one rank per node:");
    }
  };
  if (opt.sweep_collectives) {
    collective_pass(true);
  }

  for (int pass = 2; pass <= passes; ++pass) {
    say(rank, fmt::format("\n# sweeps, pass {} of {}: each timing keeps its median pass\n", pass, passes));
    if (kernels) {
      kernel_passes.push_back(kernel_sweeps(false));
      say(rank, fmt::format("  kernels against the first pass: compute {}; memory-bound {}\n",
                            against_first(kernel_passes, &KernelSweeps::compute),
                            against_first(kernel_passes, &KernelSweeps::memory)));
    }
    if (opt.sweep_collectives) {
      collective_pass(false);
    }
  }
  KernelSweeps medians;
  for (const auto part : {&KernelSweeps::compute, &KernelSweeps::memory}) {
    std::vector<std::vector<KernelTiming>> rows;
    for (const auto& k : kernel_passes) {
      rows.push_back(k.*part);
    }
    medians.*part = median_of_passes(rows);
  }
  {
    std::vector<std::vector<KernelTiming>> rows;
    for (const auto& k : kernel_passes) {
      rows.push_back(k.products);
    }
    medians.products = median_of_passes(rows);
  }
  if (passes > 1 && !medians.products.empty()) {
    say(rank, "\n# the models' own products, the median pass of each\n" + kernel_table(medians.products, true));
  }
  if (passes > 1 && opt.sweep_compute) {
    say(rank, "\n# compute, the median pass of each kernel\n" + kernel_table(medians.compute, true));
  }
  if (passes > 1 && opt.sweep_memory) {
    say(rank, "\n# memory-bound kernels, the median pass of each kernel\n" + kernel_table(medians.memory, false));
  }
  nlohmann::json coll_json = nlohmann::json::array();
  for (const auto& s : swept) {
    const auto rows = median_of_passes(s.passes);
    if (passes > 1) {
      say(rank, nccl_table(s.collective, static_cast<int>(s.devices.size()), rows)
                    .insert(1, fmt::format(" {} the median of {} passes:", s.where, passes)));
    }
    if (rank == 0) {
      append_collectives(coll_json, rows, s.devices);
    }
  }

  if (rank == 0) {
    char host[256] = {};
    int length = 0;
    MPI_Get_processor_name(host, &length);
    nlohmann::json products = nlohmann::json::array();
    for (std::size_t i = 0; i < product_shapes.size() && 3 * i + 2 < medians.products.size(); ++i) {
      const auto& p = product_shapes[i];
      products.push_back({{"batch", p.batch},
                          {"m", p.m},
                          {"n", p.n},
                          {"k", p.k},
                          {"forward", medians.products[3 * i].seconds},
                          {"data_gradient", medians.products[3 * i + 1].seconds},
                          {"weight_gradient", medians.products[3 * i + 2].seconds}});
    }
    nlohmann::json doc{{"format", "partita-calibrate measurements 1"},
                       {"date", utc_now()},
                       {"host", std::string(host, static_cast<std::size_t>(length))},
                       {"ranks", size},
                       {"nodes", where.nodes},
                       {"devices_per_node", where.per_node},
                       {"threads", opt.threads},
                       {"quick", opt.quick},
                       {"sweeps", sweep_names(opt)},
                       {"passes", passes},
                       {"pass_statistic", "median"},
                       {"backend", std::string(backend->name())},
                       {"compute", kernels_json(medians.compute, true)},
                       {"memory", kernels_json(medians.memory, false)},
                       {"collectives", coll_json}};
    if (!products.empty()) {
      doc["products"] = std::move(products);
    }
    if (!opt.output.empty()) {
      io::write_file_atomically(opt.output, doc.dump(1) + "\n");
      fmt::print("\nmeasurements written to {}\n", opt.output);
    }
  }
  release(where);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  CLI::App app{"partita-calibrate: kernel and collective sweeps for `partita calibrate` (start with mpirun -np P)"};
  Options opt;
  app.add_option("-o,--output", opt.output, "measurements as JSON, written by rank 0 (read by partita calibrate)");
  app.add_flag("--quick", opt.quick, "fewer sizes, shorter trials, collectives up to 4 MiB");
  app.add_option("--threads", opt.threads, "compute threads per rank")->check(partita::cli::whole(1, 1024, "threads"));
  app.add_option("--passes", opt.passes,
                 "passes of the kernel and collective sweeps, each timing keeping its median (default 3; 1 with "
                 "--quick)")
      ->check(partita::cli::whole(1, 100, "passes"));
  app.add_flag("--probe", opt.probe,
               "time only the GEMMs of 10^8.5 FLOPs (one per family), the memory-bound kernels of 10^6.5 and 10^7 "
               "bytes and the all-reduce inside a node of 128 KiB, 512 KiB and 2 MiB, and write them to --output: is "
               "the host at its calibrated speed now?");
  std::vector<std::string> sweeps;
  app.add_option("--sweeps", sweeps,
                 "the sweeps to run, of compute, memory and collectives (default all three; the others' rows are "
                 "left empty in --output): what a caller merges into an earlier calibration's measurements when only "
                 "those parts of the host ran at another speed then")
      ->delimiter(',')
      ->check(CLI::IsMember({"compute", "memory", "collectives"}));
  app.add_option("--backend", opt.backend,
                 fmt::format("whose kernels the compute and memory sweeps time: cpu (oneDNN) or cuda (cuBLAS/cuDNN, "
                             "one GPU per rank); this binary has: {}",
                             fmt::join(backend_names(), ", ")));
  app.add_option("--products", opt.products,
                 "a JSON list of matrix product shapes ({\"batch\", \"m\", \"n\", \"k\"}: a model's own, as "
                 "`partita calibrate --for-model` writes it) timed with the compute sweeps, forward and backward, "
                 "into --output's \"products\"");
  app.add_option("--max-bytes", opt.max_bytes, "largest collective size in bytes")
      ->check(partita::cli::real(1024, 64.0 * 1024 * 1024 * 1024, "bytes"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 1);
    MPI_Finalize();
    return code;
  }
  if (!sweeps.empty()) {
    const auto asked = [&](const char* part) { return std::find(sweeps.begin(), sweeps.end(), part) != sweeps.end(); };
    opt.sweep_compute = asked("compute");
    opt.sweep_memory = asked("memory");
    opt.sweep_collectives = asked("collectives");
  }
  int code = 0;
  try {
    code = run(opt, rank, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "partita-calibrate: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}
