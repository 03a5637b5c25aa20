#include "micro_batch.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sstream>

namespace partita::runtime {

BatchSlice batch_slice(const graph::Shape& micro, const graph::Shape& full, int micro_batches,
                       const std::string& tensor) {
  BatchSlice s;
  s.full = full;
  const auto refuse = [&] {
    return Error(fmt::format("tensor '{}': shape [{}] at the micro-batch size but [{}] at the full batch: not a slice "
                             "along one batch dim of {} micro-batches",
                             tensor, fmt::join(micro, ", "), fmt::join(full, ", "), micro_batches));
  };
  if (micro.size() != full.size()) {
    throw refuse();
  }
  for (std::size_t d = 0; d < micro.size(); ++d) {
    if (micro[d] == full[d]) {
      continue;
    }
    if (s.dim >= 0 || micro[d] * micro_batches != full[d]) {
      throw refuse();
    }
    s.dim = static_cast<int>(d);
    s.extent = micro[d];
  }
  return s;
}

sharding::Block to_full(const sharding::Block& block, const BatchSlice& slice, int micro_batch) {
  sharding::Block b = block;
  if (slice.dim >= 0) {
    const auto d = static_cast<std::size_t>(slice.dim);
    b.begin[d] += micro_batch * slice.extent;
    b.end[d] += micro_batch * slice.extent;
  }
  return b;
}

void fill_slice(Shard& shard, const BatchSlice& slice, int micro_batch, std::string_view seed, float scale) {
  if (slice.dim < 0) {
    fill_deterministic(shard, slice.full, seed, scale);
    return;
  }
  Shard shifted{to_full(shard.block, slice, micro_batch), std::move(shard.data)};
  fill_deterministic(shifted, slice.full, seed, scale);
  shard.data = std::move(shifted.data);
}

std::string with_batch(const std::string& spec, int batch) {
  if (spec.rfind("zoo:", 0) != 0) {
    throw Error(fmt::format("model '{}': micro-batches need the model at the micro-batch size, which partita-run "
                            "builds for zoo models only (plan an ONNX file with --micro-batches 1)",
                            spec));
  }
  const auto q = spec.find('?');
  std::string out = spec.substr(0, q);
  char sep = '?';
  if (q != std::string::npos) {
    std::stringstream params(spec.substr(q + 1));
    std::string p;
    while (std::getline(params, p, '&')) {
      if (p.rfind("batch=", 0) == 0 || p.empty()) {
        continue;
      }
      out += sep + p;
      sep = '&';
    }
  }
  return out + sep + fmt::format("batch={}", batch);
}

} // namespace partita::runtime
