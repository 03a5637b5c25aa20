// The CPU backend: oneDNN 2.x primitives (matmul, eltwise, binary, reduction, softmax,
// convolution, pooling, normalization; the recurrent layers in cpu_recurrent.cpp). oneDNN caches
// primitives by descriptor, so re-creating one per call costs a lookup, not a JIT. Convolutions let
// oneDNN pick its blocked layouts (format `any`) and reorder the dense NCHW buffers in and out: its
// direct kernels need them to be fast.

#include "backend.h"
#include "collectives.h"
#include "cpu_recurrent.h"
#include "faster_way.h"
#include "host_movement.h"
#include "vector_kernels.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <tuple>
#include <unordered_map>

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

dnnl::memory::desc nchw(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  return {{n, c, h, w}, dt::f32, tag::nchw};
}

dnnl::memory::desc any(const dnnl::memory::dims& d) {
  return {d, dt::f32, tag::any};
}

// oneDNN's conventions: dilation 0 is a dense window.
struct WindowArgs {
  dnnl::memory::dims strides, dilates, padding_l, padding_r, kernel;
};

WindowArgs window_args(const Window2d& w) {
  return {{w.stride_h, w.stride_w},
          {w.dilation_h - 1, w.dilation_w - 1},
          {w.pad_top, w.pad_left},
          {w.pad_bottom, w.pad_right},
          {w.kh, w.kw}};
}

// W [c_out, c_in/groups, kh, kw] is oneDNN's goihw with g leading, the same bytes.
dnnl::memory::desc conv_weights(const ConvShape& s, dnnl::memory::format_tag t) {
  if (s.groups == 1) {
    return {{s.c_out, s.c_in, s.window.kh, s.window.kw}, dt::f32, t};
  }
  return {{s.groups, s.c_out / s.groups, s.c_in / s.groups, s.window.kh, s.window.kw},
          dt::f32,
          t == tag::any ? tag::any : tag::goihw};
}

dnnl::convolution_forward::desc conv_forward_desc(const ConvShape& s, bool bias) {
  const auto a = window_args(s.window);
  const auto src = any({s.n, s.c_in, s.h, s.w});
  const auto dst = any({s.n, s.c_out, s.oh, s.ow});
  const auto wei = conv_weights(s, tag::any);
  if (bias) {
    return {dnnl::prop_kind::forward_training,
            dnnl::algorithm::convolution_direct,
            src,
            wei,
            any({s.c_out}),
            dst,
            a.strides,
            a.dilates,
            a.padding_l,
            a.padding_r};
  }
  return {dnnl::prop_kind::forward_training,
          dnnl::algorithm::convolution_direct,
          src,
          wei,
          dst,
          a.strides,
          a.dilates,
          a.padding_l,
          a.padding_r};
}

dnnl::algorithm pool_algorithm(Pool kind) {
  switch (kind) {
  case Pool::max: return dnnl::algorithm::pooling_max;
  case Pool::average_include_padding: return dnnl::algorithm::pooling_avg_include_padding;
  case Pool::average_exclude_padding: return dnnl::algorithm::pooling_avg_exclude_padding;
  }
  throw Error("unknown pooling kind");
}

dnnl::pooling_v2_forward::desc pool_forward_desc(Pool kind, const PoolShape& s) {
  const auto a = window_args(s.window);
  return {dnnl::prop_kind::forward_training,
          pool_algorithm(kind),
          nchw(s.n, s.c, s.h, s.w),
          nchw(s.n, s.c, s.oh, s.ow),
          a.strides,
          a.kernel,
          a.dilates,
          a.padding_l,
          a.padding_r};
}

// BatchNorm's [n, c, spatial] as a 4-D NCHW tensor (every oneDNN implementation takes that).
dnnl::memory::desc bn_data(const BatchNormShape& s) {
  return nchw(s.n, s.c, s.spatial, 1);
}

