#pragma once

// The zoo's builders, one per model family file, and the parsed parameters they read.

#include "partita/zoo/zoo.h"

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace partita::zoo::detail {

// Parameter values of one spec, already checked against the model's declared parameters:
// integers parse and are positive, choices are among the allowed ones.
class Params {
public:
  Params(std::string model, std::map<std::string, std::string> values);

  const std::string& model() const { return m_model; }
  std::int64_t integer(const std::string& key) const;
  // Empty when the parameter was not given and has no default ("from size" overrides).
  std::optional<std::int64_t> optional_integer(const std::string& key) const;
  const std::string& text(const std::string& key) const;

  // Throws partita::Error "zoo model 'gpt2': <message>".
  [[noreturn]] void fail(const std::string& message) const;
  // Checks that `hidden` splits into `heads` heads.
  void check_heads(std::int64_t hidden, std::int64_t heads) const;

private:
  std::string m_model;
  std::map<std::string, std::string> m_values;
};

onnx::ModelProto build_mlp(const Params& p);
onnx::ModelProto build_alexnet(const Params& p);
onnx::ModelProto build_vgg16(const Params& p);
onnx::ModelProto build_resnet50(const Params& p);
onnx::ModelProto build_resnet101(const Params& p);
onnx::ModelProto build_inception_v3(const Params& p);
onnx::ModelProto build_densenet(const Params& p);
onnx::ModelProto build_gnmt(const Params& p);
onnx::ModelProto build_rnnlm(const Params& p);
onnx::ModelProto build_transformer(const Params& p);
onnx::ModelProto build_bert(const Params& p);
onnx::ModelProto build_gpt2(const Params& p);
onnx::ModelProto build_gpt3(const Params& p);
onnx::ModelProto build_llama(const Params& p);

// Output extent of a convolution or pooling window; Params::fail when the input is too small.
std::int64_t window_out(const Params& p, const std::string& where, std::int64_t in, std::int64_t kernel,
                        std::int64_t stride, std::int64_t pad_total);

} // namespace partita::zoo::detail
