#include "host_movement.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

namespace partita::runtime::host {

void put_run(const float* in, std::int64_t run, float* out, bool accumulate) {
  if (accumulate) {
    for (std::int64_t i = 0; i < run; ++i) {
      out[i] += in[i];
    }
  } else {
    std::copy_n(in, run, out);
  }
}

namespace {

// Calls visit(src offset, dst offset) for every combination of the dims not in `skip` (an
// odometer; once when there are none).
template <class Visit> void for_each_outer(const StridedCopy& c, int skip1, int skip2, Visit&& visit) {
  std::array<std::int64_t, max_copy_rank> idx{};
  while (true) {
    std::int64_t s = 0, t = 0;
    for (int d = 0; d < c.rank; ++d) {
      s += idx[static_cast<std::size_t>(d)] * c.src_stride[d];
      t += idx[static_cast<std::size_t>(d)] * c.dst_stride[d];
    }
    visit(s, t);
    int d = c.rank;
    while (d-- > 0) {
      if (d == skip1 || d == skip2) {
        continue;
      }
      if (++idx[static_cast<std::size_t>(d)] < c.extent[d]) {
        break;
      }
      idx[static_cast<std::size_t>(d)] = 0;
    }
    if (d < 0) {
      return;
    }
  }
}

} // namespace

void copy(const StridedCopy& c, const float* src, float* dst, bool accumulate) {
  if (c.elements() == 0) {
    return;
  }
  if (c.rank == 0) {
    dst[0] = accumulate ? dst[0] + src[0] : src[0];
    return;
  }
  const int last = c.rank - 1;
  if (c.src_stride[last] == 1 && c.dst_stride[last] == 1) { // dense rows: runs
    const std::int64_t run = c.extent[last];
    for_each_outer(c, last, last, [&](std::int64_t s, std::int64_t t) { put_run(src + s, run, dst + t, accumulate); });
    return;
  }
  int a = -1, q = -1; // the dims dense in the destination and in the source
  for (int d = 0; d < c.rank; ++d) {
    a = c.dst_stride[d] == 1 && a < 0 ? d : a;
    q = c.src_stride[d] == 1 && q < 0 ? d : q;
  }
  if (a >= 0 && q >= 0 && a != q) { // a transpose: 32 x 32 tiles, writes along a, reads along q
    constexpr std::int64_t tile = 32;
    const std::int64_t ni = c.extent[q], nj = c.extent[a], sq = c.dst_stride[q], sa = c.src_stride[a];
    for_each_outer(c, a, q, [&](std::int64_t in_base, std::int64_t out_base) {
      for (std::int64_t i0 = 0; i0 < ni; i0 += tile) {
        for (std::int64_t j0 = 0; j0 < nj; j0 += tile) {
          const std::int64_t i1 = std::min(ni, i0 + tile), j1 = std::min(nj, j0 + tile);
          for (std::int64_t i = i0; i < i1; ++i) {
            const float* from = src + in_base + i;
            float* to = dst + out_base + i * sq;
            if (accumulate) {
              for (std::int64_t j = j0; j < j1; ++j) {
                to[j] += from[j * sa];
              }
            } else {
              for (std::int64_t j = j0; j < j1; ++j) {
                to[j] = from[j * sa];
              }
            }
          }
        }
      }
    });
    return;
  }
  // Anything else: element by element along the last dim.
  const std::int64_t n = c.extent[last], ss = c.src_stride[last], ds = c.dst_stride[last];
  for_each_outer(c, last, last, [&](std::int64_t s, std::int64_t t) {
    for (std::int64_t j = 0; j < n; ++j) {
      dst[t + j * ds] = accumulate ? dst[t + j * ds] + src[s + j * ss] : src[s + j * ss];
    }
  });
}

void scale(std::int64_t n, float a, const float* x, float* y) {
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = x[i] * a;
  }
}

void fill(std::int64_t n, float value, float* y) {
  std::fill_n(y, n, value);
}

void round_into(Rounding r, std::int64_t n, const float* x, float* y) {
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = round_to(r, x[i]);
  }
}

void flag_nonfinite(std::int64_t n, const float* x, float* flag) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      flag[0] = 1;
      return;
    }
  }
}

namespace {

// The row of the data that index j names, relative to the rows this shard holds.
std::int64_t local_row(const GatherShape& s, const float* indices, std::int64_t j) {
  auto row = static_cast<std::int64_t>(std::llround(indices[j]));
  if (row < 0) {
    row += s.axis_size;
  }
  if (row < 0 || row >= s.axis_size) {
    throw Error(fmt::format("index {} is out of range for an axis of size {}", row, s.axis_size));
  }
  return row - s.first_row;
}

} // namespace

