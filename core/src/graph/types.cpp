#include "partita/graph/types.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <limits>

namespace partita::graph {

std::int64_t dtype_size(DType t) {
  switch (t) {
  case DType::f64:
  case DType::i64: return 8;
  case DType::f32:
  case DType::i32: return 4;
  case DType::f16:
  case DType::bf16:
  case DType::i16: return 2;
  case DType::f8:
  case DType::i8:
  case DType::u8:
  case DType::boolean: return 1;
  case DType::string:
  case DType::unknown: return 0;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
  case DType::f32: return "f32";
  case DType::f64: return "f64";
  case DType::f16: return "f16";
  case DType::bf16: return "bf16";
  case DType::f8: return "f8";
  case DType::i64: return "i64";
  case DType::i32: return "i32";
  case DType::i16: return "i16";
  case DType::i8: return "i8";
  case DType::u8: return "u8";
  case DType::boolean: return "bool";
  case DType::string: return "string";
  case DType::unknown: return "unknown";
  }
  return "unknown";
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16 || t == DType::f8;
}

std::string_view role_name(TensorRole r) {
  switch (r) {
  case TensorRole::activation: return "activation";
  case TensorRole::input: return "input";
  case TensorRole::parameter: return "parameter";
  case TensorRole::state: return "state";
  case TensorRole::constant: return "constant";
  }
  return "activation";
}

std::int64_t element_count(const Shape& s, std::string_view what) {
  std::int64_t n = 1;
  for (std::int64_t d : s) {
    if (d < 0) {
      throw Error(fmt::format("{}: dimension {} is negative in shape {}", what, d, shape_string(s)));
    }
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) {
      throw Error(fmt::format("{}: element count of shape {} overflows int64", what, shape_string(s)));
    }
    n *= d;
  }
  return n;
}

std::string shape_string(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i != 0) {
      out += ",";
    }
    out += std::to_string(s[i]);
  }
  out += "]";
  return out;
}

} // namespace partita::graph
