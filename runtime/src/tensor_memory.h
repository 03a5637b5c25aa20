#pragma once

// Where tensor buffers live. Shards are packed, unpacked and sent over MPI, and read by the
// backend's kernels, so their storage comes from one process-wide memory resource chosen at
// start-up: the heap for the CPU backend, the GPU's own memory (cudaMalloc, pooled) for the CUDA
// backend. A resource whose buffers the host cannot touch is a DeviceMemory: data moves between
// its buffers and the host only through it (the helpers below), and a Floats over it is never
// written or read element by element on the host (its allocator zeroes a new buffer through the
// resource and refuses any host construction with partita::Error). A buffer keeps the resource it
// was allocated from, so switching resources never frees through the wrong one.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory_resource>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace partita::runtime {

// Memory the host cannot touch (a GPU's): moves, zeroes and fills its buffers for the host.
// to_host and from_host return when the data has arrived, after the kernels queued before them;
// copy and fill are ordered with the kernels (on a GPU, queued on the backend's stream).
class DeviceMemory : public std::pmr::memory_resource {
public:
  virtual void to_host(const void* device, void* host, std::size_t bytes) = 0;
  virtual void from_host(const void* host, void* device, std::size_t bytes) = 0;
  // `bytes` from one of its buffers to another (or within one; the ranges do not overlap).
  virtual void copy(const void* from, void* to, std::size_t bytes) = 0;
  virtual void fill(float* device, std::size_t count, float value) = 0;
};

// The heap as tensor buffers take it: every buffer starts 16 bytes past a 64-byte boundary, so that
// a matrix product's speed does not depend on where its operands happened to land (oneDNN's sgemm
// reads a 32-byte aligned B in place, at half its rate where B's rows are a power of two apart).
std::pmr::memory_resource* host_memory() noexcept;
// The resource new tensor buffers come from (host_memory() unless set).
std::pmr::memory_resource* tensor_memory() noexcept;
// Makes `resource` (not nullptr, outliving every buffer allocated from it) the one new tensor
// buffers come from; returns the previous one.
std::pmr::memory_resource* set_tensor_memory(std::pmr::memory_resource* resource);

// Keeps freed heap memory in the process for the next request (called once at start-up by
// partita-run and partita-calibrate). glibc hands blocks of 128 KiB and more back to the kernel
// when they are freed (munmap, heap trimming), so each iteration's buffers were mapped and zeroed
// again: about 2,000 first-touch page faults an iteration of a small GPT-2, 15% of its time on
// this project's machine. Blocks up to 32 MiB (glibc's largest threshold) now come from the heap,
// which is never trimmed, as deep-learning frameworks keep the memory they allocated.
// Throws partita::Error when glibc refuses a setting.
void keep_freed_memory();

// Throws partita::Error: the host wrote or read an element of device memory.
[[noreturn]] void host_access_refused();

// The allocator of tensor buffers: the process-wide resource at the time the container was
// made, carried along by moves, swaps and assignments.
template <class T> class TensorAllocator {
public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  TensorAllocator() noexcept : TensorAllocator(tensor_memory(), false) {}
  // An allocator whose containers leave new elements uninitialized (resize(n), a container of n).
  struct Uninitialized {};
  explicit TensorAllocator(Uninitialized) noexcept : TensorAllocator(tensor_memory(), true) {}
  template <class U>
  TensorAllocator(const TensorAllocator<U>& other) noexcept // NOLINT: rebinding
      : TensorAllocator(other.resource(), other.uninitialized()) {}

  // On device memory a new buffer is zeroed through the resource (unless uninitialized): its
  // elements are then "constructed" without the host touching them.
  T* allocate(std::size_t n) {
    T* p = static_cast<T*>(m_resource->allocate(n * sizeof(T), alignof(T)));
    if (m_device != nullptr && !m_uninitialized && n > 0) {
      static_assert(sizeof(T) == sizeof(float));
      try {
        m_device->fill(reinterpret_cast<float*>(p), n, 0.F);
      } catch (...) {
        m_resource->deallocate(p, n * sizeof(T), alignof(T));
        throw;
      }
    }
    return p;
  }
  void deallocate(T* p, std::size_t n) noexcept { m_resource->deallocate(p, n * sizeof(T), alignof(T)); }
  template <class U> void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    if (m_device != nullptr) {
      return; // zeroed (or left) by allocate()
    }
    if (m_uninitialized) {
      ::new (static_cast<void*>(p)) U; // default-initialized: a float keeps whatever is there
    } else {
      ::new (static_cast<void*>(p)) U();
    }
  }
  // A value written on the host (assign(n, v), a copy, a push_back, a reallocation's move): never
  // on device memory, whose buffers the host cannot touch.
  template <class U, class... Args> void construct(U* p, Args&&... args) {
    if (m_device != nullptr) {
      host_access_refused();
    }
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  // A copy is a new buffer: it lives where new buffers live now.
  TensorAllocator select_on_container_copy_construction() const noexcept { return {}; }

  std::pmr::memory_resource* resource() const noexcept { return m_resource; }
  DeviceMemory* device() const noexcept { return m_device; }
  bool uninitialized() const noexcept { return m_uninitialized; }
  friend bool operator==(const TensorAllocator& a, const TensorAllocator& b) noexcept {
    return a.m_resource == b.m_resource;
  }

private:
  TensorAllocator(std::pmr::memory_resource* r, bool uninitialized) noexcept
      : m_resource(r), m_device(dynamic_cast<DeviceMemory*>(r)), m_uninitialized(uninitialized) {}
  template <class U> friend class TensorAllocator;

  std::pmr::memory_resource* m_resource;
  DeviceMemory* m_device;
  bool m_uninitialized = false;
};

