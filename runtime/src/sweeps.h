#pragma once

// The sweeps partita-calibrate runs (nccl-tests and the OSU benchmarks for
// the collectives): kernels of the CPU backend over a range of work, run on every rank at once as
// a training step runs them, and collectives through the runtime's own code (all_reduce_sum) or
// the MPI calls it makes. A kernel's figure is per call, the slowest rank's, median over trials;
// a collective's is per call too, one call at a time (time_each_call).

#include "backend.h"

#include "partita/cluster/collectives.h"

#include <mpi.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace partita::runtime {

struct SweepBudget {
  double target_seconds = 0.01; // per trial: calls are repeated until a trial lasts about this long
  int trials = 5;
  int max_calls = 2000;
};

// Calls f() on every rank of `comm` together; the per-call time of the slowest rank, median over
// trials (after one untimed warm-up call). `finish` (when set) runs after the calls of a trial and
// before the clock is read: a GPU backend's synchronize(), since its calls only queue kernels.
double time_per_call(MPI_Comm comm, const SweepBudget& budget, const std::function<void()>& f,
                     const std::function<void()>& finish = {});

// One call at a time, as partita-run times a collective: prepare(i) (untimed), a barrier, then
// call(i) timed on every rank; a call's time is the fastest rank's (the rank that came last spent
// only the transfer in it, as partita-run's trace summary counts a reduce). The median over about
// trials x target_seconds of calls (at least 9, at most max_calls), after one untimed warm-up.
double time_each_call(MPI_Comm comm, const SweepBudget& budget, const std::function<void(int)>& prepare,
                      const std::function<void(int)>& call);

struct KernelTiming {
  std::string kernel;
  double flops = 0, bytes = 0, seconds = 0;
  graph::KernelClass kernel_class = graph::KernelClass::eltwise;   // memory-bound kernels: their family
  graph::ComputeClass compute_class = graph::ComputeClass::matmul; // compute kernels: their family
  // A fresh-read timing: `fresh_bytes` of the operands were written just before each call, and
  // cold_seconds is the same kernel timed the same way on operands in memory.
  double fresh_bytes = 0, cold_seconds = 0;
  double operand_bytes = 0; // a GEMM: its operands' bytes (A and B), read from memory
};

// How far a kernel sweep goes past its range: on, size by size, up to about 10^to of work, while
// a call is expected to last at most max_call_seconds (the size's work over the highest rate
// timed so far). A fast device's rate still grows past the range (an H200's fp32 GEMMs: 39-43
// TFLOP/s at 10^10 FLOPs, 51 at 7 10^10), and a curve that ends where the sweep ends prices the
// larger kernels of real models (a wide MLP's, VGG-16's) at the last rate; a slow device, whose
// rate has long stopped growing there, stops at once. A size the device has no memory for ends it
// too. max_call_seconds 0: no sizes past the range.
struct SweepExtension {
  double to = 0;
  double max_call_seconds = 0;
};

// Fills every buffer with n copies of its value on every rank of `comm`; false on every rank when
// any rank had no memory for them (its buffers then emptied).
bool fill_everywhere(MPI_Comm comm, std::initializer_list<std::pair<Floats*, float>> buffers, std::size_t n);

// GEMMs (square, tall-skinny, square with B transposed as backward passes read it, and wide: a
// large weight on few rows) from
// about 10^lo to 10^hi FLOPs, `per_decade` sizes a decade, each family then on past 10^hi as
// `beyond` lets it.
std::vector<KernelTiming> gemm_sweep(Backend& backend, MPI_Comm comm, const SweepBudget& budget, double lo, double hi,
                                     int per_decade, const SweepExtension& beyond = {});
// The backward passes of products (dA = dY B^T and dB = A^T dY, as partita-run runs them) of the
// GEMM sweep's square, tall and wide shapes and of attention's batched 128 x 128 x 64 products,
// about 10^lo to 10^hi forward FLOPs: a row per size, the mean of its two products (compute family
// matmul_backward, matmul_batched_backward for the batched ones).
std::vector<KernelTiming> gemm_backward_sweep(Backend& backend, MPI_Comm comm, const SweepBudget& budget, double lo,
                                              double hi, int per_decade, const SweepExtension& beyond = {});
// Matrix products at given shapes (a model's own, `partita calibrate --for-model`), operands
// not transposed and read from memory as the GEMM sweep reads them, on every rank at once: three
// rows per shape, in order, its forward product (compute family matmul), then its backward pass's
// dA = dY B^T and dB = A^T dY as partita-run runs them (matmul_backward), each timed alone.
std::vector<KernelTiming> product_sweep(Backend& backend, MPI_Comm comm, const SweepBudget& budget,
                                        const std::vector<MatmulShape>& shapes);
