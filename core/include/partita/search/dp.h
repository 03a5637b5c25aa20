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

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace partita::search::dp {

struct Problem {
  std::vector<int> domain;                 // per vertex: number of values (>= 1)
  std::vector<std::string> names;          // per vertex, for messages (may be empty)
  std::vector<std::vector<double>> tables; // cost tables, shared by every vertex or edge that has them
  std::vector<int> unary;                  // per vertex: index of a table of domain[v] costs, or -1 (zeros)
  struct Edge {
    int u = 0, v = 0; // u != v
    int table = 0;    // domain[u] x domain[v] costs, row-major: cost(x_u, x_v) = table[x_u * domain[v] + x_v]
  };
  std::vector<Edge> edges;

  int add_vertex(int domain_size, std::string name = {});
  int add_table(std::vector<double> costs); // returns its index
};

// Memory the tables of a solve are built in, handed on to the next solve of the same problem
// (or of one with other costs on the same graph), which then builds its tables in the same
// buffers: fresh memory costs a page fault per page first touched, a large part of a solve on a
// virtual machine.
struct Workspace {
  std::vector<std::vector<double>> buffers;
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
};

struct Stats {
  int width = 0;            // largest dependent set
  double largest_table = 0; // entries of the largest table built
  double work = 0;          // table entries visited (x the eliminated vertex's domain)
  double peak_bytes = 0;    // the tables built (kept for the way back to the choices), at their peak
  int reused_steps = 0;     // steps that took an earlier step's table (Options::reuse_repeated_steps)
};

struct Solution {
  double cost = 0;
  std::vector<int> choice; // per vertex
  Stats stats;
};

// Throws partita::Error for a malformed problem (a table of the wrong size, a NaN cost, an edge
// to a missing vertex), partita::Cancelled when cancelled.
Solution solve(const Problem& problem, const Options& options = {});

// The cost of one assignment.
double total_cost(const Problem& problem, std::span<const int> choice);

// Every assignment tried (for tests on small problems): throws partita::Error past 2e7 of them.
Solution brute_force(const Problem& problem);

} // namespace partita::search::dp
