#pragma once

// The family of memory-bound kernel an op runs. A reduction, a normalization, a gather or a
// transcendental function moves its bytes at a rate of its own, far from a plain element-wise
// pass: calibration measures each family and the cost model prices an op with its family's curve
// (cluster::Device::memory_efficiency_for). The op's family follows from its declarative
// description (OpSemantics::forward_kernel, backward_kernel).

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace partita::graph {

enum class KernelClass : std::uint8_t {
  eltwise,        // one pass over the elements: Add, Relu, Cast, Where, ...
  transcendental, // element-wise through exp, erf, tanh, ...: Erf, Gelu, Sigmoid, Exp, ...
  reduction,      // sums over dims: ReduceSum, and the gradient of a broadcast input (a bias)
  normalization,  // statistics over a row, then a pass: LayerNormalization, BatchNorm, ...
  gather,         // rows picked by an index: Gather, embeddings, ScatterND
  copy,           // rows moved into a new layout: Concat, Split, Slice, Pad, a Transpose that keeps the last dim
  transpose,      // elements moved across the last dim: a Transpose that moves it (a weight's W^T, attention's K^T)
  optimizer,      // the weight update: SGD, momentum, Adam through weights, gradients and state
  // Backward kernels that are other kernels than their forward pass, at rates of their own: Erf's
  // gradient runs exp where its forward runs erf; LayerNorm's reads x, dy and its statistics, and
  // sums two weight gradients over the rows. Uncalibrated, each uses its forward family's curve.
  transcendental_backward, // the gradient of a transcendental function (Erf, Gelu, Tanh, ...)
  normalization_backward,  // the gradient of a normalization (LayerNorm, BatchNorm, ...)
  // Softmax's forward pass: a normalization through exp, slower than LayerNorm's (timed apart, the
  // two had been one curve between them: LayerNorm 46% over, Softmax 2%).
  softmax,
  // A gradient added in place into another (dst += src): the sum of a tensor's readers' gradients,
  // and a gradient coming back through a redistribution. It writes over what it has just read, so
  // no output line is fetched before it is written, as an out-of-place kernel's is (calibrated on
  // a 2-vCPU Xeon at 0.66 of the memory bandwidth, where Add and ReLU reach 0.49). Uncalibrated,
  // the element-wise curve.
  accumulate,
  // The gradient of a piecewise-linear activation (Relu, LeakyRelu, Clip, HardSigmoid, ...): dy
  // masked or scaled by where x lies, read x and dy, write dx. A kernel of its own, not the
  // forward pass over more bytes: oneDNN's Relu backward took 2.3 times its forward time for 1.5
  // times its bytes. Uncalibrated, the element-wise curve.
  activation_backward,
};

// The family whose curve stands in for `c` where `c` has none of its own (a cluster calibrated
// before `c` was timed apart), or c itself.
KernelClass kernel_class_fallback(KernelClass c);

std::string_view kernel_class_name(KernelClass c);
std::optional<KernelClass> parse_kernel_class(std::string_view name);
std::vector<KernelClass> all_kernel_classes();

// The family of compute-bound kernel a contraction op runs. A convolution reaches a fraction of
// peak of its own, far from a GEMM of the same FLOPs (few channels, a 7x7 stem, 1x1 windows):
// calibration measures each family it can time and the cost model prices an op's FLOPs with its
// family's curve (cluster::Device::compute_efficiency_for). The op's family follows from its
// declarative description (OpSemantics::compute_class, from the descriptor's OpClass).
enum class ComputeClass : std::uint8_t {
  matmul,      // MatMul, Gemm, Einsum, and every op that is not a contraction of another family
  convolution, // Conv, ConvTranspose
  recurrent,   // LSTM, GRU, RNN
  // The backward pass of a matrix product of the matmul family: dA = dY B^T and dB = A^T dY, each
  // reading one operand transposed, at a rate of its own. Uncalibrated, the matmul curve.
  matmul_backward,
  // The same of a batched product (both operands carry the batch: attention's Q K^T and P V), whose
  // small matrices' transposed reads cost more again: on a 2-vCPU EPYC a batch of 128 x 128 x 64
  // products ran its backward pass at 50-70 GFLOP/s where square products of the same FLOPs ran
  // at 75-96, forward or backward. Uncalibrated, the matmul_backward curve (or the matmul one).
  matmul_batched_backward,
};

std::string_view compute_class_name(ComputeClass c);
std::optional<ComputeClass> parse_compute_class(std::string_view name);
std::vector<ComputeClass> all_compute_classes();

} // namespace partita::graph
