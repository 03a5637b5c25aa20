#pragma once

// A small constant tensor as the constant folder (constant_folding.h) reads and computes it:
// integer and bool contents held exactly as int64, floating contents as double.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace partita::onnx_import::detail {

// The folder reads and makes tensors of at most this many elements: shape computations are a
// few dozen values, and the cap keeps a Range or an Expand from allocating without bound (and
// keeps weights, which are larger, out of the folder).
inline constexpr std::int64_t max_fold_elements = 64 * 1024;

// Thrown by a folding rule whose inputs are known but wrong (an index out of range, shapes that
// do not match); the caller adds the node's name and op type.
struct FoldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown where the folder declines to evaluate (a result over max_fold_elements, a type it does
// not hold): the value stays unknown, which is not an error.
struct FoldDeclined : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Dims = std::vector<std::int64_t>;

struct ConstTensor {
  int elem_type = onnx::TensorProto::UNDEFINED; // onnx::TensorProto::DataType
  Dims dims;
  std::vector<std::int64_t> ints; // integer and bool types
  std::vector<double> floats;     // floating types

  bool is_float() const;
  std::int64_t size() const { return static_cast<std::int64_t>(is_float() ? floats.size() : ints.size()); }
  // Element i converted (floats truncated toward zero, bools 0/1).
  double as_double(std::int64_t i) const;
  std::int64_t as_int(std::int64_t i) const;
  // The elements at `indices`, in that order, with the given dims.
  ConstTensor take(const std::vector<std::int64_t>& indices, Dims out_dims) const;
};

bool is_float_type(int elem);
// Integer or bool types (what ConstTensor holds in `ints`).
bool is_int_type(int elem);
std::string type_name(int elem);

// Product of dims; throws FoldDeclined past max_fold_elements, FoldError for a negative dim.
std::int64_t checked_count(const Dims& dims);
// Row-major strides of dims.
Dims strides_of(const Dims& dims);

// Whether a tensor's raw bytes, where it has them, are exactly its dims' elements at its type's
// width (true without raw bytes). libonnx's inference copies raw bytes into a vector sized by
// their count and reads them unchecked: a truncated payload must not reach it.
bool raw_payload_fits(const onnx::TensorProto& t);
// The contents of an initializer or Constant value, when stored inline, of a supported type,
// and within max_fold_elements; nullopt otherwise (external data, payloads the reader dropped).
std::optional<ConstTensor> read_const(const onnx::TensorProto& t);
// As libonnx's inference reads constants (typed fields, not raw bytes).
onnx::TensorProto to_proto(const ConstTensor& t, const std::string& name);

// numpy broadcasting of shapes; throws FoldError naming both when they do not broadcast.
Dims broadcast_dims(const Dims& a, const Dims& b);
// For each element of a tensor of shape `to`, the index of the element of a tensor of shape
// `from` (broadcast to `to`) that it reads.
std::vector<std::int64_t> broadcast_indices(const Dims& from, const Dims& to);

std::string dims_text(const Dims& dims);

} // namespace partita::onnx_import::detail
