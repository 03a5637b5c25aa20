// Which activations training holds for the backward pass (strategy.h, saved_outputs).
//
// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
// section 4.1) count a transformer layer's activations as what each op's backward reads: the
// inputs of the products and of the LayerNorms, the softmax's output, GeLU's input, the dropout
// masks: s·b·h·(34 + 5·a·s/h) bytes in 16-bit, of which 2·s·b·h and 3·a·s²·b are dropout's. The
// same rule on the graph, op by op, gives those terms for any model: an output is held once,
// whichever and however many ops read it; the ops that only add, move or view read nothing back.

#include "partita/strategy/strategy.h"

#include <deque>

namespace partita::strategy {

namespace {

using graph::OpClass;
using graph::OpId;
using graph::TensorId;

bool carries_gradient(const graph::Graph& g, TensorId t) {
  return t != graph::no_tensor && graph::gets_gradient(g.tensor(t));
}

bool is_activation(const graph::Graph& g, TensorId t) {
  return t != graph::no_tensor && g.tensor(t).role == graph::TensorRole::activation;
}

// The activations the backward pass of op `id` reads, before fusion.
std::vector<TensorId> backward_reads(const graph::Graph& g, const graph::OpSemantics& s, OpId id) {
  const auto& op = g.op(id);
  std::vector<TensorId> reads;
  bool output_gradient = false;
  for (TensorId o : op.outputs) {
    output_gradient = output_gradient || carries_gradient(g, o);
  }
  if (!output_gradient || s.op_class == OpClass::shape || s.op_class == OpClass::data_movement) {
    return reads; // views and moves pass the gradient back by position (op_semantics.cpp's rule)
  }
  if (s.op_class == OpClass::softmax) { // dx = y * (dy - sum(dy * y))
    for (TensorId o : op.outputs) {
      if (o != graph::no_tensor) {
        reads.push_back(o);
      }
    }
    return reads;
  }
  if (!s.backward_reads_inputs) {
    return reads;
  }
  for (std::size_t j = 0; j < op.inputs.size(); ++j) {
    const TensorId u = op.inputs[j];
    const auto slot = j < s.slots.size() ? s.slots[j] : graph::InputSlot::data;
    if (!is_activation(g, u) || slot == graph::InputSlot::index || slot == graph::InputSlot::state) {
      continue;
    }
    if (graph::backward_reads_input(g, op, s, j)) { // d(a·b)/da = b, d(a/b)/da = 1/b, ...
      reads.push_back(u);
    }
  }
  return reads;
}

// A view's output is its input's storage.
TensorId storage_of(const graph::Graph& g, const std::vector<graph::OpSemantics>& sem, TensorId t) {
  for (int depth = 0; depth < 64; ++depth) {
    const OpId p = g.tensor(t).producer;
    if (p < 0 || sem[static_cast<std::size_t>(p)].op_class != OpClass::shape || g.op(p).inputs.empty() ||
        !is_activation(g, g.op(p).inputs[0])) {
      return t;
    }
    t = g.op(p).inputs[0];
  }
  return t;
}

// The tensors held: what backward passes read, with element-wise chains fused (a tensor an
// element-wise op reads, made by an element-wise op that nothing else reads, is recomputed inside
// the fused kernel from that op's own inputs).
std::vector<bool> held_tensors(const graph::Graph& g, const std::vector<graph::OpSemantics>& sem) {
  std::vector<bool> held(g.tensors().size(), false);
  std::vector<bool> visited(g.tensors().size(), false);
  std::deque<std::pair<TensorId, OpId>> work; // (tensor, the op that reads it)
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    for (TensorId t : backward_reads(g, sem[i], static_cast<OpId>(i))) {
      work.emplace_back(t, static_cast<OpId>(i));
    }
  }
  for (TensorId t : g.graph_outputs) { // the loss reads the model's outputs
    if (is_activation(g, t)) {
      work.emplace_back(t, -1);
    }
  }
  while (!work.empty()) {
    const auto [t, reader] = work.front();
    work.pop_front();
    const TensorId stored = storage_of(g, sem, t);
    if (visited[static_cast<std::size_t>(stored)]) {
      continue;
    }
    const auto& x = g.tensor(stored);
    const bool fusable = reader >= 0 && sem[static_cast<std::size_t>(reader)].op_class == OpClass::elementwise &&
                         stored == t && x.producer >= 0 &&
                         sem[static_cast<std::size_t>(x.producer)].op_class == OpClass::elementwise &&
                         x.consumers.size() == 1 && !g.is_graph_output(stored);
    if (!fusable) {
      visited[static_cast<std::size_t>(stored)] = true;
      held[static_cast<std::size_t>(stored)] = true;
      continue;
    }
    for (TensorId u : g.op(x.producer).inputs) {
      if (is_activation(g, u)) {
        work.emplace_back(u, x.producer);
      }
    }
  }
  return held;
}

// The attention core (selective recomputation): a product of two activations that both carry a
// gradient (queries by keys, probabilities by values) and the element-wise and softmax ops fed by
// the core, up to the next product.
std::vector<bool> attention_core(const graph::Graph& g, const std::vector<OpId>& order,
                                 const std::vector<graph::OpSemantics>& sem) {
  std::vector<bool> core(g.ops().size(), false);
  for (OpId id : order) {
    const auto& s = sem[static_cast<std::size_t>(id)];
    const auto& op = g.op(id);
    bool in = false;
    if (s.op_class == OpClass::contraction) {
      int operands = 0;
      for (TensorId t : op.inputs) {
        operands += is_activation(g, t) && carries_gradient(g, t) ? 1 : 0;
      }
      in = operands >= 2;
    } else if (s.op_class == OpClass::elementwise || s.op_class == OpClass::softmax) {
      for (TensorId t : op.inputs) {
        if (is_activation(g, t) && g.tensor(t).producer >= 0 && core[static_cast<std::size_t>(g.tensor(t).producer)]) {
          in = true;
        }
      }
    }
    core[static_cast<std::size_t>(id)] = in;
  }
  return core;
}

// The tensors that cut the graph: after the op that makes one, it is the only value carrying a
// gradient still to be read (a layer's input; a pre-norm block has two, before each residual).
std::vector<bool> cuts(const graph::Graph& g, const std::vector<OpId>& order) {
  std::vector<int> readers_left(g.tensors().size(), 0);
  for (std::size_t t = 0; t < g.tensors().size(); ++t) {
    readers_left[t] = static_cast<int>(g.tensors()[t].consumers.size());
  }
  std::vector<bool> cut(g.tensors().size(), false);
  int live = 0;
  TensorId last = graph::no_tensor;
  for (OpId id : order) {
    const auto& op = g.op(id);
    for (TensorId t : op.inputs) {
      if (is_activation(g, t) && carries_gradient(g, t) && --readers_left[static_cast<std::size_t>(t)] == 0) {
        --live;
      }
    }
    for (TensorId t : op.outputs) {
      if (is_activation(g, t) && carries_gradient(g, t) && !g.tensor(t).consumers.empty()) {
        ++live;
        last = t;
      }
    }
    if (live == 1 && last != graph::no_tensor && readers_left[static_cast<std::size_t>(last)] > 0) {
      cut[static_cast<std::size_t>(last)] = true;
    }
  }
  return cut;
}

} // namespace

