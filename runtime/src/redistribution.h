#pragma once

// Moving a tensor between two placements (a producer's output layout on its devices, a
// consumer's input layout on its devices): every rank computes, from the two layouts and
// sharding::block_of, which region each consumer needs and which holder sends it, so that all
// ranks agree without talking. The data then moves in one MPI_Alltoallv. Backward, the same
// machinery moves gradients from the consumer's layout back to the producer's, adding them up.

#include "backend.h"
#include "shard.h"

#include "partita/sharding/config.h"

#include <mpi.h>

#include <vector>

namespace partita::runtime {

struct Placement {
  sharding::TensorLayout layout;
  sharding::Config config;
  std::vector<int> devices; // copies x config.devices() ranks, copy-major (strategy::OpAssignment)
};

struct Exchange {
  struct Piece {
    int peer = 0;
    sharding::Block region;
  };
  std::vector<Piece> sends;           // ordered by peer, then by region
  std::vector<Piece> receives;        // ordered by peer, then by region
  std::vector<sharding::Block> local; // regions this rank copies from its own source shard
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs; // elements, per rank
  bool remote = false; // some rank receives something (the same answer on every rank)
  double bytes_in = 0; // what this rank receives
};

// The exchange seen from rank `me` of a communicator of `ranks` ranks. Distinct blocks of the
// source are disjoint (a layout partitions its tensor); replicas of a block are interchangeable.
Exchange plan_exchange(const Placement& from, const Placement& to, int me, int ranks);

// Runs it: `source` is this rank's block under `from` (nullptr when it holds none), `target`
// its block under `to` (nullptr when it needs none). Collective over `comm` when ex.remote.
// With a backend, the regions this rank copies from itself are copied by its kernels (queued, not
// waited for: the caller synchronizes before it reads the target on the host); what travels over
// MPI is packed and unpacked on the host after the kernels that wrote the source have finished.
void run_exchange(const Exchange& ex, const Shard* source, Shard* target, bool accumulate, MPI_Comm comm,
                  Backend* backend = nullptr);

// The same exchange point to point, for holders and consumers that run at different times
// (pipeline stages): each peer's pieces travel as one message tagged `tag`.
struct PendingSends {
  std::vector<std::vector<float>> buffers; // alive until the requests complete
  std::vector<MPI_Request> requests;
  void wait_all();
};
// Packs and posts (MPI_Isend) what this rank sends; returns the bytes sent.
double post_sends(const Exchange& ex, const Shard* source, int tag, MPI_Comm comm, PendingSends& pending);
// Receives (MPI_Irecv, then waits for all) what this rank needs, written or added into `target`.
void receive_pieces(const Exchange& ex, Shard* target, bool accumulate, int tag, MPI_Comm comm);

} // namespace partita::runtime