// A kernel's operand as mixed precision reads it: a rounded copy (rounding.h), or the buffer itself
// in fp32.
struct Rounded {
  Floats copy;
  const float* data;
  Rounded(Rounding r, std::int64_t n, const float* x) : data(x) {
    if (r != Rounding::none) {
      copy = uninitialized_floats(static_cast<std::size_t>(n));
      host::round_into(r, n, x, copy.data());
      data = copy.data();
    }
  }
};

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(int threads) : m_engine(dnnl::engine::kind::cpu, 0), m_stream(m_engine) {
    omp_set_num_threads(std::max(1, threads));
  }

  std::string_view name() const override { return "cpu (oneDNN)"; }

  void all_reduce_sum(MPI_Comm comm, float* data, std::int64_t count) override {
    runtime::all_reduce_sum(comm, data, count);
  }
  std::size_t all_reduce_sum_start(MPI_Comm comm, float* data, std::int64_t count) override {
    return m_started.start(comm, data, count);
  }
  void all_reduce_progress() override { m_started.test(); }
  void all_reduce_wait(std::size_t started) override { m_started.wait(started); }

  // A product reading A transposed (a weight's gradient, dW = X^T dY) runs, per shape, the faster
  // of two ways: oneDNN's on the transposed operand, or A reordered into a plain copy first and
  // then the plain product. oneDNN 2.6's sgemm on an AVX2 core reads a transposed A of some shapes
  // at half its rate (m = 1024, n = 256: 39 GFLOP/s, against 86 for the plain product, to which the
  // copy of A adds a sixth), and others at full rate, where the copy would be the loss.
  void matmul(const MatmulShape& s, const float* a, bool trans_a, const float* b, bool trans_b, float* c) override {
    const Rounded ra(matrix_rounding(), s.batch * s.m * s.k, a), rb(matrix_rounding(), s.batch * s.k * s.n, b);
    if (!trans_a) {
      run_matmul(s, ra.data, false, rb.data, trans_b, c);
      return;
    }
    const ProductKey key{s.batch, s.m, s.n, s.k, trans_b};
    const bool timing = !m_transposed_a.decided(key);
    const auto start = std::chrono::steady_clock::now();
    if (m_transposed_a.way(key) == 0) {
      run_matmul(s, ra.data, true, rb.data, trans_b, c);
    } else {
      const auto n = static_cast<std::size_t>(s.batch * s.m * s.k);
      if (m_plain_a.size() < n) {
        m_plain_a = uninitialized_floats(n);
      }
      const dnnl::memory::dims dims{s.batch, s.m, s.k};
      dnnl::memory from({dims, dt::f32, {s.m * s.k, 1, s.m}}, m_engine, mut(ra.data));
      dnnl::memory to({dims, dt::f32, tag::abc}, m_engine, m_plain_a.data());
      dnnl::reorder(from, to).execute(m_stream, from, to);
      run_matmul(s, m_plain_a.data(), false, rb.data, trans_b, c);
    }
    if (timing) {
      m_transposed_a.timed(key, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }

  void eltwise_forward(Eltwise kind, std::int64_t n, const float* x, float* y) override {
    // oneDNN 2.6 has no erf, sin or cos of its own
    if (kind == Eltwise::erf || kind == Eltwise::sin || kind == Eltwise::cos) {
      (kind == Eltwise::erf   ? vector_kernels::erf_forward
       : kind == Eltwise::sin ? vector_kernels::sin_forward
                              : vector_kernels::cos_forward)(n, x, y);
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
    if (kind == Eltwise::erf || kind == Eltwise::sin || kind == Eltwise::cos) {
      (kind == Eltwise::erf   ? vector_kernels::erf_backward
       : kind == Eltwise::sin ? vector_kernels::sin_backward
                              : vector_kernels::cos_backward)(n, x, dy, dx);
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
    // A sum over leading dims (a bias gradient: rows summed into one) is a streaming loop; oneDNN
    // 2.6's reduction reads such a layout at a small fraction of the memory bandwidth.
    std::size_t lead = 0;
    while (lead < dst_dims.size() && dst_dims[lead] == 1) {
      ++lead;
    }
    if (lead > 0 && std::equal(dst_dims.begin() + static_cast<std::ptrdiff_t>(lead), dst_dims.end(),
                               src_dims.begin() + static_cast<std::ptrdiff_t>(lead))) {
      const std::int64_t rows = product(Dims(src_dims.begin(), src_dims.begin() + static_cast<std::ptrdiff_t>(lead)));
      const std::int64_t n = product(dst_dims);
      std::copy_n(src, n, dst);
      for (std::int64_t r = 1; r < rows; ++r) {
        const float* row = src + r * n;
#pragma omp simd
        for (std::int64_t j = 0; j < n; ++j) {
          dst[j] += row[j];
        }
      }
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

  // Not oneDNN's: version 2.6 runs it only in its scalar reference code without AVX-512.
  void softmax_backward(const Dims& dims, int axis, const float* y, const float* dy, float* dx) override {
    const auto a = around_axis(dims, axis);
    vector_kernels::softmax_backward(a.outer, a.length, a.inner, y, dy, dx);
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
    // The statistics of the forward pass, recomputed (cheap next to keeping them per op): one read
    // of x, not a forward pass (the hint below only describes one; it does not run).
    const dnnl::layer_normalization_forward::primitive_desc hint(
        dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, md, stat, epsilon, norm_flags),
        m_engine);
    std::vector<float> mean(static_cast<std::size_t>(rows)), var(static_cast<std::size_t>(rows));
    std::vector<float> zeros(static_cast<std::size_t>(norm), 0.F);
    std::vector<float> ds(static_cast<std::size_t>(norm)), db(static_cast<std::size_t>(norm));
    vector_kernels::row_moments(rows, norm, x, mean.data(), var.data());
    dnnl::memory xm(md, m_engine, mut(x));
    dnnl::memory sm(dense({norm}), m_engine, mut(scale)), bm(dense({norm}), m_engine, zeros.data());
    dnnl::memory mm(stat, m_engine, mean.data()), vm(stat, m_engine, var.data());
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

  void conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) override {
    const Rounded rx(matrix_rounding(), input_elements(s), x), rw(matrix_rounding(), weight_elements(s), w);
    x = rx.data, w = rw.data;
    const dnnl::convolution_forward::primitive_desc pd(conv_forward_desc(s, bias != nullptr), m_engine);
    dnnl::memory xm(nchw(s.n, s.c_in, s.h, s.w), m_engine, mut(x));
    dnnl::memory wm(conv_weights(s, tag::oihw), m_engine, mut(w));
    dnnl::memory ym(nchw(s.n, s.c_out, s.oh, s.ow), m_engine, y);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, input(pd.src_desc(), xm)},
                                               {DNNL_ARG_WEIGHTS, input(pd.weights_desc(), wm)}};
    if (bias != nullptr) {
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(dense({s.c_out}), m_engine, mut(bias)));
    }
    auto out = output(pd.dst_desc(), ym);
    args.emplace(DNNL_ARG_DST, out);
    dnnl::convolution_forward(pd).execute(m_stream, args);
    finish(out, ym);
  }

  void conv_backward_data(const ConvShape& s, const float* w, const float* dy, float* dx) override {
    const Rounded rw(matrix_rounding(), weight_elements(s), w), rdy(matrix_rounding(), output_elements(s), dy);
    w = rw.data, dy = rdy.data;
    const auto a = window_args(s.window);
    const dnnl::convolution_forward::primitive_desc hint(conv_forward_desc(s, false), m_engine);
    const dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any({s.n, s.c_in, s.h, s.w}),
                                              conv_weights(s, tag::any), any({s.n, s.c_out, s.oh, s.ow}), a.strides,
                                              a.dilates, a.padding_l, a.padding_r),
        m_engine, hint);
    dnnl::memory wm(conv_weights(s, tag::oihw), m_engine, mut(w));
    dnnl::memory dym(nchw(s.n, s.c_out, s.oh, s.ow), m_engine, mut(dy));
    dnnl::memory dxm(nchw(s.n, s.c_in, s.h, s.w), m_engine, dx);
    auto out = output(pd.diff_src_desc(), dxm);
    dnnl::convolution_backward_data(pd).execute(m_stream, {{DNNL_ARG_DIFF_DST, input(pd.diff_dst_desc(), dym)},
                                                           {DNNL_ARG_WEIGHTS, input(pd.weights_desc(), wm)},
                                                           {DNNL_ARG_DIFF_SRC, out}});
    finish(out, dxm);
  }

  void conv_backward_weights(const ConvShape& s, const float* x, const float* dy, float* dw, float* d_bias) override {
    const Rounded rx(matrix_rounding(), input_elements(s), x), rdy(matrix_rounding(), output_elements(s), dy);
    x = rx.data, dy = rdy.data;
    const auto a = window_args(s.window);
    const bool bias = d_bias != nullptr;
    const dnnl::convolution_forward::primitive_desc hint(conv_forward_desc(s, bias), m_engine);
    const auto src = any({s.n, s.c_in, s.h, s.w});
    const auto dst = any({s.n, s.c_out, s.oh, s.ow});
    const auto wei = conv_weights(s, tag::any);
    const auto desc =
        bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src, wei, any({s.c_out}),
                                                        dst, a.strides, a.dilates, a.padding_l, a.padding_r)
             : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src, wei, dst, a.strides,
                                                        a.dilates, a.padding_l, a.padding_r);
    const dnnl::convolution_backward_weights::primitive_desc pd(desc, m_engine, hint);
    dnnl::memory xm(nchw(s.n, s.c_in, s.h, s.w), m_engine, mut(x));
    dnnl::memory dym(nchw(s.n, s.c_out, s.oh, s.ow), m_engine, mut(dy));
    dnnl::memory dwm(conv_weights(s, tag::oihw), m_engine, dw);
    auto out = output(pd.diff_weights_desc(), dwm);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, input(pd.src_desc(), xm)},
                                               {DNNL_ARG_DIFF_DST, input(pd.diff_dst_desc(), dym)},
                                               {DNNL_ARG_DIFF_WEIGHTS, out}};
    std::optional<dnnl::memory> dbm, dbout;
    if (bias) {
      dbm.emplace(dense({s.c_out}), m_engine, d_bias);
      dbout = output(pd.diff_bias_desc(), *dbm);
      args.emplace(DNNL_ARG_DIFF_BIAS, *dbout);
    }
    dnnl::convolution_backward_weights(pd).execute(m_stream, args);
    finish(out, dwm);
    if (bias) {
      finish(*dbout, *dbm);
    }
  }

  void pool_forward(Pool kind, const PoolShape& s, const float* x, float* y) override {
    const dnnl::pooling_v2_forward::primitive_desc pd(pool_forward_desc(kind, s), m_engine);
    dnnl::memory xm(pd.src_desc(), m_engine, mut(x)), ym(pd.dst_desc(), m_engine, y);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, xm}, {DNNL_ARG_DST, ym}};
    if (pd.workspace_desc().get_size() > 0) {
      args.emplace(DNNL_ARG_WORKSPACE, dnnl::memory(pd.workspace_desc(), m_engine));
    }
    dnnl::pooling_v2_forward(pd).execute(m_stream, args);
    m_stream.wait();
  }

  void pool_backward(Pool kind, const PoolShape& s, const float* x, const float* dy, float* dx) override {
    const auto a = window_args(s.window);
    const dnnl::pooling_v2_forward::primitive_desc hint(pool_forward_desc(kind, s), m_engine);
    const dnnl::pooling_v2_backward::primitive_desc pd(
        dnnl::pooling_v2_backward::desc(pool_algorithm(kind), nchw(s.n, s.c, s.h, s.w), nchw(s.n, s.c, s.oh, s.ow),
                                        a.strides, a.kernel, a.dilates, a.padding_l, a.padding_r),
        m_engine, hint);
    dnnl::memory dym(pd.diff_dst_desc(), m_engine, mut(dy)), dxm(pd.diff_src_desc(), m_engine, dx);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_DIFF_SRC, dxm}};
    if (kind == Pool::max) { // the arg-max positions: the forward pass again, keeping its workspace
      std::vector<float> y(static_cast<std::size_t>(s.n * s.c * s.oh * s.ow));
      dnnl::memory xm(hint.src_desc(), m_engine, mut(x)), ym(hint.dst_desc(), m_engine, y.data());
      dnnl::memory ws(hint.workspace_desc(), m_engine);
      dnnl::pooling_v2_forward(hint).execute(m_stream,
                                             {{DNNL_ARG_SRC, xm}, {DNNL_ARG_DST, ym}, {DNNL_ARG_WORKSPACE, ws}});
      args.emplace(DNNL_ARG_WORKSPACE, ws);
    }
    dnnl::pooling_v2_backward(pd).execute(m_stream, args);
    m_stream.wait();
  }

  void batch_norm_forward(const BatchNormShape& s, const float* x, const float* scale, const float* shift, float* mean,
                          float* variance, bool given_statistics, float* y) override {
    const auto md = bn_data(s);
    const dnnl::batch_normalization_forward::primitive_desc pd(
        dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, md, s.epsilon,
                                                bn_flags(given_statistics)),
        m_engine);
    const auto ch = dense({s.c});
    dnnl::memory xm(md, m_engine, mut(x)), ym(md, m_engine, y);
    dnnl::memory sm(ch, m_engine, mut(scale)), bm(ch, m_engine, mut(shift));
    dnnl::memory mm(ch, m_engine, mean), vm(ch, m_engine, variance);
    dnnl::batch_normalization_forward(pd).execute(m_stream, {{DNNL_ARG_SRC, xm},
                                                             {DNNL_ARG_DST, ym},
                                                             {DNNL_ARG_SCALE, sm},
                                                             {DNNL_ARG_SHIFT, bm},
                                                             {DNNL_ARG_MEAN, mm},
                                                             {DNNL_ARG_VARIANCE, vm}});
    m_stream.wait();
  }

  void batch_norm_backward(const BatchNormShape& s, const float* x, const float* scale, const float* mean,
                           const float* variance, const float* dy, bool given_statistics, float* dx, float* d_scale,
                           float* d_shift) override {
    const auto md = bn_data(s);
    const auto flags = bn_flags(given_statistics);
    const dnnl::batch_normalization_forward::primitive_desc hint(
        dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, md, s.epsilon, flags), m_engine);
    const dnnl::batch_normalization_backward::primitive_desc pd(
        dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, md, md, s.epsilon, flags), m_engine, hint);
    const auto ch = dense({s.c});
    std::vector<float> zeros(static_cast<std::size_t>(s.c), 0.F);
    dnnl::memory xm(md, m_engine, mut(x)), dym(md, m_engine, mut(dy)), dxm(md, m_engine, dx);
    dnnl::memory sm(ch, m_engine, mut(scale)), bm(ch, m_engine, zeros.data());
    dnnl::memory mm(ch, m_engine, mut(mean)), vm(ch, m_engine, mut(variance));
    dnnl::memory dsm(ch, m_engine, d_scale), dbm(ch, m_engine, d_shift);
    // oneDNN 2.6 wants the shift as an argument of the backward pass too (it does not read it).
    dnnl::batch_normalization_backward(pd).execute(m_stream, {{DNNL_ARG_SRC, xm},
                                                              {DNNL_ARG_DIFF_DST, dym},
                                                              {DNNL_ARG_SCALE, sm},
                                                              {DNNL_ARG_SHIFT, bm},
                                                              {DNNL_ARG_MEAN, mm},
                                                              {DNNL_ARG_VARIANCE, vm},
                                                              {DNNL_ARG_DIFF_SRC, dxm},
                                                              {DNNL_ARG_DIFF_SCALE, dsm},
                                                              {DNNL_ARG_DIFF_SHIFT, dbm}});
    m_stream.wait();
  }

  void batch_norm_backward_statistics(const BatchNormShape& s, std::int64_t count, const float* x, const float* scale,
                                      const float* mean, const float* variance, const float* d_scale,
                                      const float* d_shift, float* dx) override {
    const auto per_count = 1.F / static_cast<float>(count);
#pragma omp parallel for collapse(2)
    for (std::int64_t n = 0; n < s.n; ++n) {
      for (std::int64_t c = 0; c < s.c; ++c) {
        const float inv_std = 1.F / std::sqrt(variance[c] + s.epsilon);
        const float k = scale[c] * inv_std * per_count;
        const std::int64_t base = (n * s.c + c) * s.spatial;
        for (std::int64_t i = 0; i < s.spatial; ++i) {
          const float xhat = (x[base + i] - mean[c]) * inv_std;
          dx[base + i] -= k * (d_shift[c] + xhat * d_scale[c]);
        }
      }
    }
  }

  void recurrent_forward(const RecurrentShape& s, const RecurrentInputs& in, const RecurrentOutputs& out,
                         Floats& saved) override {
    cpu::recurrent_forward(m_engine, m_stream, s, in, out, saved);
  }

  void recurrent_backward(const RecurrentShape& s, const RecurrentInputs& in, const Floats& saved,
                          const RecurrentOutputGradients& d_out, const RecurrentInputGradients& d_in) override {
    cpu::recurrent_backward(m_engine, m_stream, s, in, saved, d_out, d_in);
  }

  void reduce_scatter_sum(MPI_Comm comm, const float* data, std::span<const std::int64_t> counts,
                          float* mine) override {
    runtime::reduce_scatter_sum(comm, data, counts, mine);
  }

  void all_gather(MPI_Comm comm, std::span<const std::int64_t> counts, float* data) override {
    runtime::all_gather(comm, counts, data);
  }

  void sgd_update(std::int64_t n, float learning_rate, const float* gradient, float* weights) override {
    vector_kernels::sgd_update(n, learning_rate, gradient, weights);
  }

  void momentum_update(std::int64_t n, float learning_rate, float momentum, const float* gradient, float* velocity,
                       float* weights) override {
    vector_kernels::momentum_update(n, learning_rate, momentum, gradient, velocity, weights);
  }

  void adam_update(std::int64_t n, const AdamParameters& p, int step, const float* gradient, float* m, float* v,
                   float* weights) override {
    const AdamCorrection c = adam_correction(p, step);
    vector_kernels::adam_update(n, p.learning_rate, p.beta1, p.beta2, p.epsilon, c.first, c.second, gradient, m, v,
                                weights);
  }

  void copy(const StridedCopy& c, const float* src, float* dst, bool accumulate) override {
    host::copy(c, src, dst, accumulate);
  }
  void scale(std::int64_t n, float a, const float* x, float* y) override {
    host::scale(n, a, x, y);
  }
  void fill(std::int64_t n, float value, float* y) override {
    host::fill(n, value, y);
  }
  void gather(const GatherShape& s, const float* data, const float* indices, float* y) override {
    host::gather(s, data, indices, y);
  }
  void gather_backward(const GatherShape& s, const float* indices, const float* dy, float* d_data) override {
    host::gather_backward(s, indices, dy, d_data);
  }
  void select(Select kind, const Dims& y_dims, const Dims& a_dims, const float* a, const Dims& b_dims, const float* b,
              const Dims& c_dims, const float* c, float* y) override {
    host::select(kind, y_dims, a_dims, a, b_dims, b, c_dims, c, y);
  }

  void flag_nonfinite(std::int64_t n, const float* x, float* flag) override {
    host::flag_nonfinite(n, x, flag);
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

  static dnnl::normalization_flags bn_flags(bool given_statistics) {
    return given_statistics ? norm_flags | dnnl::normalization_flags::use_global_stats : norm_flags;
  }

  // `user` in the layout a primitive wants: itself, or a reordered copy.
  dnnl::memory input(const dnnl::memory::desc& want, dnnl::memory user) {
    if (want == user.get_desc()) {
      return user;
    }
    dnnl::memory m(want, m_engine);
    dnnl::reorder(user, m).execute(m_stream, user, m);
    return m;
  }
  // Where a primitive writes a result meant for `user`: itself, or a buffer finish() reorders.
  dnnl::memory output(const dnnl::memory::desc& want, const dnnl::memory& user) {
    return want == user.get_desc() ? user : dnnl::memory(want, m_engine);
  }
  void finish(dnnl::memory produced, dnnl::memory& user) {
    if (produced.get() != user.get()) {
      dnnl::reorder(produced, user).execute(m_stream, produced, user);
    }
    m_stream.wait();
  }

  // C = op(A) op(B) through oneDNN's matmul, a transposed operand read in place with swapped strides.
  void run_matmul(const MatmulShape& s, const float* a, bool trans_a, const float* b, bool trans_b, float* c) {
    const dnnl::memory::dims ad{s.batch, s.m, s.k}, bd{s.batch, s.k, s.n}, cd{s.batch, s.m, s.n};
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

  static std::int64_t product(const Dims& d) {
    return std::accumulate(d.begin(), d.end(), std::int64_t{1}, std::multiplies<>());
  }

  dnnl::engine m_engine;
  dnnl::stream m_stream;
  std::vector<unsigned char> m_scratch;
  volatile unsigned char m_sink = 0;
  StartedSums m_started;
  // Products reading A transposed, by (batch, m, n, k, B transposed): in place (way 0) or on a
  // plain copy of A (way 1, into m_plain_a).
  using ProductKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool>;
  FasterWay<ProductKey> m_transposed_a;
  Floats m_plain_a;
};

} // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

} // namespace partita::runtime
