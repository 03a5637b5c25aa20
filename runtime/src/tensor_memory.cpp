#include "tensor_memory.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <new>

namespace partita::runtime {
namespace {

// The heap with every buffer starting 16 bytes past a 64-byte boundary. oneDNN's sgemm chooses
// by the address of B whether to copy it into its packed blocks first: on a B aligned to 32 bytes
// it reads B in place, and where B's rows are a power of two apart (2,048 floats, a hidden size)
// they fall on the same cache sets, so the product runs at about half its rate (here 44 against
// 78 GFLOP/s for 128x2048 by 2048x2048). glibc's heap aligns to 16 bytes only, so which product of a
// plan ran slowly depended on where its weight happened to land: deterministic within a launch,
// different between launches, and never what the calibration measured. Buffers at one offset
// take the packed path every time, on the 32- and the 64-byte rule alike.
class OffsetHeap final : public std::pmr::memory_resource {
public:
  static constexpr std::size_t boundary = 64, offset = 16;

private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    if (alignment > offset) {
      throw std::bad_alloc(); // tensor buffers ask for a float's alignment
    }
    auto* raw = static_cast<char*>(::operator new(bytes + boundary + offset));
    const auto at = (reinterpret_cast<std::uintptr_t>(raw) + boundary - 1) / boundary * boundary + offset;
    auto* p = reinterpret_cast<char*>(at);
    std::memcpy(p - sizeof(raw), &raw, sizeof(raw)); // where it came from, in the bytes skipped
    return p;
  }
  void do_deallocate(void* p, std::size_t, std::size_t) override {
    char* raw = nullptr;
    std::memcpy(&raw, static_cast<char*>(p) - sizeof(raw), sizeof(raw));
    ::operator delete(raw);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
};

std::atomic<std::pmr::memory_resource*> g_resource{host_memory()};

} // namespace

std::pmr::memory_resource* host_memory() noexcept {
  static OffsetHeap heap;
  return &heap;
}

std::pmr::memory_resource* tensor_memory() noexcept {
  return g_resource.load(std::memory_order_acquire);
}

std::pmr::memory_resource* set_tensor_memory(std::pmr::memory_resource* resource) {
  if (resource == nullptr) {
    throw Error("set_tensor_memory: no resource");
  }
  return g_resource.exchange(resource, std::memory_order_acq_rel);
}

void keep_freed_memory() {
  constexpr int largest_heap_block = 32 << 20;
  if (mallopt(M_MMAP_THRESHOLD, largest_heap_block) != 1 || mallopt(M_TRIM_THRESHOLD, INT_MAX) != 1) {
    throw Error("keep_freed_memory: glibc refused the heap settings (mallopt M_MMAP_THRESHOLD / M_TRIM_THRESHOLD)");
  }
}

void host_access_refused() {
  throw Error("partita-run touched a tensor buffer in device memory on the host (a copy, an assignment or a "
              "growth of the buffer): such data moves only through the backend or the tensor memory");
}

void to_host(const Floats& from, std::size_t offset, std::span<float> host) {
  if (offset + host.size() > from.size()) {
    throw Error(fmt::format("to_host: floats {}..{} of a buffer of {}", offset, offset + host.size(), from.size()));
  }
  if (host.empty()) {
    return;
  }
  if (auto* d = from.get_allocator().device()) {
    d->to_host(from.data() + offset, host.data(), host.size_bytes());
  } else {
    std::memcpy(host.data(), from.data() + offset, host.size_bytes());
  }
}

void from_host(std::span<const float> host, Floats& to, std::size_t offset) {
  if (offset + host.size() > to.size()) {
    throw Error(fmt::format("from_host: floats {}..{} of a buffer of {}", offset, offset + host.size(), to.size()));
  }
  if (host.empty()) {
    return;
  }
  if (auto* d = to.get_allocator().device()) {
    d->from_host(host.data(), to.data() + offset, host.size_bytes());
  } else {
    std::memcpy(to.data() + offset, host.data(), host.size_bytes());
  }
}

std::vector<float> host_copy(const Floats& from) {
  std::vector<float> v(from.size());
  to_host(from, 0, v);
  return v;
}

void copy_floats(const Floats& from, std::size_t from_offset, Floats& to, std::size_t to_offset, std::size_t n) {
  if (from_offset + n > from.size() || to_offset + n > to.size()) {
    throw Error(fmt::format("copy_floats: {} floats from {} of {} to {} of {}", n, from_offset, from.size(), to_offset,
                            to.size()));
  }
  if (n == 0) {
    return;
  }
  auto* fd = from.get_allocator().device();
  auto* td = to.get_allocator().device();
  if (fd != nullptr && fd == td) {
    fd->copy(from.data() + from_offset, to.data() + to_offset, n * sizeof(float));
  } else if (fd == nullptr && td == nullptr) {
    std::memmove(to.data() + to_offset, from.data() + from_offset, n * sizeof(float));
  } else if (td == nullptr) {
    to_host(from, from_offset, std::span<float>(to.data() + to_offset, n));
  } else if (fd == nullptr) {
    from_host(std::span<const float>(from.data() + from_offset, n), to, to_offset);
  } else { // two kinds of device memory: through the host
    std::vector<float> staged(n);
    to_host(from, from_offset, staged);
    from_host(staged, to, to_offset);
  }
}

Floats copy_of(const Floats& from) {
  Floats f = uninitialized_floats(from.size());
  copy_floats(from, 0, f, 0, from.size());
  return f;
}

void fill_floats(Floats& to, std::size_t offset, std::size_t n, float value) {
  if (offset + n > to.size()) {
    throw Error(fmt::format("fill_floats: floats {}..{} of a buffer of {}", offset, offset + n, to.size()));
  }
  if (auto* d = to.get_allocator().device()) {
    if (n > 0) {
      d->fill(to.data() + offset, n, value);
    }
  } else {
    std::fill_n(to.data() + offset, n, value);
  }
}

void refill(Floats& to, std::size_t n, float value) {
  if (to.size() != n) {
    Floats().swap(to);
    to = uninitialized_floats(n);
  }
  fill_floats(to, value);
}

Floats filled_floats(std::size_t n, float value) {
  Floats f = uninitialized_floats(n);
  fill_floats(f, value);
  return f;
}

Floats floats_from_host(std::span<const float> host) {
  Floats f = uninitialized_floats(host.size());
  from_host(host, f, 0);
  return f;
}

namespace {

// The host's pointer to floats [offset, offset + n) of `buffer`: the buffer itself where the host
// may touch it, else `staged` (read in unless `read` is false). The one body of both views.
float* host_pointer(const Floats& buffer, std::size_t offset, std::size_t n, bool read, std::vector<float>& staged,
                    const char* view) {
  if (offset + n > buffer.size()) {
    throw Error(fmt::format("{}: floats {}..{} of a buffer of {}", view, offset, offset + n, buffer.size()));
  }
  if (host_accessible(buffer)) {
    return const_cast<float*>(buffer.data()) + offset; // NOLINT: HostView holds the buffer non-const
  }
  staged.resize(n);
  if (read) {
    to_host(buffer, offset, staged);
  }
  return staged.data();
}

} // namespace

HostView::HostView(Floats& buffer, std::size_t offset, std::size_t n, Mode mode)
    : m_buffer(buffer), m_offset(offset), m_size(n),
      m_data(host_pointer(buffer, offset, n, mode != write_only, m_staged, "HostView")) {}

void HostView::commit() {
  if (!host_accessible(m_buffer)) {
    from_host(m_staged, m_buffer, m_offset);
  }
}

ConstHostView::ConstHostView(const Floats& buffer, std::size_t offset, std::size_t n)
    : m_size(n), m_data(host_pointer(buffer, offset, n, true, m_staged, "ConstHostView")) {}

namespace {

std::size_t page_size() {
  static const auto size = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

std::size_t mapped_length(std::size_t bytes) {
  const std::size_t page = page_size();
  return std::max<std::size_t>(1, (bytes + page - 1) / page) * page;
}

} // namespace

GuardedMemory::~GuardedMemory() {
  for (const auto& [p, length] : m_blocks) {
    munmap(p, length);
  }
}

void GuardedMemory::protect(void* p, std::size_t mapped, bool open) {
  if (mprotect(p, mapped, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    throw Error(fmt::format("GuardedMemory: mprotect failed: {}", std::strerror(errno)));
  }
}

void GuardedMemory::open() {
  if (m_open++ == 0) {
    for (const auto& [p, length] : m_blocks) {
      protect(p, length, true);
    }
  }
}

void GuardedMemory::close() {
  if (m_open > 0 && --m_open == 0) {
    for (const auto& [p, length] : m_blocks) {
      protect(p, length, false);
    }
  }
}

void* GuardedMemory::do_allocate(std::size_t bytes, std::size_t alignment) {
  if (alignment > page_size()) {
    throw std::bad_alloc();
  }
  const std::size_t length = mapped_length(bytes);
  void* p = mmap(nullptr, length, m_open > 0 ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw std::bad_alloc();
  }
  m_blocks.emplace(p, length);
  return p;
}

void GuardedMemory::do_deallocate(void* p, std::size_t, std::size_t) {
  const auto it = m_blocks.find(p);
  if (it != m_blocks.end()) {
    munmap(p, it->second);
    m_blocks.erase(it);
  }
}

void GuardedMemory::to_host(const void* device, void* host, std::size_t bytes) {
  open();
  std::memcpy(host, device, bytes);
  close();
}

void GuardedMemory::from_host(const void* host, void* device, std::size_t bytes) {
  open();
  std::memcpy(device, host, bytes);
  close();
}

void GuardedMemory::copy(const void* from, void* to, std::size_t bytes) {
  open();
  std::memmove(to, from, bytes);
  close();
}

void GuardedMemory::fill(float* device, std::size_t count, float value) {
  open();
  std::fill_n(device, count, value);
  close();
}

GuardedMemory& guarded_memory() {
  static GuardedMemory memory;
  return memory;
}

} // namespace partita::runtime
