// The exact solver against every assignment tried, on random chains, trees and DAGs; the bounded
// solver's plan and bound on either side of the optimum.

#include "partita/graph/error.h"
#include "partita/search/dp.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <random>

namespace partita {
namespace {

using search::dp::Problem;

// A random problem: `n` vertices with 1 to `most_values` values, each vertex joined to `parents`
// earlier ones; with `ties`, costs are whole numbers from 0 to 3, so that many sums are equal.
Problem random_problem(std::mt19937& rng, int n, int parents, bool share_tables, int most_values = 4,
                       bool ties = false) {
  Problem p;
  std::uniform_int_distribution<int> dom(1, most_values);
  std::uniform_real_distribution<double> real_cost(0.0, 10.0);
  std::uniform_int_distribution<int> whole_cost(0, 3);
  const auto cost = [&](std::mt19937& g) { return ties ? whole_cost(g) : real_cost(g); };
  for (int v = 0; v < n; ++v) {
    p.add_vertex(dom(rng), "v" + std::to_string(v));
    std::vector<double> u(static_cast<std::size_t>(p.domain.back()));
    for (auto& c : u) {
      c = cost(rng);
    }
    p.unary.back() = p.add_table(std::move(u));
  }
  for (int v = 1; v < n; ++v) {
    for (int k = 0; k < parents; ++k) {
      const int u = std::uniform_int_distribution<int>(0, v - 1)(rng);
      const auto size =
          static_cast<std::size_t>(p.domain[static_cast<std::size_t>(u)] * p.domain[static_cast<std::size_t>(v)]);
      int table = -1;
      for (std::size_t e = 0; share_tables && e < p.edges.size(); ++e) {
        if (p.tables[static_cast<std::size_t>(p.edges[e].table)].size() == size &&
            p.domain[static_cast<std::size_t>(p.edges[e].u)] == p.domain[static_cast<std::size_t>(u)]) {
          table = p.edges[e].table;
        }
      }
      if (table < 0) {
        std::vector<double> t(size);
        for (auto& c : t) {
          c = cost(rng);
        }
        table = p.add_table(std::move(t));
      }
      p.edges.push_back({u, v, table});
    }
  }
  return p;
}

TEST(Dp, EqualsBruteForceOnRandomChainsTreesAndDags) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 120; ++trial) {
    const int n = 3 + trial % 8;
    const int parents = trial % 3 == 0 ? 1 : trial % 3 == 1 ? 2 : 3;
    const auto p = random_problem(rng, n, parents, trial % 2 == 0);
    const auto exact = search::dp::solve(p);
    const auto brute = search::dp::brute_force(p);
    ASSERT_NEAR(exact.cost, brute.cost, 1e-9 * brute.cost) << "trial " << trial;
    EXPECT_NEAR(search::dp::total_cost(p, exact.choice), exact.cost, 1e-9 * exact.cost) << "trial " << trial;
  }
}

// Domains of up to 24 values, past the width the least of a row is taken in lanes; costs with ties
// (the choice must still cost the least) and without.
TEST(Dp, EqualsBruteForceWithWideDomainsAndTies) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 3 + trial % 3;
    const int parents = 1 + trial % 2;
    const auto p = random_problem(rng, n, parents, trial % 4 == 0, 24, trial % 3 == 0);
    const auto exact = search::dp::solve(p);
    const auto brute = search::dp::brute_force(p);
    ASSERT_NEAR(exact.cost, brute.cost, 1e-9 * std::max(1.0, brute.cost)) << "trial " << trial;
    EXPECT_NEAR(search::dp::total_cost(p, exact.choice), exact.cost, 1e-9 * std::max(1.0, exact.cost))
        << "trial " << trial;
  }
}

