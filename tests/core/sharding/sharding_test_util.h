#pragma once

// Small graphs shared by the sharding tests.

#include "partita/graph/op_semantics.h"
#include "partita/sharding/config.h"
#include "test_support.h"

#include <string>
#include <utility>
#include <vector>

namespace partita::test {

// The fully-connected layer Y[b,n] = X[b,k] W[k,n] as a Gemm (whose dims are named
// m, n, k: m plays b), followed by a second one Z = Y W2 that reads Y. Sizes: b 8, k 16, n 12,
// and Z's n 10.
struct TwoLayers {
  graph::Graph g;
  graph::OpSemantics fc1, fc2;

  TwoLayers() {
    tensor(g, "x", {8, 16}, graph::TensorRole::input);
    tensor(g, "w1", {16, 12}, graph::TensorRole::parameter);
    tensor(g, "y", {8, 12});
    tensor(g, "w2", {12, 10}, graph::TensorRole::parameter);
    tensor(g, "z", {8, 10});
    fc1 = graph::describe(g, op(g, "Gemm", {"x", "w1"}, {"y"}));
    fc2 = graph::describe(g, op(g, "Gemm", {"y", "w2"}, {"z"}));
  }
};

inline sharding::Config config(const graph::OpSemantics& s, std::vector<std::pair<std::string, int>> splits) {
  return sharding::make_config(s, splits);
}

inline std::vector<int> iota_devices(int n, int first = 0) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(first + i);
  }
  return out;
}

} // namespace partita::test
