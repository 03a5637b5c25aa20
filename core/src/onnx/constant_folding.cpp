#include "onnx/constant_folding.h"

#include "onnx/fold_support.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>

namespace partita::onnx_import::detail {
namespace {

using TP = onnx::TensorProto;

// ---- Shapes and metadata --------------------------------------------------------------------

ConstTensor fold_constant(const FoldArgs& a) {
  for (const auto& attr : a.node.attribute()) {
    if (attr.name() == "value") {
      auto t = read_const(attr.t());
      if (!t) {
        throw FoldDeclined("the value is not a small inline tensor");
      }
      return *std::move(t);
    }
    if (attr.name() == "value_int") {
      return int64_tensor({}, {attr.i()});
    }
    if (attr.name() == "value_ints") {
      return int64_tensor({attr.ints_size()}, {attr.ints().begin(), attr.ints().end()});
    }
    if (attr.name() == "value_float" || attr.name() == "value_floats") {
      ConstTensor t;
      t.elem_type = TP::FLOAT;
      if (attr.name() == "value_float") {
        t.floats = {attr.f()};
      } else {
        t.dims = {attr.floats_size()};
        t.floats.assign(attr.floats().begin(), attr.floats().end());
      }
      return t;
    }
  }
  throw FoldDeclined("no numeric value");
}

ConstTensor fold_shape(const FoldArgs& a) {
  const Dims dims = a.shape(0);
  const auto rank = static_cast<std::int64_t>(dims.size());
  const auto clamp = [rank](std::int64_t v) { return std::clamp(v < 0 ? v + rank : v, std::int64_t{0}, rank); };
  const std::int64_t start = clamp(attr_int(a.node, "start", 0));
  const std::int64_t end = clamp(attr_int(a.node, "end", rank));
  std::vector<std::int64_t> v;
  for (std::int64_t i = start; i < end; ++i) {
    v.push_back(dims[static_cast<std::size_t>(i)]);
  }
  const auto length = static_cast<std::int64_t>(v.size());
  return int64_tensor({length}, std::move(v));
}

ConstTensor fold_size(const FoldArgs& a) {
  std::int64_t n = 1;
  for (auto d : a.shape(0)) {
    n = checked_mul(n, d);
  }
  return int64_tensor({}, {n});
}

ConstTensor fold_identity(const FoldArgs& a) {
  return a.at(0);
}

ConstTensor fold_cast(const FoldArgs& a) {
  const int to = static_cast<int>(attr_int(a.node, "to", TP::UNDEFINED));
  if (!is_float_type(to) && !is_int_type(to)) {
    throw FoldDeclined("cast to a type the folder does not hold");
  }
  const ConstTensor& x = a.at(0);
  ConstTensor out;
  out.elem_type = to;
  out.dims = x.dims;
  for (std::int64_t i = 0; i < x.size(); ++i) {
    if (is_float_type(to)) {
      out.floats.push_back(round_to(to, x.as_double(i)));
    } else if (to == TP::BOOL) {
      out.ints.push_back(x.as_double(i) != 0 ? 1 : 0);
    } else {
      try {
        out.ints.push_back(wrap_to(to, x.as_int(i)));
      } catch (const FoldError&) {
        // NaN or infinity (a -inf mask element, say): ONNX leaves the result undefined, so the
        // value stays unknown rather than failing the import.
        throw FoldDeclined("a value out of the integer range");
      }
    }
  }
  return out;
}

// ---- Movement: every output element is some input element ------------------------------

ConstTensor fold_gather(const FoldArgs& a) {
  const ConstTensor& data = a.at(0);
  const ConstTensor& idx = a.integers(1, "indices");
  const auto rank = static_cast<std::int64_t>(data.dims.size());
  if (rank == 0) {
    throw FoldError("the data is a scalar, which has no axis to gather along");
  }
  const auto axis = static_cast<std::size_t>(normalize_axis(attr_int(a.node, "axis", 0), rank, "axis"));
  const std::int64_t extent = data.dims[axis];
  Dims out_dims(data.dims.begin(), data.dims.begin() + static_cast<std::ptrdiff_t>(axis));
  out_dims.insert(out_dims.end(), idx.dims.begin(), idx.dims.end());
  out_dims.insert(out_dims.end(), data.dims.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.dims.end());
  checked_count(out_dims);
  std::int64_t outer = 1;
  for (std::size_t i = 0; i < axis; ++i) {
    outer *= data.dims[i];
  }
  const std::int64_t inner = strides_of(data.dims)[axis];
  std::vector<std::int64_t> src;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (auto j : idx.ints) {
      if (j < -extent || j >= extent) {
        throw FoldError(fmt::format("index {} is out of range for axis {} of size {} (data shape {})", j, axis, extent,
                                    dims_text(data.dims)));
      }
      const std::int64_t row = j < 0 ? j + extent : j;
      for (std::int64_t k = 0; k < inner; ++k) {
        src.push_back((o * extent + row) * inner + k);
      }
    }
  }
  return data.take(src, std::move(out_dims));
}

ConstTensor fold_slice(const FoldArgs& a) {
  const ConstTensor& data = a.at(0);
  const auto rank = static_cast<std::int64_t>(data.dims.size());
  Dims starts;
  Dims ends;
  std::optional<Dims> axes;
  std::optional<Dims> steps;
  if (a.node.input_size() >= 3) { // opset 10+: starts, ends, axes, steps as inputs
    starts = a.integers(1, "starts").ints;
    ends = a.integers(2, "ends").ints;
    if (a.present(3)) {
      axes = a.integers(3, "axes").ints;
    }
    if (a.present(4)) {
      steps = a.integers(4, "steps").ints;
    }
  } else { // opset 1-9: attributes
    starts = attr_ints(a.node, "starts").value_or(Dims{});
    ends = attr_ints(a.node, "ends").value_or(Dims{});
    axes = attr_ints(a.node, "axes");
  }
  if (!axes) {
    axes = Dims(starts.size());
    std::iota(axes->begin(), axes->end(), std::int64_t{0});
  }
  if (!steps) {
    steps = Dims(starts.size(), 1);
  }
  if (ends.size() != starts.size() || axes->size() != starts.size() || steps->size() != starts.size()) {
    throw FoldError(fmt::format("starts, ends, axes and steps have {}, {}, {} and {} values", starts.size(),
                                ends.size(), axes->size(), steps->size()));
  }
  Dims first(data.dims.size(), 0);
  Dims step(data.dims.size(), 1);
  Dims out_dims = data.dims;
  std::set<std::int64_t> seen;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const auto axis = normalize_axis((*axes)[i], rank, "axes");
    if (!seen.insert(axis).second) {
      throw FoldError(fmt::format("axis {} is sliced twice", axis));
    }
    const std::int64_t dim = data.dims[static_cast<std::size_t>(axis)];
    const std::int64_t s = (*steps)[i];
    if (s == 0) {
      throw FoldError(fmt::format("the step along axis {} is 0", axis));
    }
    if (dim == 0) {
      continue; // nothing to take, whatever the bounds
    }
    std::int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
    std::int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (s > 0) {
      b = std::clamp(b, std::int64_t{0}, dim);
      e = std::clamp(e, std::int64_t{0}, dim);
    } else {
      b = std::clamp(b, std::int64_t{0}, dim - 1);
      e = std::clamp(e, std::int64_t{-1}, dim - 1);
    }
    const std::int64_t span = s > 0 ? e - b : b - e;
    const std::int64_t magnitude = s > 0 ? s : (s == std::numeric_limits<std::int64_t>::min() ? dim + 1 : -s);
    out_dims[static_cast<std::size_t>(axis)] = span <= 0 ? 0 : span / magnitude + (span % magnitude != 0 ? 1 : 0);
    first[static_cast<std::size_t>(axis)] = b;
    step[static_cast<std::size_t>(axis)] = s > 0 ? magnitude : -magnitude;
  }
  const std::int64_t n = checked_count(out_dims);
  const Dims in_strides = strides_of(data.dims);
  std::vector<std::int64_t> src;
  src.reserve(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t rest = k;
    std::int64_t offset = 0;
    for (std::size_t d = out_dims.size(); d-- > 0;) {
      const std::int64_t coord = rest % out_dims[d];
      rest /= out_dims[d];
      offset += (first[d] + coord * step[d]) * in_strides[d];
    }
    src.push_back(offset);
  }
  return data.take(src, std::move(out_dims));
}