// A cycle of n vertices (0 - 1 - ... - n-1 - 0), or a ladder (two chains, 0 .. n/2-1 and
// n/2 .. n-1, joined by rungs v - (n-1-v)): its steps have a scope of two or three. Vertex v takes
// dom(rng) values, each placed in one of `kinds`(rng) ways (none given: every value its own way),
// and an edge's table holds one random cost per pair of placements, as the search's tables do.
Problem cycle_or_ladder(std::mt19937& rng, int n, bool ladder, std::uniform_int_distribution<int>& dom,
                        std::uniform_int_distribution<int>* kinds = nullptr) {
  std::uniform_real_distribution<double> real_cost(0.0, 10.0);
  Problem p;
  std::vector<std::vector<int>> place(static_cast<std::size_t>(n));
  std::vector<int> ways(static_cast<std::size_t>(n));
  for (int v = 0; v < n; ++v) {
    p.add_vertex(dom(rng), "v" + std::to_string(v));
    const int values = p.domain.back();
    ways[static_cast<std::size_t>(v)] = kinds != nullptr ? (*kinds)(rng) : values;
    std::vector<double> u(static_cast<std::size_t>(values));
    for (int x = 0; x < values; ++x) {
      u[static_cast<std::size_t>(x)] = real_cost(rng);
      place[static_cast<std::size_t>(v)].push_back(
          kinds != nullptr ? std::uniform_int_distribution<int>(0, ways[static_cast<std::size_t>(v)] - 1)(rng) : x);
    }
    p.unary.back() = p.add_table(std::move(u));
  }
  const auto join = [&](int u, int v) {
    const auto& pu = place[static_cast<std::size_t>(u)];
    const auto& pv = place[static_cast<std::size_t>(v)];
    const auto wv = static_cast<std::size_t>(ways[static_cast<std::size_t>(v)]);
    std::vector<double> by_place(static_cast<std::size_t>(ways[static_cast<std::size_t>(u)]) * wv);
    for (auto& c : by_place) {
      c = real_cost(rng);
    }
    std::vector<double> t;
    for (const int a : pu) {
      for (const int b : pv) {
        t.push_back(by_place[static_cast<std::size_t>(a) * wv + static_cast<std::size_t>(b)]);
      }
    }
    p.edges.push_back({u, v, p.add_table(std::move(t))});
  };
  for (int v = 0; v + 1 < n; ++v) {
    if (!ladder || v + 1 != n / 2) {
      join(v, v + 1);
    }
  }
  if (ladder) {
    for (int v = 0; v < n / 2; ++v) {
      join(v, n - 1 - v);
    }
  } else {
    join(0, n - 1);
  }
  return p;
}

// Cycles and ladders of vertices with 2 to 13 values: their steps
// have a scope of two or three (a vertex of one value would cut the cycle), whose entries are taken four along the last
// vertex at a time and, where the factor read along it does not read the vertex before, two rows at a time; every
// remainder of four and of two, and eliminated vertices of fewer values than a register holds.
TEST(Dp, StepsTakenInBlocksOfEntriesEqualBruteForce) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> dom(2, 13);
  for (int trial = 0; trial < 80; ++trial) {
    const bool ladder = trial % 2 == 1;
    const auto p = cycle_or_ladder(rng, ladder ? 6 : 4 + trial % 3, ladder, dom);
    const auto exact = search::dp::solve(p);
    const auto brute = search::dp::brute_force(p);
    ASSERT_NEAR(exact.cost, brute.cost, 1e-9 * brute.cost) << "trial " << trial;
    EXPECT_NEAR(search::dp::total_cost(p, exact.choice), exact.cost, 1e-9 * exact.cost) << "trial " << trial;
    EXPECT_GE(exact.stats.width, 2) << "trial " << trial;
  }
}

