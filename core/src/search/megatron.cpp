// Megatron-LM tensor parallelism (Shoeybi et al. 2019) with data parallelism across groups: a
// weighted matrix product whose input arrives whole is column-parallel (split its output
// features); one whose input arrives split along its reduction dim is row-parallel (split the
// reduction: partial sums, all-reduced). The attention and MLP blocks fall out as f/g pairs:
// QKV and fc1 column-parallel, out-projection and fc2 row-parallel, heads split in between.

#include "search/families.h"

namespace partita::search::detail {

int tensor_parallel_degree(const Request& r) {
  int t = r.tensor_parallel > 0 ? r.tensor_parallel : r.cluster->devices_per_node;
  t = std::min(floor_pow2(t), floor_pow2(r.devices));
  return std::max(t, 1);
}

void megatron_op(Builder& b, graph::OpId id, int t, int& column, int& row) {
  const int d = std::max(1, b.devices() / t);
  const auto& s = b.semantics(id);
  const bool weighted = has_weight(b.graph(), id) &&
                        (s.op_class == graph::OpClass::contraction || s.op_class == graph::OpClass::embedding);
  if (!weighted) {
    b.follow(id);
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
  const int batch = b.batch_dim(id);
  if (input_split_on_k || s.op_class == graph::OpClass::embedding) {
    // Row-parallel (or vocabulary-parallel embedding): partial sums over the t devices.
    b.assign(id, b.split(id, {{batch, d}, {k, t}}));
    ++row;
  } else {
    b.assign(id, b.split(id, {{batch, d}, {feature_dim(b.graph(), s, id), t}}));
    ++column;
  }
}

strategy::Strategy megatron(const Request& r) {
  Builder b(r, "megatron");
  const int t = tensor_parallel_degree(r);
  const int d = b.devices() / t;
  int column = 0, row = 0;
  for (graph::OpId id : b.order()) {
    b.check_cancel();
    megatron_op(b, id, t, column, row);
  }
  return b.finish(fmt::format("Tensor parallelism over groups of {} devices (the innermost, fastest links) and data "
                              "parallelism over {} groups: {} weighted products are column-parallel (input whole, "
                              "output features split), {} are row-parallel or vocabulary-parallel (reduction split, "
                              "partial sums all-reduced), the ops between them keep the split.",
                              t, d, column, row));
}

} // namespace partita::search::detail
