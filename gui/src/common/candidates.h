#pragma once

// The inspector's data: every configuration an op could take on the strategy's devices, each
// costed by cost::op_cost exactly as the search builder places it (copies of the grid on devices
// 0 .. n-1), so a student can compare the chosen one with the others.

#include "common/analysis.h"

#include "partita/cost/op_cost.h"
#include "partita/sharding/config.h"

#include <string>
#include <vector>

namespace partita::gui {

struct Candidate {
  sharding::Config config;
  std::string text; // "b:2 n:4", with " x<n> copies"
  int copies = 1;
  cost::OpCost cost;
  bool chosen = false; // the strategy's configuration for this op
};

// Candidates of op `id`, in enumeration order; the chosen configuration is always present
// (added when the enumeration does not produce it, e.g. a non-power-of-two split).
std::vector<Candidate> op_candidates(const Analysis& a, graph::OpId id);

} // namespace partita::gui