// One convolution layer of the sweep: its shape as the backend takes it, and its work as core's
// Conv description counts it (graph::describe of the same layer: the convention op_cost prices).
struct ConvCase {
  std::string name;          // e.g. "conv 3x3/2 64>128 56 n8"
  ConvShape shape;           // no groups, no bias
  bool data_gradient = true; // false for a first layer, whose input is the data: no dX, as partita-run
  double fwd_flops = 0;      // forward
  double bwd_flops = 0;      // backward data (when data_gradient) + backward weights
  double fwd_bytes = 0;      // X, W and Y
  double bwd_bytes = 0;      // read + written by the backward pass
};

// Layers of ResNet-like CNNs (a 7x7 stride-2 stem and a CIFAR stem on 3 channels; 3x3 convs of 8
// to 512 channels, stride 1 and 2; 1x1 convs widening, narrowing and striding) at each batch size
// of `batches`, keeping those whose forward pass has about 10^lo to 10^hi FLOPs.
std::vector<ConvCase> conv_cases(double lo, double hi, const std::vector<std::int64_t>& batches);

// The cases through the backend's convolution kernels, as partita-run's Conv kernel calls them
// (op_kernels_cnn.cpp): forward (a row "... fwd"), then the backward pass as one timed call of
// backward data (unless a first layer) and backward weights (a row "... bwd"), the pass op_cost
// prices as one kernel. Rows carry ComputeClass::convolution.
// Then the `larger` cases, smallest first, while `beyond` lets them run (its `to` unused: the cases
// are the sizes).
std::vector<KernelTiming> conv_sweep(Backend& backend, MPI_Comm comm, const SweepBudget& budget,
                                     const std::vector<ConvCase>& cases, std::vector<ConvCase> larger = {},
                                     const SweepExtension& beyond = {});

// Memory-bound kernels from about 10^lo to 10^hi bytes read + written, per kernel family
// (graph::KernelClass), each through what partita-run runs for an op of that family: eltwise
// (ReLU, add), transcendental (Erf), reduction (a bias gradient: a sum over rows),
// normalization (Softmax, LayerNormalization), optimizer (SGD, momentum and Adam steps), gather
// (Gather of rows), copy (rows: a heads Transpose that keeps the last dim, Split) and transpose
// (a Transpose that moves the last dim), the last three through the executor's op kernels on a
// one-op graph.
std::vector<KernelTiming> memory_sweep(Backend& backend, MPI_Comm comm, const SweepBudget& budget, double lo, double hi,
                                       int per_decade);

struct CollectiveTiming {
  cluster::Collective collective = cluster::Collective::all_reduce;
  double bytes = 0; // as nccl-tests counts them
  std::int64_t count = 0;
  double seconds = 0;
};

// One collective over `comm` for byte sizes min_bytes, min_bytes x step, ... up to max_bytes.
// Every rank of comm calls it. all-reduce goes through all_reduce_sum (what partita-run runs).
// Timed as a training step meets a collective (time_each_call): one call at a time, on buffers
// that rotate through arenas larger than the caches and that each rank writes just before the
// call, as the kernel producing a gradient or an activation does.
std::vector<CollectiveTiming> collective_sweep(cluster::Collective c, MPI_Comm comm, const SweepBudget& budget,
                                               double min_bytes, double max_bytes, double step);

// Passes of the same sweep (the same kernels or sizes, in the same order) as one: each row takes
// the median of its passes' times (the mean of the middle two for an even count). This host has
// slow spells of minutes in which a kernel takes up to twice as long, and its shared-memory
// collectives swing by as much from one 50 ms window to the next; a training step meets them over
// seconds, at their typical speed, which the median of three passes gives (the fastest pass, kept
// before, priced the benchmark's steps 3-8% low: its probes found the host that much slower than
// calibrated before most runs).
std::vector<KernelTiming> median_of_passes(const std::vector<std::vector<KernelTiming>>& passes);
std::vector<CollectiveTiming> median_of_passes(const std::vector<std::vector<CollectiveTiming>>& passes);

// Kernel rows as measurements.json (and the probe's and partita-run's host check) list them:
// compute rows name their compute family ("compute_class"); every row its memory-bound family
// ("class", which earlier readers know).
nlohmann::json kernels_json(const std::vector<KernelTiming>& rows, bool compute);

// nccl-tests' table: size, count, type, redop, root, time (us), algbw and busbw (GB/s).
std::string nccl_table(cluster::Collective c, int ranks, const std::vector<CollectiveTiming>& rows);
std::string kernel_table(const std::vector<KernelTiming>& rows, bool flops);

} // namespace partita::runtime
