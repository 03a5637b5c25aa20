// Tensor memory: shards come from the process-wide resource chosen at start-up (the heap for the
// CPU backend, CUDA managed memory for the CUDA one), keep the resource they came from, and the
// CPU path computes the same through any resource.

#include "backend.h"
#include "backends.h"
#include "shard.h"
#include "tensor_memory.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <memory_resource>
#include <numeric>
#include <vector>

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
  EXPECT_EQ(tensor_memory(), host_memory());
  const Shard s = make_shard(block({0, 0}, {3, 4}));
  EXPECT_EQ(s.data.get_allocator().resource(), host_memory());
  EXPECT_EQ(s.elements(), 12);
}

// Every buffer at one offset from a 64-byte boundary, whatever its size and whatever the heap
// handed out before it (a product's speed must not depend on where its operands landed).
TEST(TensorMemory, HeapBuffersStartSixteenBytesPastA64ByteBoundary) {
  std::vector<Floats> kept;
  for (std::size_t n : {1U, 3U, 4U, 5U, 17U, 1000U, 4096U, 65536U, 1U << 22}) {
    for (int k = 0; k < 3; ++k) {
      Floats f = uninitialized_floats(n);
      f[0] = 1.F;
      f[n - 1] = 2.F; // the whole buffer is the caller's (ASan checks the ends)
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(f.data()) % 64, 16U) << n << " floats";
      kept.push_back(std::move(f));
    }
  }
  Floats zeroed(33);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(zeroed.data()) % 64, 16U);
  EXPECT_EQ(zeroed[32], 0.F);
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
  const Floats copy = moved.data;
  EXPECT_EQ(copy.get_allocator().resource(), &counting);
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

// Device memory, as the CUDA backend's is, on the CPU: GuardedMemory's buffers are closed to the
// host except through the resource.
class GuardedMemoryTest : public ::testing::Test {
protected:
  void SetUp() override { m_previous = set_tensor_memory(&guarded_memory()); }
  void TearDown() override { set_tensor_memory(m_previous); }

private:
  std::pmr::memory_resource* m_previous = nullptr;
};

TEST_F(GuardedMemoryTest, NewBuffersAreZeroedWithoutTheHostTouchingThem) {
  const Shard s = make_shard(block({0, 0}, {5, 7}));
  EXPECT_FALSE(host_accessible(s.data));
  EXPECT_EQ(s.data.get_allocator().device(), &guarded_memory());
  const std::vector<float> values = host_copy(s.data);
  ASSERT_EQ(values.size(), 35U);
  EXPECT_TRUE(std::all_of(values.begin(), values.end(), [](float v) { return v == 0.F; }));
  // Uninitialized scratch and an empty buffer need nothing of the host either.
  const Floats scratch = uninitialized_floats(1000);
  EXPECT_EQ(scratch.size(), 1000U);
}

TEST_F(GuardedMemoryTest, HostWritesAndCopiesAreRefused) {
  // What the allocator sees (an element made on the host) is refused with an error...
  Floats f(16);
  Floats empty;
  EXPECT_THROW(empty.assign(16, 1.F), Error); // n copies of a value written on the host
  EXPECT_THROW(Floats(4, 2.F), Error);
  EXPECT_THROW(f.push_back(1.F), Error); // a growth, which moves the elements on the host
  EXPECT_THROW((void)Floats(f), Error);  // a copy, which reads them on the host
  // ...and what it does not see (an element read or written in place) faults: the pages are closed.
  EXPECT_DEATH({ f[3] = 1.F; }, "");
  EXPECT_DEATH(
      {
        volatile float v = f[3];
        (void)v;
      },
      "");
  EXPECT_DEATH(f.assign(16, 1.F), ""); // the same size: written in place
}

