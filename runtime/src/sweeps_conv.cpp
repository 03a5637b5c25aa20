// The convolution sweep of partita-calibrate: layers of ResNet-like CNNs through the backend's
// convolution kernels, their FLOPs and bytes counted by core's Conv description.

#include "sweeps.h"

#include "partita/graph/error.h"
#include "partita/graph/op_semantics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace partita::runtime {

namespace {

struct Layer {
  std::int64_t c_in, c_out, kernel, stride, size; // size: input height = width
  bool first;                                     // reads the data: no data gradient
};

// What CNNs run: stems on 3 channels, 3x3 convs at every width and stride, 1x1 projections.
constexpr Layer layers[] = {
    {3, 64, 7, 2, 224, true},  // ImageNet stem
    {3, 16, 3, 1, 32, true},   // CIFAR stem
    {8, 8, 3, 1, 16, false},   // a narrow late layer: per-call costs dominate
    {16, 16, 3, 1, 32, false}, //
    {32, 32, 3, 2, 32, false}, //
    {64, 64, 3, 1, 56, false}, // ResNet stage 1
    {128, 128, 3, 2, 56, false},  {256, 256, 3, 1, 14, false},
    {512, 512, 3, 1, 7, false},   {64, 256, 1, 1, 56, false}, // bottleneck widening
    {256, 64, 1, 1, 56, false},                               // and narrowing
    {512, 1024, 1, 2, 28, false}, {1024, 256, 1, 1, 14, false},
};

// Core's description of the same layer: one Conv op on a graph of its own.
graph::OpSemantics describe_layer(const ConvShape& s, bool first) {
  graph::Graph g;
  const auto tensor = [&](std::string name, graph::Shape shape, graph::TensorRole role) {
    graph::Tensor t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.role = role;
    return g.add_tensor(std::move(t));
  };
  graph::Op op;
  op.name = "conv";
  op.type = "Conv";
  const auto& w = s.window;
  op.attrs = {{"kernel_shape", std::vector<std::int64_t>{w.kh, w.kw}},
              {"strides", std::vector<std::int64_t>{w.stride_h, w.stride_w}},
              {"pads", std::vector<std::int64_t>{w.pad_top, w.pad_left, w.pad_bottom, w.pad_right}}};
  op.inputs = {tensor("x", {s.n, s.c_in, s.h, s.w}, first ? graph::TensorRole::input : graph::TensorRole::activation),
               tensor("w", {s.c_out, s.c_in, w.kh, w.kw}, graph::TensorRole::parameter)};
  op.outputs = {tensor("y", {s.n, s.c_out, s.oh, s.ow}, graph::TensorRole::activation)};
  g.add_op(std::move(op));
  auto d = graph::describe(g, 0);
  if (!d.opaque_reason.empty()) {
    throw Error(fmt::format("convolution sweep: core does not describe the layer {}x{} {}>{}: {}", w.kh, w.kw, s.c_in,
                            s.c_out, d.opaque_reason));
  }
  return d;
}

} // namespace