ConstTensor fold_concat(const FoldArgs& a) {
  if (a.values.empty()) {
    throw FoldError("no inputs");
  }
  const ConstTensor& head = a.at(0);
  const auto rank = static_cast<std::int64_t>(head.dims.size());
  if (rank == 0) {
    throw FoldError("input 0 is a scalar; Concat joins tensors of rank 1 or more");
  }
  const auto axis = static_cast<std::size_t>(normalize_axis(attr_int(a.node, "axis", 0), rank, "axis"));
  Dims out_dims = head.dims;
  out_dims[axis] = 0;
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    const ConstTensor& t = a.at(i);
    if (t.is_float() != head.is_float()) {
      throw FoldError(
          fmt::format("input {} is {} but input 0 is {}", i, type_name(t.elem_type), type_name(head.elem_type)));
    }
    bool match = t.dims.size() == head.dims.size();
    for (std::size_t d = 0; match && d < t.dims.size(); ++d) {
      match = d == axis || t.dims[d] == head.dims[d];
    }
    if (!match) {
      throw FoldError(fmt::format("input {} has shape {}, which does not match input 0's {} outside axis {}", i,
                                  dims_text(t.dims), dims_text(head.dims), axis));
    }
    out_dims[axis] += t.dims[axis];
  }
  checked_count(out_dims);
  ConstTensor out;
  out.elem_type = head.elem_type;
  out.dims = out_dims;
  std::int64_t outer = 1;
  for (std::size_t d = 0; d < axis; ++d) {
    outer *= head.dims[d];
  }
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::size_t i = 0; i < a.values.size(); ++i) {
      const ConstTensor& t = a.at(i);
      const std::int64_t block = strides_of(t.dims)[axis] * t.dims[axis];
      const auto begin = static_cast<std::ptrdiff_t>(o * block);
      if (t.is_float()) {
        out.floats.insert(out.floats.end(), t.floats.begin() + begin, t.floats.begin() + begin + block);
      } else {
        out.ints.insert(out.ints.end(), t.ints.begin() + begin, t.ints.begin() + begin + block);
      }
    }
  }
  return out;
}

