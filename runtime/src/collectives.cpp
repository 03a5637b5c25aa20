#include "collectives.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

namespace partita::runtime {

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) {
    return;
  }
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(fmt::format("{} failed: {}", what, std::string(text, static_cast<std::size_t>(length))));
}

Communicators::Communicators(MPI_Comm world) : m_world(world) {
  check_mpi(MPI_Comm_rank(world, &m_rank), "MPI_Comm_rank");
}

Communicators::~Communicators() {
  for (auto& [group, comm] : m_comms) {
    MPI_Comm_free(&comm);
  }
}

void Communicators::add(const Partition& partition) {
  bool fresh = false;
  for (const auto& g : partition) {
    fresh = fresh || (g.size() > 1 && !m_known.contains(g));
  }
  if (!fresh) {
    return; // every rank reaches the same conclusion: no collective call
  }
  int color = MPI_UNDEFINED, key = 0;
  const Group* mine = nullptr;
  for (std::size_t i = 0; i < partition.size(); ++i) {
    const auto& g = partition[i];
    const auto it = std::find(g.begin(), g.end(), m_rank);
    if (g.size() > 1 && !m_known.contains(g) && it != g.end()) {
      color = static_cast<int>(i);
      key = static_cast<int>(it - g.begin());
      mine = &g;
    }
  }
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(m_world, color, key, &comm), "MPI_Comm_split");
  for (const auto& g : partition) {
    if (g.size() > 1) {
      m_known[g] = true;
    }
  }
  if (mine != nullptr) {
    m_comms[*mine] = comm;
  }
}

MPI_Comm Communicators::get(const Group& group) const {
  if (group.size() <= 1) {
    return MPI_COMM_NULL;
  }
  const auto it = m_comms.find(group);
  if (it == m_comms.end()) {
    throw Error(fmt::format("rank {}: no communicator for group [{}]", m_rank, fmt::join(group, ",")));
  }
  return it->second;
}

void all_reduce_sum(MPI_Comm comm, float* data, std::int64_t count) {
  if (comm == MPI_COMM_NULL) {
    return;
  }
  // MPI counts are int: reduce in chunks so that large shards stay correct.
  const std::int64_t chunk = INT_MAX / 2;
  for (std::int64_t off = 0; off < count; off += chunk) {
    const int n = static_cast<int>(std::min(chunk, count - off));
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + off, n, MPI_FLOAT, MPI_SUM, comm), "MPI_Allreduce");
  }
}

} // namespace partita::runtime
