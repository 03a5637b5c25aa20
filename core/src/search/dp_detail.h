#pragma once

// What the exact and the bounded solvers of dp.h share: the problem's checks and its vertices' names.

#include "partita/search/dp.h"

#include <string>
#include <vector>

namespace partita::search::dp::detail {

// Throws partita::Error for a malformed problem (a table of the wrong size, a NaN cost, an edge to
// a missing vertex).
void validate(const Problem& p);

// "'name'", or "vertex 7" where the vertex has no name.
std::string vertex_name(const Problem& p, int v);

// `scope` with v moved to its end (the others in their order).
std::vector<int> scope_with_last(const std::vector<int>& scope, int v);

// Copies a table over `scope` (row-major: the last vertex fastest) to `out`, laid out over
// scope_with_last(scope, v): v's values side by side.
void copy_with_last(const Problem& p, const std::vector<int>& scope, const double* data, int v, double* out);

} // namespace partita::search::dp::detail
