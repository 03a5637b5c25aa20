// The CUDA backend: cuBLAS matrix products, cuDNN convolutions, pooling, batch normalization and
// softmax (cuDNN 9's legacy API, still in its headers), cuDNN's RNN API for LSTM, GRU and RNN
// layers (cuda_recurrent.cpp), NCCL all-reduces on communicators bootstrapped over MPI, and small
// kernels of our own (cuda_kernels.cu) for the rest. Every call is queued on one stream per rank;
// synchronize() waits for it. Tensors live in the GPU's own memory (cudaMalloc, pooled:
// DeviceMemory in tensor_memory.h), which the host never touches: everything an iteration does to
// them (transposes, splits, gathers, gradient sums and zeroing, the moves between layouts on one
// rank) is a kernel (Backend::copy and the rest), and what the host must see (MPI's staging between
// ranks, --verify's snapshots, the loss scaler's overflow flag) is copied to and from the host
// through the memory resource, ordered on the backend's stream.

#include "backends.h"
#include "cuda_kernels.h"
#include "cuda_recurrent.h"
#include "cuda_support.h"
#include "tensor_memory.h"

#include "partita/graph/error.h"

#include <cmath>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace partita::runtime {
namespace {

using cuda::as_int;
using cuda::check;
using cuda::Scratch;

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw Error(fmt::format("{} failed: {} ({})", what, cublasGetStatusString(s), static_cast<int>(s)));
  }
}
void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    throw Error(fmt::format("{} failed: {} ({})", what, ncclGetErrorString(r), static_cast<int>(r)));
  }
}

// The GPU's memory (cudaMalloc), pooled. A freed block is kept for the next request of its size
// class (within 1/8 of the size), as PyTorch's caching allocator keeps device memory: cudaFree
// waits for the whole device, and an iteration frees its temporaries op by op. Reuse is
// stream-ordered without waiting: everything that touches a block (the kernels, cuBLAS, cuDNN,
// NCCL, this resource's copies and fills) is queued on the backend's one stream, and the host
// never touches device memory, so a block handed out again is written only after what was queued
// before its free has run. (With managed memory, which the host wrote directly, each free recorded
// an event and each reuse waited for it: a host that waited for the GPU at every temporary could
// not queue ahead of it.) Without a stream (none set, or the backend gone) a free waits for the
// device. A request the device has no room for hands cached memory back to the
// driver first, then fails with the sizes. Moves to and from the host are ordered on the stream
// (after the kernels queued before them) and return when done; copies and fills are queued.
class PooledDeviceMemory final : public DeviceMemory {
public:
  void to_host(const void* device, void* host, std::size_t bytes) override {
    check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_or_default()),
          "cudaMemcpyAsync (device to host)");
    check(cudaStreamSynchronize(stream_or_default()), "cudaStreamSynchronize (device to host)");
  }
  void from_host(const void* host, void* device, std::size_t bytes) override {
    check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_or_default()),
          "cudaMemcpyAsync (host to device)");
    check(cudaStreamSynchronize(stream_or_default()), "cudaStreamSynchronize (host to device)");
  }
  void copy(const void* from, void* to, std::size_t bytes) override {
    check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream_or_default()),
          "cudaMemcpyAsync (device to device)");
  }
  void fill(float* device, std::size_t count, float value) override {
    if (value == 0.F && !std::signbit(value)) {
      check(cudaMemsetAsync(device, 0, count * sizeof(float), stream_or_default()), "cudaMemsetAsync");
    } else {
      cuda::fill(stream_or_default(), static_cast<std::int64_t>(count), value, device);
    }
  }

  // The stream frees are ordered on (nullptr: none; a free then waits for the device).
  void set_stream(cudaStream_t stream) {
    const std::lock_guard lock(m_mutex);
    m_stream = stream;
  }

private:
  cudaStream_t stream_or_default() {
    const std::lock_guard lock(m_mutex);
    return m_stream; // nullptr: the legacy default stream, which waits for the others
  }

  struct Block {
    void* data = nullptr;
  };

  static std::size_t size_class(std::size_t bytes) {
    bytes = std::max<std::size_t>(bytes, 256);
    int floor_log2 = 0;
    while ((bytes >> (floor_log2 + 1)) != 0) {
      ++floor_log2;
    }
    const std::size_t step = std::max<std::size_t>(256, std::size_t{1} << std::max(0, floor_log2 - 3));
    return (bytes + step - 1) / step * step;
  }

  void* do_allocate(std::size_t bytes, std::size_t) override {
    const std::lock_guard lock(m_mutex);
    const std::size_t size = size_class(bytes);
    auto& list = m_free[size];
    if (!list.empty()) {
      const Block b = list.back();
      list.pop_back();
      return b.data;
    }
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess && size > free_bytes) {
      // First the stream-ordered scratch pool's unused memory (kept between iterations, it grows to
      // the largest workspaces seen), then this pool's cached blocks: both are made again later, so
      // a run that comes here every iteration is slow, and says so once.
      int device = 0;
      cudaMemPool_t pool = nullptr;
      (void)cudaDeviceSynchronize();
      if (cudaGetDevice(&device) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
        (void)cudaMemPoolTrimTo(pool, 0);
      }
      (void)cudaMemGetInfo(&free_bytes, &total_bytes);
      if (size > free_bytes) {
        release_cached();
        (void)cudaMemGetInfo(&free_bytes, &total_bytes);
      }
      if (!m_warned) {
        m_warned = true;
        std::fprintf(stderr,
                     "partita-run: warning: the GPU ran short of memory for a %.1f MiB tensor buffer; unused "
                     "scratch%s handed back to the driver (timings that include making them again are slow)\n",
                     static_cast<double>(size) / (1 << 20), size > free_bytes ? "" : " and cached tensor blocks");
        std::fflush(stderr);
      }
      if (size > free_bytes) {
        throw Error(fmt::format("a tensor buffer of {:.1f} MiB does not fit: {:.1f} MiB of the GPU's {:.1f} MiB are "
                                "free",
                                static_cast<double>(size) / (1 << 20), static_cast<double>(free_bytes) / (1 << 20),
                                static_cast<double>(total_bytes) / (1 << 20)));
      }
    }
    void* p = nullptr;
    if (cudaMalloc(&p, size) != cudaSuccess) {
      (void)cudaGetLastError();
      throw std::bad_alloc();
    }
    return p; // 256-byte aligned
  }

  void do_deallocate(void* p, std::size_t bytes, std::size_t) override {
    const std::lock_guard lock(m_mutex);
    if (m_stream == nullptr) {
      (void)cudaDeviceSynchronize(); // no stream to order the reuse on: wait for every kernel
    }
    m_free[size_class(bytes)].push_back(Block{p});
  }

  // Hands every cached block back to the driver (a request the device has no room for).
  void release_cached() {
    (void)cudaDeviceSynchronize();
    for (auto& [size, list] : m_free) {
      for (const Block& b : list) {
        (void)cudaFree(b.data);
      }
      list.clear();
    }
  }

  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  std::mutex m_mutex;
  cudaStream_t m_stream = nullptr;
  std::map<std::size_t, std::vector<Block>> m_free;
  bool m_warned = false;
};

