// Megatron-LM tensor parallelism (Shoeybi et al. 2019) with data parallelism across groups: a
// weighted matrix product whose input arrives whole is column-parallel (split its output
// features); one whose input arrives split along its reduction dim is row-parallel (split the
// reduction: partial sums, all-reduced). The attention and MLP blocks fall out as f/g pairs:
// QKV and fc1 column-parallel, out-projection and fc2 row-parallel, heads split in between.

#include "search/families.h"

#include <optional>

namespace partita::search::detail {

int tensor_parallel_degree(const Request& r) {
  if (r.tensor_parallel > 0) { // as asked, or refused: a degree that leaves devices idle is not what was typed
    if (r.devices % r.tensor_parallel != 0) {
      throw Error(fmt::format("megatron: --tp {} does not divide the {} devices", r.tensor_parallel, r.devices));
    }
    return r.tensor_parallel;
  }
  // A node's devices, or the largest power of two below that divides the devices.
  int t = floor_pow2(r.cluster->devices_per_node);
  while (t > 1 && r.devices % t != 0) {
    t /= 2;
  }
  return t;
}

namespace {

// Vocabulary-parallel (Megatron-LM's VocabParallelEmbedding) only for a table of a vocabulary:
// looked up by data (token ids), with more rows than columns. Position and token-type tables,
// looked up by constants or small, are replicated as Megatron-LM replicates them.
bool vocabulary_parallel(const graph::Graph& g, graph::OpId id) {
  const auto& op = g.op(id);
  if (op.inputs.size() < 2 || op.inputs[0] == graph::no_tensor || op.inputs[1] == graph::no_tensor) {
    return false;
  }
  const auto& table = g.tensor(op.inputs[0]);
  const auto& ids = g.tensor(op.inputs[1]);
  return ids.role != graph::TensorRole::constant && !ids.int_values && table.shape.size() == 2 &&
         table.shape[0] > table.shape[1];
}

// An op without weights: inside a tensor-parallel region (an input arrives split along a dim
// other than the batch: between a column- and a row-parallel product, the attention heads) it
// keeps that split; elsewhere (LayerNorm, residual adds, dropout, the embeddings' sum) it is
// replicated across the tensor-parallel group and split by the batch over the d groups.
// Whether input `i` arrives split along a tensor dim other than the batch.
bool arrives_tensor_split(const Builder& b, graph::OpId id, std::size_t i) {
  const auto layout = b.arriving_layout(id, i);
  if (!layout) {
    return false;
  }
  const int producer_batch = b.batch_dim(b.graph().tensor(b.graph().op(id).inputs[i]).producer);
  for (std::size_t j = 0; j < layout->parts.size(); ++j) {
    if (layout->parts[j] > 1 && layout->dim_axis[j] != producer_batch) {
      return true;
    }
  }
  return false;
}

// Sequence parallelism's dim of op `id`: the iteration dim indexing dim 1 (the sequence) of an
// output of rank 3 or more whose dim 0 is the batch; -1 when there is none or `t` does not divide it.
// A batch of one is no split dim (batch_dims carries only those), yet its dim 0 is still the batch:
// an export at batch 1 splits its sequence as any other batch does.
int sequence_dim(const Builder& b, graph::OpId id, int t) {
  const auto& s = b.semantics(id);
  if (s.outputs.empty() || s.outputs[0].dims.size() < 3) {
    return -1;
  }
  const int lead = s.outputs[0].dims[0];
  const int batch = b.batch_dim(id);
  const bool batch_first = batch >= 0 ? lead == batch : lead >= 0 && s.dims[static_cast<std::size_t>(lead)].size == 1;
  if (!batch_first) {
    return -1;
  }
  const int seq = s.outputs[0].dims[1];
  if (seq < 0 || seq == lead) {
    return -1;
  }
  const auto& dim = s.dims[static_cast<std::size_t>(seq)];
  return dim.splittable && !dim.reduction && dim.size % t == 0 ? seq : -1;
}

void megatron_weightless(Builder& b, graph::OpId id, int d, int t, MegatronTally& tally) {
  const int batch = b.batch_dim(id);
  std::optional<sharding::Config> region;
  bool arrived_split = false;
  for (std::size_t i = 0; i < b.graph().op(id).inputs.size(); ++i) {
    arrived_split = arrived_split || arrives_tensor_split(b, id, i);
    const auto c = b.carried_config(id, i);
    if (!c) {
      continue;
    }
    bool tensor_split = false;
    for (std::size_t j = 0; j < c->splits.size(); ++j) {
      tensor_split = tensor_split || (static_cast<int>(j) != batch && c->splits[j] > 1);
    }
    if (tensor_split && (!region || c->devices() > region->devices())) {
      region = c;
    }
  }
  if (arrived_split && !region && b.graph().op(id).outputs.size() == 1) {
    tally.lost.push_back(id);
  }
  if (region) {
    b.assign(id, *region);
    return;
  }
  // Downstream of a convolution (a CNN, where Megatron splits no product): data parallel over
  // the whole pool, carried on.
  for (std::size_t i = 0; i < b.graph().op(id).inputs.size(); ++i) {
    const auto c = b.carried_config(id, i);
    if (c && batch >= 0 && c->splits[static_cast<std::size_t>(batch)] > d) {
      b.assign(id, *c);
      return;
    }
  }
  // Sequence parallelism (Korthikanti et al. 2022): LayerNorm, dropout and the residual adds
  // split along the sequence inside the tensor-parallel group instead of repeated on each device.
  if (b.request().setup.sequence_parallel && t > 1) {
    if (const int seq = sequence_dim(b, id, t); seq >= 0) {
      b.assign(id, b.split(id, {{batch, d}, {seq, t}}));
      return;
    }
  }
  // Replicated over the tensor-parallel group: the copies of each batch block sit together on
  // the group's devices (the innermost), as the products around the op hold that block.
  const auto config = b.split(id, {{batch, d}});
  const auto& pool = b.pool();
  const std::size_t k = static_cast<std::size_t>(config.devices());
  const std::size_t copies = pool.size() / k;
  std::vector<int> devices;
  devices.reserve(k * copies);
  for (std::size_t c = 0; c < copies; ++c) {
    for (std::size_t j = 0; j < k; ++j) {
      devices.push_back(pool[j * copies + c]);
    }
  }
  b.assign_on(id, config, devices);
}

} // namespace

std::string MegatronTally::lost_text(const Builder& b, int t) const {
  if (lost.empty()) {
    return "";
  }
  const auto& op = b.graph().op(lost.front());
  return fmt::format(" Not Megatron-LM's layout everywhere: at {} ops the tensor-parallel split cannot go on, so "
                     "their input is gathered (first '{}' ({}), whose dims do not divide by {}: Megatron-LM needs the "
                     "attention heads and the hidden sizes divisible by the tensor-parallel width).",
                     lost.size(), op.name, op.type, t);
}

void megatron_op(Builder& b, graph::OpId id, int t, MegatronTally& tally) {
  const int d = std::max(1, b.devices() / t);
  const auto& s = b.semantics(id);
  const int batch = b.batch_dim(id);
  if (s.op_class == graph::OpClass::convolution) {
    // Tensor parallelism splits matrix products; a convolution is data parallel over the pool.
    b.assign(id, b.split(id, {{batch, b.devices()}}));
    return;
  }
  if (is_weight_view(b.graph(), s, id)) {
    // The Transpose of a tied embedding table: split along the vocabulary as the table is.
    b.assign(id, b.split(id, {{batch, d}, {feature_dim(b.graph(), s, id), t}}));
    return;
  }
  const bool weighted =
      has_weight(b.graph(), id) && (s.op_class == graph::OpClass::contraction ||
                                    (s.op_class == graph::OpClass::embedding && vocabulary_parallel(b.graph(), id)));
  if (!weighted) {
    megatron_weightless(b, id, d, t, tally);
    return;
  }
  const int k = weight_reduction_dim(b.graph(), s, id);
  bool input_split_on_k = false;
  if (k >= 0) {
    for (std::size_t i = 0; i < b.graph().op(id).inputs.size(); ++i) {
      if (auto carried = b.carried_config(id, i); carried && carried->splits[static_cast<std::size_t>(k)] > 1) {
        input_split_on_k = true;
      }
    }
  }
  if (input_split_on_k || s.op_class == graph::OpClass::embedding) {
    // Row-parallel (or vocabulary-parallel embedding): partial sums over the t devices.
    b.assign(id, b.split(id, {{batch, d}, {k, t}}));
    ++tally.row;
  } else {
    b.assign(id, b.split(id, {{batch, d}, {feature_dim(b.graph(), s, id), t}}));
    ++tally.column;
  }
}

namespace {

// Megatron-LM's layout with pipeline stages or micro-batches: the pipeline family's cut with
// Megatron's tensor layout inside each stage, the micro-batch count from the micro-batch size.
strategy::Strategy megatron_pipelined(const Request& r) {
  const int stages = std::max(1, r.pipeline_parallel);
  if (r.devices % stages != 0) {
    throw Error(fmt::format("megatron: --pp {} does not divide the {} devices", stages, r.devices));
  }
  const int per_stage = r.devices / stages;
  Request q = r;
  q.stages = stages;
  q.cuts.clear();
  q.tensor_parallel =
      r.tensor_parallel > 0 ? r.tensor_parallel : largest_divisor_at_most(tensor_parallel_degree(r), per_stage);
  if (per_stage % q.tensor_parallel != 0) {
    throw Error(fmt::format("megatron: --tp {} does not divide the {} devices of a pipeline stage", q.tensor_parallel,
                            per_stage));
  }
  const int replicas = per_stage / q.tensor_parallel;
  const int batch = strategy::batch_size(*r.graph);
  if (r.micro_batch_size > 0) {
    if (batch % (replicas * r.micro_batch_size) != 0) {
      throw Error(fmt::format("megatron: --micro-batch-size {}: the batch of {} does not split into micro-batches of "
                              "{} on each of the {} data-parallel replicas ({} / ({} x {}) is not whole)",
                              r.micro_batch_size, batch, r.micro_batch_size, replicas, batch, replicas,
                              r.micro_batch_size));
    }
    const int micro = batch / (replicas * r.micro_batch_size);
    if (r.micro_batches > 0 && r.micro_batches != micro) {
      throw Error(fmt::format("megatron: --micro-batches {} and --micro-batch-size {} disagree: micro-batches of {} "
                              "on {} data-parallel replicas make {} of the batch of {}",
                              r.micro_batches, r.micro_batch_size, r.micro_batch_size, replicas, micro, batch));
    }
    q.micro_batches = micro;
  }
  // Megatron-LM runs 1F1B, or its interleaved schedule with virtual pipeline stages.
  const bool interleaved = r.schedule == strategy::Schedule::interleaved;
  if (interleaved && stages < 2) {
    throw Error("megatron: --schedule interleaved needs pipeline stages (--pp 2 or more)");
  }
  q.schedule = interleaved ? strategy::Schedule::interleaved : strategy::Schedule::one_f_one_b;
  // Megatron-LM gives every stage (every chunk) as many layers; a model without repeated blocks
  // is cut by time. `--balance speed` shares the layers out by each stage's speed instead (on a
  // cluster of mixed nodes; on one of a kind it is Megatron-LM's cut).
  const auto repeated = r.facts && r.facts->repeated.size() == r.graph->ops().size()
                            ? r.facts->repeated
                            : repeated_ops(*r.graph, r.graph->topological_order());
  q.balance = r.balance == "speed"                                                  ? "speed"
              : std::find(repeated.begin(), repeated.end(), true) != repeated.end() ? "layers"
                                                                                    : "time";
  auto st = pipeline(q);
  st.family = "megatron";
  const int micro = st.pipeline ? st.pipeline->micro_batches : 1;
  const std::string schedule =
      interleaved ? fmt::format("interleaved 1F1B, {} model chunks per stage", st.pipeline->chunks) : "1F1B";
  st.explanation = fmt::format("Megatron-LM's layout: {}-way tensor parallel, {} pipeline stage{} of contiguous ops, "
                               "{}-way data parallel, {} micro-batch{} per iteration ({}). {}",
                               q.tensor_parallel, stages, stages == 1 ? "" : "s", replicas, micro,
                               micro == 1 ? "" : "es", schedule, st.explanation);
  return st;
}

} // namespace

strategy::Strategy megatron(const Request& r) {
  if (r.pipeline_parallel > 1 || r.micro_batch_size > 0 || r.micro_batches > 0 ||
      r.schedule == strategy::Schedule::interleaved) {
    return megatron_pipelined(r);
  }
  Builder b(r, "megatron");
  const int t = tensor_parallel_degree(r);
  const int d = b.devices() / t;
  MegatronTally tally;
  for (graph::OpId id : b.order()) {
    b.check_cancel();
    megatron_op(b, id, t, tally);
  }
  return b.finish(fmt::format("Tensor parallelism over groups of {} devices (the innermost, fastest links) and data "
                              "parallelism over {} groups: {} weighted products are column-parallel (input whole, "
                              "output features split), {} are row-parallel or vocabulary-parallel (reduction split, "
                              "partial sums all-reduced), the ops between them keep the split.{}",
                              t, d, tally.column, tally.row, tally.lost_text(b, t)));
}

} // namespace partita::search::detail
