#pragma once

// Calibration: from kernel and collective timings measured on a machine
// (partita-calibrate), the cluster profile whose figures make the cost model reproduce them.
//
// - Compute and memory: kernel_time(flops, bytes) = max(flops / (peak x compute_efficiency(flops)),
//   bytes / (memory_bandwidth x memory_efficiency(bytes))) + launch. The achieved rate of each
//   timed kernel (FLOP/s for GEMMs, bytes/s for memory-bound kernels) is fitted, by least squares
//   on the relative error, with a curve linear in log(work) between knots (one per half decade of
//   the measured range): the shape EfficiencyCurve interpolates. The peak is the highest fitted
//   rate and the curve is the fitted rates over it, so every fraction lies in (0, 1]. The launch
//   overhead is set to 0: per-call costs are measured, and the curves carry them at small sizes.
//   Memory-bound kernels are fitted per family (graph::KernelClass): eltwise gives
//   memory_efficiency, every other family with samples its own curve in memory_efficiency_by_class,
//   all as fractions of one memory_bandwidth (the highest rate fitted in any family).
//   Compute kernels likewise per family (graph::ComputeClass): GEMMs give compute_efficiency,
//   convolutions (forward, and backward data + weights as one pass, as op_cost prices them) their
//   own curve in compute_efficiency_by_class, both as fractions of one peak_fp32: the highest rate
//   fitted in any family, so a convolution faster than every GEMM raises the peak. GEMMs also give
//   matmul_operand_bandwidth where a term bytes / bandwidth on top of the FLOPs reproduces them
//   better than the rate curve alone (by more than a point of mean relative error): the rate
//   curve is then fitted on what remains of each GEMM's time. Convolutions of
//   one size scatter by shape, so their curve is the logarithm of the rate, piecewise linear in
//   log(FLOPs) with a knot a decade, fitted on log residuals (it cannot swing below zero, and each
//   knot stays within the rates of the samples around it); beyond the largest convolution timed the
//   rate rises with the marginal rate of the largest ones and never falls below their median
//   (calibration.cpp, fit_log_rate_curve); no convolution timed is a warning, not an error.
// - Links: each collective timing is t = a x L + n x W / B where L (latency steps) and W (bytes
//   factor) come from collective_cost itself, evaluated on a probe cluster whose link has unit
//   latency and bandwidth; (a, 1/B) is the least-squares fit on relative error over every
//   collective timed on that link class (intra-node groups; inter-node groups with one rank per
//   node), so core's formulas with the fitted figures reproduce the measurements.

#include "partita/cluster/cluster.h"
#include "partita/cluster/collectives.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace partita::cost {

struct KernelSample {
  std::string kernel; // what ran, e.g. "gemm 512x512x512" or "relu"
  double flops = 0;   // 0 for a memory-bound kernel
  double bytes = 0;   // read + written, as op_cost counts them (shard inputs + outputs)
  double seconds = 0; // per call
  graph::KernelClass kernel_class = graph::KernelClass::eltwise;   // memory-bound kernels: their family
  graph::ComputeClass compute_class = graph::ComputeClass::matmul; // compute kernels: their family
  // A fresh-read timing (memory-bound): `fresh_bytes` of the bytes were written just before the
  // call, and `cold_seconds` is the same kernel timed the same way on operands in memory. These
  // samples fit Device::fresh_read, not the families' curves.
  double fresh_bytes = 0;
  double cold_seconds = 0;
  // A GEMM: the bytes of its operands A and B, which the sweep reads from memory (not C, which it
  // writes); these fit Device::matmul_operand_bandwidth. 0: not recorded (measurements of an
  // earlier version), no operand bandwidth is fitted.
  double operand_bytes = 0;
};

struct CollectiveSample {
  cluster::Collective collective = cluster::Collective::all_reduce;
  std::vector<int> devices; // the group, as device ids of the calibrated cluster
  double bytes = 0;         // as nccl-tests counts them (collective_cost's convention)
  double seconds = 0;
};

// What partita-calibrate measured. Devices are numbered node-major: devices_per_node per node.
struct CalibrationData {
  int nodes = 1;
  int devices_per_node = 1;
  int threads = 1; // compute threads per rank
  std::vector<KernelSample> compute;
  std::vector<KernelSample> memory;
  std::vector<CollectiveSample> collectives;
  // Products timed at the shapes a model's plans run them (partita-calibrate --products): kept as
  // they are in the device's timed_products, where the cost model prices those shapes.
  std::vector<cluster::TimedProduct> products;
};

// One measurement against what the calibrated cluster predicts for it.
struct FitPoint {
  std::string what;
  double work = 0; // FLOPs, or bytes
  double measured = 0, predicted = 0;
  double error() const { return measured > 0 ? (predicted - measured) / measured : 0; }
};

struct LinkFit {
  cluster::Link link;
  int samples = 0;
};

struct Calibration {
  cluster::Cluster cluster;
  std::vector<FitPoint> compute, memory, collectives; // compute: GEMMs (the matmul family)
  // The other compute families' points (convolution), each against its own fitted curve.
  std::map<graph::ComputeClass, std::vector<FitPoint>> compute_by_class;
  // The timed products against what the fitted curves price them at (forward and backward):
  // how far a model's own shapes lie off the curves, which they replace for those shapes.
  std::vector<FitPoint> products;
  std::optional<LinkFit> intra, inter; // the link classes the data covered
  std::vector<std::string> warnings;   // what could not be fitted and what stands in for it
};

// Fits `data` onto `base` (name, device name, capacity, link kinds and NICs per node kept; shape
// from the data) and checks every point with kernel_time and collective_cost. Throws
// partita::Error when a class has too few usable points (naming it) or times do not grow with size.
Calibration calibrate(const cluster::Cluster& base, const CalibrationData& data);

// Median and largest |error| of a set of points.
struct FitQuality {
  double median_abs = 0, max_abs = 0;
};
FitQuality fit_quality(const std::vector<FitPoint>& points);

} // namespace partita::cost
