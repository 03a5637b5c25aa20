#include "onnx/fold_support.h"

#include <fmt/format.h>

namespace partita::onnx_import::detail {

using TP = onnx::TensorProto;

const ConstTensor& FoldArgs::at(std::size_t i) const {
  if (!present(i)) {
    throw FoldError(fmt::format("input {} is missing", i));
  }
  return *values[i];
}

const ConstTensor& FoldArgs::integers(std::size_t i, const char* what) const {
  const ConstTensor& t = at(i);
  if (t.is_float()) {
    throw FoldError(fmt::format("input {} ({}) is {}, not an integer tensor", i, what, type_name(t.elem_type)));
  }
  return t;
}

const ConstTensor& FoldArgs::scalar(std::size_t i, const char* what) const {
  const ConstTensor& t = at(i);
  if (t.size() != 1) {
    throw FoldError(fmt::format("input {} ({}) has shape {}, not a single value", i, what, dims_text(t.dims)));
  }
  return t;
}

std::optional<Dims> FoldArgs::axes(std::size_t i) const {
  if (auto a = attr_ints(node, "axes")) {
    return a;
  }
  if (present(i)) {
    return integers(i, "axes").ints;
  }
  return std::nullopt;
}

bool FoldArgs::has_shape(std::size_t i) const {
  if (i >= types.size() || types[i] == nullptr || !types[i]->has_tensor_type() ||
      !types[i]->tensor_type().has_shape()) {
    return false;
  }
  for (const auto& d : types[i]->tensor_type().shape().dim()) {
    if (!d.has_dim_value() || d.dim_value() < 0) {
      return false;
    }
  }
  return true;
}

Dims FoldArgs::shape(std::size_t i) const {
  if (!has_shape(i)) {
    throw FoldDeclined("the input's shape is not known");
  }
  Dims d;
  for (const auto& x : types[i]->tensor_type().shape().dim()) {
    d.push_back(x.dim_value());
  }
  return d;
}

std::int64_t attr_int(const onnx::NodeProto& node, const std::string& name, std::int64_t fallback) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) {
      return a.i();
    }
  }
  return fallback;
}

std::optional<Dims> attr_ints(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) {
      return Dims(a.ints().begin(), a.ints().end());
    }
  }
  return std::nullopt;
}

ConstTensor int64_tensor(Dims dims, std::vector<std::int64_t> values) {
  ConstTensor t;
  t.elem_type = TP::INT64;
  t.dims = std::move(dims);
  t.ints = std::move(values);
  return t;
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw FoldError(fmt::format("{} * {} overflows int64", a, b));
  }
  return r;
}

std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank) {
    throw FoldError(fmt::format("{} {} is out of range for rank {}", what, axis, rank));
  }
  return axis < 0 ? axis + rank : axis;
}

double round_to(int elem_type, double v) {
  return elem_type == TP::FLOAT ? static_cast<float>(v) : v;
}

std::int64_t wrap_to(int elem_type, std::int64_t v) {
  switch (elem_type) {
  case TP::INT32: return static_cast<std::int32_t>(v);
  case TP::UINT32: return static_cast<std::uint32_t>(v);
  case TP::INT16: return static_cast<std::int16_t>(v);
  case TP::UINT16: return static_cast<std::uint16_t>(v);
  case TP::INT8: return static_cast<std::int8_t>(v);
  case TP::UINT8: return static_cast<std::uint8_t>(v);
  case TP::BOOL: return v != 0 ? 1 : 0;
  default: return v;
  }
}

} // namespace partita::onnx_import::detail
