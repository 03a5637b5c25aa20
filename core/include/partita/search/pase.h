#pragma once

// PaSE's own benchmark (Elango, "PaSE: Parallelization Strategies for Efficient DNN Training",
// IPDPS 2021) rebuilt on dp::solve: its five graphs as its reference implementation builds them
// (graph.py), its cost model in FLOP units (nn_ops.py) and its communication-to-computation ratio
// from a device's peak FLOPS and the interconnect's bandwidth (scheduler.py --flops, --bw). Every
// op is one vertex whose values are the op's configurations (a split factor per dimension of its
// iteration domain, the product at most P); a vertex costs the op's computation plus its
// intra-layer all-reduces, an edge the redistribution of the tensor between producer and consumer.
// The optimum is the reference's "Total cost" exactly: the same problem, solved exactly. The
// graphs and costs follow the reference's last graph.py and nn_ops.py (github.com/baidu-research/
// PaSE, revision 1dafd587), its defaults those its README documents.

#include "partita/search/dp.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace partita::search::pase {

struct Options {
  int procs = 8;       // P: a configuration's splits multiply to at most this
  int batch = 128;     // the reference's default
  double flops = 10.0; // TFLOPS of one device (reference default)
  double bw = 16.0;    // GB/s of the interconnect (reference default)
  dp::Options solver;  // table limit, progress, cancel
};

// The words-to-FLOP factor: the FLOPs a device does in the time one 8-byte word crosses the
// interconnect, as the reference derives it (flops * 1e3 GFLOP/s over bw / 8 Gwords/s).
double comm_ratio(const Options& options);

// One op of a graph and the configurations it may take.
struct Layer {
  std::string name;                      // e.g. "conv2", "mixed5b/branch5x5_2/conv"
  std::string op;                        // the reference's op class: Conv, FC, Einsum, ...
  std::string dims;                      // one letter per domain dimension, e.g. "bchwrsn"
  std::vector<std::int64_t> domain;      // the iteration domain
  std::vector<std::vector<int>> configs; // per configuration: the split of each dimension
  std::vector<double> costs;             // per configuration: computation + intra-layer comm
};

// A graph as the reference builds it, with its costs for one P, and the problem dp::solve takes
// (vertex i is layers[i]; one edge per producer-consumer pair).
struct Model {
  std::string graph;
  std::vector<Layer> layers;
  dp::Problem problem;
};

// Throws partita::Error naming the graph and the known ones when the name is not one of them.
Model build(std::string_view graph, const Options& options);

struct LayerChoice {
  std::string name;
  std::string op;
  std::string split; // the chosen configuration, e.g. "b=4 c=1 h=1 w=1 r=1 s=1 n=2"
  double cost = 0;   // the layer's own cost in it
};

struct Result {
  std::string graph;
  int procs = 0;
  double total_cost = 0; // what the reference prints as "Total cost"
  std::vector<LayerChoice> layers;
  dp::Stats stats;
  int vertices = 0;
  int edges = 0;
  std::int64_t configs = 0;     // summed over the vertices
  std::int64_t max_configs = 0; // of the largest vertex domain
};

// The optimum of `graph` at options.procs. Throws partita::Error for an unknown graph or a
// problem past options.solver.max_table_entries, partita::Cancelled when cancelled.
Result search(std::string_view graph, const Options& options);

// "alexnet", "resnet101", "inception3", "rnnlm", "transformer".
const std::vector<std::string>& graph_names();

// A model name for these graphs: "zoo:pase?graph=NAME[&batch=N]" (the "zoo:" prefix optional).
bool is_spec(std::string_view model);
// The graph of a spec, and its batch written into options.batch when given. Throws partita::Error
// naming the spec and the bad part (no graph, an unknown graph or parameter, a batch that is not
// a positive integer, a parameter given twice).
std::string parse_spec(std::string_view model, Options& options);

// The total as the reference prints it ("%0.2f").
std::string format_cost(double cost);

} // namespace partita::search::pase
