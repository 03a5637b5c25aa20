#include "halo.h"

#include "collectives.h"
#include "op_kernels.h"

#include "partita/cost/op_cost.h"

#include <algorithm>

namespace partita::runtime {
namespace {

// Apart from the tags other point-to-point traffic might use on the same communicator.
constexpr int halo_tag = 0x4a10;

bool contains(const sharding::Block& outer, const sharding::Block& inner) {
  for (std::size_t d = 0; d < outer.begin.size(); ++d) {
    if (inner.begin[d] < outer.begin[d] || inner.end[d] > outer.end[d]) {
      return false;
    }
  }
  return true;
}

// Posts every receive into `in` and every send from `out` (packed in piece order), then waits.
void transfer(const std::vector<Halo::Piece>& sends, const std::vector<std::vector<float>>& out,
              const std::vector<Halo::Piece>& receives, std::vector<std::vector<float>>& in, MPI_Comm comm) {
  std::vector<MPI_Request> requests;
  requests.reserve(sends.size() + receives.size());
  for (std::size_t i = 0; i < receives.size(); ++i) {
    in[i].resize(static_cast<std::size_t>(receives[i].region.elements()));
    requests.emplace_back();
    check_mpi(MPI_Irecv(in[i].data(), static_cast<int>(in[i].size()), MPI_FLOAT, receives[i].peer, halo_tag, comm,
                        &requests.back()),
              "MPI_Irecv (halo)");
  }
  for (std::size_t i = 0; i < sends.size(); ++i) {
    requests.emplace_back();
    check_mpi(MPI_Isend(out[i].data(), static_cast<int>(out[i].size()), MPI_FLOAT, sends[i].peer, halo_tag, comm,
                        &requests.back()),
              "MPI_Isend (halo)");
  }
  check_mpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall (halo)");
}

std::vector<float> packed(const Shard& from, const sharding::Block& region) {
  std::vector<float> v(static_cast<std::size_t>(region.elements()));
  pack(from, region, v.data());
  return v;
}

} // namespace

std::optional<Halo> plan_halo(const graph::Graph& g, graph::OpId id, const sharding::TensorLayout& x_layout,
                              const sharding::TensorLayout& y_layout, const sharding::Config& config,
                              std::span<const int> devices, int me) {
  const int k = config.devices();
  const auto it = std::find(devices.begin(), devices.end(), me);
  if (it == devices.end()) {
    return std::nullopt;
  }
  const auto block = [&](int pos) { return sharding::block_of(x_layout, config, pos % k); };
  const auto region = [&](int pos) {
    return window_input_region(g, id, block(pos), sharding::block_of(y_layout, config, pos % k));
  };
  bool needed = false;
  for (int pos = 0; pos < k && !needed; ++pos) {
    needed = !contains(block(pos), region(pos));
  }
  if (!needed) {
    return std::nullopt;
  }
  // The neighbours: ranks of the same copy that differ only along the split spatial dims.
  std::vector<int> axes;
  for (std::size_t j = 2; j < x_layout.dim_axis.size(); ++j) {
    if (x_layout.dim_axis[j] >= 0 && x_layout.parts[j] > 1) {
      axes.push_back(x_layout.dim_axis[j]);
    }
  }
  std::vector<int> group;
  for (auto& candidate : cost::device_groups(config, devices, axes, false)) {
    if (std::find(candidate.begin(), candidate.end(), me) != candidate.end()) {
      group = std::move(candidate);
    }
  }
  const int mine = static_cast<int>(it - devices.begin());
  Halo h;
  const auto my_block = block(mine);
  const auto my_region = region(mine);
  h.value = make_shard(my_region);
  h.gradient = make_shard(my_region);
  for (const int peer : group) {
    if (peer == me) {
      continue;
    }
    const int pos = static_cast<int>(std::find(devices.begin(), devices.end(), peer) - devices.begin());
    auto in = intersect(my_region, block(pos));
    if (!is_empty(in)) {
      h.bytes_in += static_cast<double>(in.elements()) * 4;
      h.receives.push_back({peer, std::move(in)});
    }
    auto out = intersect(region(pos), my_block);
    if (!is_empty(out)) {
      h.sends.push_back({peer, std::move(out)});
    }
  }
  return h;
}

void exchange_halo(Halo& halo, const Shard& own, MPI_Comm comm) {
  const auto local = intersect(halo.value.block, own.block);
  if (!is_empty(local)) {
    unpack(halo.value, local, packed(own, local).data(), false);
  }
  std::vector<std::vector<float>> out, in(halo.receives.size());
  for (const auto& piece : halo.sends) {
    out.push_back(packed(own, piece.region));
  }
  transfer(halo.sends, out, halo.receives, in, comm);
  for (std::size_t i = 0; i < halo.receives.size(); ++i) {
    unpack(halo.value, halo.receives[i].region, in[i].data(), false);
  }
}

void return_halo_gradient(const Halo& halo, Shard& own_gradient, MPI_Comm comm) {
  fill_floats(own_gradient.data, 0.F);
  const auto local = intersect(halo.gradient.block, own_gradient.block);
  if (!is_empty(local)) {
    unpack(own_gradient, local, packed(halo.gradient, local).data(), true);
  }
  // The forward pass mirrored: what was received goes back, what was sent comes back to be added.
  std::vector<std::vector<float>> out, in(halo.sends.size());
  for (const auto& piece : halo.receives) {
    out.push_back(packed(halo.gradient, piece.region));
  }
  transfer(halo.receives, out, halo.sends, in, comm);
  for (std::size_t i = 0; i < halo.sends.size(); ++i) {
    unpack(own_gradient, halo.sends[i].region, in[i].data(), true);
  }
}

} // namespace partita::runtime
