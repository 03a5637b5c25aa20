#pragma once

// --verify: every rank's shards after one iteration (op outputs, input gradients, weight
// gradients or their ZeRO slices, and the weights after the optimizer step, ZeRO-3's slices of
// them) are gathered on rank 0
// and compared, region by region, with the unsharded single-device reference computed there from
// the same generated data and stepped by the same optimizer.

#include "executor.h"

#include <mpi.h>

#include <string>

namespace partita::runtime {

struct VerifyResult {
  bool passed = true;
  std::string report; // a table: per op, the max abs and relative error of each kind
  // Weight values compared after the step; of them, those held to 2 lr only (adam_learning_rate).
  std::int64_t weights = 0, sign_steps = 0;
};

// How a tensor's error is measured against the reference's magnitude: `max`, its largest error
// over the reference's largest magnitude (every element held to the tolerance: the check of a
// distributed run against one device, same arithmetic); `rms`, the root mean square of the errors
// over that of the reference (mixed precision against fp32, where an input rounded across zero
// moves ReLU's mask or a max pool's choice and one element of a gradient is off by all of it).
enum class VerifyNorm : std::uint8_t { max, rms };

// Collective over `comm`. `reference` is non-null on rank 0 only. The relative error of a tensor
// is measured by `norm`, the magnitudes floored at 1e-3.
//
// `adam` (an Adam run's parameters, else nullptr): a first step moves a weight by about the learning rate times
// the sign of its gradient whatever the gradient's size, so a gradient that is zero up to rounding
// (a conv bias under batch norm, a key bias under softmax) moves by +-lr in either run. Weights
// whose reference gradient is within twice the gradients' passing error of zero (plus 10 epsilon)
// are compared to within one step each way (2 lr) rather than the tolerance; the report counts
// those that needed it. Their gradients are compared with every other.
VerifyResult verify(const graph::Graph& g, const std::vector<Snapshot>& mine, const Executor* reference, MPI_Comm comm,
                    double tolerance, const AdamParameters* adam = nullptr, VerifyNorm norm = VerifyNorm::max);

} // namespace partita::runtime
