#include "sim/op_plan.h"

#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace partita::sim::detail {
namespace {

// The cost::term constant of `name` (the tasks keep a view of it), or an error: a term the
// simulator does not know would otherwise vanish from the iteration.
std::string_view known_term(std::string_view name, std::string_view op) {
  static constexpr std::array terms{
      cost::term::forward_compute,  cost::term::backward_compute, cost::term::recompute,
      cost::term::forward_reduce,   cost::term::backward_reduce,  cost::term::gradient_sync,
      cost::term::parameter_gather, cost::term::optimizer_step,   cost::term::halo_exchange,
      cost::term::statistics_sync,  cost::term::redistribution,   cost::term::redistribution_copies};
  for (auto t : terms) {
    if (t == name) {
      return t;
    }
  }
  throw Error(fmt::format("simulate: op '{}': the time term '{}' has no place in the task graph", op, name));
}

} // namespace

OpPlan plan_op(const graph::Graph& g, graph::OpId id, const strategy::OpPrediction& p, int micro,
               const strategy::Strategy& st) {
  static const std::vector<int> none;
  const auto& stage_of_op = st.pipeline ? st.pipeline->stage_of_op : none;
  const auto& op = g.op(id);
  if (p.term_input.size() != p.cost.time.size()) {
    throw Error(fmt::format("simulate: op '{}': the prediction says for {} of its {} time terms which input they move "
                            "(a prediction not made by evaluate())",
                            op.name, p.term_input.size(), p.cost.time.size()));
  }
  const double m = micro;
  // Per input, in input order: its transfer (a send when it crosses stages) and its copies.
  std::vector<Piece> in_forward, in_backward_copies, in_backward_transfer;
  std::vector<Piece> gather_f, gather_b, after_forward, after_backward;
  Piece fwd{TaskKind::forward, Stream::compute, cost::term::forward_compute, 0, -1};
  Piece bwd{TaskKind::backward, Stream::compute, cost::term::backward_compute, 0, -1};
  Piece recompute{TaskKind::recompute, Stream::compute, cost::term::recompute, 0, -1};
  OpPlan plan;
  for (std::size_t k = 0; k < p.cost.time.size(); ++k) {
    const auto& term = p.cost.time[k];
    const auto name = known_term(term.name, op.name);
    if (!std::isfinite(term.value) || term.value < 0 || !std::isfinite(term.backward) || term.backward < 0 ||
        term.backward > term.value) {
      throw Error(fmt::format("simulate: op '{}': the time term '{}' is {} s with {} s backward; a time term must be "
                              "finite, >= 0 and at least its backward share",
                              op.name, name, term.value, term.backward));
    }
    const double f = (term.value - term.backward) / m, b = term.backward / m;
    const int input = p.term_input[k];
    if (input >= static_cast<int>(op.inputs.size())) {
      throw Error(fmt::format("simulate: op '{}': a '{}' term moves input {}, the op has {}", op.name, name, input,
                              op.inputs.size()));
    }
    if (name == cost::term::forward_compute) {
      fwd.seconds += term.value / m;
    } else if (name == cost::term::backward_compute) {
      bwd.seconds += term.value / m;
    } else if (name == cost::term::recompute) {
      recompute.seconds += term.value / m;
    } else if (name == cost::term::forward_reduce) {
      after_forward.push_back({TaskKind::collective, Stream::communication, name, term.value / m, -1});
    } else if (name == cost::term::backward_reduce) {
      after_backward.push_back({TaskKind::collective, Stream::communication, name, term.value / m, -1});
    } else if (name == cost::term::halo_exchange || name == cost::term::statistics_sync) {
      after_forward.push_back({TaskKind::collective, Stream::communication, name, f, -1});
      after_backward.push_back({TaskKind::collective, Stream::communication, name, b, -1});
    } else if (name == cost::term::parameter_gather) {
      gather_f.push_back({TaskKind::parameter_gather, Stream::communication, name, f, -1});
      gather_b.push_back({TaskKind::parameter_gather, Stream::communication, name, b, -1});
    } else if (name == cost::term::redistribution || name == cost::term::redistribution_copies) {
      const bool transfer = name == cost::term::redistribution;
      auto kind = TaskKind::redistribution;
      if (transfer && input >= 0 && !stage_of_op.empty()) {
        const graph::OpId producer = g.tensor(op.inputs[static_cast<std::size_t>(input)]).producer;
        if (producer >= 0 &&
            stage_of_op[static_cast<std::size_t>(producer)] != stage_of_op[static_cast<std::size_t>(id)]) {
          kind = TaskKind::send;
        }
      }
      const auto stream = transfer ? Stream::communication : Stream::compute;
      if (transfer && input >= 0 && strategy::sent_once(g, st, id, static_cast<std::size_t>(input))) {
        // The whole transfer with the first micro-batch; no gradient goes back.
        in_forward.push_back({kind, stream, name, term.value - term.backward, input, 0, true});
        continue;
      }
      in_forward.push_back({kind, stream, name, f, input});
      (transfer ? in_backward_transfer : in_backward_copies).push_back({kind, stream, name, b, input});
    } else if (name == cost::term::gradient_sync) {
      plan.sync += term.value;
    } else { // optimizer step
      plan.step += term.value;
    }
  }
  plan.gradient_bytes = std::max(p.cost.get(cost::term::parameters), p.cost.get(cost::term::gradients));
  // A micro-batch's kept output lives from its forward kernel to its backward kernel (evaluate()
  // holds the micro-batches a schedule has in flight; here the schedule itself says which).
  fwd.memory = p.cost.get(cost::term::activations) / m;
  bwd.memory = -fwd.memory;
  // Forward: gather the weights, receive the inputs, compute, reduce. Backward: gather again,
  // recompute, compute, reduce, then hand each input's gradient back to its producer.
  for (auto* part : {&gather_f, &in_forward}) {
    plan.forward.insert(plan.forward.end(), part->begin(), part->end());
  }
  plan.forward.push_back(fwd);
  plan.forward.insert(plan.forward.end(), after_forward.begin(), after_forward.end());
  plan.backward = gather_b;
  plan.backward.push_back(recompute);
  plan.backward.push_back(bwd);
  for (auto* part : {&after_backward, &in_backward_copies, &in_backward_transfer}) {
    plan.backward.insert(plan.backward.end(), part->begin(), part->end());
  }
  for (auto* pass : {&plan.forward, &plan.backward}) {
    std::erase_if(*pass, [](const Piece& piece) { return !(piece.seconds > 0) && piece.memory == 0; });
  }
  return plan;
}

} // namespace partita::sim::detail
