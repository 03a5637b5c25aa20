#pragma once

// Fused projections laid out part by part (a weight's layout is ours to choose).
//
// A fused projection computes several equal parts side by side with one weight and splits them
// apart after: GPT-2's attention computes [q | k | v] = x · W_qkv and splits the last axis in
// three. Split as written, a device that holds a column block of the product holds a block of q
// (or of k and v) but not the same columns of all three, so tensor parallelism must move data
// between the product and the attention. Megatron-LM lays the fused weight out head by head
// instead; permuting a weight's columns costs nothing. This pass does the same to the graph: the
// product's last axis of P parts of C columns is read as [C, P] (a Reshape, a view), the Split
// takes the P axis apart and a Squeeze drops it, so that C, the axis the heads come from, can be
// split over devices with every device holding the same columns of every part.
//
// The model computes the same function up to that permutation of its weights' columns. Only
// splits whose input is computed column by column from parameters that nothing else reads are
// rewritten: there the permutation is free. A split of data, or of a tensor another op also
// reads, keeps its meaning and is left as it is.

#include "partita/graph/graph.h"

namespace partita::onnx_import {

// Rewrites every such Split of `g` (before validation and gradient marking; roles settled).
// Returns how many were rewritten.
int interleave_fused_projections(graph::Graph& g);

} // namespace partita::onnx_import