std::vector<cost::Saved> saved_outputs(const graph::Graph& g, const std::vector<graph::OpId>& order,
                                       const std::vector<graph::OpSemantics>& sem, cost::Recompute policy) {
  const auto held = held_tensors(g, sem);
  std::vector<cost::Saved> saved(g.ops().size(), cost::Saved::none);
  const auto holds = [&](std::size_t i) {
    for (TensorId t : g.ops()[i].outputs) {
      if (t != graph::no_tensor && held[static_cast<std::size_t>(t)]) {
        return true;
      }
    }
    return false;
  };
  if (policy == cost::Recompute::full) {
    // Only the cuts stay; everything else of the forward pass runs again before the backward.
    const auto cut = cuts(g, order);
    for (std::size_t i = 0; i < saved.size(); ++i) {
      bool keeps = false;
      for (TensorId t : g.ops()[i].outputs) {
        keeps = keeps || (t != graph::no_tensor && (cut[static_cast<std::size_t>(t)] || g.is_graph_output(t)));
      }
      saved[i] = keeps ? cost::Saved::kept : cost::Saved::recomputed;
    }
    return saved;
  }
  const auto core = policy == cost::Recompute::selective ? attention_core(g, order, sem) : std::vector<bool>{};
  for (std::size_t i = 0; i < saved.size(); ++i) {
    if (!core.empty() && core[i]) {
      saved[i] = cost::Saved::recomputed;
    } else if (holds(i)) {
      saved[i] = cost::Saved::kept;
    }
  }
  return saved;
}

} // namespace partita::strategy
