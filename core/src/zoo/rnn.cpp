// Recurrent models built on ONNX's LSTM operator: GNMT (Wu et al. 2016, in the layout of the
// MLPerf reference: attention computed for all decoder steps at once from the first decoder
// layer, as teacher-forced training does) and the large 2-layer LSTM language model of
// Zaremba et al. 2014.

#include "zoo/models.h"
#include "zoo/onnx_builder.h"

#include <fmt/format.h>

namespace partita::zoo::detail {

namespace {

// Token ids [batch, seq] -> embeddings [seq, batch, d], time-major for the LSTM operator.
std::string embed_time_major(OnnxBuilder& b, const std::string& name, const std::string& ids, std::int64_t vocab,
                             std::int64_t d) {
  const auto t = b.op("Transpose", {ids}, name + ".transpose_ids", {attr("perm", Dims{1, 0})});
  return b.op("Gather", {b.weight(name + ".weight", {vocab, d}), t}, name);
}

// Additive (Bahdanau) attention of every decoder step over every encoder step at once.
// query [t, b, n] (time-major), keys [b, s, n]; returns the context [t, b, n].
std::string additive_attention(OnnxBuilder& b, const std::string& name, const std::string& query,
                               const std::string& keys, std::int64_t n) {
  const auto q = b.op("Transpose", {query}, name + ".query.transpose", {attr("perm", Dims{1, 0, 2})});
  const auto pq = linear(b, name + ".query", q, n, n, false);
  const auto pk = linear(b, name + ".key", keys, n, n, false);
  const auto pq4 = b.op("Unsqueeze", {pq, b.shape({2})}, name + ".query.unsqueeze"); // [b, t, 1, n]
  const auto pk4 = b.op("Unsqueeze", {pk, b.shape({1})}, name + ".key.unsqueeze");   // [b, 1, s, n]
  auto sum = b.op("Add", {pq4, pk4}, name + ".sum");                                 // [b, t, s, n]
  sum = b.op("Add", {sum, b.weight(name + ".bias", {n})}, name + ".add_bias");
  const auto act = b.op("Tanh", {sum}, name + ".tanh");
  const auto scores = b.op("MatMul", {act, b.weight(name + ".v.weight", {n, 1})}, name + ".v"); // [b, t, s, 1]
  const auto squeezed = b.op("Squeeze", {scores, b.shape({3})}, name + ".squeeze");
  const auto probs = b.op("Softmax", {squeezed}, name + ".softmax", {attr("axis", std::int64_t{-1})});
  const auto context = b.op("MatMul", {probs, keys}, name + ".context"); // [b, t, n]
  return b.op("Transpose", {context}, name + ".context.transpose", {attr("perm", Dims{1, 0, 2})});
}

} // namespace

// Defaults: 32000 * 1024 * 2 embeddings, encoder LSTMs 16.8 M (bidirectional) + 12.6 M + 6 x
// 8.4 M, decoder LSTMs 8.4 M + 7 x 12.6 M, attention 2.1 M, classifier 32.8 M: about 277 M.
onnx::ModelProto build_gnmt(const Params& p) {
  const auto batch = p.integer("batch");
  const auto seq = p.integer("seq");
  const auto layers = p.integer("layers");
  const auto hidden = p.integer("hidden");
  const auto vocab = p.integer("vocab");
  if (layers < 2)
    p.fail(fmt::format("layers must be at least 2 (a bidirectional layer and the layers above it), got {}", layers));

  OnnxBuilder b("gnmt", "GNMT: LSTM encoder (first layer bidirectional) and LSTM decoder with additive attention");
  const auto source = b.input("source", {batch, seq}, onnx::TensorProto::INT64);
  const auto target = b.input("target", {batch, seq}, onnx::TensorProto::INT64);

  auto x = embed_time_major(b, "encoder.embedding", source, vocab, hidden);
  x = lstm(b, "encoder.rnn.0", x, seq, batch, hidden, hidden, true);
  x = lstm(b, "encoder.rnn.1", x, seq, batch, 2 * hidden, hidden, false);
  // Residual connections start at the third layer, in the encoder as in the decoder.
  for (std::int64_t i = 2; i < layers; ++i) {
    const auto name = fmt::format("encoder.rnn.{}", i);
    x = b.op("Add", {x, lstm(b, name, x, seq, batch, hidden, hidden, false)}, name + ".residual");
  }
  const auto memory = b.op("Transpose", {x}, "encoder.output.transpose", {attr("perm", Dims{1, 0, 2})});

  auto y = embed_time_major(b, "decoder.embedding", target, vocab, hidden);
  y = lstm(b, "decoder.rnn.0", y, seq, batch, hidden, hidden, false);
  const auto context = additive_attention(b, "decoder.attention", y, memory, hidden);
  // Every decoder layer above the first reads the attention context beside its input.
  for (std::int64_t i = 1; i < layers; ++i) {
    const auto name = fmt::format("decoder.rnn.{}", i);
    const auto in = b.op("Concat", {y, context}, name + ".concat_context", {attr("axis", std::int64_t{2})});
    const auto out = lstm(b, name, in, seq, batch, 2 * hidden, hidden, false);
    y = i >= 2 ? b.op("Add", {y, out}, name + ".residual") : out;
  }
  y = linear(b, "decoder.classifier", y, hidden, vocab);
  b.output(y);
  return b.finish();
}

// Embedding 15 M, two LSTM layers of 4 * 1500 * 3000 + 8 * 1500 = 18.012 M each, decoder
// 15.01 M: 66.03 M parameters, the "large" model's 66 M.
onnx::ModelProto build_rnnlm(const Params& p) {
  const auto batch = p.integer("batch");
  const auto seq = p.integer("seq");
  const auto hidden = p.integer("hidden");
  const auto vocab = p.integer("vocab");
  const auto layers = p.integer("layers");
  OnnxBuilder b("rnnlm", "LSTM language model (Zaremba et al. 2014, large)");
  const auto ids = b.input("input_ids", {batch, seq}, onnx::TensorProto::INT64);
  auto x = embed_time_major(b, "encoder", ids, vocab, hidden);
  for (std::int64_t i = 0; i < layers; ++i)
    x = lstm(b, fmt::format("rnn.{}", i), x, seq, batch, hidden, hidden, false);
  x = linear(b, "decoder", x, hidden, vocab);
  b.output(x);
  return b.finish();
}

} // namespace partita::zoo::detail
