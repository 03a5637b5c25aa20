#include "op_kernels.h"

#include "op_kernels_cnn.h"
#include "op_kernels_rnn.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

namespace partita::runtime {
namespace {

std::optional<Eltwise> eltwise_of(const std::string& type) {
  static const std::map<std::string, Eltwise, std::less<>> table{
      {"Relu", Eltwise::relu}, {"Tanh", Eltwise::tanh}, {"Sigmoid", Eltwise::sigmoid}, {"Gelu", Eltwise::gelu},
      {"Erf", Eltwise::erf},   {"Exp", Eltwise::exp},   {"Sin", Eltwise::sin},         {"Cos", Eltwise::cos}};
  const auto it = table.find(type);
  return it == table.end() ? std::nullopt : std::optional<Eltwise>(it->second);
}

std::optional<Binary> binary_of(const std::string& type) {
  static const std::map<std::string, Binary, std::less<>> table{
      {"Add", Binary::add}, {"Sub", Binary::sub}, {"Mul", Binary::mul}, {"Div", Binary::div}};
  const auto it = table.find(type);
  return it == table.end() ? std::nullopt : std::optional<Binary>(it->second);
}

std::int64_t product(const Dims& d, std::size_t from = 0, std::size_t to = std::string::npos) {
  std::int64_t p = 1;
  for (std::size_t i = from; i < d.size() && i < to; ++i) {
    p *= d[i];
  }
  return p;
}

// Right-aligned to `rank` dims with leading 1s (numpy broadcasting).
Dims aligned(const Dims& d, std::size_t rank) {
  Dims r(rank - d.size(), 1);
  r.insert(r.end(), d.begin(), d.end());
  return r;
}

int softmax_axis(const graph::Op& op, std::size_t rank) {
  auto axis = op.attr_int("axis", -1);
  if (axis < 0) {
    axis += static_cast<std::int64_t>(rank);
  }
  return static_cast<int>(axis);
}

// A MatMul on shards: A [..., m, k] and B [..., k, n] with equal batch dims, or B a matrix
// (then A's batch folds into m).
struct MatmulPlan {
  MatmulShape shape;
  bool fold = false; // B is a matrix shared by A's whole batch
};

MatmulPlan matmul_plan(const graph::Op& op, const Dims& a, const Dims& b) {
  if (a.size() < 2 || b.size() < 2) {
    throw Error(fmt::format("op '{}': MatMul of rank-1 operands has no kernel", op.name));
  }
  MatmulPlan p;
  p.shape.m = a[a.size() - 2];
  p.shape.k = a.back();
  p.shape.n = b.back();
  if (b[b.size() - 2] != p.shape.k) {
    throw Error(fmt::format("op '{}': local shards disagree on the contracted extent ({} vs {})", op.name, p.shape.k,
                            b[b.size() - 2]));
  }
  if (b.size() == 2) {
    p.fold = true;
    p.shape.m *= product(a, 0, a.size() - 2);
  } else {
    if (Dims(a.begin(), a.end() - 2) != Dims(b.begin(), b.end() - 2)) {
      throw Error(fmt::format("op '{}': MatMul with broadcast batch dims has no kernel", op.name));
    }
    p.shape.batch = product(a, 0, a.size() - 2);
  }
  return p;
}

using Coord = std::vector<std::int64_t>;

bool is_view(const std::string& type) {
  return type == "Reshape" || type == "Flatten" || type == "Squeeze" || type == "Unsqueeze" || type == "Identity";
}

bool is_comparison(const std::string& type) {
  return type == "Greater" || type == "Less" || type == "Equal" || type == "GreaterOrEqual" || type == "LessOrEqual";
}

// Ops whose output element is one input element, found by coordinates: views, Transpose, Split,
// Gather (on an activation, or a weight: an embedding).
bool is_remap(const std::string& type) {
  return is_view(type) || type == "Transpose" || type == "Split" || type == "Gather";
}

std::int64_t flat_index(const Coord& c, const graph::Shape& shape) {
  std::int64_t f = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    f = f * shape[d] + c[d];
  }
  return f;
}

void unravel(std::int64_t f, const graph::Shape& shape, Coord& c) {
  c.resize(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    c[d] = f % shape[d];
    f /= shape[d];
  }
}

std::string coord_string(const Coord& c) {
  return fmt::format("[{}]", fmt::join(c, ","));
}

// Where an output element comes from: an input element (global coordinates), or nothing on this
// rank (an embedding row another rank of the vocabulary split holds: a partial sum of zero).
enum class Source : std::uint8_t { element, elsewhere };

// Visits every element of `out` (its block, row-major) with the offset of its source element in
// `in`'s block, a run at a time: visit(o, i, n, stride) stands for output elements o..o+n-1 read
// from input offsets i, i + stride, ... An element that the source mapping puts outside `in`'s
// block means the layouts do not allow the op locally: refused with the op, the element and the
// blocks. A row of the output (its last dim) whose first and last elements come from input
// elements that differ in one coordinate by the row's length reads that input line in order (a
// transpose, a split, a reshape row that does not wrap, a gather's inner dims): one run. Other
// rows are visited element by element.
template <class Map, class Visit>
void remap(const graph::Op& op, const Shard& in, const Shard& out, Map&& source, Visit&& visit) {
  const auto& ob = out.block;
  const auto& ib = in.block;
  const std::size_t rank = ob.begin.size();
  const auto in_offset = [&](const Coord& o, const Coord& x) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < x.size(); ++d) {
      if (x[d] < ib.begin[d] || x[d] >= ib.end[d]) {
        throw Error(fmt::format("op '{}' ({}): output element {} needs input element {}, which this rank's input "
                                "block {}..{} does not hold: this layout cannot run the op locally (no data is "
                                "moved inside an op); plan it with another split",
                                op.name, op.type, coord_string(o), coord_string(x), coord_string(ib.begin),
                                coord_string(ib.end)));
      }
      off = off * (ib.end[d] - ib.begin[d]) + (x[d] - ib.begin[d]);
    }
    return off;
  };
  const std::int64_t n = out.elements();
  if (n == 0) {
    return;
  }
  const std::size_t last = rank > 0 ? rank - 1 : 0;
  const std::int64_t row = rank > 0 ? ob.end[last] - ob.begin[last] : 1;
  const bool runs = rank > 0 && row > 1 && source.rows_in_order(rank);
  Coord o(ob.begin.begin(), ob.begin.end());
  Coord x, x_end, o_end;
  for (std::int64_t base = 0; base < n; base += row) {
    bool done = false;
    if (runs) {
      const Source first = source(o, x);
      o_end = o;
      o_end[last] = ob.end[last] - 1;
      const Source end = source(o_end, x_end);
      int moving = -1;
      bool line = first == end && x.size() == x_end.size();
      for (std::size_t d = 0; line && d < x.size(); ++d) {
        if (x[d] != x_end[d]) {
          line = moving < 0 && x_end[d] - x[d] == row - 1;
          moving = static_cast<int>(d);
        }
      }
      if (line && moving >= 0) {
        if (first == Source::element) {
          std::int64_t stride = 1;
          for (std::size_t d = static_cast<std::size_t>(moving) + 1; d < x.size(); ++d) {
            stride *= ib.end[d] - ib.begin[d];
          }
          const std::int64_t from = in_offset(o, x);
          in_offset(o_end, x_end); // the run's far end is held too
          visit(base, from, row, stride);
        }
        done = true;
      }
    }
    for (std::int64_t j = 0; !done && j < row; ++j) {
      o[last] = ob.begin[last] + j;
      if (source(o, x) == Source::element) {
        visit(base + j, in_offset(o, x), std::int64_t{1}, std::int64_t{1});
      }
    }
    o[last] = ob.begin[last];
    for (std::size_t d = last; d-- > 0;) {
      if (++o[d] < ob.end[d]) {
        break;
      }
      o[d] = ob.begin[d];
    }
  }
}

