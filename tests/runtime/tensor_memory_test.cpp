// Tensor memory: shards come from the process-wide resource chosen at start-up (the heap for the
// CPU backend, CUDA managed memory for the CUDA one), keep the resource they came from, and the
// CPU path computes the same through any resource.

#include "backend.h"
#include "backends.h"
#include "shard.h"
#include "tensor_memory.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <memory_resource>
#include <numeric>

namespace partita::runtime {
namespace {

// Counts what goes through it, from the heap.
class CountingMemory final : public std::pmr::memory_resource {
public:
  int allocations = 0, deallocations = 0;
  std::size_t live_bytes = 0;

private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    ++allocations;
    live_bytes += bytes;
    return std::pmr::new_delete_resource()->allocate(bytes, alignment);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
    ++deallocations;
    live_bytes -= bytes;
    std::pmr::new_delete_resource()->deallocate(p, bytes, alignment);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
};

// Installs a resource for one test and puts the previous one back.
class TensorMemoryTest : public ::testing::Test {
protected:
  void SetUp() override { m_previous = set_tensor_memory(&counting); }
  void TearDown() override { set_tensor_memory(m_previous); }
  CountingMemory counting;

private:
  std::pmr::memory_resource* m_previous = nullptr;
};

sharding::Block block(std::vector<std::int64_t> begin, std::vector<std::int64_t> end) {
  return {std::move(begin), std::move(end)};
}

TEST(TensorMemory, DefaultsToTheHeap) {
  EXPECT_EQ(tensor_memory(), std::pmr::new_delete_resource());
  const Shard s = make_shard(block({0, 0}, {3, 4}));
  EXPECT_EQ(s.data.get_allocator().resource(), std::pmr::new_delete_resource());
  EXPECT_EQ(s.elements(), 12);
}

TEST(TensorMemory, FreedBlocksOfSomeMegabytesStayOnTheHeap) {
  keep_freed_memory();
  const auto mapped_before = mallinfo2().hblkhd;
  {
    Floats big(std::size_t{4} << 20); // 16 MiB: mapped on its own under glibc's defaults
    big[0] = 1.F;
    EXPECT_EQ(mallinfo2().hblkhd, mapped_before);
  }
  const auto heap = mallinfo2().arena;
  Floats again(std::size_t{4} << 20);
  EXPECT_EQ(mallinfo2().arena, heap); // the freed block was kept and is used again
}

TEST(TensorMemory, RejectsNoResource) {
  EXPECT_THROW(set_tensor_memory(nullptr), std::exception);
}

TEST_F(TensorMemoryTest, ShardsComeFromTheChosenResource) {
  {
    Shard s = make_shard(block({0, 0}, {8, 16}));
    EXPECT_EQ(s.data.get_allocator().resource(), &counting);
    EXPECT_EQ(counting.allocations, 1);
    EXPECT_EQ(counting.live_bytes, 8U * 16U * sizeof(float));
    for (const float v : s.data) {
      ASSERT_EQ(v, 0.F); // zero-filled as before
    }
  }
  EXPECT_EQ(counting.deallocations, 1);
  EXPECT_EQ(counting.live_bytes, 0U);
}

TEST_F(TensorMemoryTest, BuffersKeepTheirResourceAcrossASwitch) {
  Shard early = make_shard(block({0}, {100}));
  set_tensor_memory(std::pmr::new_delete_resource());
  Shard late = make_shard(block({0}, {50}));
  EXPECT_EQ(late.data.get_allocator().resource(), std::pmr::new_delete_resource());
  EXPECT_EQ(counting.allocations, 1);
  // Moves carry the buffer and its resource; the early buffer is freed through it.
  Shard moved = std::move(early);
  EXPECT_EQ(moved.data.get_allocator().resource(), &counting);
  moved = std::move(late);
  EXPECT_EQ(counting.deallocations, 1);
  EXPECT_EQ(counting.live_bytes, 0U);
  EXPECT_EQ(moved.data.get_allocator().resource(), std::pmr::new_delete_resource());
  set_tensor_memory(&counting);
  // A copy is a new buffer where new buffers live now.
  const Shard copy = moved;
  EXPECT_EQ(copy.data.get_allocator().resource(), &counting);
  EXPECT_EQ(counting.allocations, 2);
}

TEST_F(TensorMemoryTest, PackUnpackAndFillAreUnchanged) {
  const graph::Shape shape{4, 6};
  Shard whole_tensor = make_shard(whole(shape));
  fill_deterministic(whole_tensor, shape, "w", 0.5F);
  set_tensor_memory(std::pmr::new_delete_resource());
  Shard heap = make_shard(whole(shape));
  fill_deterministic(heap, shape, "w", 0.5F);
  set_tensor_memory(&counting);
  EXPECT_TRUE(std::equal(whole_tensor.data.begin(), whole_tensor.data.end(), heap.data.begin()));
  // A block of it, packed out and added back in.
  Shard part = make_shard(block({1, 2}, {3, 5}));
  fill_deterministic(part, shape, "w", 0.5F);
  Floats packed(static_cast<std::size_t>(part.elements()));
  pack(whole_tensor, part.block, packed.data());
  EXPECT_TRUE(std::equal(packed.begin(), packed.end(), part.data.begin()));
  unpack(whole_tensor, part.block, packed.data(), true);
  EXPECT_FLOAT_EQ(whole_tensor.data[1 * 6 + 2], 2 * heap.data[1 * 6 + 2]);
  EXPECT_FLOAT_EQ(whole_tensor.data[0], heap.data[0]);
  // The same region straight from one shard into another, without packing: copied, then added.
  Shard rows = make_shard(block({1, 0}, {3, 6}));
  copy_region(heap, rows, part.block, false);
  EXPECT_FLOAT_EQ(rows.data[0 * 6 + 2], heap.data[1 * 6 + 2]);
  EXPECT_FLOAT_EQ(rows.data[1 * 6 + 4], heap.data[2 * 6 + 4]);
  EXPECT_FLOAT_EQ(rows.data[0 * 6 + 1], 0.F); // outside the region: untouched
  copy_region(heap, rows, part.block, true);
  EXPECT_FLOAT_EQ(rows.data[1 * 6 + 3], 2 * heap.data[2 * 6 + 3]);
}

TEST_F(TensorMemoryTest, TheCpuBackendComputesOnAnyResource) {
  auto cpu = make_backend("cpu", 1, MPI_COMM_NULL);
  // C[2, 3] = A[2, 4] . B[4, 3] on buffers from the counting resource.
  Floats a(8), b(12), c(6, -1.F);
  std::iota(a.begin(), a.end(), 1.F);
  std::iota(b.begin(), b.end(), 0.F);
  const int before = counting.allocations;
  cpu->matmul({1, 2, 3, 4}, a.data(), false, b.data(), false, c.data());
  cpu->synchronize();
  EXPECT_EQ(counting.allocations, before); // the backend's own scratch is not tensor memory
  EXPECT_FLOAT_EQ(c[0], 1 * 0 + 2 * 3 + 3 * 6 + 4 * 9);
  EXPECT_FLOAT_EQ(c[5], 5 * 2 + 6 * 5 + 7 * 8 + 8 * 11);
  // The all-reduce of a group of one is nothing, on any backend.
  cpu->all_reduce_sum(MPI_COMM_NULL, c.data(), 6);
  EXPECT_FLOAT_EQ(c[0], 60.F);
  cpu->sgd_update(6, 0.5F, c.data(), c.data());
  EXPECT_FLOAT_EQ(c[0], 30.F);
}

TEST(Backends, NamesAndRefusals) {
  EXPECT_EQ(backend_names().front(), "cpu");
  EXPECT_FALSE(backend_unavailable("cpu").has_value());
  const auto unknown = backend_unavailable("tpu");
  ASSERT_TRUE(unknown.has_value());
  EXPECT_NE(unknown->find("unknown backend 'tpu'"), std::string::npos);
  const auto cuda = backend_unavailable("cuda");
#ifdef PARTITA_TEST_WITHOUT_CUDA
  ASSERT_TRUE(cuda.has_value());
  EXPECT_NE(cuda->find("built without CUDA"), std::string::npos);
#else
  // With CUDA built in: available, or refused because no device answers.
  if (cuda) {
    EXPECT_EQ(cuda->rfind("no CUDA device: cudaGetDeviceCount", 0), 0U) << *cuda;
  }
#endif
  EXPECT_THROW(make_backend("tpu", 1, MPI_COMM_NULL), std::exception);
}

} // namespace
} // namespace partita::runtime
