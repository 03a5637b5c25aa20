#pragma once

// What the CUDA backend's host files share (cuda_backend.cpp, cuda_recurrent.cpp): CUDA and cuDNN
// status checks that throw partita::Error, the int cuDNN takes, and stream-ordered scratch.

#include "partita/graph/error.h"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <fmt/format.h>

#include <climits>
#include <cstddef>
#include <cstdint>

namespace partita::runtime::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(fmt::format("{} failed: {} ({})", what, cudaGetErrorString(e), static_cast<int>(e)));
  }
}
inline void check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) {
    throw Error(fmt::format("{} failed: {} ({})", what, cudnnGetErrorString(s), static_cast<int>(s)));
  }
}

inline int as_int(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) {
    throw Error(fmt::format("{}: {} does not fit the int that cuBLAS/cuDNN take", what, v));
  }
  return static_cast<int>(v);
}

// Stream-ordered device scratch (workspaces, padded copies), freed on the stream.
class Scratch {
public:
  Scratch(cudaStream_t stream, std::size_t floats) : m_stream(stream) {
    if (floats > 0) {
      check(cudaMallocAsync(reinterpret_cast<void**>(&m_data), floats * sizeof(float), stream), "cudaMallocAsync");
    }
  }
  ~Scratch() {
    if (m_data != nullptr) {
      (void)cudaFreeAsync(m_data, m_stream);
    }
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() const { return m_data; }

private:
  cudaStream_t m_stream;
  float* m_data = nullptr;
};

} // namespace partita::runtime::cuda