std::vector<ConvCase> conv_cases(double lo, double hi, const std::vector<std::int64_t>& batches) {
  std::vector<ConvCase> out;
  for (const std::int64_t n : batches) {
    for (const auto& l : layers) {
      ConvCase c;
      auto& s = c.shape;
      const std::int64_t pad = l.kernel / 2;
      s.n = n;
      s.c_in = l.c_in;
      s.c_out = l.c_out;
      s.h = s.w = l.size;
      s.oh = s.ow = (l.size + 2 * pad - l.kernel) / l.stride + 1;
      s.window = {l.kernel, l.kernel, l.stride, l.stride, 1, 1, pad, pad, pad, pad};
      c.data_gradient = !l.first;
      const auto d = describe_layer(s, l.first);
      c.fwd_flops = d.fwd_flops;
      c.bwd_flops = d.bwd_data_flops + d.bwd_weight_flops;
      c.fwd_bytes = d.fwd_bytes_read + d.fwd_bytes_written;
      c.bwd_bytes = d.bwd_bytes;
      // Half a step of slack at either end, as the GEMM sweep's sizes land near the powers of ten.
      const double e = std::log10(c.fwd_flops);
      if (e < lo - 0.25 || e > hi + 0.25) {
        continue;
      }
      c.name = fmt::format("conv {}x{}/{} {}>{} {} n{}", l.kernel, l.kernel, l.stride, l.c_in, l.c_out, l.size, n);
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::vector<KernelTiming> conv_sweep(Backend& backend, MPI_Comm comm, const SweepBudget& budget,
                                     const std::vector<ConvCase>& cases, std::vector<ConvCase> larger,
                                     const SweepExtension& beyond) {
  std::vector<KernelTiming> out;
  Floats x, w, y, dy, dx, dw; // tensor memory, where a GPU backend's kernels can read them
  const auto size = [](std::int64_t a, std::int64_t b, std::int64_t h, std::int64_t v) {
    return static_cast<std::size_t>(a * b * h * v);
  };
  const auto time_case = [&](const ConvCase& c) {
    const auto& s = c.shape;
    for (const auto* v : {&x, &dx, &w, &dw, &y, &dy}) {
      backend.prefetch(v->data(), static_cast<std::int64_t>(v->size()));
    }
    const double fwd = time_per_call(comm, budget, [&] {
      backend.conv_forward(s, x.data(), w.data(), nullptr, y.data());
      backend.synchronize();
    });
    out.push_back({c.name + " fwd", c.fwd_flops, c.fwd_bytes, fwd, graph::KernelClass::eltwise,
                   graph::ComputeClass::convolution});
    const double bwd = time_per_call(comm, budget, [&] {
      if (c.data_gradient) {
        backend.conv_backward_data(s, w.data(), dy.data(), dx.data());
      }
      backend.conv_backward_weights(s, x.data(), dy.data(), dw.data(), nullptr);
      backend.synchronize();
    });
    out.push_back({c.name + " bwd", c.bwd_flops, c.bwd_bytes, bwd, graph::KernelClass::eltwise,
                   graph::ComputeClass::convolution});
  };
  for (const auto& c : cases) {
    const auto& s = c.shape;
    refill(x, size(s.n, s.c_in, s.h, s.w), 0.5F);
    refill(dx, c.data_gradient ? x.size() : 0, 0.0F);
    refill(w, size(s.c_out, s.c_in, s.window.kh, s.window.kw), 0.01F);
    refill(dw, w.size(), 0.0F);
    refill(y, size(s.n, s.c_out, s.oh, s.ow), 0.0F);
    refill(dy, y.size(), 0.25F);
    time_case(c);
  }
  if (beyond.max_call_seconds <= 0) {
    return out;
  }
  std::ranges::sort(larger, {}, &ConvCase::fwd_flops);
  for (const auto& c : larger) {
    double best = 0; // the highest rate timed so far, forward or backward
    for (const auto& r : out) {
      best = std::max(best, r.flops / r.seconds);
    }
    if (best <= 0 || std::max(c.fwd_flops, c.bwd_flops) / best > beyond.max_call_seconds) {
      break;
    }
    const auto& s = c.shape;
    for (auto* v : {&x, &dx, &w, &dw, &y, &dy}) {
      Floats().swap(*v); // the last case's buffers handed back before the larger ones are made
    }
    // A case some rank has no room for ends the extension, on every rank alike.
    const std::size_t nx = size(s.n, s.c_in, s.h, s.w), nw = size(s.c_out, s.c_in, s.window.kh, s.window.kw),
                      ny = size(s.n, s.c_out, s.oh, s.ow);
    if (!fill_everywhere(comm, {{&x, 0.5F}}, nx) || !fill_everywhere(comm, {{&dx, 0.0F}}, c.data_gradient ? nx : 0) ||
        !fill_everywhere(comm, {{&w, 0.01F}, {&dw, 0.0F}}, nw) ||
        !fill_everywhere(comm, {{&y, 0.0F}, {&dy, 0.25F}}, ny)) {
      break;
    }
    time_case(c);
  }
  return out;
}

} // namespace partita::runtime