PooledDeviceMemory& device_memory() {
  static PooledDeviceMemory memory; // outlives every buffer: freed with the process
  return memory;
}

// cuDNN descriptors, destroyed with their scope.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
    check(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor");
    check(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, as_int(n, "N"), as_int(c, "C"),
                                     as_int(h, "H"), as_int(w, "W")),
          "cudnnSetTensor4dDescriptor");
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  explicit FilterDesc(const ConvShape& s) {
    check(cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor");
    check(cudnnSetFilter4dDescriptor(d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, as_int(s.c_out, "c_out"),
                                     as_int(s.c_in / s.groups, "c_in / groups"), as_int(s.window.kh, "kh"),
                                     as_int(s.window.kw, "kw")),
          "cudnnSetFilter4dDescriptor");
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

bool symmetric(const Window2d& w) {
  return w.pad_top == w.pad_bottom && w.pad_left == w.pad_right;
}

// A convolution as cuDNN sees it: symmetric pads only, so asymmetric ones (ONNX pads, halo
// windows) are applied by padding X explicitly and convolving with none.
struct ConvSetup {
  ConvShape shape; // of the (possibly padded) input
  bool padded = false;
  cudnnConvolutionDescriptor_t conv = nullptr;

  ConvSetup(const ConvShape& s, Rounding rounding) : shape(s) {
    auto& w = shape.window;
    if (!symmetric(w)) {
      padded = true;
      shape.h = s.h + w.pad_top + w.pad_bottom;
      shape.w = s.w + w.pad_left + w.pad_right;
      w.pad_top = w.pad_bottom = w.pad_left = w.pad_right = 0;
    }
    check(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
    check(cudnnSetConvolution2dDescriptor(conv, as_int(w.pad_top, "pad"), as_int(w.pad_left, "pad"),
                                          as_int(w.stride_h, "stride"), as_int(w.stride_w, "stride"),
                                          as_int(w.dilation_h, "dilation"), as_int(w.dilation_w, "dilation"),
                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor");
    check(cudnnSetConvolutionGroupCount(conv, as_int(s.groups, "groups")), "cudnnSetConvolutionGroupCount");
    // fp32: FMA kernels only. CUDNN_DEFAULT_MATH lets cuDNN pick TF32 tensor-core kernels for fp32
    // on Ampere and Hopper (seen on an H100: a grouped convolution 4e-4 off oneDNN's, its gradients
    // 1e-4 to 5e-4), where partita-run computes fp32 as the CPU backend does. Mixed precision: the
    // operands come rounded to tf32, fp16 or bf16 (Rounded), each exact in TF32 (10 mantissa bits,
    // fp32's exponents), so that the tensor-core kernels compute what the CPU backend does.
    check(cudnnSetConvolutionMathType(conv, rounding == Rounding::none ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH),
          "cudnnSetConvolutionMathType");
  }
  ~ConvSetup() { cudnnDestroyConvolutionDescriptor(conv); }
  ConvSetup(const ConvSetup&) = delete;
  ConvSetup& operator=(const ConvSetup&) = delete;
};

// The NCCL communicator of an MPI communicator, cached on it as an MPI attribute: created on
// first use (every member is then in the same all-reduce) from a unique id rank 0 broadcasts over
// the MPI communicator, destroyed when MPI frees that communicator.
int destroy_nccl(MPI_Comm, int, void* value, void*) {
  ncclCommDestroy(static_cast<ncclComm_t>(value));
  return MPI_SUCCESS;
}

class CudaBackend final : public Backend {
public:
  CudaBackend(int device, int devices) : m_device(device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    m_name = fmt::format("cuda ({}, device {} of {}; cuBLAS, cuDNN {}, NCCL {})", prop.name, device, devices,
                         cudnnGetVersion(), NCCL_VERSION_CODE);
    check(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // Stream-ordered scratch (cudaMallocAsync) stays in the device's pool between iterations: by
    // default the pool hands its memory back at every synchronize, and each pass then mapped its
    // workspaces and cuDNN's copies again (LayerNorm's backward, 0.01 ms of work, took 0.2 ms).
    cudaMemPool_t pool = nullptr;
    check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
    std::uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
    check(cublasCreate(&m_blas), "cublasCreate");
    check(cublasSetStream(m_blas, m_stream), "cublasSetStream");
    check(cublasSetMathMode(m_blas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode"); // fp32 as the CPU computes it
    check(cudnnCreate(&m_dnn), "cudnnCreate");
    check(cudnnSetStream(m_dnn, m_stream), "cudnnSetStream");
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, destroy_nccl, &m_keyval, nullptr) != MPI_SUCCESS ||
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, destroy_nccl, &m_gradient_keyval, nullptr) != MPI_SUCCESS) {
      throw Error("MPI_Comm_create_keyval failed");
    }
  }
  ~CudaBackend() override {
    (void)cudaStreamSynchronize(m_stream);
    if (m_gradient_stream != nullptr) {
      (void)cudaStreamSynchronize(m_gradient_stream);
      (void)cudaStreamDestroy(m_gradient_stream);
    }
    for (cudaEvent_t e : m_sum_events) {
      (void)cudaEventDestroy(e);
    }
    device_memory().set_stream(nullptr);
    for (cudaEvent_t e : m_marks) {
      (void)cudaEventDestroy(e);
    }
    if (m_anchor != nullptr) {
      (void)cudaEventDestroy(m_anchor);
    }
    if (m_scratch != nullptr) {
      (void)cudaFree(m_scratch);
    }
    MPI_Comm_free_keyval(&m_keyval);
    MPI_Comm_free_keyval(&m_gradient_keyval);
    cudnnDestroy(m_dnn);
    cublasDestroy(m_blas);
    (void)cudaStreamDestroy(m_stream);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return m_name; }

  void synchronize() override { check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize"); }
  bool kernels_on_host() const override { return false; }
  cudaStream_t stream() const { return m_stream; }

  // Marks are CUDA events on the stream. The first after mark_times() is preceded by an anchor,
  // recorded on an idle stream (waited for) together with the host's clock, so that a mark's host
  // time is the anchor's plus the events' elapsed time.
  std::size_t mark() override {
    if (m_marks_used == 0) {
      synchronize();
      if (m_anchor == nullptr) {
        check(cudaEventCreate(&m_anchor), "cudaEventCreate");
      }
      check(cudaEventRecord(m_anchor, m_stream), "cudaEventRecord");
      m_anchor_seconds = MPI_Wtime();
    }
    if (m_marks_used == m_marks.size()) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreate(&e), "cudaEventCreate");
      m_marks.push_back(e);
    }
    check(cudaEventRecord(m_marks[m_marks_used], m_stream), "cudaEventRecord");
    return m_marks_used++;
  }
  std::vector<double> mark_times() override {
    synchronize();
    std::vector<double> out(m_marks_used);
    for (std::size_t i = 0; i < m_marks_used; ++i) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, m_anchor, m_marks[i]), "cudaEventElapsedTime");
      out[i] = m_anchor_seconds + static_cast<double>(ms) * 1e-3;
    }
    m_marks_used = 0;
    return out;
  }
  void all_reduce_sum(MPI_Comm comm, float* data, std::int64_t count) override {
    if (comm == MPI_COMM_NULL || count == 0) {
      return;
    }
    check(ncclAllReduce(data, data, static_cast<std::size_t>(count), ncclFloat, ncclSum, nccl(comm), m_stream),
          "ncclAllReduce");
  }
  // Gradient sums started during the backward pass run on a stream and NCCL communicator of their
  // own (as DDP's process group does), after what the kernels' stream has queued so far; waiting
  // makes the kernels' stream wait for them. Each sum's end is an event, reused once all are waited for.
  std::size_t all_reduce_sum_start(MPI_Comm comm, float* data, std::int64_t count) override {
    if (comm == MPI_COMM_NULL || count == 0) {
      return 0;
    }
    if (m_gradient_stream == nullptr) {
      check(cudaStreamCreateWithFlags(&m_gradient_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    if (m_sums_open == 0) {
      m_sums_used = 0;
    }
    // Two events per sum: where the kernels' stream stood when it started, and its end.
    while (m_sum_events.size() < 2 * (m_sums_used + 1)) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
      m_sum_events.push_back(e);
    }
    cudaEvent_t ready = m_sum_events[2 * m_sums_used], done = m_sum_events[2 * m_sums_used + 1];
    check(cudaEventRecord(ready, m_stream), "cudaEventRecord");
    check(cudaStreamWaitEvent(m_gradient_stream, ready, 0), "cudaStreamWaitEvent");
    check(ncclAllReduce(data, data, static_cast<std::size_t>(count), ncclFloat, ncclSum, nccl(comm, m_gradient_keyval),
                        m_gradient_stream),
          "ncclAllReduce");
    check(cudaEventRecord(done, m_gradient_stream), "cudaEventRecord");
    ++m_sums_used;
    ++m_sums_open;
    return m_sums_used;
  }
  void all_reduce_wait(std::size_t started) override {
    if (started == 0 || started > m_sums_used) {
      return;
    }
    check(cudaStreamWaitEvent(m_stream, m_sum_events[2 * (started - 1) + 1], 0), "cudaStreamWaitEvent");
    --m_sums_open;
  }

  void matmul(const MatmulShape& s, const float* a, bool trans_a, const float* b, bool trans_b, float* c) override {
    // Row-major C = A B is column-major C^T = B^T A^T: B's buffer first, the m and n roles swapped.
    const int m = as_int(s.m, "matmul m"), n = as_int(s.n, "matmul n"), k = as_int(s.k, "matmul k");
    const float one = 1.F, zero = 0.F;
    if (matrix_rounding() == Rounding::none) {
      check(cublasSgemmStridedBatched(m_blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                      n, m, k, &one, b, trans_b ? k : n, s.k * s.n, a, trans_a ? m : k, s.m * s.k,
                                      &zero, c, n, s.m * s.n, as_int(s.batch, "matmul batch")),
            "cublasSgemmStridedBatched");
      return;
    }
    // Mixed precision: fp32 operands, which cuBLAS converts to tf32, fp16 or bf16 for the tensor
    // cores (round to nearest), fp32 accumulation and result. The handle's pedantic math mode,
    // which keeps fp32 products off the tensor cores, is lifted for the call.
    const cublasComputeType_t compute = matrix_rounding() == Rounding::tf32   ? CUBLAS_COMPUTE_32F_FAST_TF32
                                        : matrix_rounding() == Rounding::fp16 ? CUBLAS_COMPUTE_32F_FAST_16F
                                                                              : CUBLAS_COMPUTE_32F_FAST_16BF;
    check(cublasSetMathMode(m_blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    const cublasStatus_t status = cublasGemmStridedBatchedEx(
        m_blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b, CUDA_R_32F,
        trans_b ? k : n, s.k * s.n, a, CUDA_R_32F, trans_a ? m : k, s.m * s.k, &zero, c, CUDA_R_32F, n, s.m * s.n,
        as_int(s.batch, "matmul batch"), compute, CUBLAS_GEMM_DEFAULT);
    check(cublasSetMathMode(m_blas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    check(status, "cublasGemmStridedBatchedEx");
  }

  void eltwise_forward(Eltwise kind, std::int64_t n, const float* x, float* y) override {
    cuda::eltwise_forward(m_stream, kind, n, x, y);
  }
  void eltwise_backward(Eltwise kind, std::int64_t n, const float* x, const float* dy, float* dx) override {
    cuda::eltwise_backward(m_stream, kind, n, x, dy, dx);
  }

  void binary(Binary kind, const Dims& a_dims, const float* a, const Dims& b_dims, const float* b, const Dims& c_dims,
              float* c) override {
    if (c_dims.size() > static_cast<std::size_t>(cuda::max_rank)) {
      throw Error(
          fmt::format("binary op on rank-{} tensors (the CUDA backend takes up to {})", c_dims.size(), cuda::max_rank));
    }
    cuda::Broadcast shape;
    shape.rank = static_cast<int>(c_dims.size());
    std::int64_t sa = 1, sb = 1;
    for (std::size_t d = c_dims.size(); d-- > 0;) {
      shape.out[d] = c_dims[d];
      shape.a_stride[d] = a_dims[d] == 1 ? 0 : sa;
      shape.b_stride[d] = b_dims[d] == 1 ? 0 : sb;
      sa *= a_dims[d];
      sb *= b_dims[d];
    }
    cuda::binary(m_stream, kind, shape, a, b, c);
  }

  void reduce_sum(const Dims& src_dims, const float* src, const Dims& dst_dims, float* dst) override {
    cuda::reduce_sum(m_stream, src_dims, src, dst_dims, dst);
  }

  // Over the last dim (attention's scores), a kernel of our own: cuDNN's legacy softmax took 14 ms
  // for the backward pass of GPT-2's [12, 1024, 1024] scores on an H100 (its forward 0.05 ms).
  static bool last_axis(const Dims& dims, int axis) {
    return !dims.empty() && static_cast<std::size_t>(axis) + 1 == dims.size();
  }
  static std::int64_t rows_before(const Dims& dims, int axis) { return around_axis(dims, axis).outer; }

  void softmax_forward(const Dims& dims, int axis, const float* x, float* y) override {
    if (last_axis(dims, axis)) {
      cuda::softmax_rows_forward(m_stream, rows_before(dims, axis), dims.back(), x, y);
      return;
    }
    const TensorDesc d = softmax_desc(dims, axis);
    const float one = 1.F, zero = 0.F;
    check(cudnnSoftmaxForward(m_dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, d.d, x, &zero, d.d, y),
          "cudnnSoftmaxForward");
  }

  void softmax_backward(const Dims& dims, int axis, const float* y, const float* dy, float* dx) override {
    if (last_axis(dims, axis)) {
      cuda::softmax_rows_backward(m_stream, rows_before(dims, axis), dims.back(), y, dy, dx);
      return;
    }
    const TensorDesc d = softmax_desc(dims, axis);
    const float one = 1.F, zero = 0.F;
    check(cudnnSoftmaxBackward(m_dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, d.d, y, d.d, dy, &zero,
                               d.d, dx),
          "cudnnSoftmaxBackward");
  }

  void layer_norm_forward(std::int64_t rows, std::int64_t norm, float epsilon, const float* x, const float* scale,
                          const float* shift, float* y, float* mean, float* inv_std) override {
    cuda::layer_norm_forward(m_stream, rows, norm, epsilon, x, scale, shift, y, mean, inv_std);
  }

  void layer_norm_backward(std::int64_t rows, std::int64_t norm, float epsilon, const float* x, const float* scale,
                           const float* dy, float* dx, float* d_scale, float* d_shift) override {
    const Scratch stats(m_stream, static_cast<std::size_t>(2 * rows));
    cuda::layer_norm_backward(m_stream, rows, norm, epsilon, x, scale, dy, dx, d_scale, d_shift, stats.get());
  }

  // The algorithm cuDNN's heuristics pick for a convolution, and its workspace, asked once per
  // shape and direction: the query (and the legacy API's translation into cuDNN 9's graphs) took
  // longer than a small convolution itself.
  // A convolution's operand as mixed precision reads it: rounded into stream-ordered scratch, or
  // the buffer itself in fp32.
  struct Rounded {
    Scratch copy;
    const float* data;
    Rounded(CudaBackend& backend, std::int64_t n, const float* x)
        : copy(backend.m_stream, backend.matrix_rounding() == Rounding::none ? 0 : static_cast<std::size_t>(n)),
          data(x) {
      if (backend.matrix_rounding() != Rounding::none) {
        cuda::round_into(backend.m_stream, backend.matrix_rounding(), n, x, copy.get());
        data = copy.get();
      }
    }
  };

  struct ConvAlgorithm {
    int algo = 0;
    std::size_t bytes = 0;
  };
  template <class Query> ConvAlgorithm conv_algorithm(int direction, const ConvShape& s, Query&& query) {
    const auto& w = s.window;
    std::vector<std::int64_t> key{static_cast<std::int64_t>(matrix_rounding()),
                                  direction,
                                  s.n,
                                  s.c_in,
                                  s.c_out,
                                  s.groups,
                                  s.h,
                                  s.w,
                                  s.oh,
                                  s.ow,
                                  w.kh,
                                  w.kw,
                                  w.stride_h,
                                  w.stride_w,
                                  w.dilation_h,
                                  w.dilation_w,
                                  w.pad_top,
                                  w.pad_left,
                                  w.pad_bottom,
                                  w.pad_right};
    const auto it = m_conv_algorithms.find(key);
    if (it != m_conv_algorithms.end()) {
      return it->second;
    }
    return m_conv_algorithms.emplace(std::move(key), query()).first->second;
  }

  void conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) override {
    const Rounded rx(*this, input_elements(s), x), rw(*this, weight_elements(s), w);
    x = rx.data, w = rw.data;
    const ConvSetup setup(s, matrix_rounding());
    const Scratch padded(m_stream,
                         setup.padded ? static_cast<std::size_t>(s.n * s.c_in * setup.shape.h * setup.shape.w) : 0);
    const float* in = setup.padded ? pad(s, x, padded.get()) : x;
    const TensorDesc xd(s.n, s.c_in, setup.shape.h, setup.shape.w), yd(s.n, s.c_out, s.oh, s.ow);
    const FilterDesc wd(s);
    check_output(setup, xd, wd, s);
    const auto chosen = conv_algorithm(0, s, [&] {
      int found = 0;
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      check(cudnnGetConvolutionForwardAlgorithm_v7(m_dnn, xd.d, wd.d, setup.conv, yd.d,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf),
            "cudnnGetConvolutionForwardAlgorithm_v7");
      const auto a = first_usable(perf, found, "forward").algo;
      std::size_t b = 0;
      check(cudnnGetConvolutionForwardWorkspaceSize(m_dnn, xd.d, wd.d, setup.conv, yd.d, a, &b),
            "cudnnGetConvolutionForwardWorkspaceSize");
      return ConvAlgorithm{static_cast<int>(a), b};
    });
    const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(chosen.algo);
    const std::size_t bytes = chosen.bytes;
    const Scratch workspace(m_stream, (bytes + sizeof(float) - 1) / sizeof(float));
    const float one = 1.F, zero = 0.F;
    check(cudnnConvolutionForward(m_dnn, &one, xd.d, in, wd.d, w, setup.conv, algo, workspace.get(), bytes, &zero, yd.d,
                                  y),
          "cudnnConvolutionForward");
    if (bias != nullptr) {
      const TensorDesc bd(1, s.c_out, 1, 1);
      check(cudnnAddTensor(m_dnn, &one, bd.d, bias, &one, yd.d, y), "cudnnAddTensor (bias)");
    }
  }

  void conv_backward_data(const ConvShape& s, const float* w, const float* dy, float* dx) override {
    const Rounded rw(*this, weight_elements(s), w), rdy(*this, output_elements(s), dy);
    w = rw.data, dy = rdy.data;
    const ConvSetup setup(s, matrix_rounding());
    const Scratch padded(m_stream,
                         setup.padded ? static_cast<std::size_t>(s.n * s.c_in * setup.shape.h * setup.shape.w) : 0);
    const TensorDesc xd(s.n, s.c_in, setup.shape.h, setup.shape.w), yd(s.n, s.c_out, s.oh, s.ow);
    const FilterDesc wd(s);
    check_output(setup, xd, wd, s);
    const auto chosen = conv_algorithm(1, s, [&] {
      int found = 0;
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      check(cudnnGetConvolutionBackwardDataAlgorithm_v7(m_dnn, wd.d, yd.d, setup.conv, xd.d,
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf),
            "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      const auto a = first_usable(perf, found, "backward data").algo;
      std::size_t b = 0;
      check(cudnnGetConvolutionBackwardDataWorkspaceSize(m_dnn, wd.d, yd.d, setup.conv, xd.d, a, &b),
            "cudnnGetConvolutionBackwardDataWorkspaceSize");
      return ConvAlgorithm{static_cast<int>(a), b};
    });
    const auto algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(chosen.algo);
    const std::size_t bytes = chosen.bytes;
    const Scratch workspace(m_stream, (bytes + sizeof(float) - 1) / sizeof(float));
    const float one = 1.F, zero = 0.F;
    float* out = setup.padded ? padded.get() : dx;
    check(cudnnConvolutionBackwardData(m_dnn, &one, wd.d, w, yd.d, dy, setup.conv, algo, workspace.get(), bytes, &zero,
                                       xd.d, out),
          "cudnnConvolutionBackwardData");
    if (setup.padded) { // the gradient on the padding is dropped
      const auto& wn = s.window;
      cuda::crop2d(m_stream, s.n * s.c_in, s.h, s.w, wn.pad_top, wn.pad_left, wn.pad_bottom, wn.pad_right, out, dx);
    }
  }

  void conv_backward_weights(const ConvShape& s, const float* x, const float* dy, float* dw, float* d_bias) override {
    const Rounded rx(*this, input_elements(s), x), rdy(*this, output_elements(s), dy);
    x = rx.data, dy = rdy.data;
    const ConvSetup setup(s, matrix_rounding());
    const Scratch padded(m_stream,
                         setup.padded ? static_cast<std::size_t>(s.n * s.c_in * setup.shape.h * setup.shape.w) : 0);
    const float* in = setup.padded ? pad(s, x, padded.get()) : x;
    const TensorDesc xd(s.n, s.c_in, setup.shape.h, setup.shape.w), yd(s.n, s.c_out, s.oh, s.ow);
    const FilterDesc wd(s);
    check_output(setup, xd, wd, s);
    const auto chosen = conv_algorithm(2, s, [&] {
      int found = 0;
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(m_dnn, xd.d, yd.d, setup.conv, wd.d,
                                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, perf),
            "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
      const auto a = first_usable(perf, found, "backward filter").algo;
      std::size_t b = 0;
      check(cudnnGetConvolutionBackwardFilterWorkspaceSize(m_dnn, xd.d, yd.d, setup.conv, wd.d, a, &b),
            "cudnnGetConvolutionBackwardFilterWorkspaceSize");
      return ConvAlgorithm{static_cast<int>(a), b};
    });
    const auto algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(chosen.algo);
    const std::size_t bytes = chosen.bytes;
    const Scratch workspace(m_stream, (bytes + sizeof(float) - 1) / sizeof(float));
    const float one = 1.F, zero = 0.F;
    check(cudnnConvolutionBackwardFilter(m_dnn, &one, xd.d, in, yd.d, dy, setup.conv, algo, workspace.get(), bytes,
                                         &zero, wd.d, dw),
          "cudnnConvolutionBackwardFilter");
    if (d_bias != nullptr) {
      const TensorDesc bd(1, s.c_out, 1, 1);
      check(cudnnConvolutionBackwardBias(m_dnn, &one, yd.d, dy, &zero, bd.d, d_bias), "cudnnConvolutionBackwardBias");
    }
  }

  void pool_forward(Pool kind, const PoolShape& s, const float* x, float* y) override {
    if (!cudnn_pools(s)) {
      cuda::pool_forward(m_stream, kind, s, x, y);
      return;
    }
    const PoolDesc p(kind, s.window);
    const TensorDesc xd(s.n, s.c, s.h, s.w), yd(s.n, s.c, s.oh, s.ow);
    const float one = 1.F, zero = 0.F;
    check(cudnnPoolingForward(m_dnn, p.d, &one, xd.d, x, &zero, yd.d, y), "cudnnPoolingForward");
  }

  void pool_backward(Pool kind, const PoolShape& s, const float* x, const float* dy, float* dx) override {
    if (!cudnn_pools(s)) {
      cuda::pool_backward(m_stream, kind, s, x, dy, dx);
      return;
    }
    const PoolDesc p(kind, s.window);
    const TensorDesc xd(s.n, s.c, s.h, s.w), yd(s.n, s.c, s.oh, s.ow);
    const Scratch y(m_stream, static_cast<std::size_t>(s.n * s.c * s.oh * s.ow)); // cuDNN wants the forward output
    const float one = 1.F, zero = 0.F;
    check(cudnnPoolingForward(m_dnn, p.d, &one, xd.d, x, &zero, yd.d, y.get()), "cudnnPoolingForward");
    check(cudnnPoolingBackward(m_dnn, p.d, &one, yd.d, y.get(), yd.d, dy, xd.d, x, &zero, xd.d, dx),
          "cudnnPoolingBackward");
  }

  void batch_norm_forward(const BatchNormShape& s, const float* x, const float* scale, const float* shift, float* mean,
                          float* variance, bool given_statistics, float* y) override {
    if (!given_statistics) {
      cuda::batch_norm_statistics(m_stream, s, x, mean, variance);
    }
    // y from the statistics: cuDNN's inference form takes them as given (population variance).
    const TensorDesc xd(s.n, s.c, s.spatial, 1), pd(1, s.c, 1, 1);
    const float one = 1.F, zero = 0.F;
    check(cudnnBatchNormalizationForwardInference(m_dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.d, x, xd.d, y, pd.d,
                                                  scale, shift, mean, variance, s.epsilon),
          "cudnnBatchNormalizationForwardInference");
  }

  void batch_norm_backward(const BatchNormShape& s, const float* x, const float* scale, const float* mean,
                           const float* variance, const float* dy, bool given_statistics, float* dx, float* d_scale,
                           float* d_shift) override {
    if (given_statistics) {
      cuda::batch_norm_backward_given(m_stream, s, x, scale, mean, variance, dy, dx, d_scale, d_shift);
      return;
    }
    // The buffer's own statistics: cuDNN recomputes them (no saved mean / inverse variance passed).
    const TensorDesc xd(s.n, s.c, s.spatial, 1), pd(1, s.c, 1, 1);
    const float one = 1.F, zero = 0.F;
    check(cudnnBatchNormalizationBackward(m_dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xd.d, x, xd.d, dy,
                                          xd.d, dx, pd.d, scale, d_scale, d_shift, s.epsilon, nullptr, nullptr),
          "cudnnBatchNormalizationBackward");
  }

  void batch_norm_backward_statistics(const BatchNormShape& s, std::int64_t count, const float* x, const float* scale,
                                      const float* mean, const float* variance, const float* d_scale,
                                      const float* d_shift, float* dx) override {
    cuda::batch_norm_backward_statistics(m_stream, s, count, x, scale, mean, variance, d_scale, d_shift, dx);
  }

  void recurrent_forward(const RecurrentShape& s, const RecurrentInputs& in, const RecurrentOutputs& out,
                         Floats& saved) override {
    cuda::recurrent_forward(m_dnn, m_stream, s, in, out, saved);
  }

  void recurrent_backward(const RecurrentShape& s, const RecurrentInputs& in, const Floats& saved,
                          const RecurrentOutputGradients& d_out, const RecurrentInputGradients& d_in) override {
    cuda::recurrent_backward(m_dnn, m_stream, s, in, saved, d_out, d_in);
  }

  void sgd_update(std::int64_t n, float learning_rate, const float* gradient, float* weights) override {
    const float alpha = -learning_rate;
    for (std::int64_t off = 0; off < n; off += INT_MAX) {
      const int count = static_cast<int>(std::min<std::int64_t>(INT_MAX, n - off));
      check(cublasSaxpy(m_blas, count, &alpha, gradient + off, 1, weights + off, 1), "cublasSaxpy (SGD)");
    }
  }

  void momentum_update(std::int64_t n, float learning_rate, float momentum, const float* gradient, float* velocity,
                       float* weights) override {
    cuda::momentum_update(m_stream, n, learning_rate, momentum, gradient, velocity, weights);
  }

  void adam_update(std::int64_t n, const AdamParameters& p, int step, const float* gradient, float* m, float* v,
                   float* weights) override {
    const AdamCorrection c = adam_correction(p, step);
    cuda::adam_update(m_stream, n, p.learning_rate, p.beta1, p.beta2, p.epsilon, c.first, c.second, gradient, m, v,
                      weights);
  }

  // NCCL's reduce-scatter and all-gather take equal slices; ZeRO's differ by one element, so each
  // slice is its own reduce (to its owner) or broadcast (from it), grouped into one launch.
  void reduce_scatter_sum(MPI_Comm comm, const float* data, std::span<const std::int64_t> counts,
                          float* mine) override {
    if (comm == MPI_COMM_NULL) {
      if (!counts.empty() && mine != data) {
        check(cudaMemcpyAsync(mine, data, static_cast<std::size_t>(counts[0]) * sizeof(float), cudaMemcpyDeviceToDevice,
                              m_stream),
              "cudaMemcpyAsync");
      }
      return;
    }
    ncclComm_t c = nccl(comm);
    // Slice r reduced to its owner r (recvbuff is read by NCCL on the root only).
    check(ncclGroupStart(), "ncclGroupStart");
    std::int64_t at = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] > 0) {
        check(ncclReduce(data + at, mine, static_cast<std::size_t>(counts[r]), ncclFloat, ncclSum, static_cast<int>(r),
                         c, m_stream),
              "ncclReduce (reduce-scatter)");
      }
      at += counts[r];
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

  void all_gather(MPI_Comm comm, std::span<const std::int64_t> counts, float* data) override {
    if (comm == MPI_COMM_NULL) {
      return;
    }
    ncclComm_t c = nccl(comm);
    check(ncclGroupStart(), "ncclGroupStart");
    std::int64_t at = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] > 0) {
        check(ncclBroadcast(data + at, data + at, static_cast<std::size_t>(counts[r]), ncclFloat, static_cast<int>(r),
                            c, m_stream),
              "ncclBroadcast (all-gather)");
      }
      at += counts[r];
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

  void copy(const StridedCopy& c, const float* src, float* dst, bool accumulate) override {
    cuda::copy(m_stream, c, src, dst, accumulate);
  }
  void scale(std::int64_t n, float a, const float* x, float* y) override { cuda::scale(m_stream, n, a, x, y); }
  void flag_nonfinite(std::int64_t n, const float* x, float* flag) override {
    cuda::flag_nonfinite(m_stream, n, x, flag);
  }
  void fill(std::int64_t n, float value, float* y) override { cuda::fill(m_stream, n, value, y); }
  void gather(const GatherShape& s, const float* data, const float* indices, float* y) override {
    cuda::gather(m_stream, s, data, indices, y);
  }
  void gather_backward(const GatherShape& s, const float* indices, const float* dy, float* d_data) override {
    cuda::gather_backward(m_stream, s, indices, dy, d_data);
  }
  void select(Select kind, const Dims& y_dims, const Dims& a_dims, const float* a, const Dims& b_dims, const float* b,
              const Dims& c_dims, const float* c, float* y) override {
    if (y_dims.size() > static_cast<std::size_t>(cuda::max_rank)) {
      throw Error(fmt::format("comparison or Where on rank-{} tensors (the CUDA backend takes up to {})", y_dims.size(),
                              cuda::max_rank));
    }
    cuda::Broadcast3 shape;
    shape.rank = static_cast<int>(y_dims.size());
    std::int64_t sa = 1, sb = 1, sc = 1;
    for (std::size_t d = y_dims.size(); d-- > 0;) {
      shape.out[d] = y_dims[d];
      shape.a_stride[d] = a_dims[d] == 1 ? 0 : sa;
      shape.b_stride[d] = b_dims[d] == 1 ? 0 : sb;
      shape.c_stride[d] = c_dims.empty() || c_dims[d] == 1 ? 0 : sc;
      sa *= a_dims[d];
      sb *= b_dims[d];
      sc *= c_dims.empty() ? 1 : c_dims[d];
    }
    cuda::select(m_stream, kind, shape, a, b, c, y);
  }

  void memory_bound(std::int64_t bytes) override {
    // Half read, half written: a device-to-device copy of bytes/2 in a buffer kept between calls.
    const auto half = static_cast<std::size_t>(std::max<std::int64_t>(bytes / 2, 1));
    if (m_scratch_bytes < 2 * half) {
      if (m_scratch != nullptr) {
        check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize");
        check(cudaFree(m_scratch), "cudaFree");
        m_scratch = nullptr;
      }
      check(cudaMalloc(&m_scratch, 2 * half), "cudaMalloc (stand-in scratch)");
      m_scratch_bytes = 2 * half;
    }
    check(cudaMemcpyAsync(static_cast<char*>(m_scratch) + half, m_scratch, half, cudaMemcpyDeviceToDevice, m_stream),
          "cudaMemcpyAsync (stand-in)");
  }

private:
  struct PoolDesc {
    cudnnPoolingDescriptor_t d = nullptr;
    PoolDesc(Pool kind, const Window2d& w) {
      const auto mode = kind == Pool::max                       ? CUDNN_POOLING_MAX_DETERMINISTIC
                        : kind == Pool::average_include_padding ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                                : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
      check(cudnnCreatePoolingDescriptor(&d), "cudnnCreatePoolingDescriptor");
      check(cudnnSetPooling2dDescriptor(d, mode, CUDNN_NOT_PROPAGATE_NAN, as_int(w.kh, "kh"), as_int(w.kw, "kw"),
                                        as_int(w.pad_top, "pad"), as_int(w.pad_left, "pad"),
                                        as_int(w.stride_h, "stride"), as_int(w.stride_w, "stride")),
            "cudnnSetPooling2dDescriptor");
    }
    ~PoolDesc() { cudnnDestroyPoolingDescriptor(d); }
    PoolDesc(const PoolDesc&) = delete;
    PoolDesc& operator=(const PoolDesc&) = delete;
  };

  // cuDNN pools dense windows with symmetric pads whose output has exactly the planned extents;
  // the rest (dilation, the extended pads of ceil_mode, halo windows) runs the direct kernel.
  static bool cudnn_pools(const PoolShape& s) {
    const auto& w = s.window;
    if (w.dilation_h != 1 || w.dilation_w != 1 || !symmetric(w) || w.pad_top >= w.kh || w.pad_left >= w.kw) {
      return false;
    }
    return (s.h + 2 * w.pad_top - w.kh) / w.stride_h + 1 == s.oh &&
           (s.w + 2 * w.pad_left - w.kw) / w.stride_w + 1 == s.ow;
  }

  // Softmax over `axis` as cuDNN's channel mode: [outer, axis, inner, 1].
  static TensorDesc softmax_desc(const Dims& dims, int axis) {
    const auto a = around_axis(dims, axis);
    return {a.outer, a.length, a.inner, 1};
  }

  const float* pad(const ConvShape& s, const float* x, float* padded) {
    const auto& w = s.window;
    cuda::pad2d(m_stream, s.n * s.c_in, s.h, s.w, w.pad_top, w.pad_left, w.pad_bottom, w.pad_right, 0.F, x, padded);
    return padded;
  }

  // The planned output extents are what cuDNN computes for the window (else the shapes disagree).
  static void check_output(const ConvSetup& setup, const TensorDesc& x, const FilterDesc& w, const ConvShape& s) {
    int n = 0, c = 0, h = 0, wd = 0;
    check(cudnnGetConvolution2dForwardOutputDim(setup.conv, x.d, w.d, &n, &c, &h, &wd),
          "cudnnGetConvolution2dForwardOutputDim");
    if (h != s.oh || wd != s.ow || c != s.c_out) {
      throw Error(fmt::format("convolution: cuDNN computes a [{}, {}, {}, {}] output for a planned [{}, {}, {}, {}]", n,
                              c, h, wd, s.n, s.c_out, s.oh, s.ow));
    }
  }

  // cuDNN's fastest algorithm by its heuristics among those whose workspace takes at most an eighth
  // of the GPU's free memory (64 MiB at least), else the one with the smallest workspace: the
  // stream-ordered pool keeps the largest workspace it has given, and tensor buffers need the room.
  template <class Perf> static const Perf& first_usable(const Perf* perf, int found, const char* what) {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
    }
    const std::size_t limit = std::max<std::size_t>(std::size_t{64} << 20, free_bytes / 8);
    const Perf* smallest = nullptr;
    for (int i = 0; i < found; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) {
        continue;
      }
      if (perf[i].memory <= limit) {
        return perf[i];
      }
      if (smallest == nullptr || perf[i].memory < smallest->memory) {
        smallest = &perf[i];
      }
    }
    if (smallest != nullptr) {
      return *smallest;
    }
    throw Error(fmt::format("cuDNN has no convolution {} algorithm for this shape", what));
  }

  // `keyval`: the kernels' communicators (m_keyval) or the gradient sums' (m_gradient_keyval).
  ncclComm_t nccl(MPI_Comm comm) { return nccl(comm, m_keyval); }
  ncclComm_t nccl(MPI_Comm comm, int keyval) {
    void* value = nullptr;
    int found = 0;
    if (MPI_Comm_get_attr(comm, keyval, &value, &found) == MPI_SUCCESS && found != 0) {
      return static_cast<ncclComm_t>(value);
    }
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    ncclUniqueId id{};
    if (rank == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    }
    if (MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, comm) != MPI_SUCCESS) {
      throw Error("MPI_Bcast of the NCCL unique id failed");
    }
    ncclComm_t created = nullptr;
    check(ncclCommInitRank(&created, size, id, rank), "ncclCommInitRank");
    if (MPI_Comm_set_attr(comm, keyval, created) != MPI_SUCCESS) {
      ncclCommDestroy(created);
      throw Error("MPI_Comm_set_attr (NCCL communicator) failed");
    }
    return created;
  }

  std::string m_name;
  cudaStream_t m_stream = nullptr;
  cublasHandle_t m_blas = nullptr;
  cudnnHandle_t m_dnn = nullptr;
  int m_keyval = MPI_KEYVAL_INVALID;
  int m_gradient_keyval = MPI_KEYVAL_INVALID;
  cudaStream_t m_gradient_stream = nullptr;
  std::vector<cudaEvent_t> m_sum_events;
  std::size_t m_sums_used = 0, m_sums_open = 0;
  void* m_scratch = nullptr;
  std::size_t m_scratch_bytes = 0;
  int m_device = 0;
  cudaEvent_t m_anchor = nullptr;
  double m_anchor_seconds = 0;
  std::vector<cudaEvent_t> m_marks;
  std::size_t m_marks_used = 0;
  std::map<std::vector<std::int64_t>, ConvAlgorithm> m_conv_algorithms;
};

} // namespace

std::optional<std::string> cuda_unavailable() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return fmt::format("no CUDA device: cudaGetDeviceCount returned {} ({})", static_cast<int>(e),
                       cudaGetErrorString(e));
  }
  if (count == 0) {
    return std::string("no CUDA device: cudaGetDeviceCount found none");
  }
  return std::nullopt;
}

std::unique_ptr<Backend> make_cuda_backend(int local_rank) {
  if (const auto why = cuda_unavailable()) {
    throw Error(*why);
  }
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  auto backend = std::make_unique<CudaBackend>(local_rank % count, count);
  // Every shard from here on lives in the GPU's memory; the resource outlives them all.
  device_memory().set_stream(backend->stream());
  set_tensor_memory(&device_memory());
  return backend;
}

} // namespace partita::runtime
