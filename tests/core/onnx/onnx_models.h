#pragma once

// Tiny ONNX models built in the tests themselves, with libonnx's protobufs.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace partita::test {

struct Dim {
  std::int64_t value = 0;
  std::string param;                // symbolic when non-empty
  Dim(std::int64_t v) : value(v) {} // NOLINT(google-explicit-constructor): shapes read as {2, 3}
  Dim(const char* p) : param(p) {}  // NOLINT(google-explicit-constructor)
};

class ModelBuilder {
public:
  explicit ModelBuilder(std::int64_t opset = 17) {
    m_model.set_ir_version(8);
    m_model.set_producer_name("partita-tests");
    auto* o = m_model.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m_model.mutable_graph()->set_name("test");
  }

  ModelBuilder& input(const std::string& name, const std::vector<Dim>& shape, int elem = onnx::TensorProto::FLOAT) {
    value_info(m_model.mutable_graph()->add_input(), name, shape, elem);
    return *this;
  }
  ModelBuilder& output(const std::string& name, int elem = onnx::TensorProto::FLOAT) {
    auto* v = m_model.mutable_graph()->add_output();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
    return *this;
  }
  // A float weight without data (external, never read).
  ModelBuilder& weight(const std::string& name, const std::vector<std::int64_t>& dims) {
    auto* t = m_model.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) {
      t->add_dims(d);
    }
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* e = t->add_external_data();
    e->set_key("location");
    e->set_value("weights.bin");
    return *this;
  }
  // A float weight with its bytes inline.
  ModelBuilder& inline_weight(const std::string& name, const std::vector<std::int64_t>& dims) {
    auto* t = m_model.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    std::int64_t n = 1;
    for (auto d : dims) {
      t->add_dims(d);
      n *= d;
    }
    t->set_raw_data(std::string(static_cast<std::size_t>(n) * 4, '\x01'));
    return *this;
  }
  ModelBuilder& ints(const std::string& name, const std::vector<std::int64_t>& values) {
    auto* t = m_model.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    for (auto v : values) {
      t->add_int64_data(v);
    }
    return *this;
  }
  // An int64 initializer of any shape (a scalar with dims {}).
  ModelBuilder& ints(const std::string& name, const std::vector<std::int64_t>& dims,
                     const std::vector<std::int64_t>& values) {
    auto* t = m_model.mutable_graph()->add_initializer();
    *t = int_tensor(name, dims, values);
    return *this;
  }
  // A Constant node holding an int64 tensor.
  onnx::NodeProto& constant_ints(const std::string& output, const std::vector<std::int64_t>& dims,
                                 const std::vector<std::int64_t>& values) {
    auto& n = node("Constant", {}, {output}, output + "_const");
    tensor_attr(n, "value", int_tensor(output, dims, values));
    return n;
  }
  // A Constant node holding a float tensor with its bytes inline (as Paddle2ONNX writes weights);
  // every element is `fill`.
  onnx::NodeProto& constant_floats(const std::string& output, const std::vector<std::int64_t>& dims,
                                   float fill = 0.5F) {
    auto& n = node("Constant", {}, {output}, output + "_const");
    tensor_attr(n, "value", float_tensor(output, dims, fill));
    return n;
  }
  static onnx::TensorProto int_tensor(const std::string& name, const std::vector<std::int64_t>& dims,
                                      const std::vector<std::int64_t>& values) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::INT64);
    for (auto d : dims) {
      t.add_dims(d);
    }
    for (auto v : values) {
      t.add_int64_data(v);
    }
    return t;
  }
  static onnx::TensorProto float_tensor(const std::string& name, const std::vector<std::int64_t>& dims, float fill) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    std::int64_t n = 1;
    for (auto d : dims) {
      t.add_dims(d);
      n *= d;
    }
    std::string raw(static_cast<std::size_t>(n) * 4, '\0');
    for (std::int64_t i = 0; i < n; ++i) {
      std::memcpy(raw.data() + i * 4, &fill, 4);
    }
    t.set_raw_data(raw);
    return t;
  }
  static void tensor_attr(onnx::NodeProto& n, const std::string& key, const onnx::TensorProto& value) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() = value;
  }
  static void attr(onnx::NodeProto& n, const std::string& key, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }

  onnx::NodeProto& node(const std::string& type, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    auto* n = m_model.mutable_graph()->add_node();
    n->set_op_type(type);
    n->set_name(name);
    for (const auto& i : inputs) {
      n->add_input(i);
    }
    for (const auto& o : outputs) {
      n->add_output(o);
    }
    return *n;
  }
  static void attr(onnx::NodeProto& n, const std::string& key, std::int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(onnx::NodeProto& n, const std::string& key, const std::vector<std::int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) {
      a->add_ints(x);
    }
  }

  onnx::ModelProto& model() { return m_model; }
  std::string bytes() const { return m_model.SerializeAsString(); }

private:
  static void value_info(onnx::ValueInfoProto* v, const std::string& name, const std::vector<Dim>& shape, int elem) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* s = tt->mutable_shape();
    for (const auto& d : shape) {
      auto* dim = s->add_dim();
      if (d.param.empty()) {
        dim->set_dim_value(d.value);
      } else {
        dim->set_dim_param(d.param);
      }
    }
  }

  onnx::ModelProto m_model;
};

// x[batch, 16] -> MatMul W1[16,32] -> Add b1 -> Relu -> Gemm(W2[32,10], b2) -> y
inline ModelBuilder mlp(std::vector<Dim> input_shape = {"batch", 16}) {
  ModelBuilder b;
  b.input("x", input_shape).weight("W1", {16, 32}).weight("b1", {32}).weight("W2", {32, 10}).weight("b2", {10});
  b.node("MatMul", {"x", "W1"}, {"h0"}, "fc1");
  b.node("Add", {"h0", "b1"}, {"h1"}, "fc1_bias");
  b.node("Relu", {"h1"}, {"h2"}, "act");
  b.node("Gemm", {"h2", "W2", "b2"}, {"y"}, "fc2");
  b.output("y");
  return b;
}

} // namespace partita::test
