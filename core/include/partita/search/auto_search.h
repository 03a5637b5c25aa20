#pragma once

// The per-layer search (PaSE, Elango 2021): the configuration of every op chosen for the whole
// graph at once, exactly, by dp::solve over a cost graph built from the same cost model that
// evaluate() uses: an op's vertex cost is its own terms from op_cost (compute, intra-op
// collectives, gradient sync, optimizer step), an edge's cost the redistribution between the
// producer's output layout and the consumer's input layout. Under a memory limit, a Lagrangian
// price on memory is swept to the limit; the result states its optimality gap. The final ranking
// is the event simulator's, among the optima with the gradient sync counted whole, half and not at
// all (it overlaps with the backward pass there) and the per-op families' plans (AutoResult::ranking).

#include "partita/search/dp.h"
#include "partita/search/optimizer.h"

#include <string>
#include <vector>

namespace partita::search {

struct AutoOpReport {
  int candidates = 0;                                    // configurations searched for this op
  bool has_runner_up = false;                            // false when the op has one configuration
  sharding::Config runner_up;                            // the best other configuration, every other op as chosen
  std::vector<cost::Term> chosen_terms, runner_up_terms; // the op's own time terms and its input redistributions
  double runner_up_delta = 0; // seconds the iteration grows with the runner-up (its edges included)
};

struct AutoStats {
  int ops = 0;
  double configurations = 0; // summed over ops
  int distinct_ops = 0;      // ops whose cost tables differ (repeated blocks share theirs)
  int edges = 0;
  int distinct_edge_tables = 0;
  double search_work = 0; // pairs of distinct layouts its edge tables price x devices (Request::max_search_work)
  double table_bytes = 0; // cost tables held by the search
  int solves = 0;         // dynamic programs run (more than one when the memory limit binds)
  // The moves (distinct pairs of placements of a tensor) the edge tables hold, those priced (the
  // rest hold a lower bound no optimum needed to look past), and the rounds that priced them.
  double moves = 0, moves_priced = 0;
  int pricing_rounds = 0;
  std::size_t bound_misses = 0; // moves priced below their bound (0 unless the bound is wrong)
  dp::Stats dp;                 // of the last solve
};

// A candidate of the final ranking and its prediction.
struct AutoRanked {
  std::string candidate; // "the exact optimum", "gradient sync counted half", "dp's plan", ...
  double objective = 0;  // its terms added up (the search's objective, the sync counted whole)
  double predicted = 0;  // the simulated iteration (the terms added up where it was too large to simulate)
  bool simulated = false;
  bool chosen = false;
};

struct AutoResult {
  strategy::Strategy strategy;
  // The search's objective for the strategy returned: the sum of its vertex and edge costs, in
  // seconds. evaluate() gives the same, or less where a tensor moved into a layout once serves
  // several readers (the search prices each reader's move).
  double objective = 0;
  // No strategy within the memory limit has an objective below this (the Lagrangian bound, and
  // the bounded search's where `exact` is false); equal to `objective` when the limit does not bind
  // and the search was exact.
  double lower_bound = 0;
  // False where the dependent sets were too wide to search exactly (Request::bounded_table_entries):
  // lower_bound is then the bounded search's (and the memory price's, where that bound too).
  bool exact = true;
  bool memory_priced = false; // the fastest plan did not fit: lower_bound is a Lagrangian bound
  double memory_limit = 0;    // bytes per device the result was held to
  double peak_memory = 0;     // of the strategy returned (evaluate's)
  std::vector<AutoOpReport> ops;
  // The final ranking by the simulator (Request::simulation_budget > 0): the distinct candidates
  // that fit (the exact optimum, the optima with the gradient sync discounted, the per-op families'
  // plans within the search's space); empty when the exact optimum was the only one.
  std::vector<AutoRanked> ranking;
  AutoStats stats;
};

// Throws partita::Error when nothing fits the memory limit (naming the smallest footprint of any
// plan, found without a search since memory is per op, and the terms that dominate it), when the
// space is too wide to search exactly, or on a bad request; partita::Cancelled when cancelled.
AutoResult auto_search(const Request& request);

// How a strategy differs from the hand-made families on the same request: the family whose
// configurations agree with it on the most ops, and the ops where they differ.
struct FamilyComparison {
  std::string closest;                // "" when no family applies
  std::vector<graph::OpId> different; // ops configured otherwise than the closest family
  std::string best_family;            // the fastest hand-made family
  double best_family_time = 0;        // its predicted iteration time: simulated where the request's
                                      // simulation_budget is not 0, as `plan` shows it, else evaluate()'s
  std::string table;                  // "dp 12.3 ms, mp ..." for the explanation
};
FamilyComparison compare_with_families(const Request& request, const strategy::Strategy& strategy);

} // namespace partita::search
