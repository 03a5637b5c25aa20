#include "onnx/const_tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace partita::onnx_import::detail {
namespace {

using TP = onnx::TensorProto;

double half_to_double(std::uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) != 0 ? -1.0 : 1.0;
  if (exponent == 0) {
    return sign * std::ldexp(mantissa, -24);
  }
  if (exponent == 31) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  }
  return sign * std::ldexp(mantissa + 1024, exponent - 25);
}

double bfloat_to_double(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f = 0;
  std::memcpy(&f, &bits, 4);
  return f;
}

int width_of(int elem) {
  switch (elem) {
  case TP::INT64:
  case TP::UINT64:
  case TP::DOUBLE: return 8;
  case TP::INT32:
  case TP::UINT32:
  case TP::FLOAT: return 4;
  case TP::INT16:
  case TP::UINT16:
  case TP::FLOAT16:
  case TP::BFLOAT16: return 2;
  case TP::INT8:
  case TP::UINT8:
  case TP::BOOL: return 1;
  default: return 0;
  }
}

// One element of raw little-endian bytes.
void read_raw(const char* p, int elem, ConstTensor& out) {
  switch (elem) {
  case TP::INT64: {
    std::int64_t v = 0;
    std::memcpy(&v, p, 8);
    out.ints.push_back(v);
    return;
  }
  case TP::UINT64: {
    std::uint64_t v = 0;
    std::memcpy(&v, p, 8);
    out.ints.push_back(static_cast<std::int64_t>(v));
    return;
  }
  case TP::INT32: {
    std::int32_t v = 0;
    std::memcpy(&v, p, 4);
    out.ints.push_back(v);
    return;
  }
  case TP::UINT32: {
    std::uint32_t v = 0;
    std::memcpy(&v, p, 4);
    out.ints.push_back(v);
    return;
  }
  case TP::INT16: {
    std::int16_t v = 0;
    std::memcpy(&v, p, 2);
    out.ints.push_back(v);
    return;
  }
  case TP::UINT16: {
    std::uint16_t v = 0;
    std::memcpy(&v, p, 2);
    out.ints.push_back(v);
    return;
  }
  case TP::INT8: out.ints.push_back(static_cast<std::int8_t>(*p)); return;
  case TP::UINT8: out.ints.push_back(static_cast<std::uint8_t>(*p)); return;
  case TP::BOOL: out.ints.push_back(*p != 0 ? 1 : 0); return;
  case TP::FLOAT: {
    float v = 0;
    std::memcpy(&v, p, 4);
    out.floats.push_back(v);
    return;
  }
  case TP::DOUBLE: {
    double v = 0;
    std::memcpy(&v, p, 8);
    out.floats.push_back(v);
    return;
  }
  case TP::FLOAT16:
  case TP::BFLOAT16: {
    std::uint16_t v = 0;
    std::memcpy(&v, p, 2);
    out.floats.push_back(elem == TP::FLOAT16 ? half_to_double(v) : bfloat_to_double(v));
    return;
  }
  default: return;
  }
}

} // namespace

bool is_float_type(int elem) {
  return elem == TP::FLOAT || elem == TP::DOUBLE || elem == TP::FLOAT16 || elem == TP::BFLOAT16;
}

bool is_int_type(int elem) {
  return elem == TP::INT64 || elem == TP::INT32 || elem == TP::INT16 || elem == TP::INT8 || elem == TP::UINT64 ||
         elem == TP::UINT32 || elem == TP::UINT16 || elem == TP::UINT8 || elem == TP::BOOL;
}

std::string type_name(int elem) {
  return TP::DataType_IsValid(elem) ? TP::DataType_Name(static_cast<TP::DataType>(elem)) : fmt::format("type {}", elem);
}

bool ConstTensor::is_float() const {
  return is_float_type(elem_type);
}

double ConstTensor::as_double(std::int64_t i) const {
  const auto k = static_cast<std::size_t>(i);
  return is_float() ? floats[k] : static_cast<double>(ints[k]);
}

std::int64_t ConstTensor::as_int(std::int64_t i) const {
  const auto k = static_cast<std::size_t>(i);
  if (!is_float()) {
    return ints[k];
  }
  const double v = floats[k];
  // 2^63 is exactly representable; anything at or past it (or NaN) has no int64 value.
  if (!(std::fabs(v) < 9.2233720368547758e18)) {
    throw FoldError(fmt::format("the value {} has no integer equivalent", v));
  }
  return static_cast<std::int64_t>(v);
}

ConstTensor ConstTensor::take(const std::vector<std::int64_t>& indices, Dims out_dims) const {
  ConstTensor out;
  out.elem_type = elem_type;
  out.dims = std::move(out_dims);
  if (is_float()) {
    out.floats.reserve(indices.size());
    for (auto i : indices) {
      out.floats.push_back(floats[static_cast<std::size_t>(i)]);
    }
  } else {
    out.ints.reserve(indices.size());
    for (auto i : indices) {
      out.ints.push_back(ints[static_cast<std::size_t>(i)]);
    }
  }
  return out;
}

