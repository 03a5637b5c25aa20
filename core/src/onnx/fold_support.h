#pragma once

// What the folding rules (constant_folding.cpp, fold_math.cpp) share: their arguments, attribute
// readers and checked integer arithmetic. Private to the folder.

#include "onnx/const_tensor.h"

#include <onnx/onnx_pb.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace partita::onnx_import::detail {

struct FoldArgs {
  const onnx::NodeProto& node;
  const std::vector<const ConstTensor*>& values;
  const std::vector<const onnx::TypeProto*>& types;

  bool present(std::size_t i) const { return i < values.size() && values[i] != nullptr; }
  // Input i's contents; FoldError when absent.
  const ConstTensor& at(std::size_t i) const;
  // Input i, which must hold integers (`what` names it in the error).
  const ConstTensor& integers(std::size_t i, const char* what) const;
  // Input i, which must hold one element.
  const ConstTensor& scalar(std::size_t i, const char* what) const;
  // Axes from the 'axes' attribute (older opsets) or from input i (newer); nullopt when neither.
  std::optional<Dims> axes(std::size_t i) const;
  bool has_shape(std::size_t i) const;
  Dims shape(std::size_t i) const;
};

std::int64_t attr_int(const onnx::NodeProto& node, const std::string& name, std::int64_t fallback);
std::optional<Dims> attr_ints(const onnx::NodeProto& node, const std::string& name);

ConstTensor int64_tensor(Dims dims, std::vector<std::int64_t> values);
// FoldError on overflow.
std::int64_t checked_mul(std::int64_t a, std::int64_t b);
// Axis in [-rank, rank) made non-negative; FoldError naming `what` otherwise.
std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank, const char* what);
// A value as the element type stores it: float rounds to single precision.
double round_to(int elem_type, double v);
// An integer as the element type stores it (int32 wraps as a C cast does, bool is 0/1).
std::int64_t wrap_to(int elem_type, std::int64_t v);

using FoldFn = ConstTensor (*)(const FoldArgs&);
// Elementwise arithmetic, comparison and logic, Where, and the reductions (fold_math.cpp).
std::vector<std::pair<std::string, FoldFn>> math_rules();

} // namespace partita::onnx_import::detail
