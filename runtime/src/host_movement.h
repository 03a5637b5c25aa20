#pragma once

// The data-movement kernels of the Backend (copy, scale, fill, gather, select) as host loops: the
// CPU backend's implementation, and the layout arithmetic every backend shares (strided_copy).

#include "kernel_shapes.h"
#include "rounding.h"

#include <cstdint>

namespace partita::runtime::host {

// dst = src (or dst += src) over the box; rows that are dense in both buffers copy as runs, a
// transpose copies 32 x 32 tiles so that both reads and writes stay within a few cache lines.
void copy(const StridedCopy& c, const float* src, float* dst, bool accumulate);
// Writes (or adds) `run` consecutive floats of `in` to `out`.
void put_run(const float* in, std::int64_t run, float* out, bool accumulate);
void scale(std::int64_t n, float a, const float* x, float* y);
void fill(std::int64_t n, float value, float* y);
// y = x rounded to the format (rounding.h); y may be x.
void round_into(Rounding r, std::int64_t n, const float* x, float* y);
// flag[0] = 1 where any of the n floats is infinite or NaN.
void flag_nonfinite(std::int64_t n, const float* x, float* flag);
// Throws partita::Error on an index outside the axis.
void gather(const GatherShape& s, const float* data, const float* indices, float* y);
// Adds in the order of dy's elements (row-major), so that a row read by several indices sums its
// gradients in the same order on every run.
void gather_backward(const GatherShape& s, const float* indices, const float* dy, float* d_data);
void select(Select kind, const Dims& y_dims, const Dims& a_dims, const float* a, const Dims& b_dims, const float* b,
            const Dims& c_dims, const float* c, float* y);

} // namespace partita::runtime::host
