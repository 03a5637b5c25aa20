// The CPU backend: oneDNN 2.x primitives (matmul, eltwise, binary, reduction, softmax). oneDNN
// caches primitives by descriptor, so re-creating one per call costs a lookup, not a JIT.

#include "backend.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace partita::runtime {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::memory::dims to_dnnl(const Dims& d) {
  // oneDNN has no 0-D memory: a scalar is a 1-element vector.
  return d.empty() ? dnnl::memory::dims{1} : dnnl::memory::dims(d.begin(), d.end());
}

dnnl::memory::desc dense(const Dims& d) {
  const auto dims = to_dnnl(d);
  dnnl::memory::dims strides(dims.size(), 1);
  for (std::size_t i = dims.size() - 1; i > 0; --i) {
    strides[i - 1] = strides[i] * dims[i];
  }
  return {dims, dt::f32, strides};
}

dnnl::algorithm eltwise_algorithm(Eltwise kind) {
  switch (kind) {
  case Eltwise::relu: return dnnl::algorithm::eltwise_relu;
  case Eltwise::tanh: return dnnl::algorithm::eltwise_tanh;
  case Eltwise::sigmoid: return dnnl::algorithm::eltwise_logistic;
  case Eltwise::gelu: return dnnl::algorithm::eltwise_gelu_erf;
  case Eltwise::exp: return dnnl::algorithm::eltwise_exp;
  case Eltwise::erf:
  case Eltwise::sin:
  case Eltwise::cos: break; // oneDNN 2.x has none of these: loops (CpuBackend::eltwise_*)
  }
  throw Error("unknown eltwise kind");
}

dnnl::algorithm binary_algorithm(Binary kind) {
  switch (kind) {
  case Binary::add: return dnnl::algorithm::binary_add;
  case Binary::sub: return dnnl::algorithm::binary_sub;
  case Binary::mul: return dnnl::algorithm::binary_mul;
  case Binary::div: return dnnl::algorithm::binary_div;
  }
  throw Error("unknown binary kind");
}

