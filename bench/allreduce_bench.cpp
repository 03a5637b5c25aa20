// partita-run's all-reduce (runtime/src/collectives: all_reduce_sum, what gradient sync and
// partial sums call) against a raw MPI_Allreduce loop on the same buffers and sizes: bus bandwidth
// of each and their ratio (target >= 95%). Run under mpirun:
//   mpirun -np 2 build/ci/bench/partita_bench_allreduce [--max-bytes B]

#include "collectives.h"
#include "sweeps.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  double max_bytes = 256.0 * 1024 * 1024;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--max-bytes") == 0) {
      max_bytes = std::atof(argv[i + 1]);
    }
  }
  using partita::cluster::Collective;
  const partita::runtime::SweepBudget budget{0.02, 5, 5000};
  const double factor = partita::cluster::bus_factor(Collective::all_reduce, p);
  std::vector<float> buffer(static_cast<std::size_t>(max_bytes / 4) + 1, 0.0F);
  if (rank == 0) {
    fmt::print("# all-reduce over {} ranks: partita-run (all_reduce_sum) vs raw MPI_Allreduce, in place, float sum\n"
               "# time: slowest rank, median of {} trials; best of 3 alternating runs each\n",
               p, budget.trials);
    fmt::print("# {:>12} {:>12} {:>12} {:>12} {:>12} {:>8}\n", "size (B)", "runtime us", "raw us", "runtime busbw",
               "raw busbw", "ratio");
  }
  double sum_ratio = 0;
  int rows = 0;
  double large_runtime = 0, large_raw = 0;
  for (double bytes = 1024; bytes <= max_bytes * (1 + 1e-9); bytes *= 4) {
    const auto count = static_cast<std::int64_t>(bytes / 4);
    double runtime = 1e30, raw = 1e30;
    for (int round = 0; round < 3; ++round) {
      raw = std::min(raw, partita::runtime::time_per_call(MPI_COMM_WORLD, budget, [&] {
                       MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                                     MPI_COMM_WORLD);
                     }));
      runtime = std::min(runtime, partita::runtime::time_per_call(MPI_COMM_WORLD, budget, [&] {
                           partita::runtime::all_reduce_sum(MPI_COMM_WORLD, buffer.data(), count);
                         }));
    }
    const double busbw_runtime = bytes / runtime * factor / 1e9, busbw_raw = bytes / raw * factor / 1e9;
    sum_ratio += busbw_runtime / busbw_raw;
    ++rows;
    if (bytes >= 1024 * 1024) {
      large_runtime += busbw_runtime;
      large_raw += busbw_raw;
    }
    if (rank == 0) {
      fmt::print("  {:>12.0f} {:>12.2f} {:>12.2f} {:>12.3f} {:>12.3f} {:>7.1f}%\n", bytes, runtime * 1e6, raw * 1e6,
                 busbw_runtime, busbw_raw, 100 * busbw_runtime / busbw_raw);
    }
  }
  if (rank == 0) {
    fmt::print("mean ratio of bus bandwidths {:.1f}% over {} sizes; from 1 MiB up {:.1f}%\n", 100 * sum_ratio / rows,
               rows, large_raw > 0 ? 100 * large_runtime / large_raw : 0.0);
  }
  MPI_Finalize();
  return 0;
}