// Offsets into a broadcast input (dims aligned to the output's rank, 1 where it broadcasts) for
// every output element, row-major.
std::vector<std::int64_t> broadcast_offsets(const Dims& in, const Dims& out) {
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(product(out)));
  Coord o(out.size(), 0);
  for (auto& off : offsets) {
    std::int64_t f = 0;
    for (std::size_t d = 0; d < out.size(); ++d) {
      f = f * in[d] + (in[d] == 1 ? 0 : o[d]);
    }
    off = f;
    for (std::size_t d = out.size(); d-- > 0;) {
      if (++o[d] < out[d]) {
        break;
      }
      o[d] = 0;
    }
  }
  return offsets;
}

// Transpose of a local block into one whose dims are the input block's permuted (out dim i is in
// dim perm[i], same begin and extent): a copy tiled 32 x 32 over the output's last dim and the
// output dim that is the input's last, so that both reads and writes stay within a few cache
// lines (remap's rows read the input with a stride: a cache line an element; a weight's
// transpose ran at a third of the copy rate, and its gradient, written with a stride, slower).
// False, with nothing written, when the blocks do not correspond that way (remap handles that).
bool tiled_transpose(const std::vector<std::int64_t>& perm, const Shard& in, Shard& out) {
  const auto& ib = in.block;
  const auto& ob = out.block;
  const std::size_t r = perm.size();
  if (r == 0 || ib.begin.size() != r || ob.begin.size() != r) {
    return false;
  }
  std::vector<std::int64_t> in_extent(r), out_extent(r), in_stride(r), out_stride(r);
  for (std::size_t d = 0; d < r; ++d) {
    in_extent[d] = ib.end[d] - ib.begin[d];
  }
  for (std::size_t d = 0; d < r; ++d) {
    const auto p = static_cast<std::size_t>(perm[d]);
    out_extent[d] = ob.end[d] - ob.begin[d];
    if (p >= r || out_extent[d] != in_extent[p] || ob.begin[d] != ib.begin[p]) {
      return false;
    }
  }
  in_stride[r - 1] = out_stride[r - 1] = 1;
  for (std::size_t d = r - 1; d-- > 0;) {
    in_stride[d] = in_stride[d + 1] * in_extent[d + 1];
    out_stride[d] = out_stride[d + 1] * out_extent[d + 1];
  }
  // Each output dim's step in the input.
  std::vector<std::int64_t> step(r);
  for (std::size_t d = 0; d < r; ++d) {
    step[d] = in_stride[static_cast<std::size_t>(perm[d])];
  }
  const std::size_t a = r - 1; // the output's last dim
  std::size_t q = 0;           // the output dim that is the input's last
  while (static_cast<std::size_t>(perm[q]) != r - 1) {
    ++q;
  }
  const float* from = in.data.data();
  float* to = out.data.data();
  if (out.elements() == 0) {
    return true;
  }
  // Odometer over the other dims (all but a and q).
  std::vector<std::int64_t> idx(r, 0);
  constexpr std::int64_t tile = 32;
  while (true) {
    std::int64_t in_base = 0, out_base = 0;
    for (std::size_t d = 0; d < r; ++d) {
      in_base += idx[d] * step[d];
      out_base += idx[d] * out_stride[d];
    }
    if (q == a) { // the last dim stays last: rows copy as they are
      std::copy_n(from + in_base, out_extent[a], to + out_base);
    } else {
      const std::int64_t ni = out_extent[q], nj = out_extent[a], sq = out_stride[q], sa = step[a];
      for (std::int64_t i0 = 0; i0 < ni; i0 += tile) {
        for (std::int64_t j0 = 0; j0 < nj; j0 += tile) {
          const std::int64_t i1 = std::min(ni, i0 + tile), j1 = std::min(nj, j0 + tile);
          for (std::int64_t i = i0; i < i1; ++i) {
            const float* src = from + in_base + i;
            float* dst = to + out_base + i * sq;
            for (std::int64_t j = j0; j < j1; ++j) {
              dst[j] = src[j * sa];
            }
          }
        }
      }
    }
    std::size_t d = r;
    while (d-- > 0) {
      if (d == a || d == q) {
        continue;
      }
      if (++idx[d] < out_extent[d]) {
        break;
      }
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) {
      return true;
    }
  }
}

