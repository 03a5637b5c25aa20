// The CPU backend's recurrent kernels (oneDNN LSTM, GRU, RNN) against a direct double-precision
// loop over ONNX's formulas: forward outputs, and every gradient against central finite
// differences of that loop. Then the LSTM/GRU/RNN op kernels on ONNX's own node tests
// (libonnx-testdata: model, inputs and expected outputs), layout 1 included.

#include "backend.h"
#include "op_kernels.h"
#include "shard.h"

#include "partita/graph/error.h"
#include "partita/onnx/import.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>

namespace partita::runtime {
namespace {

using Vec = std::vector<double>;

struct Tensors {
  Vec x, w, r, b, p, h0, c0;
};

struct Outputs {
  Vec y, y_h, y_c;
};

double sigmoid(double v) {
  return 1 / (1 + std::exp(-v));
}

double activate(Cell c, double v) {
  return c == Cell::rnn_relu ? std::max(0.0, v) : c == Cell::rnn_sigmoid ? sigmoid(v) : std::tanh(v);
}

std::size_t u(std::int64_t v) {
  return static_cast<std::size_t>(v);
}

// ONNX's LSTM, GRU and RNN equations, step by step (onnx/docs/Operators.md).
Outputs reference(const RecurrentShape& s, const Tensors& t) {
  const std::int64_t S = s.seq, N = s.batch, I = s.input, H = s.hidden, D = s.directions(), G = s.gates();
  Outputs o;
  o.y.assign(u(S * D * N * H), 0);
  o.y_h.assign(u(D * N * H), 0);
  o.y_c.assign(u(D * N * H), 0);
  for (std::int64_t d = 0; d < D; ++d) {
    const bool reverse =
        s.direction == RecurrentDirection::reverse || (s.direction == RecurrentDirection::bidirectional && d == 1);
    const auto W = [&](std::int64_t row, std::int64_t i) { return t.w[u((d * G * H + row) * I + i)]; };
    const auto R = [&](std::int64_t row, std::int64_t k) { return t.r[u((d * G * H + row) * H + k)]; };
    const auto Wb = [&](std::int64_t row) { return t.b.empty() ? 0.0 : t.b[u(d * 2 * G * H + row)]; };
    const auto Rb = [&](std::int64_t row) { return t.b.empty() ? 0.0 : t.b[u(d * 2 * G * H + G * H + row)]; };
    const auto P = [&](std::int64_t k, std::int64_t h) { return t.p.empty() ? 0.0 : t.p[u(d * 3 * H + k * H + h)]; };
    for (std::int64_t n = 0; n < N; ++n) {
      Vec h_prev(u(H)), c_prev(u(H));
      for (std::int64_t h = 0; h < H; ++h) {
        h_prev[u(h)] = t.h0.empty() ? 0 : t.h0[u((d * N + n) * H + h)];
        c_prev[u(h)] = t.c0.empty() ? 0 : t.c0[u((d * N + n) * H + h)];
      }
      for (std::int64_t step = 0; step < S; ++step) {
        const std::int64_t ts = reverse ? S - 1 - step : step;
        const auto xw = [&](std::int64_t row) { // W x_t
          double a = 0;
          for (std::int64_t i = 0; i < I; ++i) {
            a += W(row, i) * t.x[u((ts * N + n) * I + i)];
          }
          return a;
        };
        const auto rh = [&](std::int64_t row, const Vec& hv) { // R h
          double a = 0;
          for (std::int64_t k = 0; k < H; ++k) {
            a += R(row, k) * hv[u(k)];
          }
          return a;
        };
        Vec h_new(u(H)), c_new(u(H));
        if (s.cell == Cell::lstm) { // gates i, o, f, c; peepholes i, o, f
          for (std::int64_t h = 0; h < H; ++h) {
            const auto a = [&](std::int64_t gate) {
              return xw(gate * H + h) + rh(gate * H + h, h_prev) + Wb(gate * H + h) + Rb(gate * H + h);
            };
            const double ig = sigmoid(a(0) + P(0, h) * c_prev[u(h)]);
            const double fg = sigmoid(a(2) + P(2, h) * c_prev[u(h)]);
            const double cg = std::tanh(a(3));
            c_new[u(h)] = fg * c_prev[u(h)] + ig * cg;
            const double og = sigmoid(a(1) + P(1, h) * c_new[u(h)]);
            h_new[u(h)] = og * std::tanh(c_new[u(h)]);
          }
        } else if (s.cell == Cell::gru || s.cell == Cell::gru_linear_before_reset) { // gates z, r, h
          Vec rg(u(H)), rhv(u(H));
          for (std::int64_t h = 0; h < H; ++h) {
            rg[u(h)] = sigmoid(xw(H + h) + rh(H + h, h_prev) + Wb(H + h) + Rb(H + h));
            rhv[u(h)] = rg[u(h)] * h_prev[u(h)];
          }
          for (std::int64_t h = 0; h < H; ++h) {
            const double z = sigmoid(xw(h) + rh(h, h_prev) + Wb(h) + Rb(h));
            const std::int64_t row = 2 * H + h;
            const double cand = s.cell == Cell::gru
                                    ? std::tanh(xw(row) + rh(row, rhv) + Rb(row) + Wb(row))
                                    : std::tanh(xw(row) + rg[u(h)] * (rh(row, h_prev) + Rb(row)) + Wb(row));
            h_new[u(h)] = (1 - z) * cand + z * h_prev[u(h)];
          }
        } else {
          for (std::int64_t h = 0; h < H; ++h) {
            h_new[u(h)] = activate(s.cell, xw(h) + rh(h, h_prev) + Wb(h) + Rb(h));
          }
        }
        for (std::int64_t h = 0; h < H; ++h) {
          o.y[u(((ts * D + d) * N + n) * H + h)] = h_new[u(h)];
        }
        h_prev = h_new;
        c_prev = c_new;
      }
      for (std::int64_t h = 0; h < H; ++h) {
        o.y_h[u((d * N + n) * H + h)] = h_prev[u(h)];
        o.y_c[u((d * N + n) * H + h)] = c_prev[u(h)];
      }
    }
  }
  return o;
}

Vec random_vec(std::size_t n, std::mt19937& rng, double scale = 0.6) {
  std::uniform_real_distribution<double> dist(-scale, scale);
  Vec v(n);
  for (auto& e : v) {
    e = dist(rng);
  }
  return v;
}

std::vector<float> to_float(const Vec& v) {
  return {v.begin(), v.end()};
}

const float* ptr(const std::vector<float>& v) {
  return v.empty() ? nullptr : v.data();
}

struct Case {
  RecurrentShape shape;
  bool bias = true, peepholes = false, initial_h = true, initial_c = true;
};

Tensors make_tensors(const Case& c, std::mt19937& rng) {
  const auto& s = c.shape;
  const std::int64_t D = s.directions(), G = s.gates(), H = s.hidden;
  Tensors t;
  t.x = random_vec(u(s.seq * s.batch * s.input), rng, 1.0);
  t.w = random_vec(u(D * G * H * s.input), rng);
  t.r = random_vec(u(D * G * H * H), rng);
  if (c.bias) {
    t.b = random_vec(u(D * 2 * G * H), rng, 0.3);
  }
  if (c.peepholes) {
    t.p = random_vec(u(D * 3 * H), rng, 0.5);
  }
  if (c.initial_h) {
    t.h0 = random_vec(u(D * s.batch * H), rng, 0.5);
  }
  if (c.initial_c && s.cell == Cell::lstm) {
    t.c0 = random_vec(u(D * s.batch * H), rng, 0.5);
  }
  return t;
}

struct FloatTensors {
  std::vector<float> x, w, r, b, p, h0, c0;
  explicit FloatTensors(const Tensors& t)
      : x(to_float(t.x)), w(to_float(t.w)), r(to_float(t.r)), b(to_float(t.b)), p(to_float(t.p)), h0(to_float(t.h0)),
        c0(to_float(t.c0)) {}
  RecurrentInputs inputs() const { return {ptr(x), ptr(w), ptr(r), ptr(b), ptr(p), ptr(h0), ptr(c0)}; }
};

double max_abs(const Vec& v) {
  double m = 0;
  for (const double e : v) {
    m = std::max(m, std::fabs(e));
  }
  return m;
}

void expect_near(const std::vector<float>& got, const Vec& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double scale = std::max(1.0, max_abs(want));
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * scale) << what << " element " << i;
  }
}