// Edge tables as the search's are: an op's values place a tensor in fewer ways than it has values,
// and values that place it alike have the same row or column (each vertex's values map to 2 to 5
// placements, a table is one cost per pair of placements). A step sums one value of each class
// of equal columns and copies the rest: the same optimum as every assignment tried.
TEST(Dp, StepsOverClassesOfEqualColumnsEqualBruteForce) {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int> dom(8, 12), places(2, 5);
  for (int trial = 0; trial < 40; ++trial) {
    const bool ladder = trial % 2 == 1;
    const auto p = cycle_or_ladder(rng, ladder ? 6 : 5, ladder, dom, &places);
    const auto exact = search::dp::solve(p);
    const auto brute = search::dp::brute_force(p);
    ASSERT_NEAR(exact.cost, brute.cost, 1e-9 * brute.cost) << "trial " << trial;
    EXPECT_NEAR(search::dp::total_cost(p, exact.choice), exact.cost, 1e-9 * exact.cost) << "trial " << trial;
  }
}

// A workspace handed from solve to solve, over problems of other shapes and sizes, changes no
// result: the same costs and choices as solves on fresh memory.
TEST(Dp, AWorkspaceCarriedBetweenSolvesChangesNothing) {
  std::mt19937 rng(5);
  search::dp::Workspace workspace;
  search::dp::Options with;
  with.workspace = &workspace;
  for (int trial = 0; trial < 40; ++trial) {
    const auto p = random_problem(rng, 4 + trial % 9, 1 + trial % 3, trial % 2 == 0, 4 + trial % 20);
    for (int again = 0; again < 2; ++again) {
      const auto fresh = search::dp::solve(p);
      const auto reused = search::dp::solve(p, with);
      EXPECT_EQ(reused.cost, fresh.cost) << "trial " << trial;
      EXPECT_EQ(reused.choice, fresh.choice) << "trial " << trial;
    }
  }
  EXPECT_FALSE(workspace.buffers.empty()); // the tables went back to it
}

// Tables of every size class (the heap's below 64 KiB, blocks cut from huge pages up to 1 MiB,
// whole huge pages beyond): each holds what was written into it while the others are written, and
// a block freed is handed out again for the next table of its size (beyond 1 MiB, of as many huge
// pages).
TEST(Dp, TablesOfEverySizeKeepTheirContentsAndFreedBlocksAreReused) {
  using search::dp::allocate_table;
  using search::dp::free_table;
  const std::vector<std::size_t> sizes{1000, 70000, 65536, 200000, 500000, 1 << 20, (1 << 20) + 8, 3 << 20};
  std::vector<double*> tables;
  for (int round = 0; round < 3; ++round) {
    for (const std::size_t bytes : sizes) {
      auto* t = static_cast<double*>(allocate_table(bytes));
      for (std::size_t i = 0; i < bytes / sizeof(double); ++i) {
        t[i] = static_cast<double>(tables.size()) + 1e-9 * static_cast<double>(i);
      }
      tables.push_back(t);
    }
  }
  for (std::size_t k = 0; k < tables.size(); ++k) {
    const std::size_t bytes = sizes[k % sizes.size()];
    for (std::size_t i = 0; i < bytes / sizeof(double); i += 97) {
      ASSERT_EQ(tables[k][i], static_cast<double>(k) + 1e-9 * static_cast<double>(i)) << "table " << k;
    }
  }
  // 200,000 bytes take a block of 256 KiB: the last one freed is the next one given.
  double* freed = tables[3];
  free_table(freed, 200000);
  double* again = static_cast<double*>(allocate_table(250000));
  EXPECT_EQ(again, freed);
  tables[3] = again;
  // 3 MiB take two huge pages: freed, they are the next table of two pages, and keep what it writes.
  double* whole = tables[7];
  free_table(whole, 3 << 20);
  double* reused = static_cast<double*>(allocate_table((3 << 20) + 4096));
  EXPECT_EQ(reused, whole);
  EXPECT_EQ(reused[1000], 7 + 1e-9 * 1000); // kept as it was, not handed back and faulted in again
  for (std::size_t i = 0; i < ((3 << 20) + 4096) / sizeof(double); ++i) {
    reused[i] = -static_cast<double>(i);
  }
  for (std::size_t k = 0; k < tables.size(); k += 7) {
    if (k != 7) {
      ASSERT_EQ(tables[k][1], static_cast<double>(k) + 1e-9) << "table " << k;
    }
  }
  EXPECT_EQ(reused[12345], -12345.0);
  tables[7] = reused;
  for (std::size_t k = 0; k < tables.size(); ++k) {
    const std::size_t bytes = k == 3 ? 250000 : k == 7 ? (3 << 20) + 4096 : sizes[k % sizes.size()];
    free_table(tables[k], bytes);
  }
}

