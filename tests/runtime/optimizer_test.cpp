// The optimizer kernels of the CPU backend against steps computed by hand (in double, from the
// formulas in backend.h), the optimizer state's sizes, and ZeRO's slicing (no MPI job: groups of
// one).

#include "backend.h"
#include "collectives.h"
#include "optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <memory_resource>
#include <numeric>

namespace partita::runtime {
namespace {

// Two Adam steps at lr 0.1, betas 0.9 / 0.999, epsilon 1e-8, from w = [1, -2, 0.5, 0.25]:
// with bias correction the first step moves each weight by about lr times the sign of its
// gradient (w[0] 1 -> 0.9); without it, m / sqrt(v) = 0.1 g / (0.0316 |g|) would move it by
// 0.316 (to 0.684). Expected values in double, rounded to the float tolerance below.
TEST(OptimizerKernels, AdamTwoStepsWithBiasCorrection) {
  const auto cpu = make_cpu_backend(1);
  const AdamParameters p{0.1F, 0.9F, 0.999F, 1e-8F};
  Floats w{1.F, -2.F, 0.5F, 0.25F}, m(4, 0.F), v(4, 0.F);
  const Floats g1{0.1F, -0.2F, 0.F, 1e-3F}, g2{0.3F, 0.1F, -0.4F, 2e-3F};

  cpu->adam_update(4, p, 1, g1.data(), m.data(), v.data(), w.data());
  EXPECT_NEAR(w[0], 0.900000010, 1e-6);
  EXPECT_NEAR(w[1], -1.900000005, 1e-6);
  EXPECT_FLOAT_EQ(w[2], 0.5F); // a zero gradient: no step
  EXPECT_NEAR(w[3], 0.150001000, 1e-6);
  EXPECT_NEAR(m[0], 0.01, 1e-8);
  EXPECT_NEAR(v[1], 4e-5, 1e-8); // 1 - beta2 in float is 0.00099999

  cpu->adam_update(4, p, 2, g2.data(), m.data(), v.data(), w.data());
  EXPECT_NEAR(w[0], 0.808221902, 1e-6);
  EXPECT_NEAR(w[1], -1.873366303, 1e-6);
  EXPECT_NEAR(w[2], 0.574413680, 1e-6);
  EXPECT_NEAR(w[3], 0.053483408, 1e-6);
  EXPECT_NEAR(m[2], -0.04, 1e-7);
  EXPECT_NEAR(v[2], 1.6e-4, 1e-8);
}

// The same update over 1003 elements (vector lanes and a tail; the loop runs in AVX-512 or AVX2
// where the CPU has it): every element against the formula in double.
TEST(OptimizerKernels, AdamOverManyElementsMatchesTheFormula) {
  const auto cpu = make_cpu_backend(1);
  const AdamParameters p{0.01F, 0.9F, 0.999F, 1e-8F};
  const std::size_t n = 1003;
  Floats w(n), m(n), v(n), g(n);
  for (std::size_t i = 0; i < n; ++i) {
    w[i] = 0.001F * static_cast<float>(i) - 0.5F;
    m[i] = 0.01F * static_cast<float>(i % 7) - 0.03F;
    v[i] = 1e-4F * static_cast<float>(1 + i % 11);
    g[i] = 0.02F * static_cast<float>(i % 13) - 0.125F;
  }
  const Floats w0 = w, m0 = m, v0 = v;
  const int step = 3;
  cpu->adam_update(static_cast<std::int64_t>(n), p, step, g.data(), m.data(), v.data(), w.data());
  const double first = 1 - std::pow(0.9, step), second = 1 - std::pow(0.999, step);
  for (std::size_t i = 0; i < n; ++i) {
    const double mi = 0.9 * m0[i] + 0.1 * g[i], vi = 0.999 * v0[i] + 0.001 * g[i] * g[i];
    const double wi = w0[i] - 0.01 * (mi / first) / (std::sqrt(vi / second) + 1e-8);
    ASSERT_NEAR(m[i], mi, 1e-6) << "at " << i;
    ASSERT_NEAR(v[i], vi, 1e-7) << "at " << i;
    ASSERT_NEAR(w[i], wi, 2e-6) << "at " << i;
  }
}

TEST(OptimizerKernels, MomentumKeepsAVelocity) {
  const auto cpu = make_cpu_backend(1);
  Floats w{1.F, 2.F}, velocity(2, 0.F);
  const Floats g1{0.5F, -1.F}, g2{1.F, 1.F};
  cpu->momentum_update(2, 0.1F, 0.9F, g1.data(), velocity.data(), w.data());
  EXPECT_FLOAT_EQ(velocity[0], 0.5F);
  EXPECT_FLOAT_EQ(w[0], 0.95F);
  cpu->momentum_update(2, 0.1F, 0.9F, g2.data(), velocity.data(), w.data());
  EXPECT_FLOAT_EQ(velocity[0], 0.9F * 0.5F + 1.F);
  EXPECT_FLOAT_EQ(w[0], 0.95F - 0.1F * 1.45F);
  EXPECT_FLOAT_EQ(velocity[1], 0.9F * -1.F + 1.F);
  EXPECT_FLOAT_EQ(w[1], 2.1F - 0.1F * 0.1F);
}

TEST(Optimizer, StateAndDefaultsFollowTheKind) {
  EXPECT_EQ(make_optimizer_state(default_optimizer_settings(cost::Optimizer::sgd), 10).bytes(), 0);
  EXPECT_EQ(make_optimizer_state(default_optimizer_settings(cost::Optimizer::momentum), 10).bytes(), 40);
  // Adam keeps 8 bytes per parameter, as cost::TrainingSetup::optimizer_bytes prices it in fp32.
  cost::TrainingSetup setup;
  setup.optimizer = cost::Optimizer::adam;
  EXPECT_EQ(make_optimizer_state(training_of(setup).optimizer, 10).bytes(), 10 * setup.optimizer_bytes());
  const auto adam = default_optimizer_settings(cost::Optimizer::adam);
  EXPECT_FLOAT_EQ(adam.adam.learning_rate, 1e-3F);
  EXPECT_FLOAT_EQ(adam.adam.beta1, 0.9F);
  EXPECT_FLOAT_EQ(adam.adam.beta2, 0.999F);
  EXPECT_FLOAT_EQ(adam.adam.epsilon, 1e-8F);
  EXPECT_FLOAT_EQ(default_optimizer_settings(cost::Optimizer::momentum).momentum, 0.9F);

  // optimizer_step refuses state of the wrong size rather than writing past it.
  const auto cpu = make_cpu_backend(1);
  Floats w(4, 1.F), g(4, 1.F);
  OptimizerState short_state = make_optimizer_state(adam, 3);
  EXPECT_THROW(optimizer_step(*cpu, adam, 1, 4, g.data(), w.data(), short_state), Error);
  OptimizerState state = make_optimizer_state(adam, 4);
  optimizer_step(*cpu, adam, 1, 4, g.data(), w.data(), state);
  EXPECT_NEAR(w[0], 1.0 - 1e-3, 1e-6);
}

// The state comes from tensor memory (CUDA managed memory on the GPU backend), like the weights.
TEST(Optimizer, StateLivesInTensorMemory) {
  struct Counting : std::pmr::memory_resource {
    std::size_t bytes = 0;
    void* do_allocate(std::size_t n, std::size_t align) override {
      bytes += n;
      return std::pmr::new_delete_resource()->allocate(n, align);
    }
    void do_deallocate(void* p, std::size_t n, std::size_t align) override {
      std::pmr::new_delete_resource()->deallocate(p, n, align);
    }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
  } counting;
  auto* previous = set_tensor_memory(&counting);
  {
    const OptimizerState state = make_optimizer_state(default_optimizer_settings(cost::Optimizer::adam), 100);
    EXPECT_EQ(counting.bytes, 800U);
  }
  set_tensor_memory(previous);
}

TEST(Zero, SlicesCoverTheShard) {
  EXPECT_EQ(slice_counts(10, 4), (std::vector<std::int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(slice_counts(2, 4), (std::vector<std::int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(slice_counts(8, 2), (std::vector<std::int64_t>{4, 4}));
  // A group of one: the reduce-scatter is a copy of the one slice, the all-gather nothing.
  const auto cpu = make_cpu_backend(1);
  Floats data(5), mine(5, 0.F);
  std::iota(data.begin(), data.end(), 1.F);
  const std::vector<std::int64_t> counts{5};
  cpu->reduce_scatter_sum(MPI_COMM_NULL, data.data(), counts, mine.data());
  EXPECT_FLOAT_EQ(mine[4], 5.F);
  cpu->all_gather(MPI_COMM_NULL, counts, data.data());
  EXPECT_FLOAT_EQ(data[0], 1.F);
}

} // namespace
} // namespace partita::runtime