std::string name_of(const Case& c) {
  static const char* cells[] = {"lstm", "gru", "gru_lbr", "rnn_tanh", "rnn_relu", "rnn_sigmoid"};
  static const char* dirs[] = {"forward", "reverse", "bidirectional"};
  return std::string(cells[static_cast<int>(c.shape.cell)]) + "_" + dirs[static_cast<int>(c.shape.direction)] +
         (c.peepholes ? "_peepholes" : "") + (c.bias ? "" : "_nobias") + (c.initial_h ? "" : "_noinit");
}

class RecurrentKernel : public ::testing::TestWithParam<Case> {
protected:
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
};

TEST_P(RecurrentKernel, ForwardMatchesOnnxFormulas) {
  const Case c = GetParam();
  const auto& s = c.shape;
  std::mt19937 rng(7);
  const Tensors t = make_tensors(c, rng);
  const FloatTensors f(t);
  const Outputs want = reference(s, t);
  std::vector<float> y(want.y.size()), y_h(want.y_h.size()), y_c(want.y_c.size());
  Floats saved;
  backend->recurrent_forward(s, f.inputs(), {y.data(), y_h.data(), s.cell == Cell::lstm ? y_c.data() : nullptr}, saved);
  expect_near(y, want.y, 2e-5, "Y");
  expect_near(y_h, want.y_h, 2e-5, "Y_h");
  if (s.cell == Cell::lstm) {
    expect_near(y_c, want.y_c, 2e-5, "Y_c");
  }
  EXPECT_FALSE(saved.empty());
}