// `blocks` copies of one small random block (the same tables), each block's first vertex joined to
// the previous block's last, as the layers of a transformer are: most steps repeat another's.
Problem repeated_blocks(std::mt19937& rng, int blocks, int block_size, int most_values, bool ties) {
  const Problem block = random_problem(rng, block_size, 2, true, most_values, ties);
  Problem p = block;
  p.domain.clear();
  p.names.clear();
  p.unary.clear();
  p.edges.clear();
  const auto first = static_cast<std::size_t>(0), last = static_cast<std::size_t>(block_size - 1);
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  std::vector<double> link(static_cast<std::size_t>(block.domain[last] * block.domain[first]));
  for (auto& c : link) {
    c = ties ? std::floor(cost(rng) / 3) : cost(rng);
  }
  const int link_table = p.add_table(std::move(link));
  for (int b = 0; b < blocks; ++b) {
    const int base = b * block_size;
    for (int v = 0; v < block_size; ++v) {
      p.add_vertex(block.domain[static_cast<std::size_t>(v)], "b" + std::to_string(b) + "v" + std::to_string(v));
      p.unary.back() = block.unary[static_cast<std::size_t>(v)];
    }
    for (const auto& e : block.edges) {
      p.edges.push_back({base + e.u, base + e.v, e.table});
    }
    if (b > 0) {
      p.edges.push_back({base - 1, base, link_table});
    }
  }
  return p;
}

// Steps that take a repeated step's table give the same optimum and the same choices, to the
// last bit, as steps that build every table; and on problems small enough, brute force's cost.
TEST(Dp, RepeatedBlocksTakeTheirTablesOnceAndChangeNothing) {
  std::mt19937 rng(3);
  search::dp::Options off;
  off.reuse_repeated_steps = false;
  int reused = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const bool ties = trial % 2 == 1;
    const auto p = repeated_blocks(rng, 2 + trial % 7, 3 + trial % 4, 4 + trial % 13, ties);
    const auto with = search::dp::solve(p);
    const auto without = search::dp::solve(p, off);
    EXPECT_EQ(with.cost, without.cost) << "trial " << trial;
    EXPECT_EQ(with.choice, without.choice) << "trial " << trial;
    EXPECT_EQ(without.stats.reused_steps, 0);
    reused += with.stats.reused_steps;
    double combinations = 1;
    for (int d : p.domain) {
      combinations *= d;
    }
    if (combinations <= 2e6) {
      const auto brute = search::dp::brute_force(p);
      EXPECT_NEAR(with.cost, brute.cost, 1e-9 * std::max(1.0, brute.cost)) << "trial " << trial;
    }
  }
  EXPECT_GT(reused, 30); // the repeated steps were taken, not built again
}

TEST(Dp, ChainOfOneValueVerticesIsAConstant) {
  Problem p;
  p.add_vertex(1, "a");
  p.add_vertex(1, "b");
  p.add_vertex(3, "c");
  p.edges.push_back({0, 1, p.add_table({2.0})});
  p.edges.push_back({1, 2, p.add_table({5.0, 1.0, 3.0})});
  const auto s = search::dp::solve(p);
  EXPECT_DOUBLE_EQ(s.cost, 3.0);
  EXPECT_EQ(s.choice[2], 1);
}

