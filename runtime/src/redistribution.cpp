#include "redistribution.h"

#include "collectives.h"

#include "partita/graph/error.h"
#include "partita/sharding/redistribution.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>

namespace partita::runtime {
namespace {

int position_in(const std::vector<int>& devices, int d) {
  const auto it = std::find(devices.begin(), devices.end(), d);
  return it == devices.end() ? -1 : static_cast<int>(it - devices.begin());
}

} // namespace

Exchange plan_exchange(const Placement& from, const Placement& to, int me, int ranks) {
  const int kf = from.config.devices();
  const int kt = to.config.devices();
  // Distinct source blocks and who holds each, with the replica each holder is of.
  std::vector<sharding::Block> blocks;
  std::vector<std::vector<int>> holders, replicas;
  for (std::size_t i = 0; i < from.devices.size(); ++i) {
    const auto b = sharding::block_of(from.layout, from.config, static_cast<int>(i) % kf);
    std::size_t j = 0;
    while (j < blocks.size() && (blocks[j].begin != b.begin || blocks[j].end != b.end)) {
      ++j;
    }
    if (j == blocks.size()) {
      blocks.push_back(b);
      holders.emplace_back();
      replicas.emplace_back();
    }
    holders[j].push_back(from.devices[i]);
    replicas[j].push_back(sharding::replica_base(from.layout, from.config, static_cast<int>(i)));
  }

  Exchange ex;
  std::map<int, std::vector<sharding::Block>> sends, receives;
  for (std::size_t c = 0; c < to.devices.size(); ++c) {
    const int consumer = to.devices[c];
    if (consumer < 0 || consumer >= ranks) {
      throw Error(fmt::format("device {} is not a rank (there are {} ranks)", consumer, ranks));
    }
    const auto need = sharding::block_of(to.layout, to.config, static_cast<int>(c) % kt);
    // The consumer's replica, as the cost model takes it (sharding::replica_base).
    const int own = position_in(from.devices, consumer);
    const int replica =
        sharding::replica_base(from.layout, from.config, own >= 0 ? own : static_cast<int>(c % from.devices.size()));
    for (std::size_t j = 0; j < blocks.size(); ++j) {
      auto region = intersect(need, blocks[j]);
      if (is_empty(region)) {
        continue;
      }
      const auto& h = holders[j];
      // Itself when it holds the block; otherwise the holder of its replica (every replica holds
      // every block; blocks alike in bounds, as empty ones, fall back on the first holder).
      const auto mine = std::find(replicas[j].begin(), replicas[j].end(), replica);
      const int holder = position_in(h, consumer) >= 0 ? consumer
                         : mine != replicas[j].end()   ? h[static_cast<std::size_t>(mine - replicas[j].begin())]
                                                       : h.front();
      if (holder != consumer) {
        ex.remote = true;
      }
      if (holder == me && consumer == me) {
        ex.local.push_back(region);
      } else if (holder == me) {
        sends[consumer].push_back(region);
      } else if (consumer == me) {
        receives[holder].push_back(std::move(region));
      }
    }
  }
  ex.send_counts.assign(static_cast<std::size_t>(ranks), 0);
  ex.recv_counts.assign(static_cast<std::size_t>(ranks), 0);
  ex.send_displs.assign(static_cast<std::size_t>(ranks), 0);
  ex.recv_displs.assign(static_cast<std::size_t>(ranks), 0);
  for (auto& [peer, regions] : sends) {
    for (auto& r : regions) {
      ex.send_counts[static_cast<std::size_t>(peer)] += static_cast<int>(r.elements());
      ex.sends.push_back({peer, std::move(r)});
    }
  }
  for (auto& [peer, regions] : receives) {
    for (auto& r : regions) {
      ex.recv_counts[static_cast<std::size_t>(peer)] += static_cast<int>(r.elements());
      ex.bytes_in += static_cast<double>(r.elements()) * 4;
      ex.receives.push_back({peer, std::move(r)});
    }
  }
  for (std::size_t r = 1; r < static_cast<std::size_t>(ranks); ++r) {
    ex.send_displs[r] = ex.send_displs[r - 1] + ex.send_counts[r - 1];
    ex.recv_displs[r] = ex.recv_displs[r - 1] + ex.recv_counts[r - 1];
  }
  return ex;
}

namespace {

// A buffer that grows to the largest size asked for and keeps it, uninitialized.
class Staging {
public:
  float* get(std::size_t n) {
    n = std::max<std::size_t>(n, 1); // a valid pointer for MPI even when nothing moves
    if (n > m_size) {
      m_data.reset(new float[n]); // NOLINT(cppcoreguidelines-owning-memory): default-initialized on purpose
      m_size = n;
    }
    return m_data.get();
  }

private:
  std::unique_ptr<float[]> m_data;
  std::size_t m_size = 0;
};

} // namespace

void run_exchange(const Exchange& ex, const Shard* source, Shard* target, bool accumulate, MPI_Comm comm,
                  Backend* backend) {
  if (!ex.local.empty() || !ex.sends.empty()) {
    if (source == nullptr) {
      throw Error("redistribution: this rank must send a block it does not hold");
    }
  }
  if ((!ex.local.empty() || !ex.receives.empty()) && target == nullptr) {
    throw Error("redistribution: this rank receives a block it has no room for");
  }
  for (const auto& region : ex.local) {
    if (backend != nullptr) {
      std::int64_t from = 0, to = 0;
      const StridedCopy c = region_copy(source->block, target->block, region, from, to);
      backend->copy(c, source->data.data() + from, target->data.data() + to, accumulate);
    } else {
      copy_region(*source, *target, region, accumulate);
    }
  }
  if (!ex.remote) {
    return;
  }
  if (backend != nullptr) {
    backend->synchronize(); // the host packs the source and unpacks into the target next
  }
  const auto total = [](const std::vector<int>& counts) {
    std::size_t n = 0;
    for (const int c : counts) {
      n += static_cast<std::size_t>(c);
    }
    return n;
  };
  // Staging for MPI, kept from one exchange to the next and never zero-filled: every element sent
  // is packed and every element received is read back.
  thread_local Staging out_staging, in_staging;
  float* out = out_staging.get(total(ex.send_counts));
  float* in = in_staging.get(total(ex.recv_counts));
  std::size_t offset = 0;
  for (const auto& piece : ex.sends) {
    pack(*source, piece.region, out + offset);
    offset += static_cast<std::size_t>(piece.region.elements());
  }
  check_mpi(MPI_Alltoallv(out, ex.send_counts.data(), ex.send_displs.data(), MPI_FLOAT, in, ex.recv_counts.data(),
                          ex.recv_displs.data(), MPI_FLOAT, comm),
            "MPI_Alltoallv");
  offset = 0;
  for (const auto& piece : ex.receives) {
    unpack(*target, piece.region, in + offset, accumulate);
    offset += static_cast<std::size_t>(piece.region.elements());
  }
}

void PendingSends::wait_all() {
  if (!requests.empty()) {
    check_mpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  }
  requests.clear();
  buffers.clear();
}

double post_sends(const Exchange& ex, const Shard* source, int tag, MPI_Comm comm, PendingSends& pending) {
  if (!ex.local.empty()) {
    throw Error("point-to-point exchange: holder and consumer are the same rank");
  }
  if (ex.sends.empty()) {
    return 0;
  }
  if (source == nullptr) {
    throw Error("point-to-point exchange: this rank must send a block it does not hold");
  }
  double bytes = 0;
  std::size_t p = 0;
  while (p < ex.sends.size()) {
    const int peer = ex.sends[p].peer;
    auto& buffer =
        pending.buffers.emplace_back(static_cast<std::size_t>(ex.send_counts[static_cast<std::size_t>(peer)]));
    std::size_t offset = 0;
    for (; p < ex.sends.size() && ex.sends[p].peer == peer; ++p) {
      pack(*source, ex.sends[p].region, buffer.data() + offset);
      offset += static_cast<std::size_t>(ex.sends[p].region.elements());
    }
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Isend(buffer.data(), static_cast<int>(buffer.size()), MPI_FLOAT, peer, tag, comm, &request),
              "MPI_Isend");
    pending.requests.push_back(request);
    bytes += static_cast<double>(buffer.size()) * 4;
  }
  return bytes;
}

