// Folding rules for elementwise arithmetic, comparison and logic (numpy broadcasting), Where,
// and the reductions. Integer arithmetic is exact and checked: an overflow or a division by zero
// is a FoldError, never undefined behaviour.

#include "onnx/fold_support.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace partita::onnx_import::detail {
namespace {

using TP = onnx::TensorProto;
constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();

template <typename IntOp, typename FloatOp>
ConstTensor binary(const ConstTensor& a, const ConstTensor& b, bool to_bool, IntOp int_op, FloatOp float_op) {
  if (a.is_float() != b.is_float()) {
    throw FoldError(fmt::format("the inputs are {} and {}", type_name(a.elem_type), type_name(b.elem_type)));
  }
  ConstTensor out;
  out.elem_type = to_bool ? static_cast<int>(TP::BOOL) : a.elem_type;
  out.dims = broadcast_dims(a.dims, b.dims);
  const auto ia = broadcast_indices(a.dims, out.dims);
  const auto ib = broadcast_indices(b.dims, out.dims);
  for (std::size_t k = 0; k < ia.size(); ++k) {
    const auto i = static_cast<std::size_t>(ia[k]);
    const auto j = static_cast<std::size_t>(ib[k]);
    if (a.is_float()) {
      const double r = float_op(a.floats[i], b.floats[j]);
      if (to_bool) {
        out.ints.push_back(r != 0 ? 1 : 0);
      } else {
        out.floats.push_back(round_to(out.elem_type, r));
      }
    } else {
      out.ints.push_back(wrap_to(out.elem_type, int_op(a.ints[i], b.ints[j])));
    }
  }
  return out;
}

template <typename IntOp, typename FloatOp> ConstTensor unary(const ConstTensor& x, IntOp int_op, FloatOp float_op) {
  ConstTensor out = x;
  for (auto& v : out.ints) {
    v = wrap_to(out.elem_type, int_op(v));
  }
  for (auto& v : out.floats) {
    v = round_to(out.elem_type, float_op(v));
  }
  return out;
}

std::int64_t add(std::int64_t x, std::int64_t y) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(x, y, &r)) {
    throw FoldError(fmt::format("{} + {} overflows int64", x, y));
  }
  return r;
}

std::int64_t sub(std::int64_t x, std::int64_t y) {
  std::int64_t r = 0;
  if (__builtin_sub_overflow(x, y, &r)) {
    throw FoldError(fmt::format("{} - {} overflows int64", x, y));
  }
  return r;
}

std::int64_t divide(std::int64_t x, std::int64_t y) {
  if (y == 0) {
    throw FoldError(fmt::format("integer division of {} by zero", x));
  }
  if (x == int64_min && y == -1) {
    throw FoldError(fmt::format("{} / -1 overflows int64", x));
  }
  return x / y; // truncates toward zero, as ONNX Runtime does
}

std::int64_t negate(std::int64_t x) {
  if (x == int64_min) {
    throw FoldError(fmt::format("-({}) overflows int64", x));
  }
  return -x;
}

ConstTensor fold_add(const FoldArgs& a) {
  return binary(a.at(0), a.at(1), false, add, [](double x, double y) { return x + y; });
}
ConstTensor fold_sub(const FoldArgs& a) {
  return binary(a.at(0), a.at(1), false, sub, [](double x, double y) { return x - y; });
}
ConstTensor fold_mul(const FoldArgs& a) {
  return binary(a.at(0), a.at(1), false, checked_mul, [](double x, double y) { return x * y; });
}
ConstTensor fold_div(const FoldArgs& a) {
  return binary(a.at(0), a.at(1), false, divide, [](double x, double y) { return x / y; });
}

ConstTensor fold_mod(const FoldArgs& a) {
  // fmod=0: the sign of the divisor (Python's %); fmod=1: the sign of the dividend (C's fmod).
  const bool c_style = attr_int(a.node, "fmod", 0) != 0;
  return binary(
      a.at(0), a.at(1), false,
      [c_style](std::int64_t x, std::int64_t y) {
        if (y == 0) {
          throw FoldError(fmt::format("integer modulo of {} by zero", x));
        }
        if (y == -1) {
          return std::int64_t{0};
        }
        const std::int64_t r = x % y;
        return !c_style && r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
      },
      [c_style](double x, double y) {
        const double r = std::fmod(x, y);
        return !c_style && r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
      });
}

// Min and Max take any number of inputs.
template <bool is_max> ConstTensor fold_extremum(const FoldArgs& a) {
  ConstTensor out = a.at(0);
  for (std::size_t i = 1; i < a.values.size(); ++i) {
    out = binary(
        out, a.at(i), false, [](std::int64_t x, std::int64_t y) { return is_max ? std::max(x, y) : std::min(x, y); },
        [](double x, double y) {
          return std::isnan(x) || std::isnan(y) ? x + y : is_max ? std::max(x, y) : std::min(x, y);
        });
  }
  return out;
}

