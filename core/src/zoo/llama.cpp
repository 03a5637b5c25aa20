// Llama 2 (Touvron et al. 2023) and Llama 3 (Llama Team 2024) decoder-only language models, in the
// Hugging Face layout (the sizes are those of the published config.json files): pre-norm blocks
// with RMSNorm, rotary position embeddings on the queries and keys, grouped-query attention
// (kv_heads key/value heads, each shared by heads/kv_heads query heads, expanded the way HF's
// repeat_kv does), a SwiGLU MLP, no bias anywhere, a final RMSNorm, and an LM head separate from
// the token embedding (Llama does not tie them). The rotary tables are computed in the graph from
// integer constants, as HF computes them from a buffer: they are not parameters. Llama 3's base
// frequency (theta 500000) and Llama 3.1's frequency scaling change values, not costs: the
// tables here use theta 10000 and 500000 and no scaling.
//
// Counts by hand, with head_dim = hidden / heads: per layer 2 hidden^2 (q, o) + 2 hidden
// kv_heads head_dim (k, v) + 3 hidden ffn (gate, up, down) + 2 hidden (two norms); embedding
// and head vocab hidden each; final norm hidden.
//   Llama 2 7B: layer 67,108,864 + 135,266,304 + 8,192 = 202,383,360, times 32 =
//     6,476,267,520; embedding and head 2 * 131,072,000; norm 4,096; total 6,738,415,616.
//   Llama 2 13B: layer 104,857,600 + 212,336,640 + 10,240 = 317,204,480, times 40 =
//     12,688,179,200; 2 * 163,840,000; 5,120; total 13,015,864,320.
//   Llama 2 70B (8 kv heads): layer 150,994,944 + 704,643,072 + 16,384 = 855,654,400, times 80
//     = 68,452,352,000; 2 * 262,144,000; 8,192; total 68,976,648,192.
//   Llama 3 8B (8 kv heads): layer 41,943,040 + 176,160,768 + 8,192 = 218,112,000, times 32 =
//     6,979,584,000; 2 * 525,336,576; 4,096; total 8,030,261,248.
//   Llama 3 70B: the layers of Llama 2 70B; 2 * 1,050,673,152; 8,192; total 70,553,706,496.
//   Llama 3 405B: layer 570,425,344 + 2,617,245,696 + 32,768 = 3,187,703,808, times 126 =
//     401,650,679,808; 2 * 2,101,346,304; 16,384; total 405,853,388,800.

#include "zoo/models.h"
#include "zoo/onnx_builder.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

