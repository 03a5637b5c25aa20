#include "common/split_category.h"

#include <QCoreApplication>

namespace partita::gui {

QString splitKindName(SplitKind kind) {
  switch (kind) {
  case SplitKind::Batch: return QCoreApplication::translate("SplitKind", "batch split");
  case SplitKind::Feature: return QCoreApplication::translate("SplitKind", "feature split");
  case SplitKind::Reduction: return QCoreApplication::translate("SplitKind", "reduction split");
  case SplitKind::Mixed: return QCoreApplication::translate("SplitKind", "mixed");
  case SplitKind::Replicated: return QCoreApplication::translate("SplitKind", "replicated");
  }
  return {};
}

QString splitKindDescription(SplitKind kind) {
  switch (kind) {
  case SplitKind::Batch:
    return QCoreApplication::translate("SplitKind", "Only the batch is split: data parallelism, weights replicated");
  case SplitKind::Feature:
    return QCoreApplication::translate(
        "SplitKind", "Only non-reduction dims other than the batch (channels, features, heads, space) are split");
  case SplitKind::Reduction:
    return QCoreApplication::translate("SplitKind",
                                       "Only summed-over dims are split: partial sums reduced in the forward pass");
  case SplitKind::Mixed:
    return QCoreApplication::translate("SplitKind", "Dims of different kinds are split (a device grid)");
  case SplitKind::Replicated:
    return QCoreApplication::translate("SplitKind", "Nothing is split: every device of the op's group runs it whole");
  }
  return {};
}

QColor splitKindColor(SplitKind kind) {
  switch (kind) {
  case SplitKind::Batch: return {0xa9, 0xcd, 0xf5};
  case SplitKind::Feature: return {0xf9, 0xcf, 0x98};
  case SplitKind::Reduction: return {0xf2, 0xa7, 0xa5};
  case SplitKind::Mixed: return {0xcd, 0xb6, 0xe6};
  case SplitKind::Replicated: return {0xe3, 0xe3, 0xe3};
  }
  return Qt::white;
}

QColor differsColor() {
  return {0xb8, 0xe8, 0xc4};
}

std::vector<std::vector<bool>> batchDims(const graph::Graph& g, const std::vector<graph::OpSemantics>& semantics) {
  std::vector<std::vector<bool>> batch(g.ops().size());
  std::vector<std::vector<bool>> tensorBatch(g.tensors().size()); // per tensor dim
  auto mark = [&](graph::TensorId t, std::size_t dim) {
    auto& dims = tensorBatch[static_cast<std::size_t>(t)];
    if (dims.size() <= dim) {
      dims.resize(dim + 1, false);
    }
    dims[dim] = true;
  };
  for (graph::TensorId t : g.graph_inputs) {
    if (!g.tensor(t).shape.empty()) {
      mark(t, 0);
    }
  }
  for (graph::OpId id : g.topological_order()) {
    const auto& op = g.op(id);
    const auto& s = semantics[static_cast<std::size_t>(id)];
    auto& mine = batch[static_cast<std::size_t>(id)];
    mine.assign(s.dims.size(), false);
    for (std::size_t i = 0; i < op.inputs.size() && i < s.inputs.size(); ++i) {
      if (op.inputs[i] == graph::no_tensor) {
        continue;
      }
      const auto& marked = tensorBatch[static_cast<std::size_t>(op.inputs[i])];
      for (std::size_t j = 0; j < marked.size() && j < s.inputs[i].dims.size(); ++j) {
        const int d = s.inputs[i].dims[j];
        if (marked[j] && d >= 0 && !s.dims[static_cast<std::size_t>(d)].reduction) {
          mine[static_cast<std::size_t>(d)] = true;
        }
      }
    }
    for (std::size_t o = 0; o < op.outputs.size() && o < s.outputs.size(); ++o) {
      if (op.outputs[o] == graph::no_tensor) {
        continue;
      }
      const auto& dims = s.outputs[o].dims;
      for (std::size_t j = 0; j < dims.size(); ++j) {
        if (dims[j] >= 0 && mine[static_cast<std::size_t>(dims[j])]) {
          mark(op.outputs[o], j);
        }
      }
    }
  }
  return batch;
}

SplitKind splitKind(const sharding::Config& config, const graph::OpSemantics& semantics,
                    const std::vector<bool>& batch) {
  bool kinds[SplitKindCount] = {};
  for (std::size_t d = 0; d < config.splits.size() && d < semantics.dims.size(); ++d) {
    if (config.splits[d] <= 1) {
      continue;
    }
    const bool isBatch = d < batch.size() && batch[d];
    const SplitKind k = isBatch                       ? SplitKind::Batch
                        : semantics.dims[d].reduction ? SplitKind::Reduction
                                                      : SplitKind::Feature;
    kinds[static_cast<int>(k)] = true;
  }
  const int count = static_cast<int>(kinds[0]) + static_cast<int>(kinds[1]) + static_cast<int>(kinds[2]);
  if (count == 0) {
    return SplitKind::Replicated;
  }
  if (count > 1) {
    return SplitKind::Mixed;
  }
  return kinds[0] ? SplitKind::Batch : kinds[1] ? SplitKind::Feature : SplitKind::Reduction;
}

} // namespace partita::gui
