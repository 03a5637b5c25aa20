// Decoder-only language models: GPT-2 (Radford et al. 2019, Hugging Face layout) and GPT-3
// (Brown et al. 2020, Table 2.1 sizes). Pre-norm blocks, fused QKV projection, causal mask, and
// an LM head tied to the token embedding (the same initializer feeds the Gather and, through a
// Transpose, the head MatMul, so the summary counts it once). GELU is the erf form (GPT-2 used
// the tanh approximation: the same cost); GPT-3's alternating sparse attention is built dense.
//
// GPT-2 small by hand: wte 50257 * 768 = 38,597,376; wpe 1024 * 768 = 786,432; per block
// ln_1 1,536 + qkv 1,771,776 + proj 590,592 + ln_2 1,536 + fc 2,362,368 + proj 2,360,064 =
// 7,087,872, times 12 = 85,054,464; ln_f 1,536; total 124,439,808.

#include "zoo/models.h"
#include "zoo/onnx_builder.h"

#include <fmt/format.h>

#include <map>

namespace partita::zoo::detail {

namespace {

struct Size {
  std::int64_t layers, hidden, heads;
};

struct Dimensions {
  std::int64_t batch, seq, layers, d, heads, vocab, positions;
};

Dimensions dimensions(const Params& p, const std::map<std::string, Size>& sizes) {
  const auto& s = sizes.at(p.text("size"));
  Dimensions m{p.integer("batch"),
               p.integer("seq"),
               p.optional_integer("layers").value_or(s.layers),
               p.optional_integer("hidden").value_or(s.hidden),
               p.optional_integer("heads").value_or(s.heads),
               p.integer("vocab"),
               p.integer("positions")};
  p.check_heads(m.d, m.heads);
  if (m.seq > m.positions)
    p.fail(fmt::format("seq ({}) exceeds the {} position embeddings", m.seq, m.positions));
  return m;
}

onnx::ModelProto build_decoder(const std::string& model, const std::string& doc, const Dimensions& m) {
  OnnxBuilder b(model, doc);
  const auto ids = b.input("input_ids", {m.batch, m.seq}, onnx::TensorProto::INT64);
  const auto positions = b.int_constant("position_ids", iota(m.seq));
  const auto wte = b.weight("wte.weight", {m.vocab, m.d});
  auto x = b.op("Gather", {wte, ids}, "wte");
  const auto pos = b.op("Gather", {b.weight("wpe.weight", {m.positions, m.d}), positions}, "wpe");
  x = b.op("Add", {x, pos}, "add_position");
  const auto mask = causal_mask(b, "causal_mask", positions);

  const AttentionSpec spec{m.batch, m.seq, m.seq, m.d, m.heads, true};
  for (std::int64_t i = 0; i < m.layers; ++i) {
    const auto n = fmt::format("h.{}", i);
    auto a = layer_norm(b, n + ".ln_1", x, m.d, 1e-5f);
    a = attention(b, n + ".attn", a, "", mask, spec);
    x = b.op("Add", {x, a}, n + ".attn.residual");
    auto h = layer_norm(b, n + ".ln_2", x, m.d, 1e-5f);
    h = linear(b, n + ".mlp.fc", h, m.d, 4 * m.d);
    h = gelu(b, n + ".mlp.gelu", h);
    h = linear(b, n + ".mlp.proj", h, 4 * m.d, m.d);
    x = b.op("Add", {x, h}, n + ".mlp.residual");
  }
  x = layer_norm(b, "ln_f", x, m.d, 1e-5f);
  const auto head = b.op("Transpose", {wte}, "lm_head.transpose", {attr("perm", Dims{1, 0})});
  b.output(b.op("MatMul", {x, head}, "lm_head"));
  return b.finish();
}

} // namespace

onnx::ModelProto build_gpt2(const Params& p) {
  static const std::map<std::string, Size> sizes{
      {"small", {12, 768, 12}}, {"medium", {24, 1024, 16}}, {"large", {36, 1280, 20}}, {"xl", {48, 1600, 25}}};
  const auto m = dimensions(p, sizes);
  return build_decoder("gpt2", fmt::format("GPT-2 {} (tied LM head)", p.text("size")), m);
}

onnx::ModelProto build_gpt3(const Params& p) {
  // Table 2.1 of the paper, except where its columns disagree: XL lists 24 heads of 128 for
  // d_model 2048 (16 heads of 128 here) and 13B lists d_model 5140 for 40 heads of 128 (5120).
  static const std::map<std::string, Size> sizes{
      {"small", {12, 768, 12}}, {"medium", {24, 1024, 16}}, {"large", {24, 1536, 16}}, {"xl", {24, 2048, 16}},
      {"2.7b", {32, 2560, 32}}, {"6.7b", {32, 4096, 32}},   {"13b", {40, 5120, 40}},   {"175b", {96, 12288, 96}}};
  const auto m = dimensions(p, sizes);
  return build_decoder("gpt3", fmt::format("GPT-3 {} (dense attention, tied LM head)", p.text("size")), m);
}

} // namespace partita::zoo::detail