// L = sum(Y * gy) + sum(Y_h * gh) + sum(Y_c * gc): the backend's gradients against central
// differences of the double-precision reference.
TEST_P(RecurrentKernel, BackwardMatchesFiniteDifferences) {
  const Case c = GetParam();
  const auto& s = c.shape;
  std::mt19937 rng(11);
  Tensors t = make_tensors(c, rng);
  const Outputs shapes = reference(s, t);
  const bool lstm = s.cell == Cell::lstm;
  const Vec gy = random_vec(shapes.y.size(), rng, 1.0), gh = random_vec(shapes.y_h.size(), rng, 1.0);
  const Vec gc = lstm ? random_vec(shapes.y_c.size(), rng, 1.0) : Vec(shapes.y_c.size(), 0.0);
  const auto loss = [&](const Tensors& at) {
    const Outputs o = reference(s, at);
    double l = 0;
    for (std::size_t i = 0; i < o.y.size(); ++i) {
      l += o.y[i] * gy[i];
    }
    for (std::size_t i = 0; i < o.y_h.size(); ++i) {
      l += o.y_h[i] * gh[i] + o.y_c[i] * gc[i];
    }
    return l;
  };

  const FloatTensors f(t);
  std::vector<float> y(shapes.y.size()), y_h(shapes.y_h.size()), y_c(shapes.y_c.size());
  Floats saved;
  backend->recurrent_forward(s, f.inputs(), {y.data(), y_h.data(), lstm ? y_c.data() : nullptr}, saved);
  const auto fy = to_float(gy), fh = to_float(gh), fc = to_float(gc);
  std::vector<float> dx(t.x.size()), dw(t.w.size()), dr(t.r.size()), db(t.b.size()), dp(t.p.size()), dh0(t.h0.size()),
      dc0(t.c0.size());
  const auto out = [](std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  backend->recurrent_backward(s, f.inputs(), saved, {fy.data(), fh.data(), lstm ? fc.data() : nullptr},
                              {out(dx), out(dw), out(dr), out(db), out(dp), out(dh0), out(dc0)});

  const std::pair<Vec Tensors::*, std::vector<float>*> checks[] = {
      {&Tensors::x, &dx}, {&Tensors::w, &dw},   {&Tensors::r, &dr},  {&Tensors::b, &db},
      {&Tensors::p, &dp}, {&Tensors::h0, &dh0}, {&Tensors::c0, &dc0}};
  const char* names[] = {"dX", "dW", "dR", "dB", "dP", "d initial_h", "d initial_c"};
  constexpr double eps = 1e-5;
  int checked = 0;
  for (std::size_t k = 0; k < std::size(checks); ++k) {
    Vec& v = t.*checks[k].first;
    Vec fd(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double keep = v[i];
      v[i] = keep + eps;
      const double up = loss(t);
      v[i] = keep - eps;
      const double down = loss(t);
      v[i] = keep;
      fd[i] = (up - down) / (2 * eps);
    }
    expect_near(*checks[k].second, fd, 2e-4, names[k]);
    checked += v.empty() ? 0 : 1;
  }
  EXPECT_GE(checked, 3); // X, W, R at least
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const auto dir : {RecurrentDirection::forward, RecurrentDirection::reverse, RecurrentDirection::bidirectional}) {
    for (const auto cell : {Cell::lstm, Cell::gru, Cell::gru_linear_before_reset, Cell::rnn_tanh}) {
      all.push_back({{cell, dir, 4, 3, 3, 2}});
    }
  }
  all.push_back({{Cell::lstm, RecurrentDirection::bidirectional, 3, 2, 3, 3}, true, true});
  all.push_back({{Cell::lstm, RecurrentDirection::forward, 3, 2, 2, 3}, false, false, false, false});
  all.push_back({{Cell::gru, RecurrentDirection::reverse, 3, 2, 2, 3}, false, false, false, false});
  all.push_back({{Cell::rnn_sigmoid, RecurrentDirection::bidirectional, 3, 2, 3, 2}});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cells, RecurrentKernel, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name_of(info.param); });