TEST_F(GuardedMemoryTest, DataMovesThroughTheMemory) {
  Floats f = floats_from_host(std::vector<float>{1, 2, 3, 4, 5, 6});
  fill_floats(f, 4, 2, -1.F);
  Floats g = copy_of(f);
  EXPECT_EQ(g.get_allocator().device(), &guarded_memory());
  copy_floats(f, 0, g, 2, 2);
  EXPECT_EQ(host_copy(g), (std::vector<float>{1, 2, 1, 2, -1, -1}));
  HostView view(g, 1, 3, HostView::read_write);
  EXPECT_EQ(std::vector<float>(view.begin(), view.end()), (std::vector<float>{2, 1, 2}));
  view[0] = 10;
  EXPECT_EQ(host_copy(g)[1], 2.F); // not written back before commit()
  view.commit();
  EXPECT_EQ(host_copy(g), (std::vector<float>{1, 10, 1, 2, -1, -1}));
  const ConstHostView part(g, 4, 2);
  EXPECT_EQ(part[0], -1.F);
  EXPECT_THROW(ConstHostView(g, 5, 2), Error); // past the buffer
  refill(g, 3, 7.F);
  EXPECT_EQ(host_copy(g), (std::vector<float>{7, 7, 7}));
  // Between the host's memory and the device's, either way.
  Floats host;
  {
    const TensorMemoryScope heap(std::pmr::new_delete_resource());
    host = Floats(3);
  }
  EXPECT_TRUE(host_accessible(host));
  copy_floats(g, 0, host, 0, 3);
  EXPECT_EQ(std::vector<float>(host.begin(), host.end()), (std::vector<float>{7, 7, 7}));
}

TEST_F(GuardedMemoryTest, ShardsPackUnpackAndFillAsOnTheHeap) {
  const graph::Shape shape{4, 6};
  Shard device = make_shard(whole(shape));
  fill_deterministic(device, shape, "w", 0.5F);
  Shard heap = make_host_shard(whole(shape));
  fill_deterministic(heap, shape, "w", 0.5F);
  EXPECT_EQ(host_copy(device.data), std::vector<float>(heap.data.begin(), heap.data.end()));
  const auto region = block({1, 2}, {3, 5});
  std::vector<float> packed(6), expected(6);
  pack(device, region, packed.data());
  pack(heap, region, expected.data());
  EXPECT_EQ(packed, expected);
  unpack(device, region, packed.data(), true);
  unpack(heap, region, expected.data(), true);
  EXPECT_EQ(host_copy(device.data), std::vector<float>(heap.data.begin(), heap.data.end()));
  Shard rows = make_shard(block({1, 0}, {3, 6}));
  copy_region(device, rows, region, false);
  const Shard back = host_copy_of(rows);
  EXPECT_TRUE(host_accessible(back.data));
  EXPECT_FLOAT_EQ(back.data[0 * 6 + 2], heap.data[1 * 6 + 2]);
  EXPECT_FLOAT_EQ(back.data[0 * 6 + 1], 0.F); // outside the region: untouched
}

TEST_F(GuardedMemoryTest, TheGuardedBackendComputesOnIt) {
  auto guarded = make_backend("cpu-guarded", 1, MPI_COMM_NULL);
  EXPECT_EQ(tensor_memory(), &guarded_memory());
  Floats a = floats_from_host(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  Floats b = floats_from_host(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Floats c = uninitialized_floats(6);
  guarded->matmul({1, 2, 3, 4}, a.data(), false, b.data(), false, c.data());
  const auto got = host_copy(c);
  EXPECT_FLOAT_EQ(got[0], 1 * 0 + 2 * 3 + 3 * 6 + 4 * 9);
  EXPECT_FLOAT_EQ(got[5], 5 * 2 + 6 * 5 + 7 * 8 + 8 * 11);
  EXPECT_DEATH(
      {
        volatile float v = c[0];
        (void)v;
      },
      ""); // closed again after the call
}

TEST(Backends, NamesAndRefusals) {
  EXPECT_EQ(backend_names().front(), "cpu");
  EXPECT_FALSE(backend_unavailable("cpu").has_value());
  EXPECT_FALSE(backend_unavailable("cpu-guarded").has_value());
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
