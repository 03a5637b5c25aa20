#pragma once

// What the exact and the bounded solvers of dp.h share: the problem's checks and its vertices' names.

#include "partita/search/dp.h"

#include <string>

namespace partita::search::dp::detail {

// Throws partita::Error for a malformed problem (a table of the wrong size, a NaN cost, an edge to
// a missing vertex).
void validate(const Problem& p);

// "'name'", or "vertex 7" where the vertex has no name.
std::string vertex_name(const Problem& p, int v);

} // namespace partita::search::dp::detail
