#include "tensor_memory.h"

#include "partita/graph/error.h"

#include <malloc.h>

#include <atomic>
#include <climits>
#include <cstddef>

namespace partita::runtime {
namespace {

std::atomic<std::pmr::memory_resource*> g_resource{std::pmr::new_delete_resource()};

} // namespace

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

} // namespace partita::runtime
