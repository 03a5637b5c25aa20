// The encoder-decoder Transformer of Vaswani et al. 2017 (post-norm, ReLU feed-forward), with the
// source embedding, the target embedding and the pre-softmax projection sharing one matrix.
//
// Base (d 512, ff 2048, 6 + 6 layers, vocab 37000): embedding 18,944,000; encoder layer
// 3,152,384; decoder layer 4,204,032; 63.08 M in all (the paper rounds to 65 M). Big (d 1024,
// ff 4096, 16 heads): 214.2 M (the paper's 213 M).

#include "zoo/models.h"
#include "zoo/onnx_builder.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

namespace partita::zoo::detail {

namespace {

struct Dimensions {
  std::int64_t batch, seq, layers, d, heads, ff, vocab;
};

// PE[pos, i] = sin(pos / 10000^(2 floor(i/2) / d) + (i odd) * pi/2), computed from integer index
// constants so that no float table is stored: it is not a parameter.
std::string positional_encoding(OnnxBuilder& b, const std::string& positions, std::int64_t d) {
  const std::string n = "positional_encoding";
  Dims pair_index(static_cast<std::size_t>(d)), odd(static_cast<std::size_t>(d));
  for (std::int64_t i = 0; i < d; ++i) {
    pair_index[static_cast<std::size_t>(i)] = i - i % 2;
    odd[static_cast<std::size_t>(i)] = i % 2;
  }
  const auto to_float = attr("to", static_cast<std::int64_t>(onnx::TensorProto::FLOAT));
  auto pos = b.op("Cast", {positions}, n + ".positions", {to_float});
  pos = b.op("Unsqueeze", {pos, b.shape({1})}, n + ".column"); // [seq, 1]
  auto freq = b.op("Cast", {b.int_constant(n + ".pair_index", pair_index)}, n + ".pair_index.cast", {to_float});
  freq = b.op("Mul", {freq, b.float_scalar(static_cast<float>(-std::log(10000.0) / static_cast<double>(d)))},
              n + ".exponent");
  freq = b.op("Exp", {freq}, n + ".frequency");
  const auto angle = b.op("Mul", {pos, freq}, n + ".angle"); // [seq, d]
  auto phase = b.op("Cast", {b.int_constant(n + ".odd", odd)}, n + ".odd.cast", {to_float});
  phase = b.op("Mul", {phase, b.float_scalar(static_cast<float>(std::numbers::pi / 2))}, n + ".phase");
  return b.op("Sin", {b.op("Add", {angle, phase}, n + ".shifted")}, n);
}

std::string embed(OnnxBuilder& b, const std::string& name, const std::string& table, const std::string& ids,
                  const std::string& pe, std::int64_t d) {
  auto x = b.op("Gather", {table, ids}, name);
  x = b.op("Mul", {x, b.float_scalar(std::sqrt(static_cast<float>(d)))}, name + ".scale");
  return b.op("Add", {x, pe}, name + ".add_position");
}

std::string feed_forward(OnnxBuilder& b, const std::string& name, const std::string& x, const Dimensions& m) {
  auto y = linear(b, name + ".linear1", x, m.d, m.ff);
  y = b.op("Relu", {y}, name + ".relu");
  return linear(b, name + ".linear2", y, m.ff, m.d);
}

// LayerNorm(x + sublayer(x)), the original post-norm residual.
std::string add_norm(OnnxBuilder& b, const std::string& name, const std::string& x, const std::string& sub,
                     std::int64_t d) {
  return layer_norm(b, name, b.op("Add", {x, sub}, name + ".residual"), d, 1e-5f);
}

} // namespace

onnx::ModelProto build_transformer(const Params& p) {
  const bool big = p.text("size") == "big";
  const Dimensions m{p.integer("batch"),
                     p.integer("seq"),
                     p.optional_integer("layers").value_or(6),
                     p.optional_integer("hidden").value_or(big ? 1024 : 512),
                     p.optional_integer("heads").value_or(big ? 16 : 8),
                     p.optional_integer("ff").value_or(big ? 4096 : 2048),
                     p.integer("vocab")};
  p.check_heads(m.d, m.heads);
  OnnxBuilder b("transformer",
                fmt::format("Transformer ({}), encoder-decoder with shared embeddings", big ? "big" : "base"));
  const auto source = b.input("source", {m.batch, m.seq}, onnx::TensorProto::INT64);
  const auto target = b.input("target", {m.batch, m.seq}, onnx::TensorProto::INT64);
  const auto table = b.weight("embedding.weight", {m.vocab, m.d});
  const auto positions = b.int_constant("positions", iota(m.seq));
  const auto pe = positional_encoding(b, positions, m.d);
  const auto mask = causal_mask(b, "causal_mask", positions);
  const AttentionSpec self{m.batch, m.seq, m.seq, m.d, m.heads, false};

  auto x = embed(b, "encoder.embedding", table, source, pe, m.d);
  for (std::int64_t i = 0; i < m.layers; ++i) {
    const auto n = fmt::format("encoder.layers.{}", i);
    x = add_norm(b, n + ".norm1", x, attention(b, n + ".self_attn", x, "", "", self), m.d);
    x = add_norm(b, n + ".norm2", x, feed_forward(b, n + ".ff", x, m), m.d);
  }
  const auto memory = x;

  auto y = embed(b, "decoder.embedding", table, target, pe, m.d);
  for (std::int64_t i = 0; i < m.layers; ++i) {
    const auto n = fmt::format("decoder.layers.{}", i);
    y = add_norm(b, n + ".norm1", y, attention(b, n + ".self_attn", y, "", mask, self), m.d);
    y = add_norm(b, n + ".norm2", y, attention(b, n + ".cross_attn", y, memory, "", self), m.d);
    y = add_norm(b, n + ".norm3", y, feed_forward(b, n + ".ff", y, m), m.d);
  }
  const auto projection = b.op("Transpose", {table}, "generator.transpose", {attr("perm", Dims{1, 0})});
  y = b.op("MatMul", {y, projection}, "generator");
  b.output(y);
  return b.finish();
}

} // namespace partita::zoo::detail
