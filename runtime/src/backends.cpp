#include "backends.h"

#include "collectives.h"
#include "tensor_memory.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace partita::runtime {
#ifdef PARTITA_HAVE_CUDA
namespace {

// This rank's index among the ranks of its node: Open MPI says it directly; otherwise the
// shared-memory split of `world` (collective) gives it.
int local_rank(MPI_Comm world) {
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int rank = 0;
  check_mpi(MPI_Comm_rank(node, &rank), "MPI_Comm_rank");
  MPI_Comm_free(&node);
  return rank;
}

} // namespace
#endif

std::vector<std::string> backend_names() {
#ifdef PARTITA_HAVE_CUDA
  return {"cpu", "cpu-guarded", "cuda"};
#else
  return {"cpu", "cpu-guarded"};
#endif
}

std::optional<std::string> backend_unavailable(std::string_view name) {
  if (name == "cpu" || name == "cpu-guarded") {
    return std::nullopt;
  }
  if (name == "cuda") {
#ifdef PARTITA_HAVE_CUDA
    return cuda_unavailable();
#else
    return std::string("this partita-run was built without CUDA (PARTITA_BUILD_CUDA=OFF: the CUDA toolkit, cuDNN "
                       "or NCCL was not found at configure time)");
#endif
  }
  return fmt::format("unknown backend '{}' (this partita-run has: {})", name, fmt::join(backend_names(), ", "));
}

std::unique_ptr<Backend> make_backend(std::string_view name, int threads, MPI_Comm world) {
  if (const auto why = backend_unavailable(name)) {
    throw Error(fmt::format("backend '{}': {}", name, *why));
  }
  keep_freed_memory();
#ifdef PARTITA_HAVE_CUDA
  if (name == "cuda") {
    return make_cuda_backend(local_rank(world));
  }
#else
  (void)world;
#endif
  if (name == "cpu-guarded") {
    return make_guarded_backend(make_cpu_backend(threads));
  }
  return make_cpu_backend(threads);
}

} // namespace partita::runtime
