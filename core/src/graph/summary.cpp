#include "partita/graph/summary.h"

#include <fmt/format.h>

#include <set>

namespace partita::graph {

ModelSummary summarize(const Graph& g) {
  ModelSummary m;
  m.model = g.name;
  std::set<TensorId> counted;
  for (OpId id : g.topological_order()) {
    const Op& op = g.op(id);
    const OpSemantics s = describe(g, id);
    LayerRow row;
    row.op = id;
    row.name = op.name;
    row.type = op.type;
    row.op_class = s.op_class;
    for (TensorId t : op.outputs) {
      if (t != no_tensor) {
        row.output_shape = g.tensor(t).shape;
        break;
      }
    }
    for (TensorId t : op.inputs) {
      if (t != no_tensor && g.tensor(t).role == TensorRole::parameter && counted.insert(t).second) {
        row.params += g.tensor(t).elements();
        m.param_bytes += g.tensor(t).bytes();
      }
    }
    row.macs = s.macs;
    row.fwd_flops = s.fwd_flops;
    row.bwd_flops = s.bwd_data_flops + s.bwd_weight_flops;
    for (TensorId t : op.outputs) {
      if (t != no_tensor) {
        row.activation_bytes += g.tensor(t).bytes();
      }
    }
    row.opaque_reason = s.opaque_reason;
    if (s.op_class == OpClass::opaque) {
      m.opaque_ops.push_back(fmt::format("{} ({}): {}", op.name, op.type, s.opaque_reason));
    }
    m.params += row.params;
    m.macs += row.macs;
    m.fwd_flops += row.fwd_flops;
    m.bwd_flops += row.bwd_flops;
    m.activation_bytes += row.activation_bytes;
    m.rows.push_back(std::move(row));
  }
  return m;
}

} // namespace partita::graph