ConstTensor fold_unsqueeze(const FoldArgs& a) {
  ConstTensor out = a.at(0);
  const Dims axes = a.axes(1).value_or(Dims{});
  const auto rank = static_cast<std::int64_t>(out.dims.size() + axes.size());
  std::set<std::int64_t> at;
  for (auto x : axes) {
    if (!at.insert(normalize_axis(x, rank, "axes")).second) {
      throw FoldError(fmt::format("axis {} is given twice", x));
    }
  }
  Dims dims;
  std::size_t next = 0;
  for (std::int64_t d = 0; d < rank; ++d) {
    dims.push_back(at.count(d) != 0 ? 1 : out.dims[next++]);
  }
  out.dims = std::move(dims);
  return out;
}

ConstTensor fold_squeeze(const FoldArgs& a) {
  ConstTensor out = a.at(0);
  const auto rank = static_cast<std::int64_t>(out.dims.size());
  std::set<std::int64_t> drop;
  if (auto axes = a.axes(1)) {
    for (auto x : *axes) {
      const auto d = normalize_axis(x, rank, "axes");
      if (out.dims[static_cast<std::size_t>(d)] != 1) {
        throw FoldError(fmt::format("axis {} has size {}, not 1", d, out.dims[static_cast<std::size_t>(d)]));
      }
      drop.insert(d);
    }
  } else {
    for (std::int64_t d = 0; d < rank; ++d) {
      if (out.dims[static_cast<std::size_t>(d)] == 1) {
        drop.insert(d);
      }
    }
  }
  Dims dims;
  for (std::int64_t d = 0; d < rank; ++d) {
    if (drop.count(d) == 0) {
      dims.push_back(out.dims[static_cast<std::size_t>(d)]);
    }
  }
  out.dims = std::move(dims);
  return out;
}

