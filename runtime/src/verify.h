#pragma once

// --verify: every rank's shards after one iteration (op outputs, input gradients, weight
// gradients or their ZeRO slices, and the weights after the optimizer step) are gathered on rank 0
// and compared, region by region, with the unsharded single-device reference computed there from
// the same generated data and stepped by the same optimizer.

#include "executor.h"

#include <mpi.h>

#include <string>

namespace partita::runtime {

struct VerifyResult {
  bool passed = true;
  std::string report;                    // a table: per op, the max abs and relative error of each kind
  std::int64_t weights = 0, skipped = 0; // weight values compared after the step; left out (sign_steps)
};

// Collective over `comm`. `reference` is non-null on rank 0 only. The relative error of a tensor
// is its max abs error over the max abs value of the reference tensor.
//
// `sign_steps` (Adam): a first step moves a weight by about the learning rate times the sign of its
// gradient whatever the gradient's size, so a gradient that is zero up to rounding (a key bias under
// softmax) moves by +-lr in either run. Weights whose reference gradient is within the tolerance
// of zero (relative, as above) are left out of the weights' comparison and counted in the report;
// their gradients are compared with every other.
VerifyResult verify(const graph::Graph& g, const std::vector<Snapshot>& mine, const Executor* reference, MPI_Comm comm,
                    double tolerance, bool sign_steps = false);

} // namespace partita::runtime
