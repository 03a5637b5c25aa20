#pragma once

// MPI sub-communicators, one per distinct device group the plan's reductions use, created once
// at start-up with MPI_Comm_split (a collective every rank enters in the same order), and the
// in-place sum all-reduce on them.

#include <mpi.h>

#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace partita::runtime {

using Group = std::vector<int>;       // ranks of `world`, in the core's order
using Partition = std::vector<Group>; // disjoint groups, as cost::device_groups returns them

class Communicators {
public:
  explicit Communicators(MPI_Comm world);
  ~Communicators();
  Communicators(const Communicators&) = delete;
  Communicators& operator=(const Communicators&) = delete;

  // Creates the communicators of every group of size > 1 not created before. Collective over
  // `world`: every rank passes the same partition.
  void add(const Partition& partition);

  // The communicator of `group`, MPI_COMM_NULL for a group of one. Throws when this rank is not
  // in the group or the group was never added.
  MPI_Comm get(const Group& group) const;

  int created() const { return static_cast<int>(m_comms.size()); }

private:
  MPI_Comm m_world;
  int m_rank = 0;
  std::map<Group, MPI_Comm> m_comms; // only groups this rank belongs to
  std::map<Group, bool> m_known;     // every group seen, members or not
};

// Sums `data` in place over the communicator (no-op for MPI_COMM_NULL), in chunks of
// all_reduce_chunk floats.
constexpr std::int64_t all_reduce_chunk = std::int64_t{1} << 20;
void all_reduce_sum(MPI_Comm comm, float* data, std::int64_t count);

// Nonblocking in-place sums (MPI_Iallreduce, in the chunks all_reduce_sum uses), each known by the
// number start() returns (from 1): test() moves every one on, wait(n) finishes sum n. The caller
// waits for every sum it started (partita-run ends the job with MPI_Abort where it cannot).
class StartedSums {
public:
  std::size_t start(MPI_Comm comm, float* data, std::int64_t count);
  void test();
  void wait(std::size_t started);

private:
  std::vector<std::vector<MPI_Request>> m_requests; // by number - 1; emptied once waited for
  std::size_t m_open = 0;                           // started and not waited for
};
// Backend::reduce_scatter_sum and Backend::all_gather over MPI (a ring of MPI_Sendrecv, timed by
// partita-calibrate as partita-run runs it; MPI_Allgatherv in place); no-ops for MPI_COMM_NULL but
// for the copy of the one slice.
void reduce_scatter_sum(MPI_Comm comm, const float* data, std::span<const std::int64_t> counts, float* mine);
void all_gather(MPI_Comm comm, std::span<const std::int64_t> counts, float* data);

// ZeRO's cut of a shard of n elements over `parts` replicas: consecutive slices whose lengths
// differ by at most one, the longer first.
std::vector<std::int64_t> slice_counts(std::int64_t n, int parts);

// Throws partita::Error naming the MPI call and the error string when `code` is not MPI_SUCCESS.
void check_mpi(int code, const char* what);

} // namespace partita::runtime
