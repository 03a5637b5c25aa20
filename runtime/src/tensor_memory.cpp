#include "tensor_memory.h"

#include "partita/graph/error.h"

#include <atomic>

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

} // namespace partita::runtime