TEST(Dp, RejectsMalformedProblemsByName) {
  Problem p;
  p.add_vertex(2, "conv1");
  p.unary[0] = p.add_table({1.0});
  EXPECT_THAT([&] { search::dp::solve(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr(
                                                 "the cost of 'conv1' has 1 costs, its domains need 2")));
  p.tables[0] = {1.0, std::nan("")};
  EXPECT_THAT([&] { search::dp::solve(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("finite")));
  p.tables[0] = {1.0, 2.0};
  p.edges.push_back({0, 3, 0});
  EXPECT_THAT([&] { search::dp::solve(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("edge joins")));
}

TEST(Dp, ChecksATableSharedByManyEdgesForEveryUseAndItsCostsOnce) {
  // Three vertices of two values, both edges reading one table (as the copies of a repeated block
  // do): a bad cost anywhere in it is named with the first edge that reads it, whatever its place.
  Problem p;
  for (const char* name : {"a", "b", "c"}) {
    p.add_vertex(2, name);
  }
  const int shared = p.add_table({1.0, 2.0, 3.0, 4.0});
  p.edges.push_back({0, 1, shared});
  p.edges.push_back({1, 2, shared});
  EXPECT_DOUBLE_EQ(search::dp::solve(p).cost, 2.0);
  for (const double bad : {-1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    p.tables[static_cast<std::size_t>(shared)] = {1.0, 2.0, 3.0, bad};
    EXPECT_THAT([&] { search::dp::solve(p); }, ::testing::ThrowsMessage<Error>(::testing::AllOf(
                                                   ::testing::HasSubstr("the edge 'a' - 'b' holds the cost"),
                                                   ::testing::HasSubstr("must be finite and >= 0"))))
        << bad;
  }
  // Its size is checked for every edge that reads it: a third edge from a vertex of three values.
  p.tables[static_cast<std::size_t>(shared)] = {1.0, 2.0, 3.0, 4.0};
  p.add_vertex(3, "d");
  p.edges.push_back({3, 0, shared});
  EXPECT_THAT([&] { search::dp::solve(p); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr(
                                                 "the edge 'd' - 'a' has 4 costs, its domains need 6")));
}

TEST(Dp, TooWideASpaceIsRefusedNotRunOutOfMemory) {
  Problem p;
  for (int v = 0; v < 4; ++v) {
    p.add_vertex(100, "op" + std::to_string(v));
  }
  const int t = p.add_table(std::vector<double>(100 * 100, 1.0));
  for (int u = 0; u < 4; ++u) {
    for (int v = u + 1; v < 4; ++v) {
      p.edges.push_back({u, v, t});
    }
  }
  search::dp::Options o;
  o.max_table_entries = 1e4;
  EXPECT_THAT([&] { search::dp::solve(p, o); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("too wide to search exactly")));
}

TEST(Dp, StopsWhenCancelled) {
  std::mt19937 rng(1);
  const auto p = random_problem(rng, 30, 2, false);
  std::atomic<bool> cancel{true};
  search::dp::Options o;
  o.cancel = &cancel;
  EXPECT_THROW(search::dp::solve(p, o), Cancelled);
}

// A DenseNet block in miniature: every layer reads the block's input and every earlier layer's
// output, so that any elimination ordering holds all of them in one table.
Problem dense_block(std::mt19937& rng, int layers, int values) {
  Problem p;
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  const auto table = [&](std::size_t n) {
    std::vector<double> t(n);
    for (auto& c : t) {
      c = cost(rng);
    }
    return p.add_table(std::move(t));
  };
  for (int v = 0; v < layers; ++v) {
    p.add_vertex(values, "layer" + std::to_string(v));
    p.unary.back() = table(static_cast<std::size_t>(values));
    for (int u = 0; u < v; ++u) {
      p.edges.push_back({u, v, table(static_cast<std::size_t>(values * values))});
    }
  }
  return p;
}

TEST(DpBounded, ItsPlanAndBoundStandOnEitherSideOfTheOptimum) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const auto p = trial % 3 == 0
                       ? dense_block(rng, 4 + trial % 4, 4)
                       : random_problem(rng, 4 + trial % 7, 2 + trial % 3, trial % 2 == 0, 5, trial % 4 == 1);
    const auto brute = search::dp::brute_force(p);
    for (const double entries : {1.0, 8.0, 64.0}) {
      const auto b = search::dp::solve_bounded(p, entries);
      EXPECT_NEAR(search::dp::total_cost(p, b.choice), b.cost, 1e-9 * b.cost) << "trial " << trial;
      EXPECT_LE(b.lower_bound, brute.cost + 1e-9 * brute.cost) << "trial " << trial << ", tables of " << entries;
      EXPECT_GE(b.cost, brute.cost - 1e-9 * brute.cost) << "trial " << trial << ", tables of " << entries;
      EXPECT_LE(b.lower_bound, b.cost) << "trial " << trial;
      if (b.exact) {
        EXPECT_NEAR(b.cost, brute.cost, 1e-9 * brute.cost) << "trial " << trial << ", tables of " << entries;
      }
    }
  }
}

TEST(DpBounded, IsExactWhereNoStepIsSplit) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const auto p = random_problem(rng, 3 + trial % 8, 1 + trial % 3, trial % 2 == 0);
    const auto exact = search::dp::solve(p);
    const auto b = search::dp::solve_bounded(p, 1e9);
    EXPECT_TRUE(b.exact) << "trial " << trial;
    EXPECT_EQ(b.stats.split_steps, 0);
    EXPECT_NEAR(b.cost, exact.cost, 1e-9 * exact.cost) << "trial " << trial;
    EXPECT_DOUBLE_EQ(b.lower_bound, b.cost);
  }
}

