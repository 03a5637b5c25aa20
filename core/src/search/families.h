#pragma once

// The families' entry points, one file each; optimizer.cpp wraps them as Optimizers.

#include "search/builder.h"

namespace partita::search::detail {

strategy::Strategy data_parallel(const Request& r);
strategy::Strategy model_parallel(const Request& r);
strategy::Strategy one_weird_trick(const Request& r);
strategy::Strategy megatron(const Request& r);
// Megatron's decision for one op on the builder's current device pool (t-way tensor parallel,
// data parallel over the rest of the pool); counts column- and row-parallel products.
void megatron_op(Builder& b, graph::OpId id, int t, int& column, int& row);
int tensor_parallel_degree(const Request& r);
strategy::Strategy hybrid(const Request& r);
strategy::Strategy gholami(const Request& r);
strategy::Strategy pipeline(const Request& r);
strategy::Strategy group_hybrid(const Request& r);
strategy::Strategy given(const Request& r);
strategy::Strategy gholami_with_grid(const Request& r, int pr, int pc);
strategy::Strategy hybrid_with_group(const Request& r, int group, const std::string& family);

} // namespace partita::search::detail
