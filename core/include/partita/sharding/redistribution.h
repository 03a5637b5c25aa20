#pragma once

// What must move when a producer's output layout differs from its consumer's input layout,
// computed in general from the two layouts: every consumer device needs a block; what it does
// not already hold (as a producer device) it receives. No special cases per op pair.

#include "partita/sharding/config.h"

#include <algorithm>
#include <span>
#include <vector>

namespace partita::sharding {

enum class Pattern : std::uint8_t {
  none,       // every device already holds what it needs
  all_gather, // consumers need more of a dim the producer partitioned
  all_to_all, // the partitioned dim changes
  slice,      // consumers need less: a local slice, nothing moves
  send_recv,  // the two ops sit on different devices (e.g. pipeline stages)
  mixed,
};
std::string_view pattern_name(Pattern p);

// Sets of devices in one buffer (a move has up to one group per device, and the search computes
// millions of moves): group i is the devices from ends[i - 1] to ends[i].
class DeviceGroups {
public:
  class Iterator {
  public:
    Iterator(const DeviceGroups* groups, std::size_t i) : m_groups(groups), m_i(i) {}
    std::span<const int> operator*() const { return (*m_groups)[m_i]; }
    Iterator& operator++() {
      ++m_i;
      return *this;
    }
    bool operator==(const Iterator&) const = default;

  private:
    const DeviceGroups* m_groups;
    std::size_t m_i;
  };

  std::size_t size() const { return m_ends.size(); }
  bool empty() const { return m_ends.empty(); }
  std::span<const int> operator[](std::size_t i) const {
    const std::size_t begin = i == 0 ? 0 : m_ends[i - 1];
    return {m_devices.data() + begin, m_ends[i] - begin};
  }
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, m_ends.size()}; }
  // Appends a group of the devices given.
  void push_back(std::span<const int> group) {
    m_devices.insert(m_devices.end(), group.begin(), group.end());
    m_ends.push_back(m_devices.size());
  }
  // Appends an empty group; add() puts a device into the last group.
  void open() { m_ends.push_back(m_devices.size()); }
  void add(int device) {
    m_devices.push_back(device);
    ++m_ends.back();
  }
  void reserve(std::size_t groups, std::size_t devices) {
    m_ends.reserve(groups);
    m_devices.reserve(devices);
  }
  void clear() {
    m_devices.clear();
    m_ends.clear();
  }
  // Keeps, in order, the groups i for which keep(i) holds (asked before anything moves).
  template <class Keep> void keep_if(Keep keep) {
    std::size_t kept = 0, written = 0, begin = 0;
    for (std::size_t i = 0; i < m_ends.size(); ++i) {
      const std::size_t end = m_ends[i];
      if (keep(i)) {
        std::copy(m_devices.begin() + static_cast<std::ptrdiff_t>(begin),
                  m_devices.begin() + static_cast<std::ptrdiff_t>(end),
                  m_devices.begin() + static_cast<std::ptrdiff_t>(written));
        written += end - begin;
        m_ends[kept++] = written;
      }
      begin = end;
    }
    m_ends.resize(kept);
    m_devices.resize(written);
  }
  // Every device of every group, group after group.
  const std::vector<int>& devices() const { return m_devices; }
  // Group sizes in order: what write_groups fills by index (the buffer sized to their sum).
  void assign_sizes(std::span<const std::size_t> sizes);
  int& at(std::size_t group, std::size_t k) { return m_devices[(group == 0 ? 0 : m_ends[group - 1]) + k]; }
  std::vector<std::vector<int>> lists() const;
  bool operator==(const DeviceGroups&) const = default;

private:
  std::vector<int> m_devices;
  std::vector<std::size_t> m_ends;
};

struct Redistribution {
  Pattern pattern = Pattern::none;
  double max_bytes_in = 0; // the most any one device receives
  double total_bytes = 0;  // received over all devices
  // The largest block any consumer device assembles (what it holds itself and what it receives);
  // where the layouts differ it is written in full, a memory-bound copy beside the transfer.
  double max_block_bytes = 0;
  // Devices that exchange data with each other, as groups (for the alpha term and link class).
  DeviceGroups groups;
};

// A consumer device gets each cell of the producer's layout it lacks from one holder: the one of
// its own replica. Positions of the producer's grid that differ only in the coordinates of the
// axes that cut the tensor hold the cells of one replica; replica_base names it (the position with
// those coordinates set to 0; a copy of the grid keeps its offset). A consumer that is one of the
// producer's devices is of its own position's replica; another, of the replica of its position in
// its own device list modulo the producer's device count. So a transfer runs between devices that
// differ only where the tensor is cut: inside a node when those axes are (the last grid axes
// vary fastest, over neighbouring ids). partita-run exchanges so too.
int replica_base(const TensorLayout& layout, const Config& config, int position);

// A device list may hold several copies of its grid (a multiple of the config's devices; device
// i sits at grid position i % config.devices()): every copy holds the same blocks.
// `from` is the producer's output layout under `from_config` on `from_devices`; `to` the
// consumer's input layout under `to_config` on `to_devices` (device ids of the cluster).
// A device that holds any copy of an element counts as holding it. A producer layout with
// partial_axes is taken as already reduced over them (the producing op's forward reduction).
// Throws partita::Error when shapes differ, a device list does not fit its config, or a device
// is listed twice on one side.
//
// `node_bits` >= 0 asks for the groups only up to moves between nodes of 2^node_bits devices
// (device d on node d >> node_bits), for a caller that prices each way groups sit on their nodes
// once: where both sides are on devices 0 .. N-1 with every split a power of two, a device index's
// bits at or above node_bits that neither side's blocks are read from change nothing but the nodes,
// so only the groups whose devices have those bits 0 are listed (every other group is one of them
// moved by whole nodes, sitting on its nodes alike, and comes after it in the order of first
// devices). The byte counts and pattern are those of every device. Elsewhere every group is listed.
// `alike_by_xor`, for a caller that prices a group by how many of its devices each node holds (a
// switched node: every device of a node on the same links), lists fewer still: where groups are
// one another moved by an exclusive or of the device ids with a constant, which keeps those counts
// up to the nodes' order, one of each such set is listed (in the closed form, every dim a whole
// number of both sides' parts, the groups of the devices whose non-cutting bits are 0; where a
// split does not divide a dim, those of the devices whose bits that neither side reads are 0).
Redistribution redistribute(const TensorLayout& from, const Config& from_config, std::span<const int> from_devices,
                            const TensorLayout& to, const Config& to_config, std::span<const int> to_devices,
                            int node_bits = -1);
// The same into `out`, reusing its buffers (the search computes hundreds of thousands).
void redistribute(const TensorLayout& from, const Config& from_config, std::span<const int> from_devices,
                  const TensorLayout& to, const Config& to_config, std::span<const int> to_devices, int node_bits,
                  Redistribution& out, bool alike_by_xor = false);
// Both ways at once: `forward` from `from` to `to`, `backward` from `to` to `from` (a move and
// its gradient). The same as two calls, in about the time of one where the blocks are uneven
// (both walk the same devices and read the same parts).
void redistribute_both(const TensorLayout& from, const Config& from_config, std::span<const int> from_devices,
                       const TensorLayout& to, const Config& to_config, std::span<const int> to_devices, int node_bits,
                       Redistribution& forward, Redistribution& backward, bool alike_by_xor = false);

} // namespace partita::sharding
