#pragma once

// Small helpers for building graphs by hand in tests.

#include "partita/graph/graph.h"

#include <map>
#include <string>
#include <vector>

namespace partita::test {

// Adds a tensor; role defaults to activation.
graph::TensorId tensor(graph::Graph& g, const std::string& name, graph::Shape shape,
                       graph::TensorRole role = graph::TensorRole::activation, graph::DType dtype = graph::DType::f32);

// Adds an op reading `inputs` and writing `outputs` (tensor names, "" for an omitted input).
graph::OpId op(graph::Graph& g, const std::string& type, const std::vector<std::string>& inputs,
               const std::vector<std::string>& outputs, std::map<std::string, graph::Attribute> attrs = {});

// Path of a scratch directory unique to the running test (created, emptied).
std::string scratch_dir();

} // namespace partita::test