// The source mapping of a remap op's output `k` (global coordinates).
struct RemapSource {
  const graph::Graph& g;
  const graph::Op& op;
  const OpBuffers& buf;
  std::size_t k = 0;

  Source operator()(const Coord& o, Coord& x) const {
    const auto& in_shape = g.tensor(op.inputs[0]).shape;
    const auto& out_shape = g.tensor(op.outputs[k]).shape;
    if (is_view(op.type)) {
      unravel(flat_index(o, out_shape), in_shape, x);
      return Source::element;
    }
    if (op.type == "Transpose") {
      x.resize(o.size());
      for (std::size_t i = 0; i < o.size(); ++i) {
        x[static_cast<std::size_t>(perm[i])] = o[i];
      }
      return Source::element;
    }
    if (op.type == "Split") {
      x = o;
      x[axis] += split_offset;
      return Source::element;
    }
    // Gather: Y[o[:axis], idx[o[axis:axis+r]], o[axis+r:]] from data.
    const Shard& idx = *buf.inputs[1];
    const std::size_t r = idx.block.begin.size();
    std::int64_t off = 0;
    for (std::size_t d = 0; d < r; ++d) {
      off = off * (idx.block.end[d] - idx.block.begin[d]) + (o[axis + d] - idx.block.begin[d]);
    }
    auto row = static_cast<std::int64_t>(std::llround(idx.data[static_cast<std::size_t>(off)]));
    if (row < 0) {
      row += in_shape[axis];
    }
    if (row < 0 || row >= in_shape[axis]) {
      throw Error(
          fmt::format("op '{}': index {} is out of range for axis {} of size {}", op.name, row, axis, in_shape[axis]));
    }
    x.resize(in_shape.size());
    for (std::size_t d = 0; d < axis; ++d) {
      x[d] = o[d];
    }
    x[axis] = row;
    for (std::size_t d = axis + 1; d < in_shape.size(); ++d) {
      x[d] = o[d - 1 + r];
    }
    const auto& held = buf.inputs[0]->block;
    return embedding && (row < held.begin[axis] || row >= held.end[axis]) ? Source::elsewhere : Source::element;
  }

  // Whether the last output dim walks one input dim in order (so remap may take a row as one run,
  // after checking its ends): not for a gather whose last output dims are indices.
  bool rows_in_order(std::size_t out_rank) const {
    if (op.type != "Gather") {
      return true;
    }
    const std::size_t r = buf.inputs[1]->block.begin.size();
    return out_rank - 1 >= axis + r;
  }

  std::vector<std::int64_t> perm;
  std::size_t axis = 0;
  std::int64_t split_offset = 0;
  bool embedding = false;
};

RemapSource remap_source(const graph::Graph& g, const graph::Op& op, const OpBuffers& buf, std::size_t k) {
  RemapSource src{g, op, buf, k, {}, 0, 0, false};
  const auto& in_shape = g.tensor(op.inputs[0]).shape;
  if (op.type == "Transpose") {
    src.perm = op.attr_ints("perm");
    if (src.perm.empty()) {
      for (std::size_t i = in_shape.size(); i-- > 0;) {
        src.perm.push_back(static_cast<std::int64_t>(i));
      }
    }
    for (auto& p : src.perm) {
      p = p < 0 ? p + static_cast<std::int64_t>(in_shape.size()) : p;
    }
  } else if (op.type == "Split" || op.type == "Gather") {
    auto axis = op.attr_int("axis", 0);
    axis = axis < 0 ? axis + static_cast<std::int64_t>(in_shape.size()) : axis;
    src.axis = static_cast<std::size_t>(axis);
    for (std::size_t j = 0; op.type == "Split" && j < k; ++j) {
      src.split_offset += g.tensor(op.outputs[j]).shape[src.axis];
    }
    src.embedding = op.type == "Gather" && g.tensor(op.inputs[0]).role == graph::TensorRole::parameter;
  }
  return src;
}

