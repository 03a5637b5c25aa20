// BERT (Devlin et al. 2019) encoder with pooler, in the Hugging Face layout: post-norm layers,
// erf GELU, LayerNorm epsilon 1e-12.
//
// Large (24 layers, hidden 1024, ff 4096): embeddings 30522*1024 + 512*1024 + 2*1024 + 2048 =
// 31,782,912; each layer 3 * 1,049,600 (Q, K, V) + 1,049,600 (output) + 4,198,400 + 4,195,328
// (feed-forward) + 2 * 2048 (norms) = 12,596,224, times 24 = 302,309,376; pooler 1,049,600;
// total 335,141,888. Base: 109,482,240.

#include "zoo/models.h"
#include "zoo/onnx_builder.h"

#include <fmt/format.h>

namespace partita::zoo::detail {

onnx::ModelProto build_bert(const Params& p) {
  const bool large = p.text("size") == "large";
  const auto batch = p.integer("batch");
  const auto seq = p.integer("seq");
  const auto layers = p.optional_integer("layers").value_or(large ? 24 : 12);
  const auto d = p.optional_integer("hidden").value_or(large ? 1024 : 768);
  const auto heads = p.optional_integer("heads").value_or(large ? 16 : 12);
  const auto vocab = p.integer("vocab");
  const auto max_positions = p.integer("positions");
  const std::int64_t ff = 4 * d;
  constexpr std::int64_t type_vocab = 2;
  constexpr float epsilon = 1e-12f;
  p.check_heads(d, heads);
  if (seq > max_positions)
    p.fail(fmt::format("seq ({}) exceeds the {} position embeddings", seq, max_positions));

  OnnxBuilder b("bert", fmt::format("BERT-{} encoder with pooler", large ? "large" : "base"));
  const auto ids = b.input("input_ids", {batch, seq}, onnx::TensorProto::INT64);
  const auto types = b.input("token_type_ids", {batch, seq}, onnx::TensorProto::INT64);
  const auto positions = b.int_constant("position_ids", iota(seq));

  auto x =
      b.op("Gather", {b.weight("embeddings.word_embeddings.weight", {vocab, d}), ids}, "embeddings.word_embeddings");
  const auto pos = b.op("Gather", {b.weight("embeddings.position_embeddings.weight", {max_positions, d}), positions},
                        "embeddings.position_embeddings");
  const auto typ = b.op("Gather", {b.weight("embeddings.token_type_embeddings.weight", {type_vocab, d}), types},
                        "embeddings.token_type_embeddings");
  x = b.op("Add", {x, pos}, "embeddings.add_position");
  x = b.op("Add", {x, typ}, "embeddings.add_token_type");
  x = layer_norm(b, "embeddings.LayerNorm", x, d, epsilon);

  const AttentionSpec spec{batch, seq, seq, d, heads, false};
  for (std::int64_t i = 0; i < layers; ++i) {
    const auto n = fmt::format("encoder.layer.{}", i);
    auto a = attention(b, n + ".attention", x, "", "", spec);
    a = b.op("Add", {a, x}, n + ".attention.output.residual");
    x = layer_norm(b, n + ".attention.output.LayerNorm", a, d, epsilon);
    auto h = linear(b, n + ".intermediate.dense", x, d, ff);
    h = gelu(b, n + ".intermediate.gelu", h);
    h = linear(b, n + ".output.dense", h, ff, d);
    h = b.op("Add", {h, x}, n + ".output.residual");
    x = layer_norm(b, n + ".output.LayerNorm", h, d, epsilon);
  }
  b.output(x);

  // The pooler reads the first ([CLS]) token of every sequence.
  auto cls = b.op("Gather", {x, b.int_scalar("pooler.first_token.index", 0)}, "pooler.first_token",
                  {attr("axis", std::int64_t{1})});
  cls = linear(b, "pooler.dense", cls, d, d);
  b.output(b.op("Tanh", {cls}, "pooler.activation"));
  return b.finish();
}

} // namespace partita::zoo::detail