TEST(RecurrentKernelRelu, ForwardMatchesOnnxFormulas) {
  auto backend = make_cpu_backend(1);
  const Case c{{Cell::rnn_relu, RecurrentDirection::bidirectional, 3, 2, 3, 4}};
  std::mt19937 rng(5);
  const Tensors t = make_tensors(c, rng);
  const FloatTensors f(t);
  const Outputs want = reference(c.shape, t);
  std::vector<float> y(want.y.size()), y_h(want.y_h.size());
  Floats saved;
  backend->recurrent_forward(c.shape, f.inputs(), {y.data(), y_h.data(), nullptr}, saved);
  expect_near(y, want.y, 2e-5, "Y");
  expect_near(y_h, want.y_h, 2e-5, "Y_h");
}

TEST(RecurrentKernelErrors, BackwardWithoutForwardIsRefused) {
  auto backend = make_cpu_backend(1);
  const Case c{{Cell::lstm, RecurrentDirection::forward, 2, 1, 2, 2}};
  std::mt19937 rng(3);
  const FloatTensors f(make_tensors(c, rng));
  std::vector<float> dx(4);
  Floats saved;
  EXPECT_THROW(backend->recurrent_backward(c.shape, f.inputs(), saved, {}, {dx.data()}), Error);
}

// ---- The op kernels on ONNX's node tests ----

const std::filesystem::path node_tests = "/usr/share/libonnx-testdata/data/node";

onnx::TensorProto read_tensor(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  onnx::TensorProto t;
  if (!in || !t.ParseFromIstream(&in)) {
    throw Error("cannot read tensor " + file.string());
  }
  return t;
}

std::vector<float> values(const onnx::TensorProto& t) {
  std::vector<float> v;
  if (t.data_type() == onnx::TensorProto::FLOAT) {
    if (!t.raw_data().empty()) {
      v.resize(t.raw_data().size() / sizeof(float));
      std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
    } else {
      v.assign(t.float_data().begin(), t.float_data().end());
    }
  } else if (t.data_type() == onnx::TensorProto::INT32) {
    std::vector<std::int32_t> i(t.raw_data().size() / sizeof(std::int32_t));
    std::memcpy(i.data(), t.raw_data().data(), i.size() * sizeof(std::int32_t));
    if (i.empty()) {
      i.assign(t.int32_data().begin(), t.int32_data().end());
    }
    v.assign(i.begin(), i.end());
  } else {
    throw Error("unexpected tensor type in " + t.name());
  }
  return v;
}