bool (*comparison(const std::string& type))(float, float) {
  if (type == "Greater") {
    return [](float a, float b) { return a > b; };
  }
  if (type == "Less") {
    return [](float a, float b) { return a < b; };
  }
  if (type == "GreaterOrEqual") {
    return [](float a, float b) { return a >= b; };
  }
  if (type == "LessOrEqual") {
    return [](float a, float b) { return a <= b; };
  }
  return [](float a, float b) { return a == b; };
}

struct LayerNormShape {
  std::int64_t rows = 1, norm = 1;
  float epsilon = 1e-5F;
};

LayerNormShape layer_norm_shape(const graph::Op& op, const Dims& x) {
  auto axis = op.attr_int("axis", -1);
  axis = axis < 0 ? axis + static_cast<std::int64_t>(x.size()) : axis;
  return {product(x, 0, static_cast<std::size_t>(axis)), product(x, static_cast<std::size_t>(axis)),
          static_cast<float>(op.attr_float("epsilon", 1e-5))};
}

struct GemmAttrs {
  bool trans_a = false, trans_b = false;
  float alpha = 1, beta = 1;
  MatmulShape shape;
  bool adds_bias = false; // this rank holds the first block of k: it adds beta * C (once per partial sum)
};

GemmAttrs gemm_attrs(const graph::Op& op, const OpBuffers& buf) {
  GemmAttrs a;
  a.trans_a = op.attr_int("transA", 0) != 0;
  a.trans_b = op.attr_int("transB", 0) != 0;
  a.alpha = static_cast<float>(op.attr_float("alpha", 1.0));
  a.beta = static_cast<float>(op.attr_float("beta", 1.0));
  const Dims ad = buf.inputs[0]->extents(), bd = buf.inputs[1]->extents();
  a.shape.m = a.trans_a ? ad[1] : ad[0];
  a.shape.k = a.trans_a ? ad[0] : ad[1];
  a.shape.n = a.trans_b ? bd[0] : bd[1];
  if ((a.trans_b ? bd[1] : bd[0]) != a.shape.k) {
    throw Error(fmt::format("op '{}': local shards disagree on the contracted extent", op.name));
  }
  a.adds_bias = buf.inputs.size() > 2 && buf.inputs[2] != nullptr && buf.inputs[0]->block.begin[a.trans_a ? 0 : 1] == 0;
  return a;
}

void scale_in_place(float* p, std::int64_t n, float factor) {
  if (factor != 1.F) {
    for (std::int64_t i = 0; i < n; ++i) {
      p[i] *= factor;
    }
  }
}

// Concat: its axis is whole on every rank (core keeps it whole), so the output block is the
// inputs' blocks laid side by side along it. Visits (input, offset in the input, offset in the
// output, run length) for every contiguous run.
template <class Visit> void concat_runs(const graph::Op& op, const OpBuffers& buf, const Shard& y, Visit&& visit) {
  const Dims ye = y.extents();
  auto axis = op.attr_int("axis", 0);
  axis = axis < 0 ? axis + static_cast<std::int64_t>(ye.size()) : axis;
  const auto a = static_cast<std::size_t>(axis);
  const std::int64_t outer = product(ye, 0, a), inner = product(ye, a + 1);
  std::int64_t along = 0;
  for (const auto* in : buf.inputs) {
    const Dims xe = in->extents();
    if (product(xe, 0, a) != outer || product(xe, a + 1) != inner) {
      throw Error(fmt::format("op '{}' (Concat): an input block [{}] does not match the output block [{}] off axis {}",
                              op.name, fmt::join(xe, ","), fmt::join(ye, ","), axis));
    }
    along += xe[a];
  }
  if (along != ye[a]) {
    throw Error(fmt::format("op '{}' (Concat): the input blocks add up to {} along axis {}, the output block has {}",
                            op.name, along, axis, ye[a]));
  }
  for (std::int64_t o = 0; o < outer; ++o) {
    std::int64_t at = o * ye[a] * inner;
    for (std::size_t j = 0; j < buf.inputs.size(); ++j) {
      const std::int64_t run = buf.inputs[j]->extents()[a] * inner;
      visit(j, o * run, at, run);
      at += run;
    }
  }
}

// Split output `source.k`, when its block is the input block's along every dim but the axis and
// lies inside it along the axis (as the layouts core plans give): visits (offset in the output,
// offset in the input, run length) for each contiguous run, one per row of the dims before the
// axis, and returns true. False, with nothing visited, for any other pair of blocks (remap
// handles those, element by element where it must): remap finds these runs too, but pays a
// coordinate walk per row, which made Split three times slower than a copy of its bytes.
template <class Visit> bool split_runs(const RemapSource& source, const Shard& in, const Shard& out, Visit&& visit) {
  const auto& ib = in.block;
  const auto& ob = out.block;
  const std::size_t r = ob.begin.size(), a = source.axis;
  if (r == 0 || ib.begin.size() != r || a >= r) {
    return false;
  }
  for (std::size_t d = 0; d < r; ++d) {
    if (d != a && (ib.begin[d] != ob.begin[d] || ib.end[d] != ob.end[d])) {
      return false;
    }
  }
  const std::int64_t first = ob.begin[a] + source.split_offset, last = ob.end[a] + source.split_offset;
  if (first < ib.begin[a] || last > ib.end[a]) {
    return false;
  }
  const Dims ie = in.extents();
  const std::int64_t outer = product(ie, 0, a), inner = product(ie, a + 1);
  const std::int64_t run = (last - first) * inner, row = ie[a] * inner, skip = (first - ib.begin[a]) * inner;
  for (std::int64_t o = 0; run > 0 && o < outer; ++o) {
    visit(o * run, o * row + skip, run);
  }
  return true;
}

} // namespace

