#pragma once

// What the hand-made families share: the model's semantics, which iteration dim of each op
// carries the batch, and "follow": a weightless op takes the layout its input arrives in, or the
// cheapest of a few alternatives, so that families only decide the ops that matter.

#include "partita/cluster/cluster.h"
#include "partita/cost/setup.h"
#include "partita/graph/error.h"
#include "partita/graph/op_semantics.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/strategy.h"

#include <fmt/format.h>

#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

namespace partita::search::detail {

class Builder {
public:
  explicit Builder(const Request& request, std::string family);

  const graph::Graph& graph() const { return *m_request.graph; }
  const cluster::Cluster& cluster() const { return *m_request.cluster; }
  const graph::OpSemantics& semantics(graph::OpId id) const { return m_facts->semantics[static_cast<std::size_t>(id)]; }
  const std::vector<graph::OpSemantics>& all_semantics() const { return m_facts->semantics; }
  // cost::cost_signature(graph(), id, semantics(id), Saved::kept), derived once.
  const std::string& cost_signature(graph::OpId id) const;
  // Equal for ops of equal cost signatures.
  int signature_id(graph::OpId id) const;
  // repeated_ops(graph(), order()), derived once.
  const std::vector<bool>& repeated() const;
  // Devices the current decisions place ops on (all of the request's by default; a pipeline
  // stage's while that stage is built).
  int devices() const { return static_cast<int>(m_pool.size()); }
  void set_pool(std::vector<int> devices) { m_pool = std::move(devices); }
  const std::vector<int>& pool() const { return m_pool; }
  const std::vector<graph::OpId>& order() const { return m_order; }

  // The iteration dim that carries the batch (propagated from dim 0 of the graph inputs), or -1.
  int batch_dim(graph::OpId id) const { return m_batch_dim[static_cast<std::size_t>(id)]; }

  // Splits `dim` of op `id` by the largest power of two <= min(factor, dim size); -1 leaves it whole.
  sharding::Config split(graph::OpId id, std::initializer_list<std::pair<int, int>> dim_factors) const;

  // Places `config` on the pool's devices (copies fill what the config does not split).
  void assign(graph::OpId id, const sharding::Config& config);
  // Places `config` on `devices` (whole copies of the grid; the rest of the list is left out).
  void assign_on(graph::OpId id, const sharding::Config& config, std::span<const int> devices);
  // Picks, for a weightless op, the cheapest of: its input's layout carried over, a batch split,
  // and replication (time of the op plus redistribution of its inputs).
  void follow(graph::OpId id);
  bool assigned(graph::OpId id) const { return m_assigned[static_cast<std::size_t>(id)]; }

  // The layout input `i` arrives in: its producer's output layout (nullopt when the input has no
  // producer, or one not assigned yet).
  std::optional<sharding::TensorLayout> arriving_layout(graph::OpId id, std::size_t input) const;
  // The layout this op's input `i` arrives in, carried over onto this op's dims (nullopt when the
  // input has no producer).
  std::optional<sharding::Config> carried_config(graph::OpId id, std::size_t input) const;

  // Time of op `id` under its current assignment, including input redistribution.
  double op_time(graph::OpId id) const;

  void check_cancel() const;
  void progress(double f) const;

  strategy::Strategy finish(std::string explanation);
  const Request& request() const { return m_request; }

private:
  const Request& m_request;
  std::string m_family;
  std::shared_ptr<const ModelFacts> m_facts;           // the request's, or the semantics derived here
  mutable std::vector<std::string> m_cost_signatures;  // without the request's facts: as asked
  mutable std::map<std::string, int> m_signature_ids;  // without the request's facts: as asked
  mutable std::optional<std::vector<bool>> m_repeated; // without the request's facts: when asked
  std::vector<graph::OpId> m_order;
  std::vector<int> m_batch_dim;
  std::vector<strategy::OpAssignment> m_ops;
  std::vector<bool> m_assigned;
  std::vector<int> m_pool;
  // op_time's parts, each priced once per builder (follow() weighs the same few layouts of every
  // layer's ops): an op's own time by its cost signature, configuration and devices; an input's
  // move by what input_redistribution reads (both ends' cost signatures, which hold the tensor's
  // shape, type, readers and gradient, the slots, both configurations and devices). Keys of ints,
  // the first 0 for an op and 1 for a move; device lists interned.
  struct KeyHash {
    std::size_t operator()(const std::vector<int>& key) const noexcept;
  };
  mutable std::unordered_map<std::vector<int>, double, KeyHash> m_times;
  mutable std::map<std::vector<int>, int> m_device_lists;
  mutable std::vector<int> m_key; // op_time's key, its capacity kept
  int device_list(const std::vector<int>& devices) const;
};

// A trainable parameter, or one seen through views and transposes (a tied LM head reads the
// embedding table through a Transpose): a weight of whatever reads it.
bool is_weight(const graph::Graph& g, graph::TensorId t);
// The op reads a weight (a "layer with weights").
bool has_weight(const graph::Graph& g, graph::OpId id);
// The op only views or moves a weight (the Transpose of a tied embedding table).
bool is_weight_view(const graph::Graph& g, const graph::OpSemantics& s, graph::OpId id);
// The non-reduction splittable dim that indexes both a parameter input and the output (Conv co,
// Gemm/MatMul n, embedding hidden), preferring the largest; -1 if none.
int feature_dim(const graph::Graph& g, const graph::OpSemantics& s, graph::OpId id);
// The reduction dim that indexes a parameter input (MatMul/Gemm k), -1 if none.
int weight_reduction_dim(const graph::Graph& g, const graph::OpSemantics& s, graph::OpId id);

// Per op, the iteration dim that carries the batch (dim 0 of every graph input, carried through the
// ops' tensor maps), or -1.
std::vector<int> batch_dims(const graph::Graph& g, const std::vector<graph::OpSemantics>& semantics,
                            const std::vector<graph::OpId>& order);

int floor_pow2(std::int64_t x);
// The largest f <= limit that divides `of` (1 when none above it does).
int largest_divisor_at_most(std::int64_t limit, int of);

// The group-size families (hybrid, ghp): builds a strategy for every group size g = 1, 2, 4, ...
// up to `max_group` that divides the devices, predicts each, and keeps the fastest. `table`
// lists the predicted iteration times ("g=1: 12.3 ms, g=2: ...") for the explanation.
struct GroupChoice {
  strategy::Strategy strategy;
  int group = 1;
  std::string table;
};
GroupChoice fastest_group(const Request& r, int max_group, const std::function<strategy::Strategy(int)>& make);

} // namespace partita::search::detail
