#pragma once

// Picking a backend by name at run time ("cpu", "cpu-guarded", "cuda"). The CUDA backend exists in a binary built
// with PARTITA_BUILD_CUDA (the toolkit, cuDNN and NCCL found at configure time); it runs where
// cudaGetDeviceCount finds a device.

#include "backend.h"

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace partita::runtime {

// The names this binary can run, "cpu" first.
std::vector<std::string> backend_names();

// Why backend `name` cannot run on this rank, or nullopt when it can: an unknown name, a binary
// built without CUDA, no CUDA device. Starts nothing.
std::optional<std::string> backend_unavailable(std::string_view name);

// The backend `name` (backend_unavailable(name) must be nullopt). Collective over `world`: the
// CUDA backend picks device (rank on this node) % (devices on this node) and makes the GPU's
// memory (cudaMalloc, pooled) the tensor memory (tensor_memory.h) before any shard is allocated.
std::unique_ptr<Backend> make_backend(std::string_view name, int threads, MPI_Comm world);

// `inner` (the CPU backend) with GuardedMemory as the tensor memory: buffers closed to the host
// outside the backend's calls, as a GPU's are (backend "cpu-guarded").
std::unique_ptr<Backend> make_guarded_backend(std::unique_ptr<Backend> inner);

// The CUDA backend's parts (cuda_backend.cpp), present when built with it.
#ifdef PARTITA_HAVE_CUDA
std::optional<std::string> cuda_unavailable();
std::unique_ptr<Backend> make_cuda_backend(int local_rank);
#endif

} // namespace partita::runtime