ConstTensor fold_reshape(const FoldArgs& a) {
  ConstTensor out = a.at(0);
  const Dims& target = a.integers(1, "shape").ints;
  const bool allow_zero = attr_int(a.node, "allowzero", 0) != 0;
  Dims dims;
  std::optional<std::size_t> inferred;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < target.size(); ++i) {
    std::int64_t d = target[i];
    if (d == 0 && !allow_zero) {
      if (i >= out.dims.size()) {
        throw FoldError(fmt::format("target {} copies dimension {}, which the input {} lacks", dims_text(target), i,
                                    dims_text(out.dims)));
      }
      d = out.dims[i];
    } else if (d == -1) {
      if (inferred) {
        throw FoldError(fmt::format("target {} has more than one -1", dims_text(target)));
      }
      inferred = i;
      d = 1;
    } else if (d < 0) {
      throw FoldError(fmt::format("target {} has the negative dimension {}", dims_text(target), d));
    }
    known = checked_mul(known, d);
    dims.push_back(d);
  }
  const std::int64_t n = out.size();
  if (inferred) {
    if (known == 0 || n % known != 0) {
      throw FoldError(
          fmt::format("cannot reshape {} elements (shape {}) into {}", n, dims_text(out.dims), dims_text(target)));
    }
    dims[*inferred] = n / known;
  } else if (known != n) {
    throw FoldError(
        fmt::format("cannot reshape {} elements (shape {}) into {}", n, dims_text(out.dims), dims_text(target)));
  }
  out.dims = std::move(dims);
  return out;
}

ConstTensor fold_flatten(const FoldArgs& a) {
  ConstTensor out = a.at(0);
  const auto rank = static_cast<std::int64_t>(out.dims.size());
  std::int64_t axis = attr_int(a.node, "axis", 1);
  if (axis < -rank || axis > rank) {
    throw FoldError(fmt::format("axis {} is out of range for rank {}", axis, rank));
  }
  axis = axis < 0 ? axis + rank : axis;
  std::int64_t rows = 1;
  for (std::int64_t d = 0; d < axis; ++d) {
    rows *= out.dims[static_cast<std::size_t>(d)];
  }
  out.dims = {rows, rows == 0 ? 0 : out.size() / rows};
  return out;
}

ConstTensor fold_transpose(const FoldArgs& a) {
  const ConstTensor& x = a.at(0);
  const std::size_t rank = x.dims.size();
  Dims perm = attr_ints(a.node, "perm").value_or(Dims{});
  if (perm.empty()) {
    for (std::size_t d = rank; d-- > 0;) {
      perm.push_back(static_cast<std::int64_t>(d));
    }
  }
  Dims sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t d = 0; d < sorted.size(); ++d) {
    if (sorted.size() != rank || sorted[d] != static_cast<std::int64_t>(d)) {
      throw FoldError(fmt::format("perm {} is not a permutation of the {} axes", dims_text(perm), rank));
    }
  }
  Dims out_dims;
  for (auto p : perm) {
    out_dims.push_back(x.dims[static_cast<std::size_t>(p)]);
  }
  const Dims in_strides = strides_of(x.dims);
  std::vector<std::int64_t> src;
  for (std::int64_t k = 0; k < x.size(); ++k) {
    std::int64_t rest = k;
    std::int64_t offset = 0;
    for (std::size_t d = rank; d-- > 0;) {
      offset += rest % out_dims[d] * in_strides[static_cast<std::size_t>(perm[d])];
      rest /= out_dims[d];
    }
    src.push_back(offset);
  }
  return x.take(src, std::move(out_dims));
}

