#include "op_kernels.h"

#include "op_kernels_cnn.h"
#include "op_kernels_rnn.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

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

// Host copies of an op's shards for a walk on the host: the shards themselves where the host may
// touch them (the heap), copies where the tensor memory is the device's, the outputs written back
// by commit().
class HostShards {
public:
  const Shard* input(const Shard* s) {
    if (s == nullptr || host_accessible(s->data)) {
      return s;
    }
    return &m_copies.emplace_back(host_copy_of(*s));
  }
  OpBuffers inputs_of(const OpBuffers& buf) {
    OpBuffers hb;
    for (const Shard* s : buf.inputs) {
      hb.inputs.push_back(input(s));
    }
    return hb;
  }
  // `read`: the copy starts with the shard's values (a walk that writes only some elements).
  Shard& output(Shard& s, bool read) {
    if (host_accessible(s.data)) {
      return s;
    }
    Shard& copy = m_copies.emplace_back(read ? host_copy_of(s) : make_host_shard(s.block));
    m_written.emplace_back(&copy, &s);
    return copy;
  }
  void commit() {
    for (const auto& [from, to] : m_written) {
      copy_floats(from->data, 0, to->data, 0, from->data.size());
    }
  }

private:
  std::deque<Shard> m_copies;
  std::vector<std::pair<const Shard*, Shard*>> m_written;
};

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

