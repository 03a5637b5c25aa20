// PaSE's sequence benchmarks as its graph.py builds them: a 2-layer LSTM language model and the
// (small) Transformer. Both let any dimension split down to size 1 (cutoff 1), so that layers,
// heads and the stack can be split too.

#include "model_builder.h"

#include <fmt/format.h>

namespace partita::search::pase::detail {

void rnnlm(ModelBuilder& b, std::int64_t batch) {
  constexpr std::int64_t layers = 2, vocab = 100000, units = 2048, seq = 256;
  b.set_cutoff(1);
  const int tokens = b.input({batch, seq});
  int x = b.embedding("embedding", tokens, vocab, units);
  x = b.lstm("lstm", x, units, layers);
  x = b.fc("projection", x, vocab);
  b.softmax_cross_entropy("loss", x);
}

void transformer(ModelBuilder& b, std::int64_t batch) {
  constexpr std::int64_t seq = 256, vocab = 50000, embed = 512, heads = 8, ff = 2048, d_k = 64;
  constexpr int layers = 6;
  b.set_cutoff(1);

  // s: q/k/v stack, b: batch, l: sequence, e: embedding, h: heads, k: d_k, m: memory (= l).
  auto attention = [&](const std::string& n, const std::vector<int>& xs) {
    int qkv = 0;
    std::string eq;
    if (xs.size() == 3) {
      qkv = b.stack(n + "/stack", xs, 0);
      eq = "sble,shek->sbhlk";
    } else {
      qkv = xs[0];
      eq = "ble,shek->sbhlk";
    }
    qkv = b.einsum(n + "/qkv", eq, qkv, b.input({3, heads, embed, d_k}));
    const auto parts = b.unstack(n + "/unstack", qkv, 0);
    const int logits = b.einsum(n + "/logits", "bhlk,bhmk->bhlm", parts[0], parts[1]);
    const int weights = b.softmax(n + "/softmax", logits, 3);
    int scores = b.einsum(n + "/scores", "bhlm,bhmk->bhlk", weights, parts[2]);
    scores = b.einsum(n + "/out", "bhlk,hek->ble", scores, b.input({heads, embed, d_k}));
    scores = b.elementwise(n + "/add", xs[0], scores);
    return b.norm(n + "/norm", scores, -1);
  };
  auto feed_forward = [&](const std::string& n, int x) {
    int y = b.einsum(n + "/ff1", "ble,ef->blf", x, b.input({embed, ff}), 2);
    y = b.einsum(n + "/ff2", "blf,fe->ble", y, b.input({ff, embed}));
    y = b.elementwise(n + "/add", x, y);
    return b.norm(n + "/norm", y, -1);
  };

  const int enc_in = b.input({batch, seq});
  const int dec_in = b.input({batch, seq});
  const int pos = b.input({batch, seq, embed});

  int x = b.embedding("encoder/embedding", enc_in, vocab, embed);
  x = b.elementwise("encoder/position", x, pos);
  for (int i = 0; i < layers; ++i) {
    const std::string n = fmt::format("encoder{}", i);
    x = feed_forward(n + "/ffn", attention(n + "/self_attention", {x}));
  }
  const int enc = x;

  x = b.embedding("decoder/embedding", dec_in, vocab, embed);
  x = b.elementwise("decoder/position", x, pos);
  for (int i = 0; i < layers; ++i) {
    const std::string n = fmt::format("decoder{}", i);
    const int self = attention(n + "/self_attention", {x});
    x = feed_forward(n + "/ffn", attention(n + "/attention", {self, enc, enc}));
  }
  x = b.einsum("projection", "ble,ev->blv", x, b.input({embed, vocab}));
  b.softmax_cross_entropy("loss", x);
}

} // namespace partita::search::pase::detail
