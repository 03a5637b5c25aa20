#pragma once

// Time of a collective on any group of devices: the alpha-beta model of the algorithm (ring, tree,
// hierarchical two-level), bottlenecked by the slowest link class the group spans and by NIC
// sharing when several groups cross nodes at once. Bandwidth figures follow nccl-tests'
// definitions (doc/PERFORMANCE.md): algbw = bytes / time, busbw = algbw x bus factor.

#include "partita/cluster/cluster.h"

#include <memory>
#include <span>
#include <string>

namespace partita::cluster {

enum class Collective : std::uint8_t { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv };
std::string_view collective_name(Collective c);

enum class Algorithm : std::uint8_t { automatic, ring, tree, hierarchical };
std::string_view algorithm_name(Algorithm a);

// nccl-tests' bus factor: all-reduce 2(p-1)/p; all-gather, reduce-scatter, all-to-all (p-1)/p;
// broadcast and send/recv 1.
double bus_factor(Collective c, int p);

// The size of one message a collective of `bytes` over p devices sends between two of them, which
// decides the protocol a link runs (Link::protocols): n/p for all-reduce, all-gather,
// reduce-scatter (a ring's chunk) and all-to-all (a peer's part); n for broadcast and send/recv.
double message_bytes(Collective c, double bytes, int p);

struct CollectiveCost {
  double seconds = 0;
  double latency_seconds = 0;            // the alpha terms
  double bandwidth_seconds = 0;          // the beta terms
  Algorithm algorithm = Algorithm::ring; // the one used (automatic picks the fastest); all-to-all and
                                         // send/recv are direct exchanges, reported as ring
  LinkKind bottleneck = LinkKind::shared_memory;
  double algbw = 0;    // bytes / seconds
  double busbw = 0;    // algbw x bus_factor
  std::string formula; // one sentence with the numbers, for the GUI's inspector

  auto operator<=>(const CollectiveCost&) const = default;
};

// `bytes` as nccl-tests counts it: the buffer for all-reduce, broadcast and send/recv; the whole
// gathered buffer (p x per-device part) for all-gather and reduce-scatter; the per-device send
// buffer for all-to-all. `devices` are distinct device ids; a group of one costs nothing.
// `concurrent_groups` groups of this shape run at the same time on the same nodes and share
// their NICs (e.g. the 8 data-parallel gradient all-reduces of a 8-way model-parallel layer).
// Throws partita::Error on a device id outside the cluster or a repeated id.
CollectiveCost collective_cost(const Cluster& cluster, Collective collective, std::span<const int> devices,
                               double bytes, Algorithm algorithm = Algorithm::automatic, int concurrent_groups = 1);

// The same numbers without the formula (left empty): for callers that price millions of
// collectives and show none of them (the per-layer search's redistribution tables).
CollectiveCost collective_cost_unexplained(const Cluster& cluster, Collective collective, std::span<const int> devices,
                                           double bytes, Algorithm algorithm = Algorithm::automatic,
                                           int concurrent_groups = 1);

// Collective costs remembered for one cluster. While a CollectiveMemo::Use made on a thread lives,
// collective_cost_unexplained() on that thread answers a collective it has priced before for the
// memo's cluster (the same collective, devices in the same order, bytes, algorithm and groups at
// once; on a switched cluster, whose collectives' costs read only how many of a group's devices each
// node holds, any group of ascending devices spread over its nodes alike) from memory. For callers that price the same
// collectives over and over against a cluster that does not change meanwhile (strategy::Evaluator, across a search's
// candidates).
class CollectiveMemo {
public:
  explicit CollectiveMemo(const Cluster& cluster);
  ~CollectiveMemo();
  CollectiveMemo(const CollectiveMemo&) = delete;
  CollectiveMemo& operator=(const CollectiveMemo&) = delete;

  // The memo in use on this thread until destroyed (the one in use before comes back then).
  class Use {
  public:
    explicit Use(CollectiveMemo& memo);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

  private:
    CollectiveMemo* m_previous;
  };

  std::size_t size() const; // collectives remembered

private:
  friend CollectiveCost collective_cost_unexplained(const Cluster&, Collective, std::span<const int>, double, Algorithm,
                                                    int);
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

} // namespace partita::cluster