ConstTensor fold_expand(const FoldArgs& a) {
  const ConstTensor& x = a.at(0);
  const Dims out_dims = broadcast_dims(x.dims, a.integers(1, "shape").ints);
  return x.take(broadcast_indices(x.dims, out_dims), out_dims);
}

ConstTensor fold_tile(const FoldArgs& a) {
  const ConstTensor& x = a.at(0);
  const Dims& repeats = a.integers(1, "repeats").ints;
  if (repeats.size() != x.dims.size()) {
    throw FoldError(fmt::format("{} repeats for an input of rank {}", repeats.size(), x.dims.size()));
  }
  Dims out_dims;
  for (std::size_t d = 0; d < repeats.size(); ++d) {
    if (repeats[d] < 0) {
      throw FoldError(fmt::format("repeat {} along axis {} is negative", repeats[d], d));
    }
    out_dims.push_back(checked_mul(x.dims[d], repeats[d]));
  }
  const std::int64_t n = checked_count(out_dims);
  const Dims in_strides = strides_of(x.dims);
  std::vector<std::int64_t> src;
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t rest = k;
    std::int64_t offset = 0;
    for (std::size_t d = out_dims.size(); d-- > 0;) {
      offset += rest % out_dims[d] % x.dims[d] * in_strides[d];
      rest /= out_dims[d];
    }
    src.push_back(offset);
  }
  return x.take(src, std::move(out_dims));
}

// ---- Generators -----------------------------------------------------------------------

ConstTensor fold_constant_of_shape(const FoldArgs& a) {
  const Dims dims = a.integers(0, "input").ints;
  for (auto d : dims) {
    if (d < 0) {
      throw FoldError(fmt::format("the shape {} has a negative dimension", dims_text(dims)));
    }
  }
  const std::int64_t n = checked_count(dims);
  ConstTensor value;
  value.elem_type = TP::FLOAT;
  value.floats = {0.0};
  for (const auto& attr : a.node.attribute()) {
    if (attr.name() == "value") {
      auto v = read_const(attr.t());
      if (!v || v->size() != 1) {
        throw FoldError("the 'value' attribute is not a one-element tensor");
      }
      value = *std::move(v);
    }
  }
  value.dims = {1};
  return value.take(std::vector<std::int64_t>(static_cast<std::size_t>(n), 0), dims);
}

ConstTensor fold_range(const FoldArgs& a) {
  const ConstTensor& start = a.scalar(0, "start");
  const ConstTensor& limit = a.scalar(1, "limit");
  const ConstTensor& delta = a.scalar(2, "delta");
  ConstTensor out;
  out.elem_type = start.elem_type;
  if (start.is_float()) {
    const double s = start.floats[0];
    const double d = delta.as_double(0);
    if (d == 0) {
      throw FoldError("delta is 0");
    }
    const double count = std::max(std::ceil((limit.as_double(0) - s) / d), 0.0);
    if (!(count <= static_cast<double>(max_fold_elements))) {
      throw FoldDeclined("too many elements");
    }
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(count); ++i) {
      out.floats.push_back(round_to(out.elem_type, s + static_cast<double>(i) * d));
    }
  } else {
    const std::int64_t s = start.ints[0];
    const std::int64_t l = limit.as_int(0);
    const std::int64_t d = delta.as_int(0);
    if (d == 0) {
      throw FoldError("delta is 0");
    }
    // Unsigned differences are exact for any int64 pair in the right order.
    const bool up = d > 0;
    const std::uint64_t span = up ? (l > s ? static_cast<std::uint64_t>(l) - static_cast<std::uint64_t>(s) : 0)
                                  : (s > l ? static_cast<std::uint64_t>(s) - static_cast<std::uint64_t>(l) : 0);
    const std::uint64_t magnitude = up ? static_cast<std::uint64_t>(d) : static_cast<std::uint64_t>(-(d + 1)) + 1;
    const std::uint64_t count = span / magnitude + (span % magnitude != 0 ? 1 : 0);
    if (count > static_cast<std::uint64_t>(max_fold_elements)) {
      throw FoldDeclined("too many elements");
    }
    for (std::uint64_t i = 0; i < count; ++i) {
      out.ints.push_back(s + static_cast<std::int64_t>(i) * d);
    }
  }
  out.dims = {out.size()};
  return out;
}

