#pragma once

// The families' entry points, one file each; optimizer.cpp wraps them as Optimizers.

#include "search/builder.h"

namespace partita::search::detail {

strategy::Strategy data_parallel(const Request& r);
strategy::Strategy model_parallel(const Request& r);
strategy::Strategy one_weird_trick(const Request& r);
strategy::Strategy megatron(const Request& r);
// What Megatron's decisions came to: column- and row-parallel products, and the ops where a
// tensor-parallel split could not be carried on (a view whose dims do not divide by t: fewer
// attention heads than devices), so that their input is gathered there.
struct MegatronTally {
  int column = 0, row = 0;
  std::vector<graph::OpId> lost;
  std::string lost_text(const Builder& b, int t) const; // "" when none
};
// Megatron's decision for one op on the builder's current device pool (t-way tensor parallel,
// data parallel over the rest of the pool).
void megatron_op(Builder& b, graph::OpId id, int t, MegatronTally& tally);
int tensor_parallel_degree(const Request& r);
strategy::Strategy hybrid(const Request& r);
strategy::Strategy gholami(const Request& r);
// `stage_layouts`, where given, receives the per-layer search's layouts of the plan returned with
// stage_layout "searched" (Request::stage_layouts' form), for a caller that plans them again.
strategy::Strategy pipeline(const Request& r, std::vector<std::vector<sharding::Config>>* stage_layouts = nullptr);
// What each piece of a pipeline receives where it starts: per distinct boundary a row (per op of
// the order, in seconds, what a piece starting at that op receives from the piece before it), and
// per piece its row (piece 0's is not read). Boundaries differ by the devices they join: two
// stages inside a node, on two nodes, of two kinds of device.
struct PieceReceives {
  std::vector<std::vector<double>> rows;
  std::vector<int> row_of_piece;
};
// The contiguous partition of the ops into kind_of_piece.size() non-empty pieces minimizing the
// slowest, where op i costs times[kind_of_piece[v]][i] in piece v and piece v > 0 also costs what
// it receives where it starts (no rows: nothing). Returns the start of every piece after the
// first. Over one row of times with one row of receives for every piece (or none), the fewest
// pieces within the least bound, split further where fewer than asked; else exact (every piece
// non-empty).
std::vector<int> balanced_cuts(const std::vector<std::vector<double>>& times, const std::vector<int>& kind_of_piece,
                               const PieceReceives& receive);
// Per op of `order`: whether another op of the same type and tensor shapes occurs (the ops of
// repeated blocks, a transformer's layers).
std::vector<bool> repeated_ops(const graph::Graph& g, const std::vector<graph::OpId>& order);
strategy::Strategy group_hybrid(const Request& r);
strategy::Strategy given(const Request& r);
strategy::Strategy gholami_with_grid(const Request& r, int pr, int pc);
strategy::Strategy hybrid_with_group(const Request& r, int group, const std::string& family);

} // namespace partita::search::detail
