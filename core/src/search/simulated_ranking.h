#pragma once

// What the final rankings of `3d` and `bapipe` share: the lower bound they simulate candidates in
// the order of, and the cost of a simulation in Request::simulation_budget's units.

#include "partita/sim/task_graph.h"
#include "partita/strategy/strategy.h"

#include <cstddef>

namespace partita::search::detail {

// The terms added up less what the simulator overlaps or shortens: the gradient synchronization
// (overlapped with the backward pass), the moves between ops (summed over the `stages` pipeline
// stages, so taken per stage: a stage's sends run beside the next micro-batch's kernels) and the
// bubble (its fill and drain run op by op). Kernels, an op's own collectives and the step run in
// dependence order. Checked, not proven (three_d.cpp says against what).
double simulated_lower_bound(const strategy::Prediction& p, int stages);

// A task, and each NIC a transfer shares with others (the fluid sharing revisits them).
std::size_t simulation_work(const sim::TaskGraph& tg);

} // namespace partita::search::detail