// One node test: its op on whole-tensor shards, inputs and expected outputs by tensor name.
struct NodeTest {
  graph::Graph g;
  std::map<std::string, std::vector<float>> inputs, expected;
  std::vector<Shard> in_shards, out_shards;
  Floats saved;

  explicit NodeTest(const std::string& name) {
    const auto dir = node_tests / name;
    g = onnx_import::import_file(dir / "model.onnx").graph;
    onnx::ModelProto model;
    std::ifstream in(dir / "model.onnx", std::ios::binary);
    model.ParseFromIstream(&in);
    for (int i = 0; i < model.graph().input_size(); ++i) {
      inputs[model.graph().input(i).name()] =
          values(read_tensor(dir / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb")));
    }
    for (int i = 0; i < model.graph().output_size(); ++i) {
      expected[model.graph().output(i).name()] =
          values(read_tensor(dir / "test_data_set_0" / ("output_" + std::to_string(i) + ".pb")));
    }
    const graph::Op& op = g.op(0);
    for (const auto t : op.inputs) {
      in_shards.push_back(t == graph::no_tensor ? Shard{} : make_shard(whole(g.tensor(t).shape)));
      if (t != graph::no_tensor) {
        const auto& value = inputs.at(g.tensor(t).name);
        in_shards.back().data.assign(value.begin(), value.end());
      }
    }
    for (const auto t : op.outputs) {
      out_shards.push_back(t == graph::no_tensor ? Shard{} : make_shard(whole(g.tensor(t).shape)));
    }
  }

  OpBuffers buffers() {
    OpBuffers b;
    for (std::size_t i = 0; i < in_shards.size(); ++i) {
      b.inputs.push_back(g.op(0).inputs[i] == graph::no_tensor ? nullptr : &in_shards[i]);
    }
    for (std::size_t k = 0; k < out_shards.size(); ++k) {
      b.outputs.push_back(g.op(0).outputs[k] == graph::no_tensor ? nullptr : &out_shards[k]);
    }
    b.saved = &saved;
    return b;
  }
};

class OnnxNodeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxNodeTest, ForwardMatchesOnnxExpectedOutputs) {
  if (!std::filesystem::exists(node_tests / GetParam())) {
    GTEST_SKIP() << "libonnx-testdata is not installed";
  }
  NodeTest t(GetParam());
  EXPECT_EQ(missing_kernel(t.g, 0), "");
  auto backend = make_cpu_backend(1);
  run_forward(*backend, t.g, 0, t.buffers());
  int compared = 0;
  for (std::size_t k = 0; k < t.out_shards.size(); ++k) {
    const auto tid = t.g.op(0).outputs[k];
    if (tid == graph::no_tensor || t.expected.count(t.g.tensor(tid).name) == 0) {
      continue;
    }
    const auto& want = t.expected.at(t.g.tensor(tid).name);
    const auto& got = t.out_shards[k].data;
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5) << t.g.tensor(tid).name << " element " << i;
    }
    ++compared;
  }
  EXPECT_GE(compared, 1);
}

INSTANTIATE_TEST_SUITE_P(LibOnnxTestdata, OnnxNodeTest,
                         ::testing::Values("test_lstm_defaults", "test_lstm_with_initial_bias",
                                           "test_lstm_with_peepholes", "test_lstm_batchwise", "test_gru_defaults",
                                           "test_gru_with_initial_bias", "test_gru_seq_length", "test_gru_batchwise",
                                           "test_simple_rnn_defaults", "test_simple_rnn_with_initial_bias",
                                           "test_rnn_seq_length", "test_simple_rnn_batchwise"));