Select select_of(const std::string& type) {
  static const std::map<std::string, Select, std::less<>> table{{"Greater", Select::greater},
                                                                {"Less", Select::less},
                                                                {"Equal", Select::equal},
                                                                {"GreaterOrEqual", Select::greater_or_equal},
                                                                {"LessOrEqual", Select::less_or_equal},
                                                                {"Where", Select::where}};
  return table.at(type);
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

// Concat: its axis is whole on every rank (core keeps it whole), so the output block is the
// inputs' blocks laid side by side along it. For each input, the box it fills in the output
// (read densely from the input, written with the output's row pitch) and the box's offset there.
std::vector<std::pair<StridedCopy, std::int64_t>> concat_boxes(const graph::Op& op, const OpBuffers& buf,
                                                               const Shard& y) {
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
  std::vector<std::pair<StridedCopy, std::int64_t>> boxes;
  std::int64_t at = 0;
  for (const auto* in : buf.inputs) {
    const std::int64_t run = in->extents()[a] * inner;
    boxes.emplace_back(strided_copy({outer, run}, {run, 1}, {ye[a] * inner, 1}), at);
    at += run;
  }
  return boxes;
}

// `to` = `from`, both blocks the same size (an element-wise op's layouts): a dense copy on the
// backend. Blocks of different sizes, as the plain assignment took them before, are copied on the
// host.
void copy_whole(Backend& backend, const Shard& from, Shard& to) {
  if (from.elements() == to.elements()) {
    backend.copy(contiguous_copy(to.elements()), from.data.data(), to.data.data(), false);
    return;
  }
  backend.synchronize();
  to.data = copy_of(from.data);
}

// The same box read the other way: from the buffer it was written to back into the one it was read
// from (a gradient).
StridedCopy reversed(StridedCopy c) {
  for (int d = 0; d < c.rank; ++d) {
    std::swap(c.src_stride[d], c.dst_stride[d]);
  }
  return c;
}

bool same_block(const sharding::Block& a, const sharding::Block& b) {
  return a.begin == b.begin && a.end == b.end;
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

// A remap op's output (Transpose, Split, a view) as one box of its input: the output block, read
// from the input with `box.src_stride` from `offset` on and written row-major. None when the blocks
// do not correspond that way (remap then walks them on the host).
struct RemapBox {
  StridedCopy box;
  std::int64_t offset = 0;
};

std::optional<RemapBox> remap_box(const graph::Graph& g, const graph::Op& op, const RemapSource& source,
                                  const Shard& in, const Shard& out) {
  const auto& ib = in.block;
  const auto& ob = out.block;
  const std::size_t r = ob.begin.size();
  const Dims ie = in.extents(), oe = out.extents();
  const Dims in_stride = row_major_strides(ie), out_stride = row_major_strides(oe);
  if (is_view(op.type)) {
    // The same elements in the same order (is_buffer_view's test): a dense copy.
    if (in.elements() != out.elements() ||
        walk_of(ib, g.tensor(op.inputs[0]).shape) != walk_of(ob, g.tensor(op.outputs[source.k]).shape)) {
      return std::nullopt;
    }
    return RemapBox{contiguous_copy(out.elements()), 0};
  }
  if (ib.begin.size() != r) {
    return std::nullopt;
  }
  if (op.type == "Transpose") { // out dim d is in dim perm[d], with the same begin and extent
    if (source.perm.size() != r) {
      return std::nullopt;
    }
    Dims step(r);
    for (std::size_t d = 0; d < r; ++d) {
      const auto p = static_cast<std::size_t>(source.perm[d]);
      if (p >= r || oe[d] != ie[p] || ob.begin[d] != ib.begin[p]) {
        return std::nullopt;
      }
      step[d] = in_stride[p];
    }
    return RemapBox{strided_copy(oe, step, out_stride), 0};
  }
  if (op.type == "Split") { // the input block off the axis, a part of it along the axis
    const std::size_t a = source.axis;
    if (a >= r) {
      return std::nullopt;
    }
    for (std::size_t d = 0; d < r; ++d) {
      if (d != a && (ib.begin[d] != ob.begin[d] || ib.end[d] != ob.end[d])) {
        return std::nullopt;
      }
    }
    const std::int64_t first = ob.begin[a] + source.split_offset, last = ob.end[a] + source.split_offset;
    if (first < ib.begin[a] || last > ib.end[a]) {
      return std::nullopt;
    }
    return RemapBox{strided_copy(oe, in_stride, out_stride), (first - ib.begin[a]) * in_stride[a]};
  }
  return std::nullopt;
}

// A Gather whose output block is the data block's off the axis and the indices' block along the
// index dims, with every row it may read held here or, for an embedding, a partial sum elsewhere,
// as the backend's gather. None for other blocks (remap then walks them on the host).
std::optional<GatherShape> gather_shape(const graph::Graph& g, const graph::Op& op, const RemapSource& source,
                                        const Shard& data, const Shard& indices, const Shard& out) {
  const auto& db = data.block;
  const auto& xb = indices.block;
  const auto& ob = out.block;
  const std::size_t rank = db.begin.size(), r = xb.begin.size(), axis = source.axis;
  const auto& shape = g.tensor(op.inputs[0]).shape;
  if (axis >= rank || ob.begin.size() != rank - 1 + r) {
    return std::nullopt;
  }
  const auto same = [](const sharding::Block& a, std::size_t da, const sharding::Block& b, std::size_t dbi) {
    return a.begin[da] == b.begin[dbi] && a.end[da] == b.end[dbi];
  };
  for (std::size_t d = 0; d < rank; ++d) {
    if (d < axis && !same(ob, d, db, d)) {
      return std::nullopt;
    }
    if (d > axis && !same(ob, d - 1 + r, db, d)) {
      return std::nullopt;
    }
  }
  for (std::size_t d = 0; d < r; ++d) {
    if (!same(ob, axis + d, xb, d)) {
      return std::nullopt;
    }
  }
  if (!source.embedding && (db.begin[axis] != 0 || db.end[axis] != shape[axis])) {
    return std::nullopt; // a row of an activation held elsewhere is an error remap reports
  }
  const Dims de = data.extents();
  GatherShape s;
  s.outer = product(de, 0, axis);
  s.inner = product(de, axis + 1);
  s.count = indices.elements();
  s.rows = de[axis];
  s.first_row = db.begin[axis];
  s.axis_size = shape[axis];
  return s;
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
    if (a.alpha != 1.F) {
      backend.scale(y.elements(), a.alpha, y.data.data(), y.data.data());
    }
    if (a.adds_bias) {
      const Dims c = y.extents();
      const Shard& given = *buf.inputs[2];
      Floats scaled;
      const float* bias = given.data.data();
      if (a.beta != 1.F) {
        scaled = uninitialized_floats(given.data.size());
        backend.scale(given.elements(), a.beta, bias, scaled.data());
        bias = scaled.data();
      }
      backend.binary(Binary::add, c, y.data.data(), aligned(given.extents(), c.size()), bias, c, y.data.data());
    }
  } else if (op.type == "LayerNormalization") {
    const auto ln = layer_norm_shape(op, buf.inputs[0]->extents());
    Floats zeros;
    const float* shift = nullptr;
    if (buf.inputs.size() > 2 && buf.inputs[2] != nullptr) {
      shift = buf.inputs[2]->data.data();
    } else {
      zeros = uninitialized_floats(static_cast<std::size_t>(ln.norm));
      backend.fill(ln.norm, 0.F, zeros.data());
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
      if (op.type == "Gather") {
        if (const auto shape = gather_shape(g, op, source, x, *buf.inputs[1], y)) {
          backend.gather(*shape, x.data.data(), buf.inputs[1]->data.data(), y.data.data());
          continue;
        }
      } else if (const auto box = remap_box(g, op, source, x, y)) {
        backend.copy(box->box, x.data.data() + box->offset, y.data.data(), false);
        continue;
      }
      // Blocks that are not one box of each other: walked on the host, once the kernels that wrote
      // the input have finished (on host copies where the tensor memory is the device's).
      backend.synchronize();
      HostShards host;
      const OpBuffers hb = host.inputs_of(buf);
      const Shard& hx = *hb.inputs[0];
      Shard& hy = host.output(y, true);
      const RemapSource host_source = remap_source(g, op, hb, k);
      if (source.embedding) { // embedding rows held elsewhere stay 0 (partial sums)
        std::fill(hy.data.begin(), hy.data.end(), 0.F);
      }
      float* to = hy.data.data();
      const float* from = hx.data.data();
      remap(op, hx, hy, host_source, [&](std::int64_t o, std::int64_t i, std::int64_t n, std::int64_t s) {
        if (s == 1) {
          std::copy_n(from + i, n, to + o);
          return;
        }
        for (std::int64_t j = 0; j < n; ++j) {
          to[o + j] = from[i + j * s];
        }
      });
      host.commit();
    }
  } else if (op.type == "Concat") {
    Shard& y = *buf.outputs[0];
    const auto boxes = concat_boxes(op, buf, y);
    for (std::size_t j = 0; j < boxes.size(); ++j) {
      backend.copy(boxes[j].first, buf.inputs[j]->data.data(), y.data.data() + boxes[j].second, false);
    }
  } else if (op.type == "Cast") {
    // Every tensor is held as fp32 (integers and booleans exactly): a cast is a copy.
    copy_whole(backend, *buf.inputs[0], *buf.outputs[0]);
  } else if (is_comparison(op.type) || op.type == "Where") {
    Shard& y = *buf.outputs[0];
    const Dims c = y.extents();
    const auto dims = [&](std::size_t i) { return aligned(buf.inputs[i]->extents(), c.size()); };
    const auto data = [&](std::size_t i) { return buf.inputs[i]->data.data(); };
    if (op.type == "Where") {
      backend.select(Select::where, c, dims(0), data(0), dims(1), data(1), dims(2), data(2), y.data.data());
    } else {
      backend.select(select_of(op.type), c, dims(0), data(0), dims(1), data(1), {}, nullptr, y.data.data());
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
      full = uninitialized_floats(static_cast<std::size_t>(product(c)));
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
        backend.scale(d_in[1]->elements(), -1.F, db, db);
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
        backend.scale(d_in[1]->elements(), -1.F, db, db);
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
      if (a.alpha != 1.F) {
        backend.scale(d_in[0]->elements(), a.alpha, da, da);
      }
    }
    if (wants(1)) {
      float* db = d_in[1]->data.data();
      if (!a.trans_b) { // dB[k, n] = A'^T . dY
        backend.matmul({1, s.k, s.n, s.m}, A, !a.trans_a, dy, false, db);
      } else { // dB[n, k] = dY^T . A'
        backend.matmul({1, s.n, s.k, s.m}, dy, true, A, a.trans_a, db);
      }
      if (a.alpha != 1.F) {
        backend.scale(d_in[1]->elements(), a.alpha, db, db);
      }
    }
    if (wants(2)) {
      Shard& dc = *d_in[2];
      if (a.adds_bias) { // only the rank that added C: the replica reduction over k then counts it once
        const Dims c = d_out[0]->extents();
        backend.reduce_sum(c, dy, aligned(dc.extents(), c.size()), dc.data.data());
        if (a.beta != 1.F) {
          backend.scale(dc.elements(), a.beta, dc.data.data(), dc.data.data());
        }
      } else {
        backend.fill(dc.elements(), 0.F, dc.data.data());
      }
    }
  } else if (op.type == "LayerNormalization") {
    const auto ln = layer_norm_shape(op, buf.inputs[0]->extents());
    // Scratch for an unwanted dx only: the kernels skip unwanted d_scale and d_shift.
    Floats dx = uninitialized_floats(wants(0) ? 0 : static_cast<std::size_t>(ln.rows * ln.norm));
    backend.layer_norm_backward(ln.rows, ln.norm, ln.epsilon, buf.inputs[0]->data.data(), buf.inputs[1]->data.data(),
                                d_out[0]->data.data(), wants(0) ? d_in[0]->data.data() : dx.data(),
                                wants(1) ? d_in[1]->data.data() : nullptr, wants(2) ? d_in[2]->data.data() : nullptr);
  } else if (is_remap(op.type)) {
    if (wants(0)) {
      // Gather is a scatter-add: an element read by several outputs (an embedding row) sums their
      // gradients. Transpose, Split and views read every input element once: when their output
      // gradients hold as many elements as the input's, each element of dx is written once, with
      // no zero fill before (the fill and the adds made Transpose's backward 1.5 times its forward).
      Shard& dx = *d_in[0];
      const Shard& x = *buf.inputs[0];
      std::int64_t covered = 0;
      bool all = true;
      for (const Shard* dy : d_out) {
        all = all && dy != nullptr;
        covered += dy != nullptr ? dy->elements() : 0;
      }
      const bool write = op.type != "Gather" && all && covered == dx.elements();
      std::optional<GatherShape> gather;
      if (op.type == "Gather" && d_out[0] != nullptr && same_block(dx.block, x.block)) {
        gather = gather_shape(g, op, remap_source(g, op, buf, 0), x, *buf.inputs[1], *d_out[0]);
      }
      if (gather) {
        backend.gather_backward(*gather, buf.inputs[1]->data.data(), d_out[0]->data.data(), dx.data.data());
      } else if (!write) {
        backend.fill(dx.elements(), 0.F, dx.data.data());
      }
      // Blocks that are not one box of each other are walked on the host, once the kernels have
      // finished (on host copies where the tensor memory is the device's, written back at the end).
      std::optional<HostShards> host;
      std::optional<OpBuffers> hb;
      Shard* hdx = nullptr;
      for (std::size_t k = 0; k < d_out.size() && !gather; ++k) {
        if (d_out[k] == nullptr) {
          continue;
        }
        const Shard& dy = *d_out[k];
        const RemapSource source = remap_source(g, op, buf, k);
        // The box's input offsets are into the input's block: dX must hold that block to take them.
        if (same_block(dx.block, x.block)) {
          if (const auto box = remap_box(g, op, source, x, dy)) {
            backend.copy(reversed(box->box), dy.data.data(), dx.data.data() + box->offset, !write);
            continue;
          }
        }
        if (!host) {
          backend.synchronize();
          host.emplace();
          hb = host->inputs_of(buf);
          hdx = &host->output(dx, true);
        }
        const Shard& hdy = *host->input(&dy);
        const RemapSource host_source = remap_source(g, op, *hb, k);
        float* to = hdx->data.data();
        const float* from = hdy.data.data();
        remap(op, *hb->inputs[0], hdy, host_source,
              [&](std::int64_t o, std::int64_t i, std::int64_t n, std::int64_t s) {
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
      if (host) {
        host->commit();
      }
    }
  } else if (op.type == "Concat") {
    const auto boxes = concat_boxes(op, buf, *d_out[0]);
    for (std::size_t j = 0; j < boxes.size(); ++j) {
      if (wants(j)) {
        backend.copy(reversed(boxes[j].first), d_out[0]->data.data() + boxes[j].second, d_in[j]->data.data(), false);
      }
    }
  } else if (op.type == "Cast") {
    if (wants(0)) {
      copy_whole(backend, *d_out[0], *d_in[0]);
    }
  } else if (op.type == "Where") {
    const Dims c = d_out[0]->extents();
    const Dims cond = aligned(buf.inputs[0]->extents(), c.size());
    // dY where the condition picked this input, 0 elsewhere, summed over its broadcast dims.
    Floats zero = uninitialized_floats(1);
    backend.fill(1, 0.F, zero.data());
    const Dims scalar(c.size(), 1);
    for (std::size_t i = 1; i < 3; ++i) {
      if (!wants(i)) {
        continue;
      }
      Floats full = uninitialized_floats(static_cast<std::size_t>(product(c)));
      const float* dy = d_out[0]->data.data();
      backend.select(Select::where, c, cond, buf.inputs[0]->data.data(), i == 1 ? c : scalar, i == 1 ? dy : zero.data(),
                     i == 1 ? scalar : c, i == 1 ? zero.data() : dy, full.data());
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