std::string missing_kernel(const graph::Graph& g, graph::OpId id) {
  const graph::Op& op = g.op(id);
  for (const auto t : op.inputs) {
    if (t == graph::no_tensor) {
      continue;
    }
    const auto dt = g.tensor(t).dtype;
    if (dt == graph::DType::string || dt == graph::DType::unknown) {
      return fmt::format("input '{}' is {}", g.tensor(t).name, graph::dtype_name(dt));
    }
  }
  if (op.type == "MatMul") {
    const auto ra = g.tensor(op.inputs[0]).shape.size(), rb = g.tensor(op.inputs[1]).shape.size();
    if (ra < 2 || rb < 2) {
      return "MatMul of rank-1 operands";
    }
    if (rb > 2 && ra != rb) {
      return "MatMul with broadcast batch dims";
    }
    return {};
  }
  if (eltwise_of(op.type) || binary_of(op.type) || is_comparison(op.type) || is_remap(op.type)) {
    return {};
  }
  if (op.type == "Gemm" || op.type == "Softmax" || op.type == "LayerNormalization" || op.type == "Where" ||
      op.type == "Concat") {
    return {};
  }
  if (op.type == "Cast") {
    const auto to = g.tensor(op.outputs[0]).dtype;
    return to == graph::DType::string ? "Cast to string" : std::string();
  }
  if (op.type == "Constant") {
    return {}; // its value is filled once by the executor (Executor::Executor)
  }
  if (cnn::handles(op.type)) {
    return cnn::missing_kernel(g, id);
  }
  if (rnn::handles(op.type)) {
    return rnn::missing_kernel(g, id);
  }
  return fmt::format("no kernel for {} yet", op.type);
}

namespace {

// Where a block's elements lie in its tensor's row-major order, as the shard holds them (its own
// row-major order over the block's extents): first + sum over dims of local index x stride, with
// dims of extent 1 dropped and neighbours merged where they run on (stride of the outer = extent x
// stride of the inner). Two blocks with the same walk hold the same elements in the same order.
struct Walk {
  std::int64_t first = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> dims; // (extent, stride), outermost first
  bool operator==(const Walk&) const = default;
};

Walk walk_of(const sharding::Block& b, const graph::Shape& shape) {
  Walk w;
  std::int64_t stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    w.first += b.begin[d] * stride;
    const std::int64_t extent = b.end[d] - b.begin[d];
    if (extent != 1) {
      if (!w.dims.empty() && w.dims.back().second * w.dims.back().first == stride) {
        w.dims.back().first *= extent; // runs on from the inner dim: one longer dim
      } else {
        w.dims.emplace_back(extent, stride);
      }
    }
    stride *= shape[d];
  }
  std::reverse(w.dims.begin(), w.dims.end());
  return w;
}

} // namespace

bool is_buffer_view(const graph::Graph& g, graph::OpId id, const Shard& in, const Shard& out) {
  const graph::Op& op = g.op(id);
  if (!is_view(op.type) || op.inputs.empty() || op.outputs.size() != 1 || in.elements() != out.elements()) {
    return false;
  }
  // A view keeps the tensor's row-major order: the output shard is the input's buffer as it is
  // when both blocks walk the same elements in the same order (a batch or head split of a Reshape
  // that splits or merges dims, not only blocks that are one run of the whole tensor).
  return walk_of(in.block, g.tensor(op.inputs[0]).shape) == walk_of(out.block, g.tensor(op.outputs[0]).shape);
}

sharding::Block window_input_region(const graph::Graph& g, graph::OpId id, const sharding::Block& x_block,
                                    const sharding::Block& y_block) {
  const auto& type = g.op(id).type;
  return type == "Conv" || type == "MaxPool" || type == "AveragePool"
             ? cnn::window_input_region(g, id, x_block, y_block)
             : x_block;
}

