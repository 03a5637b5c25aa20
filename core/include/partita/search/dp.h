#pragma once

// The exact solver behind the per-layer search (PaSE, Elango 2021): every vertex (an op) picks one
// value of its domain (a configuration); the cost is the sum of a unary cost per vertex (the op's
// own time) and a pairwise cost per edge (the redistribution between two ops' layouts). solve()
// finds the minimum exactly by dynamic programming over a vertex elimination ordering: each
// vertex, once eliminated, leaves a table over its dependent set (its not yet eliminated
// neighbours) that holds, for every configuration of that set, the best cost of everything
// eliminated so far (PaSE's GenerateSeq keeps the same tables; the ordering here is chosen
// greedily by the size of the table each step would build, as a tree decomposition would).
// No pruning is heuristic: the result is the optimum of the problem as given.
//
// Some graphs have no narrow ordering at all: a DenseNet block concatenates every earlier layer's
// output, so its dependent sets hold every layer of the block. For them solve_bounded() (or solve()
// with Options::bounded_table_entries) returns a plan and a lower bound on the optimum instead, so
// that how far the plan can be from the optimum is stated, never guessed.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace partita::search::dp {

// Memory the tables of a solve are built in, handed on to the next solve of the same problem
// (or of one with other costs on the same graph), which then builds its tables in the same
// buffers: fresh memory costs a page fault per page first touched, a large part of a solve on a
// virtual machine.
// Memory for a table: from 64 KiB to 1 MiB a block of a power of two cut from a huge page and kept,
// once freed, for the next table of its size; larger, whole huge pages (Linux's transparent huge
// pages, asked for with madvise; where the system has none the memory is as good), kept once
// freed for the next table of as many pages, up to 64 MiB in all; smaller, the heap's. Fresh
// memory costs a page fault per page first touched, and on 4 KiB pages those were a sixth of a
// large solve and a fifth of a search at 64 devices on a virtual machine. free_table takes the
// size the table was allocated with.
void* allocate_table(std::size_t bytes);
void free_table(void* p, std::size_t bytes) noexcept;

// allocate_table's memory for a std::vector, its values initialized as std::allocator does: the
// large arrays a search fills once and reads many times (its edge tables: hundreds of MiB at 1,024
// devices), whose page faults on 4 KiB pages cost more than filling them.
template <class T> struct HugePages : std::allocator<T> {
  template <class U> struct rebind { using other = HugePages<U>; };
  HugePages() = default;
  template <class U> HugePages(const HugePages<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_table(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { free_table(p, n * sizeof(T)); }
};
template <class T> using HugeVector = std::vector<T, HugePages<T>>;
using Costs = HugeVector<double>;

// A table's entries: the same memory, grown without being zeroed first (every step writes each
// entry it sizes; std::vector<double>'s resize would clear them first, a tenth of a large solve).
template <class T> struct Uninitialized : HugePages<T> {
  template <class U> struct rebind { using other = Uninitialized<U>; };
  Uninitialized() = default;
  template <class U> Uninitialized(const Uninitialized<U>&) noexcept {}
  template <class U> void construct(U* p) noexcept { ::new (static_cast<void*>(p)) U; }
  template <class U, class... Args> void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using Buffer = std::vector<double, Uninitialized<double>>;

struct Problem {
  std::vector<int> domain;        // per vertex: number of values (>= 1)
  std::vector<std::string> names; // per vertex, for messages (may be empty)
  std::vector<Costs> tables;      // cost tables, shared by every vertex or edge that has them
  std::vector<int> unary;         // per vertex: index of a table of domain[v] costs, or -1 (zeros)
  struct Edge {
    int u = 0, v = 0; // u != v
    int table = 0;    // domain[u] x domain[v] costs, row-major: cost(x_u, x_v) = table[x_u * domain[v] + x_v]
  };
  std::vector<Edge> edges;

  int add_vertex(int domain_size, std::string name = {});
  int add_table(std::vector<double> costs); // returns its index
  int add_zero_table(std::size_t entries);  // a table of `entries` zeros; returns its index
};

struct Workspace {
  std::vector<Buffer> buffers;
};

struct Options {
  // The largest table (entries) one elimination step may build; beyond it solve() throws
  // partita::Error naming the vertex and its dependent set rather than run out of memory.
  double max_table_entries = 6e7;
  std::function<void(double)> progress;      // fraction done
  const std::atomic<bool>* cancel = nullptr; // polled every ~256K table sums (about a millisecond)
  Workspace* workspace = nullptr;            // where to build the tables (none: fresh memory)
  // A step made of the same costs and factors as an earlier one (an op of a repeated block before
  // anything from outside the block reaches it) takes the earlier step's table: the same sums.
  bool reuse_repeated_steps = true;
  // Where a step would pass max_table_entries: 0 throws (exact or nothing); above 0, solve() hands
  // the problem to solve_bounded() with tables of at most this many entries instead.
  double bounded_table_entries = 0;
};

struct Stats {
  int width = 0;            // largest dependent set
  double largest_table = 0; // entries of the largest table built
  double work = 0;          // table entries visited (x the eliminated vertex's domain)
  double peak_bytes = 0;    // the tables built (kept for the way back to the choices), at their peak
  int reused_steps = 0;     // steps that took an earlier step's table (Options::reuse_repeated_steps)
  // Bounded solves: the table the exact elimination would have needed (entries; 0 when it was not
  // tried), the steps split into several tables, and the local search's improving moves.
  double too_wide_table = 0;
  int split_steps = 0;
  int local_moves = 0;
};

struct Solution {
  double cost = 0;
  std::vector<int> choice; // per vertex
  // No assignment costs less: equal to `cost` where the solve was exact.
  double lower_bound = 0;
  bool exact = true;
  Stats stats;
};

// Throws partita::Error for a malformed problem (a table of the wrong size, a NaN cost, an edge
// to a missing vertex), partita::Cancelled when cancelled.
Solution solve(const Problem& problem, const Options& options = {});

// For problems too wide to solve exactly: mini-bucket elimination (Dechter & Rish 2003) over the
// same greedy ordering, where a step whose table would pass `table_entries` sums its factors in
// several smaller tables instead of one (the least of a sum is at least the sum of the least of
// its parts, so the constant left is a lower bound on the optimum); the choices are read back
// through the same tables, then improved one vertex at a time (each takes its best value given its
// neighbours' until none improves). Exact, and equal to solve()'s cost, where no step is split.
// Throws as solve() does, and partita::Error when `table_entries` is below 1.
Solution solve_bounded(const Problem& problem, double table_entries, const Options& options = {});

// A local search from `choice`: each vertex in turn takes its best value given its neighbours'
// (its own cost and its edges', the first least on a tie) until a pass changes none; every move
// lowers the total, so it ends. Returns the moves made. Polls Options::cancel between passes.
int improve(const Problem& problem, std::vector<int>& choice, const Options& options = {});

// The largest table solve() builds for this problem (entries), found without building any: its
// ordering depends on the domains and the edges alone.
double widest_table(const Problem& problem);

// The cost of one assignment.
double total_cost(const Problem& problem, std::span<const int> choice);

// Every assignment tried (for tests on small problems): throws partita::Error past 2e7 of them.
Solution brute_force(const Problem& problem);

} // namespace partita::search::dp