template <typename Compare> ConstTensor compare(const FoldArgs& a, Compare c) {
  return binary(
      a.at(0), a.at(1), true, [c](std::int64_t x, std::int64_t y) { return std::int64_t{c(x, y) ? 1 : 0}; },
      [c](double x, double y) { return c(x, y) ? 1.0 : 0.0; });
}

ConstTensor fold_equal(const FoldArgs& a) {
  return compare(a, [](auto x, auto y) { return x == y; });
}
ConstTensor fold_less(const FoldArgs& a) {
  return compare(a, [](auto x, auto y) { return x < y; });
}
ConstTensor fold_less_or_equal(const FoldArgs& a) {
  return compare(a, [](auto x, auto y) { return x <= y; });
}
ConstTensor fold_greater(const FoldArgs& a) {
  return compare(a, [](auto x, auto y) { return x > y; });
}
ConstTensor fold_greater_or_equal(const FoldArgs& a) {
  return compare(a, [](auto x, auto y) { return x >= y; });
}

const ConstTensor& boolean(const FoldArgs& a, std::size_t i) {
  const ConstTensor& t = a.at(i);
  if (t.elem_type != TP::BOOL) {
    throw FoldError(fmt::format("input {} is {}, not BOOL", i, type_name(t.elem_type)));
  }
  return t;
}

template <typename Logic> ConstTensor logic(const FoldArgs& a, Logic l) {
  return binary(
      boolean(a, 0), boolean(a, 1), true,
      [l](std::int64_t x, std::int64_t y) { return std::int64_t{l(x != 0, y != 0)}; },
      [](double, double) { return 0.0; });
}

ConstTensor fold_and(const FoldArgs& a) {
  return logic(a, [](bool x, bool y) { return x && y; });
}
ConstTensor fold_or(const FoldArgs& a) {
  return logic(a, [](bool x, bool y) { return x || y; });
}
ConstTensor fold_xor(const FoldArgs& a) {
  return logic(a, [](bool x, bool y) { return x != y; });
}
ConstTensor fold_not(const FoldArgs& a) {
  return unary(
      boolean(a, 0), [](std::int64_t x) { return std::int64_t{x == 0 ? 1 : 0}; }, [](double x) { return x; });
}

ConstTensor fold_neg(const FoldArgs& a) {
  return unary(a.at(0), negate, [](double x) { return -x; });
}
ConstTensor fold_abs(const FoldArgs& a) {
  return unary(
      a.at(0), [](std::int64_t x) { return x < 0 ? negate(x) : x; }, [](double x) { return std::fabs(x); });
}

// Floor, Ceil and Sqrt are defined on floating tensors only.
const ConstTensor& floating(const FoldArgs& a) {
  const ConstTensor& t = a.at(0);
  if (!t.is_float()) {
    throw FoldError(fmt::format("input 0 is {}, not a floating type", type_name(t.elem_type)));
  }
  return t;
}
ConstTensor fold_floor(const FoldArgs& a) {
  return unary(
      floating(a), [](std::int64_t x) { return x; }, [](double x) { return std::floor(x); });
}
ConstTensor fold_ceil(const FoldArgs& a) {
  return unary(
      floating(a), [](std::int64_t x) { return x; }, [](double x) { return std::ceil(x); });
}
ConstTensor fold_sqrt(const FoldArgs& a) {
  return unary(
      floating(a), [](std::int64_t x) { return x; }, [](double x) { return std::sqrt(x); });
}

ConstTensor fold_where(const FoldArgs& a) {
  const ConstTensor& c = boolean(a, 0);
  const ConstTensor& x = a.at(1);
  const ConstTensor& y = a.at(2);
  if (x.is_float() != y.is_float()) {
    throw FoldError(fmt::format("the choices are {} and {}", type_name(x.elem_type), type_name(y.elem_type)));
  }
  const Dims dims = broadcast_dims(broadcast_dims(c.dims, x.dims), y.dims);
  const auto ic = broadcast_indices(c.dims, dims);
  const auto ix = broadcast_indices(x.dims, dims);
  const auto iy = broadcast_indices(y.dims, dims);
  ConstTensor out;
  out.elem_type = x.elem_type;
  out.dims = dims;
  for (std::size_t k = 0; k < ic.size(); ++k) {
    const bool pick_x = c.ints[static_cast<std::size_t>(ic[k])] != 0;
    const ConstTensor& from = pick_x ? x : y;
    const auto i = static_cast<std::size_t>(pick_x ? ix[k] : iy[k]);
    if (out.is_float()) {
      out.floats.push_back(from.floats[i]);
    } else {
      out.ints.push_back(from.ints[i]);
    }
  }
  return out;
}

