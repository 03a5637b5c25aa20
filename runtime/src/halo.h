#pragma once

// The halo exchange of a window op (Conv, MaxPool, AveragePool) whose output spatial dims are
// split (spatial or domain parallelism, Gholami et al.): each rank's windows read, beyond its own
// block of the input, the boundary rows its neighbours along the split hold. Forward, those rows
// are fetched from the neighbours; backward, the gradient computed on them is sent back and added
// to the neighbours' input gradients. Point-to-point (MPI_Isend/MPI_Irecv) between the ranks of
// the op's spatial group only: ranks that differ in no other grid coordinate, so they hold the
// same batch and channel block. Core prices this as the op's "halo exchange" term.

#include "shard.h"

#include "partita/graph/graph.h"
#include "partita/sharding/config.h"

#include <mpi.h>

#include <optional>
#include <span>
#include <vector>

namespace partita::runtime {

struct Halo {
  struct Piece {
    int peer = 0; // rank of the communicator
    sharding::Block region;
  };
  std::vector<Piece> sends;    // forward: parts of this rank's block that a neighbour's windows read
  std::vector<Piece> receives; // forward: parts of the neighbours' blocks this rank's windows read
  Shard value;                 // the region this rank's windows read: its block's part and the halo
  Shard gradient;              // the gradient over that region, as the op's kernel computes it
  double bytes_in = 0;         // received per exchange
};

// The halo of input 0 of op `id` under `config` on `devices`, for rank `me` at grid position
// `position`; nullopt when no rank of the op reads outside its own block of input 0 (or the op
// is not a window op). `x_layout` and `y_layout` are the op's input 0 and output 0 layouts.
std::optional<Halo> plan_halo(const graph::Graph& g, graph::OpId id, const sharding::TensorLayout& x_layout,
                              const sharding::TensorLayout& y_layout, const sharding::Config& config,
                              std::span<const int> devices, int me);

// Forward: fills halo.value from this rank's block `own` and the neighbours' pieces.
void exchange_halo(Halo& halo, const Shard& own, MPI_Comm comm);

// Backward: `own_gradient` (this rank's block) becomes the sum of the halo gradients of every
// rank whose windows read it, this rank's included.
void return_halo_gradient(const Halo& halo, Shard& own_gradient, MPI_Comm comm);

} // namespace partita::runtime