std::int64_t checked_count(const Dims& dims) {
  std::int64_t n = 1;
  for (auto d : dims) {
    if (d < 0) {
      throw FoldError(fmt::format("dimension {} is negative", d));
    }
    if (d != 0 && n > max_fold_elements / d) {
      throw FoldDeclined(fmt::format("a tensor of shape {} is larger than the {} elements the folder evaluates",
                                     dims_text(dims), max_fold_elements));
    }
    n *= d;
  }
  return n;
}

Dims strides_of(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) {
    s[i - 1] = s[i] * dims[i];
  }
  return s;
}

bool raw_payload_fits(const onnx::TensorProto& t) {
  if (!t.has_raw_data()) {
    return true;
  }
  const std::int64_t width = width_of(t.data_type());
  if (width <= 0) {
    return false;
  }
  std::int64_t n = width;
  for (auto d : t.dims()) {
    if (d < 0 || (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d)) {
      return false;
    }
    n *= d;
  }
  return static_cast<std::uint64_t>(n) == t.raw_data().size();
}

std::optional<ConstTensor> read_const(const onnx::TensorProto& t) {
  if (t.data_location() == TP::EXTERNAL || (!is_float_type(t.data_type()) && !is_int_type(t.data_type()))) {
    return std::nullopt;
  }
  ConstTensor out;
  out.elem_type = t.data_type();
  std::int64_t n = 1;
  for (auto d : t.dims()) {
    if (d < 0 || (d != 0 && n > max_fold_elements / d)) {
      return std::nullopt;
    }
    n *= d;
    out.dims.push_back(d);
  }
  const auto count = static_cast<std::size_t>(n);
  if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    const auto width = static_cast<std::size_t>(width_of(t.data_type()));
    if (raw.size() != width * count) {
      return std::nullopt; // dropped by the reader, or malformed
    }
    for (std::size_t i = 0; i < count; ++i) {
      read_raw(raw.data() + i * width, t.data_type(), out);
    }
  } else {
    switch (t.data_type()) {
    case TP::INT64: out.ints.assign(t.int64_data().begin(), t.int64_data().end()); break;
    case TP::UINT64:
    case TP::UINT32:
      for (auto v : t.uint64_data()) {
        out.ints.push_back(static_cast<std::int64_t>(v));
      }
      break;
    case TP::FLOAT: out.floats.assign(t.float_data().begin(), t.float_data().end()); break;
    case TP::DOUBLE: out.floats.assign(t.double_data().begin(), t.double_data().end()); break;
    case TP::FLOAT16:
    case TP::BFLOAT16:
      for (auto v : t.int32_data()) {
        const auto bits = static_cast<std::uint16_t>(v);
        out.floats.push_back(t.data_type() == TP::FLOAT16 ? half_to_double(bits) : bfloat_to_double(bits));
      }
      break;
    default: // int32, int16, int8, uint16, uint8, bool
      out.ints.assign(t.int32_data().begin(), t.int32_data().end());
      break;
    }
  }
  if (static_cast<std::size_t>(out.size()) != count) {
    return std::nullopt;
  }
  return out;
}

onnx::TensorProto to_proto(const ConstTensor& t, const std::string& name) {
  TP p;
  p.set_name(name);
  p.set_data_type(t.elem_type);
  for (auto d : t.dims) {
    p.add_dims(d);
  }
  switch (t.elem_type) {
  case TP::INT64:
    for (auto v : t.ints) {
      p.add_int64_data(v);
    }
    break;
  case TP::UINT64:
  case TP::UINT32:
    for (auto v : t.ints) {
      p.add_uint64_data(static_cast<std::uint64_t>(v));
    }
    break;
  case TP::FLOAT:
    for (auto v : t.floats) {
      p.add_float_data(static_cast<float>(v));
    }
    break;
  case TP::DOUBLE:
    for (auto v : t.floats) {
      p.add_double_data(v);
    }
    break;
  case TP::FLOAT16:
  case TP::BFLOAT16: break; // no inference rule reads them: the caller does not publish them
  default:
    for (auto v : t.ints) {
      p.add_int32_data(static_cast<std::int32_t>(v));
    }
    break;
  }
  return p;
}

Dims broadcast_dims(const Dims& a, const Dims& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Dims out(rank, 1);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x != y && x != 1 && y != 1) {
      throw FoldError(fmt::format("shapes {} and {} do not broadcast", dims_text(a), dims_text(b)));
    }
    out[i] = x == 1 ? y : x;
  }
  return out;
}

std::vector<std::int64_t> broadcast_indices(const Dims& from, const Dims& to) {
  const std::int64_t n = checked_count(to);
  const std::size_t rank = to.size();
  const std::size_t offset = rank - from.size();
  const Dims from_strides = strides_of(from);
  Dims step(rank, 0); // the source stride along each output axis, 0 where broadcast
  for (std::size_t i = offset; i < rank; ++i) {
    step[i] = from[i - offset] == 1 ? 0 : from_strides[i - offset];
  }
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(n));
  Dims counter(rank, 0);
  std::int64_t src = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    out.push_back(src);
    for (std::size_t i = rank; i-- > 0;) {
      if (++counter[i] < to[i]) {
        src += step[i];
        break;
      }
      src -= step[i] * (to[i] - 1);
      counter[i] = 0;
    }
  }
  return out;
}

std::string dims_text(const Dims& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

} // namespace partita::onnx_import::detail
