#pragma once

// MPI sub-communicators, one per distinct device group the plan's reductions use, created once
// at start-up with MPI_Comm_split (a collective every rank enters in the same order), and the
// in-place sum all-reduce on them.

#include <mpi.h>

#include <cstdint>
#include <map>
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

// Sums `data` in place over the communicator (no-op for MPI_COMM_NULL).
void all_reduce_sum(MPI_Comm comm, float* data, std::int64_t count);

// Throws partita::Error naming the MPI call and the error string when `code` is not MPI_SUCCESS.
void check_mpi(int code, const char* what);

} // namespace partita::runtime
