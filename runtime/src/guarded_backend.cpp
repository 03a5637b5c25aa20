#include "backends.h"

// The CPU backend on GuardedMemory (tensor_memory.h): tensor buffers are open to the host only
// while one of the backend's calls runs, as a GPU's memory is open only to its kernels, so that a
// host access of tensor memory anywhere else in partita-run faults here, on a machine without a GPU,
// instead of reading device memory there.

namespace partita::runtime {
namespace {

class GuardedBackend final : public Backend {
public:
  GuardedBackend(std::unique_ptr<Backend> inner, GuardedMemory& memory)
      : m_inner(std::move(inner)), m_memory(memory),
        m_name(std::string(m_inner->name()) + ", tensor memory closed to the host outside kernels") {}

  std::string_view name() const override { return m_name; }
  void synchronize() override { m_inner->synchronize(); }
  bool kernels_on_host() const override { return m_inner->kernels_on_host(); }
  void prefetch(const float* data, std::int64_t count) override { m_inner->prefetch(data, count); }
  std::size_t mark() override { return m_inner->mark(); }
  std::vector<double> mark_times() override { return m_inner->mark_times(); }

  void flag_nonfinite(std::int64_t n, const float* x, float* flag) override {
    const Open o(*this);
    m_inner->flag_nonfinite(n, x, flag);
  }
  void all_reduce_sum(MPI_Comm comm, float* data, std::int64_t count) override {
    const Open o(*this);
    m_inner->all_reduce_sum(comm, data, count);
  }
  void matmul(const MatmulShape& s, const float* a, bool trans_a, const float* b, bool trans_b, float* c) override {
    const Open o(*this);
    m_inner->matmul(s, a, trans_a, b, trans_b, c);
  }
  void eltwise_forward(Eltwise kind, std::int64_t n, const float* x, float* y) override {
    const Open o(*this);
    m_inner->eltwise_forward(kind, n, x, y);
  }
  void eltwise_backward(Eltwise kind, std::int64_t n, const float* x, const float* dy, float* dx) override {
    const Open o(*this);
    m_inner->eltwise_backward(kind, n, x, dy, dx);
  }
  void binary(Binary kind, const Dims& a_dims, const float* a, const Dims& b_dims, const float* b, const Dims& c_dims,
              float* c) override {
    const Open o(*this);
    m_inner->binary(kind, a_dims, a, b_dims, b, c_dims, c);
  }
  void reduce_sum(const Dims& src_dims, const float* src, const Dims& dst_dims, float* dst) override {
    const Open o(*this);
    m_inner->reduce_sum(src_dims, src, dst_dims, dst);
  }
  void softmax_forward(const Dims& dims, int axis, const float* x, float* y) override {
    const Open o(*this);
    m_inner->softmax_forward(dims, axis, x, y);
  }
  void softmax_backward(const Dims& dims, int axis, const float* y, const float* dy, float* dx) override {
    const Open o(*this);
    m_inner->softmax_backward(dims, axis, y, dy, dx);
  }
  void layer_norm_forward(std::int64_t rows, std::int64_t norm, float epsilon, const float* x, const float* scale,
                          const float* shift, float* y, float* mean, float* inv_std) override {
    const Open o(*this);
    m_inner->layer_norm_forward(rows, norm, epsilon, x, scale, shift, y, mean, inv_std);
  }
  void layer_norm_backward(std::int64_t rows, std::int64_t norm, float epsilon, const float* x, const float* scale,
                           const float* dy, float* dx, float* d_scale, float* d_shift) override {
    const Open o(*this);
    m_inner->layer_norm_backward(rows, norm, epsilon, x, scale, dy, dx, d_scale, d_shift);
  }
  void conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) override {
    const Open o(*this);
    m_inner->conv_forward(s, x, w, bias, y);
  }
  void conv_backward_data(const ConvShape& s, const float* w, const float* dy, float* dx) override {
    const Open o(*this);
    m_inner->conv_backward_data(s, w, dy, dx);
  }
  void conv_backward_weights(const ConvShape& s, const float* x, const float* dy, float* dw, float* d_bias) override {
    const Open o(*this);
    m_inner->conv_backward_weights(s, x, dy, dw, d_bias);
  }
  void pool_forward(Pool kind, const PoolShape& s, const float* x, float* y) override {
    const Open o(*this);
    m_inner->pool_forward(kind, s, x, y);
  }
  void pool_backward(Pool kind, const PoolShape& s, const float* x, const float* dy, float* dx) override {
    const Open o(*this);
    m_inner->pool_backward(kind, s, x, dy, dx);
  }
  void batch_norm_forward(const BatchNormShape& s, const float* x, const float* scale, const float* shift, float* mean,
                          float* variance, bool given_statistics, float* y) override {
    const Open o(*this);
    m_inner->batch_norm_forward(s, x, scale, shift, mean, variance, given_statistics, y);
  }
  void batch_norm_backward(const BatchNormShape& s, const float* x, const float* scale, const float* mean,
                           const float* variance, const float* dy, bool given_statistics, float* dx, float* d_scale,
                           float* d_shift) override {
    const Open o(*this);
    m_inner->batch_norm_backward(s, x, scale, mean, variance, dy, given_statistics, dx, d_scale, d_shift);
  }
  void batch_norm_backward_statistics(const BatchNormShape& s, std::int64_t count, const float* x, const float* scale,
                                      const float* mean, const float* variance, const float* d_scale,
                                      const float* d_shift, float* dx) override {
    const Open o(*this);
    m_inner->batch_norm_backward_statistics(s, count, x, scale, mean, variance, d_scale, d_shift, dx);
  }
  void recurrent_forward(const RecurrentShape& s, const RecurrentInputs& in, const RecurrentOutputs& out,
                         Floats& saved) override {
    const Open o(*this);
    m_inner->recurrent_forward(s, in, out, saved);
  }
  void recurrent_backward(const RecurrentShape& s, const RecurrentInputs& in, const Floats& saved,
                          const RecurrentOutputGradients& d_out, const RecurrentInputGradients& d_in) override {
    const Open o(*this);
    m_inner->recurrent_backward(s, in, saved, d_out, d_in);
  }
  void reduce_scatter_sum(MPI_Comm comm, const float* data, std::span<const std::int64_t> counts,
                          float* mine) override {
    const Open o(*this);
    m_inner->reduce_scatter_sum(comm, data, counts, mine);
  }
  void all_gather(MPI_Comm comm, std::span<const std::int64_t> counts, float* data) override {
    const Open o(*this);
    m_inner->all_gather(comm, counts, data);
  }
  void sgd_update(std::int64_t n, float learning_rate, const float* gradient, float* weights) override {
    const Open o(*this);
    m_inner->sgd_update(n, learning_rate, gradient, weights);
  }
  void momentum_update(std::int64_t n, float learning_rate, float momentum, const float* gradient, float* velocity,
                       float* weights) override {
    const Open o(*this);
    m_inner->momentum_update(n, learning_rate, momentum, gradient, velocity, weights);
  }
  void adam_update(std::int64_t n, const AdamParameters& p, int step, const float* gradient, float* m, float* v,
                   float* weights) override {
    const Open o(*this);
    m_inner->adam_update(n, p, step, gradient, m, v, weights);
  }
  void copy(const StridedCopy& c, const float* src, float* dst, bool accumulate) override {
    const Open o(*this);
    m_inner->copy(c, src, dst, accumulate);
  }
  void scale(std::int64_t n, float a, const float* x, float* y) override {
    const Open o(*this);
    m_inner->scale(n, a, x, y);
  }
  void fill(std::int64_t n, float value, float* y) override {
    const Open o(*this);
    m_inner->fill(n, value, y);
  }
  void gather(const GatherShape& s, const float* data, const float* indices, float* y) override {
    const Open o(*this);
    m_inner->gather(s, data, indices, y);
  }
  void gather_backward(const GatherShape& s, const float* indices, const float* dy, float* d_data) override {
    const Open o(*this);
    m_inner->gather_backward(s, indices, dy, d_data);
  }
  void select(Select kind, const Dims& y_dims, const Dims& a_dims, const float* a, const Dims& b_dims, const float* b,
              const Dims& c_dims, const float* c, float* y) override {
    const Open o(*this);
    m_inner->select(kind, y_dims, a_dims, a, b_dims, b, c_dims, c, y);
  }
  void memory_bound(std::int64_t bytes) override {
    const Open o(*this);
    m_inner->memory_bound(bytes);
  }

private:
  // Tensor memory open for one call (and the call's matrix arithmetic passed on).
  struct Open {
    explicit Open(GuardedBackend& b) : memory(b.m_memory) {
      b.m_inner->set_matrix_rounding(b.matrix_rounding());
      memory.open();
    }
    ~Open() { memory.close(); }
    Open(const Open&) = delete;
    Open& operator=(const Open&) = delete;
    GuardedMemory& memory;
  };

  std::unique_ptr<Backend> m_inner;
  GuardedMemory& m_memory;
  std::string m_name;
};

} // namespace

std::unique_ptr<Backend> make_guarded_backend(std::unique_ptr<Backend> inner) {
  set_tensor_memory(&guarded_memory());
  return std::make_unique<GuardedBackend>(std::move(inner), guarded_memory());
}

} // namespace partita::runtime