void receive_pieces(const Exchange& ex, Shard* target, bool accumulate, int tag, MPI_Comm comm) {
  if (ex.receives.empty()) {
    return;
  }
  if (target == nullptr) {
    throw Error("point-to-point exchange: this rank receives a block it has no room for");
  }
  std::vector<std::vector<float>> buffers;
  std::vector<MPI_Request> requests;
  for (std::size_t p = 0; p < ex.receives.size();) {
    const int peer = ex.receives[p].peer;
    auto& buffer = buffers.emplace_back(static_cast<std::size_t>(ex.recv_counts[static_cast<std::size_t>(peer)]));
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Irecv(buffer.data(), static_cast<int>(buffer.size()), MPI_FLOAT, peer, tag, comm, &request),
              "MPI_Irecv");
    requests.push_back(request);
    while (p < ex.receives.size() && ex.receives[p].peer == peer) {
      ++p;
    }
  }
  check_mpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  std::size_t b = 0;
  for (std::size_t p = 0; p < ex.receives.size(); ++b) {
    const int peer = ex.receives[p].peer;
    std::size_t offset = 0;
    for (; p < ex.receives.size() && ex.receives[p].peer == peer; ++p) {
      unpack(*target, ex.receives[p].region, buffers[b].data() + offset, accumulate);
      offset += static_cast<std::size_t>(ex.receives[p].region.elements());
    }
  }
}

} // namespace partita::runtime