// The op kernel's layout-1 path (transposes of X, Y, states and their gradients) against finite
// differences of its own forward pass, on a batch-first node test.
TEST(RecurrentOpKernel, BatchFirstBackwardMatchesFiniteDifferences) {
  if (!std::filesystem::exists(node_tests / "test_lstm_batchwise")) {
    GTEST_SKIP() << "libonnx-testdata is not installed";
  }
  for (const std::string name : {"test_lstm_batchwise", "test_gru_batchwise"}) {
    NodeTest t(name);
    auto backend = make_cpu_backend(1);
    std::mt19937 rng(13);
    std::vector<std::vector<float>> seeds;
    for (auto& o : t.out_shards) {
      const auto r = random_vec(o.data.size(), rng, 1.0);
      seeds.emplace_back(r.begin(), r.end());
    }
    const auto loss = [&]() {
      run_forward(*backend, t.g, 0, t.buffers());
      double l = 0;
      for (std::size_t k = 0; k < t.out_shards.size(); ++k) {
        for (std::size_t i = 0; i < t.out_shards[k].data.size(); ++i) {
          l += static_cast<double>(t.out_shards[k].data[i]) * seeds[k][i];
        }
      }
      return l;
    };
    loss();
    std::vector<Shard> d_out_shards;
    std::vector<const Shard*> d_out;
    for (std::size_t k = 0; k < t.out_shards.size(); ++k) {
      Shard d{t.out_shards[k].block, Floats(seeds[k].begin(), seeds[k].end())};
      d_out_shards.push_back(std::move(d));
    }
    for (std::size_t k = 0; k < d_out_shards.size(); ++k) {
      d_out.push_back(t.g.op(0).outputs[k] == graph::no_tensor ? nullptr : &d_out_shards[k]);
    }
    std::vector<Shard> d_in_shards;
    for (const auto& x : t.in_shards) {
      d_in_shards.emplace_back(x.block, x.data);
    }
    std::vector<Shard*> d_in;
    for (auto& s : d_in_shards) {
      d_in.push_back(&s);
    }
    run_backward(*backend, t.g, 0, t.buffers(), d_out, d_in);
    for (std::size_t i = 0; i < 3; ++i) { // X, W, R
      auto& v = t.in_shards[i].data;
      constexpr float eps = 1e-2F;
      for (std::size_t e = 0; e < v.size(); ++e) {
        const float keep = v[e];
        v[e] = keep + eps;
        const double up = loss();
        v[e] = keep - eps;
        const double down = loss();
        v[e] = keep;
        EXPECT_NEAR(d_in_shards[i].data[e], (up - down) / (2 * eps), 2e-3)
            << name << " input " << i << " element " << e;
      }
    }
  }
}

} // namespace
} // namespace partita::runtime

namespace partita::runtime {
namespace {

// What oneDNN cannot compute is refused with the op and the reason, before and while running.
TEST(RecurrentOpKernel, RefusesWhatItCannotCompute) {
  if (!std::filesystem::exists(node_tests / "test_lstm_defaults")) {
    GTEST_SKIP() << "libonnx-testdata is not installed";
  }
  const std::vector<std::pair<std::function<void(graph::Op&)>, std::string>> refused{
      {[](graph::Op& op) { op.attrs["clip"] = 3.0; }, "clip"},
      {[](graph::Op& op) { op.attrs["input_forget"] = std::int64_t{1}; }, "input_forget"},
      {[](graph::Op& op) {
         op.attrs["activations"] = std::vector<std::string>{"Sigmoid", "Relu", "Tanh"};
       },
       "activations [Sigmoid, Relu, Tanh]"},
      {[](graph::Op& op) { op.attrs["activation_alpha"] = std::vector<double>{0.5}; }, "activation_alpha"}};
  auto backend = make_cpu_backend(1);
  for (const auto& [change, reason] : refused) {
    NodeTest t("test_lstm_defaults");
    EXPECT_EQ(missing_kernel(t.g, 0), "");
    change(t.g.op(0));
    EXPECT_NE(missing_kernel(t.g, 0).find(reason), std::string::npos) << missing_kernel(t.g, 0);
    try {
      run_forward(*backend, t.g, 0, t.buffers());
      ADD_FAILURE() << "ran an LSTM with " << reason;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("op '" + t.g.op(0).name + "' (LSTM)"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  }
  // Sequences shorter than the tensor's time extent: refused on the data.
  NodeTest t("test_lstm_with_peepholes");
  t.in_shards[4].data.assign(t.in_shards[4].data.size(), 0.F);
  EXPECT_THROW(run_forward(*backend, t.g, 0, t.buffers()), Error);
}

} // namespace
} // namespace partita::runtime
