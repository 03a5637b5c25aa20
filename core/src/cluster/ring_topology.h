#pragma once

// The rate at which ring collectives move data among devices of one node: the switch port for a
// switched node; for a mesh of direct links (DGX-1), the rings that NCCL-style channels can lay
// over the lanes.

#include "partita/cluster/cluster.h"

#include <span>

namespace partita::cluster::detail {

struct RingRate {
  double bandwidth = 0; // bytes/s per device, all rings together
  double latency = 0;   // slowest hop's alpha
  LinkKind kind = LinkKind::shared_memory;
};

// `devices`: at least two distinct global ids, all on one node.
RingRate intra_node_ring(const Cluster& cluster, std::span<const int> devices);

// Seconds for an all-to-all inside one node in which every device sends `bytes_per_peer` to each
// of the others at once: a switch port carries all of a device's sends; direct lanes run in
// parallel; peers without a direct link share the fallback link.
struct AllToAll {
  double seconds = 0;                      // the transfer, without latency
  double latency = 0;                      // the slowest pair's alpha
  LinkKind kind = LinkKind::shared_memory; // the link class of the slowest transfer
};
AllToAll intra_node_all_to_all(const Cluster& cluster, std::span<const int> devices, double bytes_per_peer);

} // namespace partita::cluster::detail
