#include "test_support.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace partita::test {

graph::TensorId tensor(graph::Graph& g, const std::string& name, graph::Shape shape, graph::TensorRole role,
                       graph::DType dtype) {
  graph::Tensor t;
  t.name = name;
  t.shape = std::move(shape);
  t.role = role;
  t.dtype = dtype;
  return g.add_tensor(std::move(t));
}

graph::OpId op(graph::Graph& g, const std::string& type, const std::vector<std::string>& inputs,
               const std::vector<std::string>& outputs, std::map<std::string, graph::Attribute> attrs) {
  graph::Op o;
  o.name = type + "_" + std::to_string(g.ops().size());
  o.type = type;
  for (const auto& n : inputs) {
    o.inputs.push_back(n.empty() ? graph::no_tensor : g.find_tensor(n));
  }
  for (const auto& n : outputs) {
    o.outputs.push_back(g.find_tensor(n));
  }
  o.attrs = std::move(attrs);
  return g.add_op(std::move(o));
}

std::string scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(PARTITA_BINARY_DIR) / "test-scratch" /
                              (std::string(info->test_suite_name()) + "." + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

} // namespace partita::test
