#pragma once

// The 3-D search (`--strategy 3d`): the global choices a practitioner of Megatron-LM, DeepSpeed or
// torchtitan makes by hand, searched together. Every candidate is Megatron-LM's layout (tensor
// parallel inside a node, contiguous pipeline stages of as many layers, data parallel over the
// rest) with a micro-batch size, a schedule (1F1B, or interleaved with V model chunks per stage),
// a ZeRO stage, a recomputation policy and sequence parallelism on or off; each is planned by the
// megatron family and predicted by strategy::Evaluator (evaluate()'s numbers up to the order of
// floating-point sums), its terms added up. Candidates whose resident memory alone (parameters,
// gradients, optimizer state) provably exceeds the limit, those whose time provably cannot beat
// what was found, and those another candidate provably matches or beats in both time and memory
// are skipped without planning (three_d.cpp says how); a plan that does not fit is never returned.
// The final ranking is the event simulator's (sim::simulate_prediction, the figure `partita plan`
// prints): the candidates that fit are simulated in the order of a lower bound (their terms added
// up less what the simulator can overlap; checked, not proven, three_d.cpp) until the bound says
// no candidate left can beat the best simulated or the budget (Request::simulation_budget) is
// spent, and the chosen plan is always simulated where its size allows.

#include "partita/search/optimizer.h"
#include "partita/strategy/strategy.h"

#include <optional>
#include <string>
#include <vector>

namespace partita::search::three_d {

struct Candidate {
  int pipeline = 1; // stages
  int tensor = 1;   // tensor-parallel width inside a stage
  int data = 1;     // data-parallel replicas
  int micro_batch_size = 1;
  int micro_batches = 1; // batch / (data x micro_batch_size)
  strategy::Schedule schedule = strategy::Schedule::one_f_one_b;
  int chunks = 1; // model chunks per stage (interleaved)
  int zero_stage = 0;
  cost::Recompute recompute = cost::Recompute::none;
  bool sequence_parallel = false;
  // On a cluster of mixed nodes: the layers shared out by the speed of each stage's devices
  // (`--balance speed`) instead of evenly (Megatron-LM's cut).
  bool speed_cut = false;
  // Every stage laid out by the per-layer search on its devices, priced in the micro-batches
  // (`--strategy pipeline --stage-layout searched`): it chooses each op's split, so `tensor` and
  // `data` are 1 and `micro_batch_size` is the batch over the micro-batches.
  bool per_layer = false;
  // per_layer: the stages cut as Megatron-LM cuts them (the repeated blocks shared out evenly,
  // `--balance layers`) instead of by each op's time (a cut by time alone can fall inside a block,
  // where the tensor sent between stages is large).
  bool layers_cut = false;

  // "PP 4 x TP 8 x DP 32, micro-batch 2 (28 per iteration), interleaved x3, ZeRO 1, recompute full,
  // sequence parallel"
  std::string text() const;
  // The megatron family's options (--tp, --pp, --micro-batch-size, --schedule, --chunks) and the
  // setup's (--zero, --recompute, --sequence-parallel) that give this candidate's plan.
  std::string options() const;
};

struct Point {
  Candidate candidate;
  double iteration_time = 0; // seconds: simulated where `simulated`, else additive_time
  double additive_time = 0;  // seconds: evaluate()'s terms added up
  bool simulated = false;    // iteration_time is the event simulator's (sim::simulate_prediction)
  double peak_memory = 0;    // bytes on the fullest device
  bool fits = false;
};

struct Result {
  strategy::Strategy strategy; // the fastest candidate that fits; its setup is the candidate's
  Point best;
  std::optional<Point> runner_up; // the next fastest that fits
  // The candidates that fit and that no other beats in both iteration time and memory per device,
  // fastest first (each a plan: `partita plan --strategy megatron` with its options()).
  std::vector<Point> pareto;
  std::size_t candidates = 0;      // the space, after the user's held choices
  std::size_t evaluated = 0;       // planned and predicted
  std::size_t too_big = 0;         // skipped: resident memory alone over the limit (a lower bound)
  std::size_t too_slow = 0;        // skipped: time bound not below the best (and memory not below the front's)
  std::size_t refused = 0;         // the megatron family refused the shape (dims that do not divide, ...)
  std::size_t simulated = 0;       // of the planned ones that fit: run through the event simulator
  std::size_t simulation_work = 0; // their cost in Request::simulation_budget's units
  // The simulation budget (Request::simulation_budget) ran out before the ranking's bound said
  // that no candidate left could beat the best: the rest are ranked by their terms added up.
  bool budget_cut = false;
  double memory_limit = 0; // bytes per device
  // What keeps the best from being faster: "memory" when a faster candidate exists that does not
  // fit, else the larger of "pipeline bubble" and "communication" in its prediction.
  std::string binding;
};

// The choices the user held (typed) stay as typed: r.tensor_parallel, r.pipeline_parallel,
// r.micro_batch_size, r.chunks (interleaved with that many chunks) and, when r.hold_setup says so,
// the setup's ZeRO stage, recomputation and sequence parallelism. Throws partita::Error when no
// candidate fits, naming the smallest footprint found.
Result search(const Request& r);

// The plan of one candidate: the megatron family with its shape, the candidate's setup attached.
strategy::Strategy plan(const Request& r, const Candidate& c);

// The family: search(r).strategy with an explanation (the choice, the runner-up, the binding
// constraint, the space); the search's result in `*result` when given.
strategy::Strategy optimize(const Request& r, Result* result = nullptr);

} // namespace partita::search::three_d
