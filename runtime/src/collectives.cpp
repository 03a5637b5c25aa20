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
  // In chunks of 4 MiB: Open MPI 4.1's shared-memory all-reduce switches algorithm between 32 and
  // 128 MiB and drops from 5 to 0.4 GB/s there (bench/allreduce_bench.cpp: 64 MiB in 174 ms at
  // once, 14 ms in chunks); chunks also keep every count within MPI's int.
  for (std::int64_t off = 0; off < count; off += all_reduce_chunk) {
    const int n = static_cast<int>(std::min(all_reduce_chunk, count - off));
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + off, n, MPI_FLOAT, MPI_SUM, comm), "MPI_Allreduce");
  }
}

std::size_t StartedSums::start(MPI_Comm comm, float* data, std::int64_t count) {
  if (m_open == 0) {
    m_requests.clear();
  }
  auto& requests = m_requests.emplace_back();
  ++m_open;
  if (comm != MPI_COMM_NULL) {
    for (std::int64_t off = 0; off < count; off += all_reduce_chunk) {
      const int n = static_cast<int>(std::min(all_reduce_chunk, count - off));
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data + off, n, MPI_FLOAT, MPI_SUM, comm, &requests.emplace_back()),
                "MPI_Iallreduce");
    }
  }
  return m_requests.size();
}

void StartedSums::test() {
  for (auto& r : m_requests) {
    if (!r.empty()) {
      int done = 0;
      check_mpi(MPI_Testall(static_cast<int>(r.size()), r.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    }
  }
}

void StartedSums::wait(std::size_t started) {
  if (started == 0 || started > m_requests.size()) {
    return;
  }
  auto& r = m_requests[started - 1];
  check_mpi(MPI_Waitall(static_cast<int>(r.size()), r.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  r.clear();
  --m_open;
}

namespace {

std::vector<int> int_counts(std::span<const std::int64_t> counts, const char* what) {
  std::vector<int> out;
  for (const auto c : counts) {
    if (c < 0 || c > INT_MAX) {
      throw Error(fmt::format("{}: a slice of {} elements does not fit an MPI count", what, c));
    }
    out.push_back(static_cast<int>(c));
  }
  return out;
}

std::vector<int> displacements(const std::vector<int>& counts, const char* what) {
  std::vector<int> out(counts.size());
  std::int64_t at = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (at > INT_MAX) {
      throw Error(fmt::format("{}: a buffer of more than {} elements does not fit an MPI displacement", what, INT_MAX));
    }
    out[r] = static_cast<int>(at);
    at += counts[r];
  }
  return out;
}

} // namespace

// The ring (NCCL's, and Patarasuk and Yuan's): p - 1 steps; at step k each rank passes its running
// sum of segment (r - k - 1) mod p on to the next rank and adds its own part of segment
// (r - k - 2) mod p to what the previous rank passes it, so that after the last step the sum it
// holds is its own segment, whole. Each rank sends and receives (p - 1) / p of the buffer, as a
// reduce-scatter should. Open MPI 4.1's MPI_Reduce_scatter took twice an all-reduce's time on 2
// ranks of one host (4 MB: 1.37 ms against 0.72 ms, 2026-12-02), where it moves half the bytes.
void reduce_scatter_sum(MPI_Comm comm, const float* data, std::span<const std::int64_t> counts, float* mine) {
  if (comm == MPI_COMM_NULL) {
    if (!counts.empty()) {
      std::copy(data, data + counts[0], mine);
    }
    return;
  }
  int rank = 0, p = 1;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &p), "MPI_Comm_size");
  const auto n = int_counts(counts, "reduce-scatter");
  if (n.size() != static_cast<std::size_t>(p)) {
    throw Error(fmt::format("reduce-scatter: {} segments for a group of {}", n.size(), p));
  }
  const auto at = displacements(n, "reduce-scatter");
  if (p == 1) {
    std::copy(data, data + n[0], mine);
    return;
  }
  const auto segment = [&](int k) { return static_cast<std::size_t>(((k % p) + p) % p); };
  thread_local std::vector<float> sending, receiving;
  const std::size_t first = segment(rank - 1);
  sending.assign(data + at[first], data + at[first] + n[first]);
  for (int k = 0; k + 1 < p; ++k) {
    const std::size_t out = segment(rank - k - 1), in = segment(rank - k - 2);
    receiving.resize(static_cast<std::size_t>(n[in]));
    check_mpi(MPI_Sendrecv(sending.data(), n[out], MPI_FLOAT, (rank + 1) % p, 0, receiving.data(), n[in], MPI_FLOAT,
                           (rank + p - 1) % p, 0, comm, MPI_STATUS_IGNORE),
              "MPI_Sendrecv");
    float* sum = mine; // the last step's segment is this rank's own
    if (k + 2 < p) {
      sending.resize(static_cast<std::size_t>(n[in]));
      sum = sending.data();
    }
    const float* own = data + at[in];
    for (int i = 0; i < n[in]; ++i) {
      sum[i] = receiving[static_cast<std::size_t>(i)] + own[i];
    }
  }
}

void all_gather(MPI_Comm comm, std::span<const std::int64_t> counts, float* data) {
  if (comm == MPI_COMM_NULL) {
    return;
  }
  const auto n = int_counts(counts, "MPI_Allgatherv");
  const auto displs = displacements(n, "MPI_Allgatherv");
  check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, n.data(), displs.data(), MPI_FLOAT, comm),
            "MPI_Allgatherv");
}

std::vector<std::int64_t> slice_counts(std::int64_t n, int parts) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(std::max(parts, 1)), n / std::max(parts, 1));
  for (std::int64_t r = 0; r < n % std::max(parts, 1); ++r) {
    out[static_cast<std::size_t>(r)] += 1;
  }
  return out;
}

} // namespace partita::runtime
