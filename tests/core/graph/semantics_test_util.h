#pragma once

// Assertions shared by the op-description tests.

#include "partita/graph/op_semantics.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace partita::test {

// The index of iteration dim `name`, failing the test when absent.
inline int dim_index(const graph::OpSemantics& s, const std::string& name) {
  const int d = s.find_dim(name);
  EXPECT_GE(d, 0) << "no iteration dim '" << name << "'";
  return d;
}

// Iteration dim names in order.
inline std::vector<std::string> dim_names(const graph::OpSemantics& s) {
  std::vector<std::string> out;
  for (const auto& d : s.dims) {
    out.push_back(d.name);
  }
  return out;
}

// A tensor map written with dim names ("" for -1), for readable expectations.
inline std::vector<int> dims_of(const graph::OpSemantics& s, const std::vector<std::string>& names) {
  std::vector<int> out;
  for (const auto& n : names) {
    out.push_back(n.empty() ? -1 : dim_index(s, n));
  }
  return out;
}

// Checks size, reduction and splittable of one dim.
inline void expect_dim(const graph::OpSemantics& s, const std::string& name, std::int64_t size, bool reduction,
                       bool splittable) {
  const int d = dim_index(s, name);
  if (d < 0) {
    return;
  }
  const auto& dim = s.dims[static_cast<std::size_t>(d)];
  EXPECT_EQ(dim.size, size) << name;
  EXPECT_EQ(dim.reduction, reduction) << name;
  EXPECT_EQ(dim.splittable, splittable) << name;
}

} // namespace partita::test
