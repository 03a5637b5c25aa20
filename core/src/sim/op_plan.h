#pragma once

// How one op's time terms (evaluate()'s) become the tasks of an iteration: which pass, which
// stream, which share per micro-batch, and what it does once per iteration.

#include "partita/sim/task_graph.h"

#include <string_view>
#include <vector>

namespace partita::sim::detail {

// A share of one time term, for one micro-batch: what one task of an op runs.
struct Piece {
  TaskKind kind = TaskKind::forward;
  Stream stream = Stream::compute;
  std::string_view term;
  double seconds = 0;
  int input = -1;
  double memory = 0;       // activation bytes per device: allocated at the start (> 0), freed at the end (< 0)
  bool first_only = false; // the whole term, with the first micro-batch only (strategy::sent_once)
};

// An op's terms sorted into the tasks of its forward and backward pass, per micro-batch, and
// what it does once per iteration.
struct OpPlan {
  std::vector<Piece> forward, backward;
  double sync = 0, step = 0;
  double gradient_bytes = 0;
};

// Sorts op `id`'s predicted terms into its plan for `micro` micro-batches. The strategy's pipeline
// (if any) tells a send between stages from a redistribution inside one, and which sends go once
// (strategy::sent_once). Throws
// partita::Error on a term the simulator does not know, a negative or non-finite term, or a
// prediction that does not say which input each redistribution moves.
OpPlan plan_op(const graph::Graph& g, graph::OpId id, const strategy::OpPrediction& p, int micro,
               const strategy::Strategy& st);

} // namespace partita::sim::detail