// NonZero of a known tensor: its output's length is data-dependent only while the data is unknown
// (exporters build masks this way from shapes, e.g. Less(Range(0, n), ...) -> NonZero).
ConstTensor fold_nonzero(const FoldArgs& a) {
  const ConstTensor& x = a.at(0);
  const Dims strides = strides_of(x.dims);
  std::vector<std::int64_t> hits;
  for (std::int64_t i = 0; i < x.size(); ++i) {
    if (x.as_double(i) != 0) {
      hits.push_back(i);
    }
  }
  const auto rank = static_cast<std::int64_t>(x.dims.size());
  const auto count = static_cast<std::int64_t>(hits.size());
  // A scalar is a tensor of rank 0: its indices have no rows (ONNX's shape [0, count]).
  std::vector<std::int64_t> out(static_cast<std::size_t>(rank * count));
  for (std::int64_t k = 0; k < count; ++k) {
    std::int64_t rest = hits[static_cast<std::size_t>(k)];
    for (std::int64_t d = 0; d < rank; ++d) {
      const std::int64_t stride = strides[static_cast<std::size_t>(d)];
      out[static_cast<std::size_t>(d * count + k)] = rest / stride;
      rest %= stride;
    }
  }
  return int64_tensor({rank, count}, std::move(out));
}

struct Rule {
  ConstTensor (*fold)(const FoldArgs&);
  bool shape_only = false; // reads its input's shape, not its contents
};

// The one place where each op's folding rule is found. Arithmetic, comparison, logic and
// reduction rules are in fold_math.cpp.
const std::unordered_map<std::string, Rule>& rules() {
  static const std::unordered_map<std::string, Rule> table = [] {
    std::unordered_map<std::string, Rule> t = {
        {"Constant", {fold_constant}},   {"Shape", {fold_shape, true}},
        {"Size", {fold_size, true}},     {"Identity", {fold_identity}},
        {"Cast", {fold_cast}},           {"Gather", {fold_gather}},
        {"Slice", {fold_slice}},         {"Concat", {fold_concat}},
        {"Unsqueeze", {fold_unsqueeze}}, {"Squeeze", {fold_squeeze}},
        {"Reshape", {fold_reshape}},     {"Flatten", {fold_flatten}},
        {"Transpose", {fold_transpose}}, {"Expand", {fold_expand}},
        {"Tile", {fold_tile}},           {"ConstantOfShape", {fold_constant_of_shape}},
        {"Range", {fold_range}},         {"NonZero", {fold_nonzero}},
    };
    for (const auto& [type, fold] : math_rules()) {
      t.emplace(type, Rule{fold});
    }
    return t;
  }();
  return table;
}

} // namespace

bool has_fold_rule(const std::string& op_type) {
  return rules().count(op_type) != 0;
}

std::optional<ConstTensor> fold_node(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& values,
                                     const std::vector<const onnx::TypeProto*>& types) {
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    return std::nullopt;
  }
  const auto rule = rules().find(node.op_type());
  if (rule == rules().end()) {
    return std::nullopt;
  }
  const FoldArgs args{node, values, types};
  if (rule->second.shape_only) {
    if (!args.has_shape(0)) {
      return std::nullopt;
    }
  } else {
    for (int i = 0; i < node.input_size(); ++i) {
      if (!node.input(i).empty() && !args.present(static_cast<std::size_t>(i))) {
        return std::nullopt;
      }
    }
  }
  try {
    ConstTensor out = rule->second.fold(args);
    if (out.size() > max_fold_elements) {
      return std::nullopt;
    }
    return out;
  } catch (const FoldDeclined&) {
    return std::nullopt;
  }
}

} // namespace partita::onnx_import::detail