enum class Reduction { sum, prod, max, min };

template <Reduction kind> ConstTensor fold_reduce(const FoldArgs& a) {
  const ConstTensor& x = a.at(0);
  const auto rank = static_cast<std::int64_t>(x.dims.size());
  const auto axes = a.axes(1);
  if ((!axes || axes->empty()) && attr_int(a.node, "noop_with_empty_axes", 0) != 0) {
    return x;
  }
  std::set<std::int64_t> reduced;
  for (std::int64_t d = 0; d < rank; ++d) {
    if (!axes || axes->empty()) {
      reduced.insert(d);
    }
  }
  for (auto axis : axes.value_or(Dims{})) {
    reduced.insert(normalize_axis(axis, rank, "axes"));
  }
  Dims kept = x.dims; // the output's dims with keepdims=1
  for (auto d : reduced) {
    kept[static_cast<std::size_t>(d)] = 1;
  }
  const std::int64_t count = checked_count(kept);
  if ((kind == Reduction::max || kind == Reduction::min) && x.size() == 0 && count > 0) {
    throw FoldDeclined("max or min over no elements");
  }
  // The output element that x's element k reduces into: reduced axes have size 1 in `kept`, so
  // this is numpy broadcasting of `kept` to x's shape.
  const auto target = broadcast_indices(kept, x.dims);
  ConstTensor out;
  out.elem_type = x.elem_type;
  std::vector<bool> seen(static_cast<std::size_t>(count), false);
  const double float_init = kind == Reduction::prod ? 1.0 : 0.0;
  const std::int64_t int_init = kind == Reduction::prod ? 1 : 0;
  if (x.is_float()) {
    out.floats.assign(static_cast<std::size_t>(count), float_init);
  } else {
    out.ints.assign(static_cast<std::size_t>(count), int_init);
  }
  for (std::size_t k = 0; k < target.size(); ++k) {
    const auto o = static_cast<std::size_t>(target[k]);
    const bool first = !seen[o];
    seen[o] = true;
    if (x.is_float()) {
      double& acc = out.floats[o];
      const double v = x.floats[k];
      acc = kind == Reduction::sum    ? acc + v
            : kind == Reduction::prod ? acc * v
            : first                   ? v
            : kind == Reduction::max  ? std::max(acc, v)
                                      : std::min(acc, v);
    } else {
      std::int64_t& acc = out.ints[o];
      const std::int64_t v = x.ints[k];
      acc = kind == Reduction::sum    ? add(acc, v)
            : kind == Reduction::prod ? checked_mul(acc, v)
            : first                   ? v
            : kind == Reduction::max  ? std::max(acc, v)
                                      : std::min(acc, v);
    }
  }
  if (attr_int(a.node, "keepdims", 1) != 0) {
    out.dims = kept;
  } else {
    for (std::int64_t d = 0; d < rank; ++d) {
      if (reduced.count(d) == 0) {
        out.dims.push_back(x.dims[static_cast<std::size_t>(d)]);
      }
    }
  }
  for (auto& v : out.floats) {
    v = round_to(out.elem_type, v);
  }
  for (auto& v : out.ints) {
    v = wrap_to(out.elem_type, v);
  }
  return out;
}

} // namespace

std::vector<std::pair<std::string, FoldFn>> math_rules() {
  return {
      {"Add", fold_add},
      {"Sub", fold_sub},
      {"Mul", fold_mul},
      {"Div", fold_div},
      {"Mod", fold_mod},
      {"Min", fold_extremum<false>},
      {"Max", fold_extremum<true>},
      {"Neg", fold_neg},
      {"Abs", fold_abs},
      {"Floor", fold_floor},
      {"Ceil", fold_ceil},
      {"Sqrt", fold_sqrt},
      {"Equal", fold_equal},
      {"Less", fold_less},
      {"LessOrEqual", fold_less_or_equal},
      {"Greater", fold_greater},
      {"GreaterOrEqual", fold_greater_or_equal},
      {"Not", fold_not},
      {"And", fold_and},
      {"Or", fold_or},
      {"Xor", fold_xor},
      {"Where", fold_where},
      {"ReduceSum", fold_reduce<Reduction::sum>},
      {"ReduceProd", fold_reduce<Reduction::prod>},
      {"ReduceMax", fold_reduce<Reduction::max>},
      {"ReduceMin", fold_reduce<Reduction::min>},
  };
}

} // namespace partita::onnx_import::detail
