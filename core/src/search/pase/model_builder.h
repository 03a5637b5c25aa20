#pragma once

// Builds a PaSE graph op by op, as the reference's nn_ops.py does: each op gets its domain, its
// configurations, a cost per configuration, and per input and output tensor the split of that
// tensor's dimensions in each configuration; an edge joins a tensor's producer and consumer with
// the redistribution cost for every pair of their configurations.

#include "partita/search/pase.h"

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace partita::search::pase::detail {

using Shape = std::vector<std::int64_t>;
using Pair = std::array<std::int64_t, 2>;

// Per configuration of an op, how many parts each dimension of one of its tensors is split in:
// configs x rank, row-major.
struct Layouts {
  int rank = 0;
  std::vector<double> split;

  std::size_t count() const { return rank == 0 ? 0 : split.size() / static_cast<std::size_t>(rank); }
  std::span<const double> row(std::size_t c) const {
    return {split.data() + c * static_cast<std::size_t>(rank), static_cast<std::size_t>(rank)};
  }
};

// Configurations of a domain: per dimension the factors f of its size d with d / f >= cutoff (or
// just 1 when there is none), every combination whose product is at most procs.
std::vector<std::vector<int>> configurations(const Shape& domain, int procs, int cutoff);

// The layouts of a tensor whose dimension j is domain dimension dims[j].
Layouts select(const std::vector<std::vector<int>>& configs, std::span<const int> dims);

// Dimension lists: 0..n-1; 0..n-1 but `skip`; and n letters to name them.
std::vector<int> iota_dims(std::size_t n);
std::vector<int> without(std::size_t n, std::size_t skip);
std::string letters(std::size_t n);

// A configuration's part of the domain: each dimension's size over its split.
std::vector<double> parts(const Layer& layer, std::size_t config);
// Their product over `dims`, left to right as numpy's prod.
double product(std::span<const double> values, std::span<const int> dims);
double product(std::span<const double> values);

// The costs (FLOP units; ratio converts words) the reference's nn_ops.py assigns.
double allreduce_cost(double ratio, double words, double procs);
// A batched GEMM: dom and split hold batch dims..., m, n, k.
double gemm_cost(double ratio, std::span<const double> dom, std::span<const double> split, int pointwise_ops);
// Halo elements a pooling exchanges: tensor and split are its input's b, c, h, w.
double ghost_cost(double ratio, std::span<const double> tensor, std::span<const double> split, double r, double s);
// Words a consumer's part needs beyond what the producer's part holds (zero when the consumer
// uses more devices than the producer covers: then it needs everything).
double area_needed(std::span<const double> src_part, std::span<const double> tgt_part, double src_procs,
                   double tgt_procs);
// Redistribution between every pair of configurations, row-major producer x consumer.
std::vector<double> edge_costs(double ratio, const Shape& tensor, const Layouts& src, const Layouts& tgt);

class ModelBuilder {
public:
  ModelBuilder(std::string graph, const Options& options);

  double ratio() const { return m_ratio; }
  int procs() const { return m_procs; }
  void set_cutoff(int cutoff) { m_cutoff = cutoff; }

  // Tensors are ids; an input tensor has no producer and brings no edge.
  int input(Shape shape);
  const Shape& shape(int tensor) const { return m_tensors[static_cast<std::size_t>(tensor)].shape; }

  int conv(const std::string& name, int img, const Shape& filter, Pair stride, Pair pad, int pointwise_ops = 0);
  int pooling(const std::string& name, int img, Pair filter, Pair stride, Pair pad);
  int fc(const std::string& name, int in, std::int64_t units, int pointwise_ops = 0);
  int einsum(const std::string& name, const std::string& equation, int in1, int in2, int pointwise_ops = 0);
  int embedding(const std::string& name, int in, std::int64_t vocab, std::int64_t dim);
  int elementwise(const std::string& name, int a, int b, int pointwise_ops = 0);
  int reshape(const std::string& name, int in, const Shape& shape);
  int concat(const std::string& name, const std::vector<int>& ins, int axis);
  int norm(const std::string& name, int in, int axis);
  int batch_norm(const std::string& name, int in) { return norm(name, in, 0); }
  int reduce_mean(const std::string& name, int in, const std::vector<int>& axes, bool keepdims);
  int softmax(const std::string& name, int in, int axis);
  int softmax_cross_entropy(const std::string& name, int in);
  int stack(const std::string& name, const std::vector<int>& ins, int axis);
  std::vector<int> unstack(const std::string& name, int in, int axis);
  int lstm(const std::string& name, int in, std::int64_t units, std::int64_t layers);

  Model finish();

private:
  struct Tensor {
    Shape shape;
    int producer = -1;
    int output = 0;
  };
  struct Node {
    Layer layer;
    std::vector<Layouts> outputs;
  };
  struct Io {
    int tensor = 0;
    Layouts layouts;
  };

  // Adds the op, its output tensors and the edges from its inputs' producers; returns the ids of
  // its outputs.
  std::vector<int> add(Layer layer, const std::vector<Io>& inputs, std::vector<std::pair<Shape, Layouts>> outputs);
  static std::vector<std::pair<Shape, Layouts>> single(Shape shape, Layouts layouts);
  Layer layer(const std::string& name, std::string op, std::string dims, Shape domain) const;
  int ravel(const std::string& name, int in);
  int unravel(const std::string& name, int in, const Shape& shape);

  std::string m_graph;
  int m_procs = 1;
  double m_ratio = 0;
  int m_cutoff = 4;
  std::vector<Tensor> m_tensors;
  std::vector<Node> m_nodes;
  // A second edge between the same two ops replaces the first, as a networkx DiGraph's add_edge
  // does in the reference (e.g. q and k both from one Unstack into one Einsum).
  std::map<std::pair<int, int>, std::vector<double>> m_edges;
};

// The graphs (graphs_cnn.cpp, graphs_seq.cpp).
void alexnet(ModelBuilder& b, std::int64_t batch);
void resnet101(ModelBuilder& b, std::int64_t batch);
void inception3(ModelBuilder& b, std::int64_t batch);
void rnnlm(ModelBuilder& b, std::int64_t batch);
void transformer(ModelBuilder& b, std::int64_t batch);

} // namespace partita::search::pase::detail
