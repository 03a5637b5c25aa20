#pragma once

// Where tensor buffers live. Shards are packed, unpacked and sent over MPI on the host and read
// by the backend's kernels, so their storage comes from one process-wide memory resource chosen
// at start-up: the heap for the CPU backend, CUDA managed memory for the CUDA backend (one
// pointer valid on the host and on the device, no copy per kernel call). A buffer keeps the
// resource it was allocated from, so switching resources never frees through the wrong one.

#include <cstddef>
#include <memory_resource>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace partita::runtime {

// The resource new tensor buffers come from (std::pmr::new_delete_resource() unless set).
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

// The allocator of tensor buffers: the process-wide resource at the time the container was
// made, carried along by moves, swaps and assignments.
template <class T> class TensorAllocator {
public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  TensorAllocator() noexcept : m_resource(tensor_memory()) {}
  // An allocator whose containers leave new elements uninitialized (resize(n), a container of n).
  struct Uninitialized {};
  explicit TensorAllocator(Uninitialized) noexcept : m_resource(tensor_memory()), m_uninitialized(true) {}
  template <class U>
  TensorAllocator(const TensorAllocator<U>& other) noexcept // NOLINT: rebinding
      : m_resource(other.resource()), m_uninitialized(other.uninitialized()) {}

  T* allocate(std::size_t n) { return static_cast<T*>(m_resource->allocate(n * sizeof(T), alignof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { m_resource->deallocate(p, n * sizeof(T), alignof(T)); }
  template <class U> void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    if (m_uninitialized) {
      ::new (static_cast<void*>(p)) U; // default-initialized: a float keeps whatever is there
    } else {
      ::new (static_cast<void*>(p)) U();
    }
  }
  template <class U, class... Args> void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  // A copy is a new buffer: it lives where new buffers live now.
  TensorAllocator select_on_container_copy_construction() const noexcept { return {}; }

  std::pmr::memory_resource* resource() const noexcept { return m_resource; }
  bool uninitialized() const noexcept { return m_uninitialized; }
  friend bool operator==(const TensorAllocator& a, const TensorAllocator& b) noexcept {
    return a.m_resource == b.m_resource;
  }

private:
  std::pmr::memory_resource* m_resource;
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

} // namespace partita::runtime