void run_forward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buf) {
  const graph::Op& op = g.op(id);
  if (op.type == "MatMul") {
    const auto p = matmul_plan(op, buf.inputs[0]->extents(), buf.inputs[1]->extents());
    backend.matmul(p.shape, buf.inputs[0]->data.data(), false, buf.inputs[1]->data.data(), false,
                   buf.outputs[0]->data.data());
  } else if (const auto e = eltwise_of(op.type)) {
    backend.eltwise_forward(*e, buf.inputs[0]->elements(), buf.inputs[0]->data.data(), buf.outputs[0]->data.data());
  } else if (const auto b = binary_of(op.type)) {
    const Dims c = buf.outputs[0]->extents();
    backend.binary(*b, aligned(buf.inputs[0]->extents(), c.size()), buf.inputs[0]->data.data(),
                   aligned(buf.inputs[1]->extents(), c.size()), buf.inputs[1]->data.data(), c,
                   buf.outputs[0]->data.data());
  } else if (op.type == "Softmax") {
    const Dims d = buf.inputs[0]->extents();
    backend.softmax_forward(d, softmax_axis(op, d.size()), buf.inputs[0]->data.data(), buf.outputs[0]->data.data());
  } else if (op.type == "Gemm") {
    const auto a = gemm_attrs(op, buf);
    Shard& y = *buf.outputs[0];
    backend.matmul(a.shape, buf.inputs[0]->data.data(), a.trans_a, buf.inputs[1]->data.data(), a.trans_b,
                   y.data.data());
    backend.synchronize(); // the host scales what the kernel wrote
    scale_in_place(y.data.data(), y.elements(), a.alpha);
    if (a.adds_bias) {
      const Dims c = y.extents();
      Floats bias(buf.inputs[2]->data);
      scale_in_place(bias.data(), static_cast<std::int64_t>(bias.size()), a.beta);
      backend.binary(Binary::add, c, y.data.data(), aligned(buf.inputs[2]->extents(), c.size()), bias.data(), c,
                     y.data.data());
    }
  } else if (op.type == "LayerNormalization") {
    const auto ln = layer_norm_shape(op, buf.inputs[0]->extents());
    Floats zeros;
    const float* shift = nullptr;
    if (buf.inputs.size() > 2 && buf.inputs[2] != nullptr) {
      shift = buf.inputs[2]->data.data();
    } else {
      zeros.assign(static_cast<std::size_t>(ln.norm), 0.F);
      shift = zeros.data();
    }
    const auto stat = [&](std::size_t j) {
      return buf.outputs.size() > j && buf.outputs[j] != nullptr ? buf.outputs[j]->data.data() : nullptr;
    };
    backend.layer_norm_forward(ln.rows, ln.norm, ln.epsilon, buf.inputs[0]->data.data(), buf.inputs[1]->data.data(),
                               shift, buf.outputs[0]->data.data(), stat(1), stat(2));
  } else if (is_remap(op.type)) {
    for (std::size_t k = 0; k < buf.outputs.size(); ++k) {
      if (buf.outputs[k] == nullptr) {
        continue;
      }
      Shard& y = *buf.outputs[k];
      const Shard& x = *buf.inputs[0];
      const RemapSource source = remap_source(g, op, buf, k);
      if (op.type == "Transpose" && tiled_transpose(source.perm, x, y)) {
        continue;
      }
      if (op.type == "Split" && split_runs(source, x, y, [&](std::int64_t o, std::int64_t i, std::int64_t n) {
            std::copy_n(x.data.data() + i, n, y.data.data() + o);
          })) {
        continue;
      }
      if (source.embedding) { // embedding rows held elsewhere stay 0 (partial sums)
        std::fill(y.data.begin(), y.data.end(), 0.F);
      }
      float* to = y.data.data();
      const float* from = x.data.data();
      remap(op, x, y, source, [&](std::int64_t o, std::int64_t i, std::int64_t n, std::int64_t s) {
        if (s == 1) {
          std::copy_n(from + i, n, to + o);
          return;
        }
        for (std::int64_t j = 0; j < n; ++j) {
          to[o + j] = from[i + j * s];
        }
      });
    }
  } else if (op.type == "Concat") {
    Shard& y = *buf.outputs[0];
    concat_runs(op, buf, y, [&](std::size_t j, std::int64_t from, std::int64_t to, std::int64_t n) {
      std::copy_n(buf.inputs[j]->data.begin() + from, n, y.data.begin() + to);
    });
  } else if (op.type == "Cast") {
    // Every tensor is held as fp32 (integers and booleans exactly): a cast is a copy.
    buf.outputs[0]->data = buf.inputs[0]->data;
  } else if (is_comparison(op.type) || op.type == "Where") {
    Shard& y = *buf.outputs[0];
    const Dims c = y.extents();
    std::vector<std::vector<std::int64_t>> at;
    for (const auto* in : buf.inputs) {
      at.push_back(broadcast_offsets(aligned(in->extents(), c.size()), c));
    }
    const auto v = [&](std::size_t input, std::size_t i) {
      return buf.inputs[input]->data[static_cast<std::size_t>(at[input][i])];
    };
    if (op.type == "Where") {
      for (std::size_t i = 0; i < y.data.size(); ++i) {
        y.data[i] = v(0, i) != 0.F ? v(1, i) : v(2, i);
      }
    } else {
      const auto test = comparison(op.type); // chosen once, not per element (string compares: 14 ns each)
      for (std::size_t i = 0; i < y.data.size(); ++i) {
        y.data[i] = test(v(0, i), v(1, i)) ? 1.F : 0.F;
      }
    }
  } else if (op.type == "Constant") {
    // Filled once when the executor allocated it.
  } else if (cnn::handles(op.type)) {
    cnn::forward(backend, g, id, buf);
  } else if (rnn::handles(op.type)) {
    rnn::forward(backend, g, id, buf);
  } else {
    std::int64_t bytes = 0;
    for (const auto* s : buf.inputs) {
      bytes += s != nullptr ? s->elements() * 4 : 0;
    }
    for (const auto* s : buf.outputs) {
      bytes += s != nullptr ? s->elements() * 4 : 0;
    }
    backend.memory_bound(bytes);
  }
}