// A tensor buffer: what a Shard holds, and any scratch a backend kernel reads or writes.
using Floats = std::vector<float, TensorAllocator<float>>;

// Scratch of n floats that a backend kernel writes whole before anything reads it, not zeroed: a
// zeroed Floats is written on the host, which on a GPU backend moves its pages to the host and,
// at the kernel, back to the device.
inline Floats uninitialized_floats(std::size_t n) {
  Floats f(TensorAllocator<float>(TensorAllocator<float>::Uninitialized{}));
  f.resize(n);
  return f;
}

// Whether the host may read and write the buffer's elements (not device memory).
inline bool host_accessible(const Floats& f) {
  return f.get_allocator().device() == nullptr;
}

// Moving data between tensor buffers and the host, through the buffer's resource where it is
// device memory, with a plain copy where it is not. Offsets and counts are in floats.
void to_host(const Floats& from, std::size_t offset, std::span<float> host);
void from_host(std::span<const float> host, Floats& to, std::size_t offset);
std::vector<float> host_copy(const Floats& from);
// n floats from `from` (at from_offset) to `to` (at to_offset), either of them device memory.
void copy_floats(const Floats& from, std::size_t from_offset, Floats& to, std::size_t to_offset, std::size_t n);
// A new buffer (from tensor_memory()) holding a copy of `from` (a Floats copy constructor would
// read device memory on the host).
Floats copy_of(const Floats& from);
// n floats of `to` from `offset` set to `value`.
void fill_floats(Floats& to, std::size_t offset, std::size_t n, float value);
inline void fill_floats(Floats& to, float value) {
  fill_floats(to, 0, to.size(), value);
}
// `to` made n floats, each `value` (its old buffer freed first when the size changes).
void refill(Floats& to, std::size_t n, float value);
// A buffer of n floats, each `value`.
Floats filled_floats(std::size_t n, float value);
// A buffer holding `host`'s values.
Floats floats_from_host(std::span<const float> host);

// The host's view of n floats of a tensor buffer from `offset` on: the buffer itself where the
// host may touch it; otherwise a host copy, read in at construction (unless `write_only`) and
// written back by commit().
class HostView {
public:
  enum Mode { read, read_write, write_only };
  HostView(Floats& buffer, std::size_t offset, std::size_t n, Mode mode);
  HostView(Floats& buffer, Mode mode) : HostView(buffer, 0, buffer.size(), mode) {}
  float* data() { return m_data; }
  std::size_t size() const { return m_size; }
  float& operator[](std::size_t i) { return m_data[i]; }
  float* begin() { return m_data; }
  float* end() { return m_data + m_size; }
  // Writes the host copy back (nothing where the view is the buffer itself).
  void commit();

private:
  Floats& m_buffer;
  std::size_t m_offset, m_size;
  std::vector<float> m_staged;
  float* m_data;
};
// The same, read only.
class ConstHostView {
public:
  ConstHostView(const Floats& buffer, std::size_t offset, std::size_t n);
  explicit ConstHostView(const Floats& buffer) : ConstHostView(buffer, 0, buffer.size()) {}
  const float* data() const { return m_data; }
  std::size_t size() const { return m_size; }
  const float& operator[](std::size_t i) const { return m_data[i]; }
  const float* begin() const { return m_data; }
  const float* end() const { return m_data + m_size; }

private:
  std::size_t m_size;
  std::vector<float> m_staged;
  const float* m_data;
};

// Makes `resource` the tensor memory for a scope (the heap for --verify's CPU reference beside a
// GPU run), restoring the previous one at its end.
class TensorMemoryScope {
public:
  explicit TensorMemoryScope(std::pmr::memory_resource* resource) : m_previous(set_tensor_memory(resource)) {}
  ~TensorMemoryScope() { set_tensor_memory(m_previous); }
  TensorMemoryScope(const TensorMemoryScope&) = delete;
  TensorMemoryScope& operator=(const TensorMemoryScope&) = delete;

private:
  std::pmr::memory_resource* m_previous;
};

// Memory the host cannot touch outside a backend's calls, on the CPU: each buffer its own pages,
// mapped with no access except while open() (a backend call is running) or while the resource
// moves data for the host. A host access anywhere else is a segmentation fault, where on a GPU it
// would read device memory: the "cpu-guarded" backend runs partita-run on it to find them.
class GuardedMemory final : public DeviceMemory {
public:
  GuardedMemory() = default;
  ~GuardedMemory() override;
  GuardedMemory(const GuardedMemory&) = delete;
  GuardedMemory& operator=(const GuardedMemory&) = delete;
  // Opens (and closes) every live buffer to the host; nests.
  void open();
  void close();
  void to_host(const void* device, void* host, std::size_t bytes) override;
  void from_host(const void* host, void* device, std::size_t bytes) override;
  void copy(const void* from, void* to, std::size_t bytes) override;
  void fill(float* device, std::size_t count, float value) override;

private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
  void protect(void* p, std::size_t mapped, bool open);

  std::map<void*, std::size_t> m_blocks; // live mappings and their lengths
  int m_open = 0;
};

// The process's GuardedMemory.
GuardedMemory& guarded_memory();

} // namespace partita::runtime
