#pragma once

// --verify: every rank's shards after one iteration (op outputs, input gradients, weight
// gradients) are gathered on rank 0 and compared, region by region, with the unsharded
// single-device reference computed there from the same generated data.

#include "executor.h"

#include <mpi.h>

#include <string>

namespace partita::runtime {

struct VerifyResult {
  bool passed = true;
  std::string report; // a table: per op, the max abs and relative error of each kind
};

// Collective over `comm`. `reference` is non-null on rank 0 only. The relative error of a tensor
// is its max abs error over the max abs value of the reference tensor.
VerifyResult verify(const graph::Graph& g, const std::vector<Snapshot>& mine, const Executor* reference, MPI_Comm comm,
                    double tolerance);

} // namespace partita::runtime
