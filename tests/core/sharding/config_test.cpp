#include "partita/graph/error.h"
#include "partita/sharding/config.h"
#include "sharding_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

namespace partita {
namespace {

using sharding::Config;
using sharding::enumerate_configs;
using Ints = std::vector<std::int64_t>;
using Groups = std::vector<std::vector<int>>;

// A 2-D conv with 5 splittable dims (n, co, ci, oh, ow) of the given sizes and 3x3 kernel dims.
graph::OpSemantics conv(graph::Graph& g, std::int64_t n, std::int64_t c, std::int64_t hw) {
  test::tensor(g, "x", {n, c, hw, hw});
  test::tensor(g, "w", {c, c, 3, 3}, graph::TensorRole::parameter);
  test::tensor(g, "y", {n, c, hw, hw});
  return graph::describe(g, test::op(g, "Conv", {"x", "w"}, {"y"}, {{"pads", Ints{1, 1, 1, 1}}}));
}

TEST(ShardingConfig, DevicesAndToString) {
  const test::TwoLayers t;
  const Config c = test::config(t.fc1, {{"m", 2}, {"n", 4}});
  EXPECT_EQ(c.splits, (std::vector<int>{2, 4, 1}));
  EXPECT_EQ(c.devices(), 8);
  EXPECT_EQ(to_string(c, t.fc1), "m:2 n:4");
  EXPECT_EQ(to_string(test::config(t.fc1, {}), t.fc1), "replicated");
  EXPECT_EQ(test::config(t.fc1, {}).devices(), 1);
}

TEST(ShardingConfig, MakeConfigErrorsNameTheDimAndReason) {
  const test::TwoLayers t;
  graph::Graph g;
  const auto s = conv(g, 2, 4, 8);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  using testing::AllOf;
  using testing::HasSubstr;
  EXPECT_THAT(message([&] { test::config(t.fc1, {{"zz", 2}}); }), AllOf(HasSubstr("'zz'"), HasSubstr("m n k")));
  EXPECT_THAT(message([&] { test::config(s, {{"kh", 3}}); }), AllOf(HasSubstr("'kh'"), HasSubstr("not splittable")));
  EXPECT_THAT(message([&] { test::config(s, {{"n", 4}}); }), AllOf(HasSubstr("'n'"), HasSubstr("size 2")));
  EXPECT_THAT(message([&] { test::config(s, {{"co", 0}}); }), AllOf(HasSubstr("'co'"), HasSubstr(">= 1")));
  EXPECT_THAT(message([&] { test::config(s, {{"co", 2}, {"co", 2}}); }), HasSubstr("twice"));
  // A factor of 1 on an unsplittable dim is no split.
  EXPECT_NO_THROW(test::config(s, {{"kh", 1}}));
}

TEST(ShardingConfig, EnumeratePowersOfTwo) {
  const test::TwoLayers t; // m 8, n 12, k 16
  // Exponents (a, b, c) with a + b + c <= 2: C(5, 3) = 10; == 2: C(4, 2) = 6.
  EXPECT_EQ(enumerate_configs(t.fc1, {4, true, false}).size(), 10u);
  EXPECT_EQ(enumerate_configs(t.fc1, {4, true, true}).size(), 6u);
  EXPECT_EQ(enumerate_configs(t.fc1, {1, true, false}).size(), 1u);
  // Not a power of two: the powers 1, 2, 4 still fit under 6; none uses exactly 6.
  EXPECT_EQ(enumerate_configs(t.fc1, {6, true, false}).size(), 10u);
  EXPECT_TRUE(enumerate_configs(t.fc1, {6, true, true}).empty());
}

TEST(ShardingConfig, EnumerateAnyFactor) {
  const test::TwoLayers t;
  // Ordered triples with product n, summed over n <= 4: 1 + 3 + 3 + 6 = 13; product exactly 4: 6.
  EXPECT_EQ(enumerate_configs(t.fc1, {4, false, false}).size(), 13u);
  EXPECT_EQ(enumerate_configs(t.fc1, {4, false, true}).size(), 6u);
  EXPECT_EQ(enumerate_configs(t.fc1, {3, false, true}).size(), 3u);
  for (const Config& c : enumerate_configs(t.fc1, {12, false, true})) {
    EXPECT_EQ(c.devices(), 12) << to_string(c, t.fc1);
  }
}

TEST(ShardingConfig, EnumerateRespectsDimSizesAndSplittability) {
  graph::Graph g;
  const auto s = conv(g, 2, 4, 8); // n 2, co 4, ci 4, oh 8, ow 8, kh 3, kw 3 (never split)
  const auto configs = enumerate_configs(s, {2, true, false});
  EXPECT_EQ(configs.size(), 6u); // replicated + one of five dims split in two
  const auto four = enumerate_configs(s, {16, true, false});
  const int kh = s.find_dim("kh"), kw = s.find_dim("kw"), n = s.find_dim("n"), co = s.find_dim("co");
  for (const Config& c : four) {
    EXPECT_EQ(c.splits[static_cast<std::size_t>(kh)], 1);
    EXPECT_EQ(c.splits[static_cast<std::size_t>(kw)], 1);
    EXPECT_LE(c.splits[static_cast<std::size_t>(n)], 2);
    EXPECT_LE(c.splits[static_cast<std::size_t>(co)], 4);
    EXPECT_LE(c.devices(), 16);
  }
  // Deterministic: lexicographic, replicated first, no duplicates.
  EXPECT_TRUE(std::is_sorted(four.begin(), four.end()));
  EXPECT_EQ(std::adjacent_find(four.begin(), four.end()), four.end());
  EXPECT_EQ(four.front().devices(), 1);
  EXPECT_EQ(four, enumerate_configs(s, {16, true, false}));
  EXPECT_THROW(enumerate_configs(s, {0, true, false}), Error);
}

TEST(ShardingConfig, EnumerateLargeGridCount) {
  graph::Graph g;
  const auto s = conv(g, 1024, 1024, 1024);
  // Five dims, exponents summing to <= 10: C(15, 5); to exactly 10: C(14, 4).
  EXPECT_EQ(enumerate_configs(s, {1024, true, false}).size(), 3003u);
  EXPECT_EQ(enumerate_configs(s, {1024, true, true}).size(), 1001u);
}

TEST(ShardingConfig, GridCoordinatesLastSplitDimFastest) {
  const test::TwoLayers t;
  const Config c = test::config(t.fc1, {{"m", 2}, {"n", 2}});
  EXPECT_EQ(grid_coordinates(c, 0), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(grid_coordinates(c, 1), (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(grid_coordinates(c, 2), (std::vector<int>{1, 0, 0}));
  EXPECT_EQ(grid_coordinates(c, 3), (std::vector<int>{1, 1, 0}));
  EXPECT_THROW(grid_coordinates(c, 4), Error);
  const Config mk = test::config(t.fc1, {{"m", 2}, {"k", 4}});
  EXPECT_EQ(grid_coordinates(mk, 5), (std::vector<int>{1, 0, 1}));
}

TEST(ShardingConfig, GroupsAlong) {
  const test::TwoLayers t;
  const Config c = test::config(t.fc1, {{"m", 2}, {"n", 2}});
  const std::vector<int> devices{10, 11, 12, 13};
  const int b = t.fc1.find_dim("m"), n = t.fc1.find_dim("n");
  // Along b: devices sharing an n coordinate; n is fastest, so they are 2 apart. This is W's
  // replica group, i.e. data parallelism's gradient all-reduce.
  EXPECT_EQ(groups_along(c, devices, std::vector<int>{b}), (Groups{{10, 12}, {11, 13}}));
  EXPECT_EQ(groups_along(c, devices, std::vector<int>{n}), (Groups{{10, 11}, {12, 13}}));
  EXPECT_EQ(groups_along(c, devices, std::vector<int>{b, n}), (Groups{{10, 11, 12, 13}}));
  EXPECT_EQ(groups_along(c, devices, std::vector<int>{}), (Groups{{10}, {11}, {12}, {13}}));
  // An unsplit axis groups nothing.
  EXPECT_EQ(groups_along(c, devices, std::vector<int>{t.fc1.find_dim("k")}), (Groups{{10}, {11}, {12}, {13}}));
  EXPECT_THROW(groups_along(c, std::vector<int>{0, 1}, std::vector<int>{b}), Error);
  EXPECT_THROW(groups_along(c, devices, std::vector<int>{7}), Error);
}

} // namespace
} // namespace partita
