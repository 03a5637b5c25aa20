#pragma once

// The simulated iteration as Chrome Trace Event JSON, which Perfetto and chrome://tracing open:
// one process per device, one thread per stream (compute, communication), a complete event per
// task and device, the critical path marked in each event's args, and a memory counter per device.

#include "partita/graph/graph.h"
#include "partita/sim/simulate.h"

#include <filesystem>
#include <string>

namespace partita::sim {

std::string chrome_trace(const graph::Graph& g, const TaskGraph& tasks, const Result& result);

// Writes chrome_trace() to `path` atomically; throws partita::Error naming the path on failure.
void write_chrome_trace(const std::filesystem::path& path, const graph::Graph& g, const TaskGraph& tasks,
                        const Result& result);

} // namespace partita::sim