void run_backward(Backend& backend, const graph::Graph& g, graph::OpId id, const OpBuffers& buf,
                  const std::vector<const Shard*>& d_out, const std::vector<Shard*>& d_in) {
  const graph::Op& op = g.op(id);
  const auto wants = [&](std::size_t i) { return i < d_in.size() && d_in[i] != nullptr; };
  if (op.type == "MatMul") {
    const Shard& a = *buf.inputs[0];
    const Shard& b = *buf.inputs[1];
    const Shard& dy = *d_out[0];
    const auto p = matmul_plan(op, a.extents(), b.extents());
    const auto& s = p.shape;
    if (wants(0)) { // dA[m, k] = dY[m, n] . B^T
      backend.matmul({s.batch, s.m, s.k, s.n}, dy.data.data(), false, b.data.data(), true, d_in[0]->data.data());
    }
    if (wants(1)) { // dB[k, n] = A^T . dY; a folded batch is summed by the contraction over m
      backend.matmul({s.batch, s.k, s.n, s.m}, a.data.data(), true, dy.data.data(), false, d_in[1]->data.data());
    }
  } else if (const auto e = eltwise_of(op.type)) {
    if (wants(0)) {
      backend.eltwise_backward(*e, buf.inputs[0]->elements(), buf.inputs[0]->data.data(), d_out[0]->data.data(),
                               d_in[0]->data.data());
    }
  } else if (const auto b = binary_of(op.type)) {
    const Dims c = d_out[0]->extents();
    const Dims ad = aligned(buf.inputs[0]->extents(), c.size());
    const Dims bd = aligned(buf.inputs[1]->extents(), c.size());
    const float* dy = d_out[0]->data.data();
    // dY (op) the other input, for Mul and Div: written straight into the gradient when that input
    // is not broadcast (no sum to take), else into `full` and summed over the broadcast dims.
    Floats full;
    const auto into = [&](const Dims& target, float* dst) {
      if (target == c) {
        return dst;
      }
      full.resize(static_cast<std::size_t>(product(c)));
      return full.data();
    };
    const auto sum_into = [&](const Dims& target, const float* from, float* dst) {
      if (from != dst) {
        backend.reduce_sum(c, from, target, dst);
      }
    };
    if (wants(0)) { // dA = reduce(dY (op) ...)
      float* da = d_in[0]->data.data();
      switch (*b) {
      case Binary::add:
      case Binary::sub: backend.reduce_sum(c, dy, ad, da); break;
      case Binary::mul:
      case Binary::div: {
        float* t = into(ad, da);
        backend.binary(*b, c, dy, bd, buf.inputs[1]->data.data(), c, t);
        sum_into(ad, t, da);
        break;
      }
      }
    }
    if (wants(1)) {
      float* db = d_in[1]->data.data();
      switch (*b) {
      case Binary::add: backend.reduce_sum(c, dy, bd, db); break;
      case Binary::sub:
        backend.reduce_sum(c, dy, bd, db);
        backend.synchronize(); // the host negates what the kernel wrote
        for (auto& v : d_in[1]->data) {
          v = -v;
        }
        break;
      case Binary::mul: {
        float* t = into(bd, db);
        backend.binary(Binary::mul, c, dy, ad, buf.inputs[0]->data.data(), c, t);
        sum_into(bd, t, db);
        break;
      }
      case Binary::div: { // dB = -dY * A / B^2 = -(dY * Y) / B
        float* t = into(bd, db);
        backend.binary(Binary::mul, c, dy, c, buf.outputs[0]->data.data(), c, t);
        backend.binary(Binary::div, c, t, bd, buf.inputs[1]->data.data(), c, t);
        sum_into(bd, t, db);
        backend.synchronize();
        for (auto& v : d_in[1]->data) {
          v = -v;
        }
        break;
      }
      }
    }
  } else if (op.type == "Softmax") {
    if (wants(0)) {
      const Dims d = buf.outputs[0]->extents();
      backend.softmax_backward(d, softmax_axis(op, d.size()), buf.outputs[0]->data.data(), d_out[0]->data.data(),
                               d_in[0]->data.data());
    }
  } else if (op.type == "Gemm") {
    const auto a = gemm_attrs(op, buf);
    const auto& s = a.shape;
    const float* A = buf.inputs[0]->data.data();
    const float* B = buf.inputs[1]->data.data();
    const float* dy = d_out[0]->data.data();
    if (wants(0)) {
      float* da = d_in[0]->data.data();
      if (!a.trans_a) { // dA[m, k] = dY . B'^T
        backend.matmul({1, s.m, s.k, s.n}, dy, false, B, !a.trans_b, da);
      } else { // dA[k, m] = B' . dY^T
        backend.matmul({1, s.k, s.m, s.n}, B, a.trans_b, dy, true, da);
      }
      backend.synchronize();
      scale_in_place(da, d_in[0]->elements(), a.alpha);
    }
    if (wants(1)) {
      float* db = d_in[1]->data.data();
      if (!a.trans_b) { // dB[k, n] = A'^T . dY
        backend.matmul({1, s.k, s.n, s.m}, A, !a.trans_a, dy, false, db);
      } else { // dB[n, k] = dY^T . A'
        backend.matmul({1, s.n, s.k, s.m}, dy, true, A, a.trans_a, db);
      }
      backend.synchronize();
      scale_in_place(db, d_in[1]->elements(), a.alpha);
    }
    if (wants(2)) {
      Shard& dc = *d_in[2];
      if (a.adds_bias) { // only the rank that added C: the replica reduction over k then counts it once
        const Dims c = d_out[0]->extents();
        backend.reduce_sum(c, dy, aligned(dc.extents(), c.size()), dc.data.data());
        backend.synchronize();
        scale_in_place(dc.data.data(), dc.elements(), a.beta);
      } else {
        std::fill(dc.data.begin(), dc.data.end(), 0.F);
      }
    }
  } else if (op.type == "LayerNormalization") {
    const auto ln = layer_norm_shape(op, buf.inputs[0]->extents());
    Floats d_scale(static_cast<std::size_t>(ln.norm)), d_shift(static_cast<std::size_t>(ln.norm));
    Floats dx(wants(0) ? 0 : static_cast<std::size_t>(ln.rows * ln.norm));
    backend.layer_norm_backward(ln.rows, ln.norm, ln.epsilon, buf.inputs[0]->data.data(), buf.inputs[1]->data.data(),
                                d_out[0]->data.data(), wants(0) ? d_in[0]->data.data() : dx.data(),
                                wants(1) ? d_in[1]->data.data() : d_scale.data(),
                                wants(2) ? d_in[2]->data.data() : d_shift.data());
  } else if (is_remap(op.type)) {
    if (wants(0)) {
      // Gather is a scatter-add: an element read by several outputs (an embedding row) sums their
      // gradients. Transpose, Split and views read every input element once: when their output
      // gradients hold as many elements as the input's, each element of dx is written once, with
      // no zero fill before (the fill and the adds made Transpose's backward 1.5 times its forward).
      Shard& dx = *d_in[0];
      std::int64_t covered = 0;
      bool all = true;
      for (const Shard* dy : d_out) {
        all = all && dy != nullptr;
        covered += dy != nullptr ? dy->elements() : 0;
      }
      const bool write = op.type != "Gather" && all && covered == dx.elements();
      bool tiled = false;
      if (write && op.type == "Transpose") { // dX is dY transposed back
        const auto perm = remap_source(g, op, buf, 0).perm;
        std::vector<std::int64_t> inverse(perm.size());
        for (std::size_t d = 0; d < perm.size(); ++d) {
          inverse[static_cast<std::size_t>(perm[d])] = static_cast<std::int64_t>(d);
        }
        tiled = tiled_transpose(inverse, *d_out[0], dx);
      }
      if (!write) {
        std::fill(dx.data.begin(), dx.data.end(), 0.F);
      }
      for (std::size_t k = 0; k < d_out.size() && !tiled; ++k) {
        if (d_out[k] == nullptr) {
          continue;
        }
        const Shard& dy = *d_out[k];
        float* to = dx.data.data();
        const float* from = dy.data.data();
        const RemapSource source = remap_source(g, op, buf, k);
        // The runs' input offsets are into the input's block: dX must hold that block to take them.
        if (op.type == "Split" && dx.block.begin == buf.inputs[0]->block.begin &&
            dx.block.end == buf.inputs[0]->block.end &&
            split_runs(source, dx, dy, [&](std::int64_t o, std::int64_t i, std::int64_t n) {
              if (write) {
                std::copy_n(from + o, n, to + i);
              } else {
                std::transform(from + o, from + o + n, to + i, to + i, std::plus<>());
              }
            })) {
          continue;
        }
        remap(op, *buf.inputs[0], dy, source, [&](std::int64_t o, std::int64_t i, std::int64_t n, std::int64_t s) {
          if (write) {
            for (std::int64_t j = 0; j < n; ++j) {
              to[i + j * s] = from[o + j];
            }
          } else {
            for (std::int64_t j = 0; j < n; ++j) {
              to[i + j * s] += from[o + j];
            }
          }
        });
      }
    }
  } else if (op.type == "Concat") {
    concat_runs(op, buf, *d_out[0], [&](std::size_t j, std::int64_t from, std::int64_t to, std::int64_t n) {
      if (wants(j)) {
        std::copy_n(d_out[0]->data.begin() + to, n, d_in[j]->data.begin() + from);
      }
    });
  } else if (op.type == "Cast") {
    if (wants(0)) {
      d_in[0]->data = d_out[0]->data;
    }
  } else if (op.type == "Where") {
    const Dims c = d_out[0]->extents();
    const auto cond = broadcast_offsets(aligned(buf.inputs[0]->extents(), c.size()), c);
    for (std::size_t i = 1; i < 3; ++i) {
      if (!wants(i)) {
        continue;
      }
      backend.synchronize(); // the previous input's reduction has finished before the host writes again
      Floats full(d_out[0]->data);
      for (std::size_t e = 0; e < full.size(); ++e) {
        const bool picked = buf.inputs[0]->data[static_cast<std::size_t>(cond[e])] != 0.F;
        full[e] = picked == (i == 1) ? full[e] : 0.F;
      }
      backend.reduce_sum(c, full.data(), aligned(d_in[i]->extents(), c.size()), d_in[i]->data.data());
    }
  } else if (is_comparison(op.type) || op.type == "Constant") {
    // No gradient flows through a comparison or into a constant.
  } else if (cnn::handles(op.type)) {
    cnn::backward(backend, g, id, buf, d_out, d_in);
  } else if (rnn::handles(op.type)) {
    rnn::backward(backend, g, id, buf, d_out, d_in);
  } else {
    std::int64_t bytes = 0;
    for (const auto* s : d_out) {
      bytes += s != nullptr ? 2 * s->elements() * 4 : 0;
    }
    for (const auto* s : d_in) {
      bytes += s != nullptr ? s->elements() * 4 : 0;
    }
    backend.memory_bound(bytes);
  }
}

} // namespace partita::runtime