void* mut(const float* p) {
  return const_cast<float*>(p);
} // oneDNN takes non-const handles

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(int threads) : m_engine(dnnl::engine::kind::cpu, 0), m_stream(m_engine) {
    omp_set_num_threads(std::max(1, threads));
  }

  std::string_view name() const override { return "cpu (oneDNN)"; }

  void matmul(const MatmulShape& s, const float* a, bool trans_a, const float* b, bool trans_b, float* c) override {
    const dnnl::memory::dims ad{s.batch, s.m, s.k}, bd{s.batch, s.k, s.n}, cd{s.batch, s.m, s.n};
    // A transposed operand is the same buffer read with swapped strides.
    const dnnl::memory::desc amd(
        ad, dt::f32, trans_a ? dnnl::memory::dims{s.m * s.k, 1, s.m} : dnnl::memory::dims{s.m * s.k, s.k, 1});
    const dnnl::memory::desc bmd(
        bd, dt::f32, trans_b ? dnnl::memory::dims{s.k * s.n, 1, s.k} : dnnl::memory::dims{s.k * s.n, s.n, 1});
    const dnnl::memory::desc cmd(cd, dt::f32, tag::abc);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(amd, bmd, cmd), m_engine);
    dnnl::memory am(amd, m_engine, mut(a)), bm(bmd, m_engine, mut(b)), cm(cmd, m_engine, c);
    dnnl::matmul(pd).execute(m_stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    m_stream.wait();
  }

  void eltwise_forward(Eltwise kind, std::int64_t n, const float* x, float* y) override {
    if (kind == Eltwise::erf || kind == Eltwise::sin || kind == Eltwise::cos) {
#pragma omp parallel for simd
      for (std::int64_t i = 0; i < n; ++i) {
        y[i] = kind == Eltwise::erf ? std::erf(x[i]) : kind == Eltwise::sin ? std::sin(x[i]) : std::cos(x[i]);
      }
      return;
    }
    const auto md = dense({n});
    const dnnl::eltwise_forward::primitive_desc pd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, eltwise_algorithm(kind), md, 0.F, 0.F),
        m_engine);
    dnnl::memory xm(md, m_engine, mut(x)), ym(md, m_engine, y);
    dnnl::eltwise_forward(pd).execute(m_stream, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DST, ym}});
    m_stream.wait();
  }

  void eltwise_backward(Eltwise kind, std::int64_t n, const float* x, const float* dy, float* dx) override {
    if (kind == Eltwise::erf) { // d erf(x) / dx = 2 / sqrt(pi) * exp(-x^2)
      constexpr float two_over_sqrt_pi = 1.1283791670955126F;
#pragma omp parallel for simd
      for (std::int64_t i = 0; i < n; ++i) {
        dx[i] = dy[i] * two_over_sqrt_pi * std::exp(-x[i] * x[i]);
      }
      return;
    }
    if (kind == Eltwise::sin || kind == Eltwise::cos) { // sin' = cos, cos' = -sin
#pragma omp parallel for simd
      for (std::int64_t i = 0; i < n; ++i) {
        dx[i] = dy[i] * (kind == Eltwise::sin ? std::cos(x[i]) : -std::sin(x[i]));
      }
      return;
    }
    const auto md = dense({n});
    const auto alg = eltwise_algorithm(kind);
    const dnnl::eltwise_forward::primitive_desc hint(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, md, 0.F, 0.F), m_engine);
    const dnnl::eltwise_backward::primitive_desc pd(dnnl::eltwise_backward::desc(alg, md, md, 0.F, 0.F), m_engine,
                                                    hint);
    dnnl::memory xm(md, m_engine, mut(x)), dym(md, m_engine, mut(dy)), dxm(md, m_engine, dx);
    dnnl::eltwise_backward(pd).execute(m_stream,
                                       {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_DIFF_SRC, dxm}});
    m_stream.wait();
  }

  void binary(Binary kind, const Dims& a_dims, const float* a, const Dims& b_dims, const float* b, const Dims& c_dims,
              float* c) override {
    // oneDNN broadcasts only the second source. Commutative ops swap a broadcast first source
    // there; otherwise the first source is expanded (a broadcast add onto zeros).
    if (a_dims != c_dims) {
      if ((kind == Binary::add || kind == Binary::mul) && b_dims == c_dims) {
        binary(kind, b_dims, b, a_dims, a, c_dims, c);
        return;
      }
      std::vector<float> expanded(static_cast<std::size_t>(product(c_dims)), 0.F);
      binary(Binary::add, c_dims, expanded.data(), a_dims, a, c_dims, expanded.data());
      binary(kind, c_dims, expanded.data(), b_dims, b, c_dims, c);
      return;
    }
    const auto amd = dense(a_dims), bmd = dense(b_dims), cmd = dense(c_dims);
    const dnnl::binary::primitive_desc pd(dnnl::binary::desc(binary_algorithm(kind), amd, bmd, cmd), m_engine);
    dnnl::memory am(amd, m_engine, mut(a)), bm(bmd, m_engine, mut(b)), cm(cmd, m_engine, c);
    dnnl::binary(pd).execute(m_stream, {{DNNL_ARG_SRC_0, am}, {DNNL_ARG_SRC_1, bm}, {DNNL_ARG_DST, cm}});
    m_stream.wait();
  }

  void reduce_sum(const Dims& src_dims, const float* src, const Dims& dst_dims, float* dst) override {
    if (src_dims == dst_dims) {
      std::memcpy(dst, src, static_cast<std::size_t>(product(src_dims)) * sizeof(float));
      return;
    }
    const auto smd = dense(src_dims), dmd = dense(dst_dims);
    const dnnl::reduction::primitive_desc pd(dnnl::reduction::desc(dnnl::algorithm::reduction_sum, smd, dmd, 0.F, 0.F),
                                             m_engine);
    dnnl::memory sm(smd, m_engine, mut(src)), dm(dmd, m_engine, dst);
    dnnl::reduction(pd).execute(m_stream, {{DNNL_ARG_SRC, sm}, {DNNL_ARG_DST, dm}});
    m_stream.wait();
  }

  void softmax_forward(const Dims& dims, int axis, const float* x, float* y) override {
    const auto md = dense(dims);
    const dnnl::softmax_forward::primitive_desc pd(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_training, md, axis), m_engine);
    dnnl::memory xm(md, m_engine, mut(x)), ym(md, m_engine, y);
    dnnl::softmax_forward(pd).execute(m_stream, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DST, ym}});
    m_stream.wait();
  }

  void softmax_backward(const Dims& dims, int axis, const float* y, const float* dy, float* dx) override {
    const auto md = dense(dims);
    const dnnl::softmax_forward::primitive_desc hint(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_training, md, axis), m_engine);
    const dnnl::softmax_backward::primitive_desc pd(dnnl::softmax_backward::desc(md, md, axis), m_engine, hint);
    dnnl::memory ym(md, m_engine, mut(y)), dym(md, m_engine, mut(dy)), dxm(md, m_engine, dx);
    dnnl::softmax_backward(pd).execute(m_stream,
                                       {{DNNL_ARG_DST, ym}, {DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_DIFF_SRC, dxm}});
    m_stream.wait();
  }

  void layer_norm_forward(std::int64_t rows, std::int64_t norm, float epsilon, const float* x, const float* scale,
                          const float* shift, float* y, float* mean, float* inv_std) override {
    const auto md = dense({rows, norm});
    const auto stat = dense({rows});
    const dnnl::layer_normalization_forward::primitive_desc pd(
        dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, md, stat, epsilon, norm_flags),
        m_engine);
    std::vector<float> mean_buf(static_cast<std::size_t>(rows)), var_buf(static_cast<std::size_t>(rows));
    dnnl::memory xm(md, m_engine, mut(x)), ym(md, m_engine, y);
    dnnl::memory sm(dense({norm}), m_engine, mut(scale)), bm(dense({norm}), m_engine, mut(shift));
    dnnl::memory mm(stat, m_engine, mean_buf.data()), vm(stat, m_engine, var_buf.data());
    dnnl::layer_normalization_forward(pd).execute(m_stream, {{DNNL_ARG_SRC, xm},
                                                             {DNNL_ARG_DST, ym},
                                                             {DNNL_ARG_SCALE, sm},
                                                             {DNNL_ARG_SHIFT, bm},
                                                             {DNNL_ARG_MEAN, mm},
                                                             {DNNL_ARG_VARIANCE, vm}});
    m_stream.wait();
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto u = static_cast<std::size_t>(r);
      if (mean != nullptr) {
        mean[r] = mean_buf[u];
      }
      if (inv_std != nullptr) {
        inv_std[r] = 1.F / std::sqrt(var_buf[u] + epsilon);
      }
    }
  }

  void layer_norm_backward(std::int64_t rows, std::int64_t norm, float epsilon, const float* x, const float* scale,
                           const float* dy, float* dx, float* d_scale, float* d_shift) override {
    const auto md = dense({rows, norm});
    const auto stat = dense({rows});
    // The statistics of the forward pass, recomputed (cheap next to keeping them per op).
    const dnnl::layer_normalization_forward::primitive_desc hint(
        dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, md, stat, epsilon, norm_flags),
        m_engine);
    std::vector<float> mean(static_cast<std::size_t>(rows)), var(static_cast<std::size_t>(rows));
    std::vector<float> y(static_cast<std::size_t>(rows * norm)), zeros(static_cast<std::size_t>(norm), 0.F);
    std::vector<float> ds(static_cast<std::size_t>(norm)), db(static_cast<std::size_t>(norm));
    dnnl::memory xm(md, m_engine, mut(x)), ym(md, m_engine, y.data());
    dnnl::memory sm(dense({norm}), m_engine, mut(scale)), bm(dense({norm}), m_engine, zeros.data());
    dnnl::memory mm(stat, m_engine, mean.data()), vm(stat, m_engine, var.data());
    dnnl::layer_normalization_forward(hint).execute(m_stream, {{DNNL_ARG_SRC, xm},
                                                               {DNNL_ARG_DST, ym},
                                                               {DNNL_ARG_SCALE, sm},
                                                               {DNNL_ARG_SHIFT, bm},
                                                               {DNNL_ARG_MEAN, mm},
                                                               {DNNL_ARG_VARIANCE, vm}});
    const dnnl::layer_normalization_backward::primitive_desc pd(
        dnnl::layer_normalization_backward::desc(dnnl::prop_kind::backward, md, md, stat, epsilon, norm_flags),
        m_engine, hint);
    dnnl::memory dym(md, m_engine, mut(dy)), dxm(md, m_engine, dx);
    dnnl::memory dsm(dense({norm}), m_engine, ds.data()), dbm(dense({norm}), m_engine, db.data());
    // oneDNN 2.6 wants the shift as an argument of the backward pass too (it does not read it).
    dnnl::layer_normalization_backward(pd).execute(m_stream, {{DNNL_ARG_SRC, xm},
                                                              {DNNL_ARG_DIFF_DST, dym},
                                                              {DNNL_ARG_SCALE, sm},
                                                              {DNNL_ARG_SHIFT, bm},
                                                              {DNNL_ARG_MEAN, mm},
                                                              {DNNL_ARG_VARIANCE, vm},
                                                              {DNNL_ARG_DIFF_SRC, dxm},
                                                              {DNNL_ARG_DIFF_SCALE, dsm},
                                                              {DNNL_ARG_DIFF_SHIFT, dbm}});
    m_stream.wait();
    if (d_scale != nullptr) {
      std::copy(ds.begin(), ds.end(), d_scale);
    }
    if (d_shift != nullptr) {
      std::copy(db.begin(), db.end(), d_shift);
    }
  }

  void sgd_update(std::int64_t n, float learning_rate, const float* gradient, float* weights) override {
#pragma omp parallel for simd
    for (std::int64_t i = 0; i < n; ++i) {
      weights[i] -= learning_rate * gradient[i];
    }
  }

  void memory_bound(std::int64_t bytes) override {
    // Half read, half written: a copy of bytes/2 through a scratch buffer kept between calls.
    const auto half = static_cast<std::size_t>(std::max<std::int64_t>(bytes / 2, 1));
    if (m_scratch.size() < 2 * half) {
      m_scratch.assign(2 * half, 1);
    }
    std::memcpy(m_scratch.data() + half, m_scratch.data(), half);
    m_sink = m_scratch[half + half / 2];
  }

private:
  static inline const auto norm_flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

  static std::int64_t product(const Dims& d) {
    return std::accumulate(d.begin(), d.end(), std::int64_t{1}, std::multiplies<>());
  }

  dnnl::engine m_engine;
  dnnl::stream m_stream;
  std::vector<unsigned char> m_scratch;
  volatile unsigned char m_sink = 0;
};

} // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

} // namespace partita::runtime