namespace partita::zoo::detail {

namespace {

struct Size {
  std::int64_t layers, hidden, heads, kv_heads, ffn, vocab, seq;
  double rope_theta;
};

struct Dimensions {
  std::int64_t batch, seq, layers, d, heads, kv_heads, ffn, vocab;
  double rope_theta;
  std::int64_t head_dim() const { return d / heads; }
};

constexpr float rms_epsilon = 1e-5f;

Dimensions dimensions(const Params& p) {
  // seq is the pretraining context length (Llama 3.1 extends it to 128K after pretraining).
  static const std::map<std::string, Size> sizes{
      {"2-7b", {32, 4096, 32, 32, 11008, 32000, 4096, 1e4}},
      {"2-13b", {40, 5120, 40, 40, 13824, 32000, 4096, 1e4}},
      {"2-70b", {80, 8192, 64, 8, 28672, 32000, 4096, 1e4}},
      {"3-8b", {32, 4096, 32, 8, 14336, 128256, 8192, 5e5}},
      {"3-70b", {80, 8192, 64, 8, 28672, 128256, 8192, 5e5}},
      {"3-405b", {126, 16384, 128, 8, 53248, 128256, 8192, 5e5}},
  };
  const auto& s = sizes.at(p.text("size"));
  const Dimensions m{p.integer("batch"),
                     p.optional_integer("seq").value_or(s.seq),
                     p.optional_integer("layers").value_or(s.layers),
                     p.optional_integer("hidden").value_or(s.hidden),
                     p.optional_integer("heads").value_or(s.heads),
                     p.optional_integer("kv_heads").value_or(s.kv_heads),
                     p.optional_integer("ffn").value_or(s.ffn),
                     p.optional_integer("vocab").value_or(s.vocab),
                     s.rope_theta};
  p.check_heads(m.d, m.heads);
  if (m.heads % m.kv_heads != 0)
    p.fail(fmt::format("kv_heads ({}) does not divide heads ({}): each key/value head serves the same number of "
                       "query heads",
                       m.kv_heads, m.heads));
  if (m.head_dim() % 2 != 0)
    p.fail(fmt::format("the head width hidden/heads ({}/{} = {}) is odd: rotary embeddings rotate pairs of features",
                       m.d, m.heads, m.head_dim()));
  return m;
}

// x / sqrt(mean(x^2) + eps) * weight over the last axis, from primitives (RMSNormalization is
// only an operator from opset 23).
std::string rms_norm(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t d) {
  const auto square = b.op("Mul", {x, x}, name + ".square");
  auto mean = b.op("ReduceMean", {square}, name + ".mean", {attr("axes", Dims{-1}), attr("keepdims", std::int64_t{1})});
  mean = b.op("Add", {mean, b.float_scalar(rms_epsilon)}, name + ".add_epsilon");
  const auto root = b.op("Sqrt", {mean}, name + ".sqrt");
  const auto inverse = b.op("Reciprocal", {root}, name + ".reciprocal");
  const auto normed = b.op("Mul", {x, inverse}, name + ".normalize");
  return b.op("Mul", {normed, b.weight(name + ".weight", {d})}, name);
}

struct Rotary {
  std::string cos, sin; // [seq, head_dim]
};

// HF's tables: angle[pos, j] = pos * theta^(-2 (j mod half) / head_dim), the same frequencies for
// both halves of a head, from integer constants (`exponent` holds 2 (j mod half)). HF computes
// them once per forward pass; here the queries and the keys of each layer compute their own (a
// few tiny ops), because tables shared between layers, or between the query and key paths of one
// layer, widen the per-layer search's dependent sets (from 3 to 5 at 8 devices: 1,000 times the
// table entries, and past its limit at 16 devices).
Rotary rotary_tables(OnnxBuilder& b, const std::string& n, const std::string& positions, const std::string& exponent,
                     const Dimensions& m) {
  const auto to_float = attr("to", static_cast<std::int64_t>(onnx::TensorProto::FLOAT));
  auto pos = b.op("Cast", {positions}, n + ".positions", {to_float});
  pos = b.op("Unsqueeze", {pos, b.shape({1})}, n + ".column"); // [seq, 1]
  auto freq = b.op("Cast", {exponent}, n + ".exponent", {to_float});
  freq = b.op("Mul",
              {freq, b.float_scalar(static_cast<float>(-std::log(m.rope_theta) / static_cast<double>(m.head_dim())))},
              n + ".log_frequency");
  freq = b.op("Exp", {freq}, n + ".frequency");
  const auto angle = b.op("Mul", {pos, freq}, n + ".angle"); // [seq, head_dim]
  return {b.op("Cos", {angle}, n + ".cos"), b.op("Sin", {angle}, n + ".sin")};
}

// x * cos + rotate_half(x) * sin on [batch, heads, seq, head_dim], rotate_half(x) being
// concat(-x[..., half:], x[..., :half]), with its own tables.
std::string apply_rotary(OnnxBuilder& b, const std::string& name, const std::string& x, const std::string& positions,
                         const std::string& exponent, const Dimensions& m) {
  const std::int64_t hd = m.head_dim();
  const auto r = rotary_tables(b, name, positions, exponent, m);
  const auto axis = b.shape({3});
  const auto first = b.op("Slice", {x, b.shape({0}), b.shape({hd / 2}), axis}, name + ".first_half");
  const auto second = b.op("Slice", {x, b.shape({hd / 2}), b.shape({hd}), axis}, name + ".second_half");
  const auto negated = b.op("Neg", {second}, name + ".negate");
  const auto rotated = b.op("Concat", {negated, first}, name + ".rotate_half", {attr("axis", std::int64_t{-1})});
  const auto a = b.op("Mul", {x, r.cos}, name + ".mul_cos");
  const auto c = b.op("Mul", {rotated, r.sin}, name + ".mul_sin");
  return b.op("Add", {a, c}, name);
}

// Grouped-query self-attention with rotary embeddings and the causal mask.
std::string attention(OnnxBuilder& b, const std::string& name, const std::string& x, const std::string& mask,
                      const std::string& positions, const std::string& exponent, const Dimensions& m) {
  const std::int64_t hd = m.head_dim();
  const std::int64_t repeat = m.heads / m.kv_heads;
  // [batch, seq, n * head_dim] -> [batch, n, seq, head_dim]
  const auto split_heads = [&](const std::string& t, std::int64_t n, const std::string& tag) {
    const auto r = b.op("Reshape", {t, b.shape({m.batch, m.seq, n, hd})}, name + "." + tag + ".split_heads");
    return b.op("Transpose", {r}, name + "." + tag + ".transpose", {attr("perm", Dims{0, 2, 1, 3})});
  };
  // [batch, kv_heads, seq, head_dim] -> [batch, heads, seq, head_dim], each kv head repeated.
  const auto repeat_kv = [&](const std::string& t, const std::string& tag) {
    if (repeat == 1)
      return t;
    const auto n = name + "." + tag + ".repeat_kv";
    auto r = b.op("Reshape", {t, b.shape({m.batch, m.kv_heads, 1, m.seq, hd})}, n + ".unsqueeze");
    r = b.op("Expand", {r, b.shape({m.batch, m.kv_heads, repeat, m.seq, hd})}, n + ".expand");
    return b.op("Reshape", {r, b.shape({m.batch, m.heads, m.seq, hd})}, n);
  };
  auto q = split_heads(linear(b, name + ".q_proj", x, m.d, m.heads * hd, false), m.heads, "q");
  auto k = split_heads(linear(b, name + ".k_proj", x, m.d, m.kv_heads * hd, false), m.kv_heads, "k");
  auto v = split_heads(linear(b, name + ".v_proj", x, m.d, m.kv_heads * hd, false), m.kv_heads, "v");
  q = apply_rotary(b, name + ".q.rotary", q, positions, exponent, m);
  k = apply_rotary(b, name + ".k.rotary", k, positions, exponent, m);
  k = repeat_kv(k, "k");
  v = repeat_kv(v, "v");
  const auto kt = b.op("Transpose", {k}, name + ".k.transpose_keys", {attr("perm", Dims{0, 1, 3, 2})});
  auto scores = b.op("MatMul", {q, kt}, name + ".scores");
  scores = b.op("Mul", {scores, b.float_scalar(1.0f / std::sqrt(static_cast<float>(hd)))}, name + ".scale");
  scores = b.op("Add", {scores, mask}, name + ".mask");
  const auto probs = b.op("Softmax", {scores}, name + ".softmax", {attr("axis", std::int64_t{-1})});
  const auto context = b.op("MatMul", {probs, v}, name + ".context");
  const auto merged = b.op("Transpose", {context}, name + ".context.transpose", {attr("perm", Dims{0, 2, 1, 3})});
  const auto flat = b.op("Reshape", {merged, b.shape({m.batch, m.seq, m.heads * hd})}, name + ".merge_heads");
  return linear(b, name + ".o_proj", flat, m.heads * hd, m.d, false);
}

// down(silu(gate(x)) * up(x)), silu(g) = g * sigmoid(g).
std::string swiglu(OnnxBuilder& b, const std::string& name, const std::string& x, const Dimensions& m) {
  const auto gate = linear(b, name + ".gate_proj", x, m.d, m.ffn, false);
  const auto sigmoid = b.op("Sigmoid", {gate}, name + ".sigmoid");
  const auto silu = b.op("Mul", {gate, sigmoid}, name + ".silu");
  const auto up = linear(b, name + ".up_proj", x, m.d, m.ffn, false);
  const auto h = b.op("Mul", {silu, up}, name + ".gated");
  return linear(b, name + ".down_proj", h, m.ffn, m.d, false);
}

} // namespace

onnx::ModelProto build_llama(const Params& p) {
  const auto m = dimensions(p);
  OnnxBuilder b("llama", fmt::format("Llama {} (grouped-query attention with {} of {} key/value heads, SwiGLU, "
                                     "rotary embeddings, untied LM head)",
                                     p.text("size"), m.kv_heads, m.heads));
  const auto ids = b.input("input_ids", {m.batch, m.seq}, onnx::TensorProto::INT64);
  const auto positions = b.int_constant("position_ids", iota(m.seq));
  auto x = b.op("Gather", {b.weight("embed_tokens.weight", {m.vocab, m.d}), ids}, "embed_tokens");
  const auto mask = causal_mask(b, "causal_mask", positions);
  Dims pair_exponent(static_cast<std::size_t>(m.head_dim()));
  for (std::int64_t j = 0; j < m.head_dim(); ++j)
    pair_exponent[static_cast<std::size_t>(j)] = 2 * (j % (m.head_dim() / 2));
  const auto exponent = b.int_constant("rotary.exponent", pair_exponent);

  for (std::int64_t i = 0; i < m.layers; ++i) {
    const auto n = fmt::format("layers.{}", i);
    auto a = rms_norm(b, n + ".input_layernorm", x, m.d);
    a = attention(b, n + ".self_attn", a, mask, positions, exponent, m);
    x = b.op("Add", {x, a}, n + ".self_attn.residual");
    auto h = rms_norm(b, n + ".post_attention_layernorm", x, m.d);
    h = swiglu(b, n + ".mlp", h, m);
    x = b.op("Add", {x, h}, n + ".mlp.residual");
  }
  x = rms_norm(b, "norm", x, m.d);
  b.output(linear(b, "lm_head", x, m.d, m.vocab, false));
  return b.finish();
}

} // namespace partita::zoo::detail