void gather(const GatherShape& s, const float* data, const float* indices, float* y) {
  for (std::int64_t j = 0; j < s.count; ++j) {
    const std::int64_t row = local_row(s, indices, j);
    const bool held = row >= 0 && row < s.rows;
    for (std::int64_t o = 0; o < s.outer; ++o) {
      float* to = y + (o * s.count + j) * s.inner;
      if (held) {
        std::copy_n(data + (o * s.rows + row) * s.inner, s.inner, to);
      } else {
        std::fill_n(to, s.inner, 0.F); // another rank's row: a partial sum of zero
      }
    }
  }
}

void gather_backward(const GatherShape& s, const float* indices, const float* dy, float* d_data) {
  std::fill_n(d_data, s.outer * s.rows * s.inner, 0.F);
  std::vector<std::int64_t> rows(static_cast<std::size_t>(s.count));
  for (std::int64_t j = 0; j < s.count; ++j) {
    rows[static_cast<std::size_t>(j)] = local_row(s, indices, j);
  }
  for (std::int64_t o = 0; o < s.outer; ++o) {
    for (std::int64_t j = 0; j < s.count; ++j) {
      const std::int64_t row = rows[static_cast<std::size_t>(j)];
      if (row >= 0 && row < s.rows) {
        put_run(dy + (o * s.count + j) * s.inner, s.inner, d_data + (o * s.rows + row) * s.inner, true);
      }
    }
  }
}

namespace {

// Calls f(i, offset in a, offset in b, offset in c) for every element of y, row-major.
template <class F> void broadcast_walk(const Dims& y, const Dims& a, const Dims& b, const Dims& c, F&& f) {
  const std::size_t r = y.size();
  const auto strides = [&](const Dims& in) {
    Dims s(r, 0);
    std::int64_t stride = 1;
    for (std::size_t d = r; d-- > 0;) {
      s[d] = in.empty() || in[d] == 1 ? 0 : stride;
      stride *= in.empty() ? 1 : in[d];
    }
    return s;
  };
  const Dims sa = strides(a), sb = strides(b), sc = strides(c);
  std::int64_t n = 1;
  for (const auto e : y) {
    n *= e;
  }
  std::vector<std::int64_t> idx(r, 0);
  std::int64_t oa = 0, ob = 0, oc = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    f(i, oa, ob, oc);
    for (std::size_t d = r; d-- > 0;) {
      oa += sa[d];
      ob += sb[d];
      oc += sc[d];
      if (++idx[d] < y[d]) {
        break;
      }
      oa -= sa[d] * y[d];
      ob -= sb[d] * y[d];
      oc -= sc[d] * y[d];
      idx[d] = 0;
    }
  }
}

template <class Test>
void compare(const Dims& y_dims, const Dims& a_dims, const float* a, const Dims& b_dims, const float* b, float* y,
             Test test) {
  broadcast_walk(y_dims, a_dims, b_dims, {}, [&](std::int64_t i, std::int64_t ia, std::int64_t ib, std::int64_t) {
    y[i] = test(a[ia], b[ib]) ? 1.F : 0.F;
  });
}

} // namespace

void select(Select kind, const Dims& y_dims, const Dims& a_dims, const float* a, const Dims& b_dims, const float* b,
            const Dims& c_dims, const float* c, float* y) {
  switch (kind) {
  case Select::greater: compare(y_dims, a_dims, a, b_dims, b, y, [](float u, float v) { return u > v; }); return;
  case Select::less: compare(y_dims, a_dims, a, b_dims, b, y, [](float u, float v) { return u < v; }); return;
  case Select::equal: compare(y_dims, a_dims, a, b_dims, b, y, [](float u, float v) { return u == v; }); return;
  case Select::greater_or_equal:
    compare(y_dims, a_dims, a, b_dims, b, y, [](float u, float v) { return u >= v; });
    return;
  case Select::less_or_equal: compare(y_dims, a_dims, a, b_dims, b, y, [](float u, float v) { return u <= v; }); return;
  case Select::where:
    broadcast_walk(y_dims, a_dims, b_dims, c_dims,
                   [&](std::int64_t i, std::int64_t ia, std::int64_t ib, std::int64_t ic) {
                     y[i] = a[ia] != 0.F ? b[ib] : c[ic];
                   });
    return;
  }
}

} // namespace partita::runtime::host