TEST(DpBounded, SolveHandsAProblemTooWideForItsTablesToTheBoundedSearch) {
  std::mt19937 rng(3);
  const auto p = dense_block(rng, 9, 6); // exactly: a table of 6^8 = 1.7e6 entries
  const auto brute = search::dp::brute_force(p);
  search::dp::Options o;
  o.max_table_entries = 1e4;
  EXPECT_THAT([&] { search::dp::solve(p, o); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("too wide to search exactly")));
  o.bounded_table_entries = 100;
  const auto s = search::dp::solve(p, o);
  EXPECT_FALSE(s.exact);
  EXPECT_DOUBLE_EQ(s.stats.too_wide_table, std::pow(6.0, 8));
  EXPECT_GT(s.stats.split_steps, 0);
  EXPECT_LE(s.stats.largest_table, 100);
  EXPECT_LE(s.lower_bound, brute.cost + 1e-9 * brute.cost);
  EXPECT_GE(s.cost, brute.cost - 1e-9 * brute.cost);
  EXPECT_NEAR(search::dp::total_cost(p, s.choice), s.cost, 1e-9 * s.cost);
  // Its plan can be no worse than the local search's end: no single vertex can improve it.
  for (std::size_t v = 0; v < p.domain.size(); ++v) {
    auto other = s.choice;
    for (int x = 0; x < p.domain[v]; ++x) {
      other[v] = x;
      EXPECT_GE(search::dp::total_cost(p, other), s.cost - 1e-9 * s.cost) << "vertex " << v << " value " << x;
    }
  }
  // Where the exact program fits, solve() stays exact whatever the bounded tables would be.
  o.max_table_entries = 1e7;
  const auto exact = search::dp::solve(p, o);
  EXPECT_TRUE(exact.exact);
  EXPECT_NEAR(exact.cost, brute.cost, 1e-9 * brute.cost);
  EXPECT_DOUBLE_EQ(exact.lower_bound, exact.cost);
}

TEST(DpBounded, RefusesTablesOfNoEntryAndStopsWhenCancelled) {
  std::mt19937 rng(2);
  const auto p = dense_block(rng, 6, 4);
  EXPECT_THAT([&] { search::dp::solve_bounded(p, 0); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("at least one entry")));
  std::atomic<bool> cancel{true};
  search::dp::Options o;
  o.cancel = &cancel;
  EXPECT_THROW(search::dp::solve_bounded(p, 16, o), Cancelled);
}

} // namespace
} // namespace partita
