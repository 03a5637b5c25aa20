#include "verify.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace partita::runtime {
namespace {

// [op, kind, index, rank, begin..., end..., count, values...] per snapshot, as doubles.
std::vector<double> serialize(const std::vector<Snapshot>& snaps) {
  std::vector<double> out;
  for (const auto& s : snaps) {
    out.insert(out.end(), {static_cast<double>(s.op), static_cast<double>(s.kind), static_cast<double>(s.index),
                           static_cast<double>(s.shard.block.begin.size())});
    out.insert(out.end(), s.shard.block.begin.begin(), s.shard.block.begin.end());
    out.insert(out.end(), s.shard.block.end.begin(), s.shard.block.end.end());
    out.push_back(static_cast<double>(s.shard.data.size()));
    out.insert(out.end(), s.shard.data.begin(), s.shard.data.end());
  }
  return out;
}

std::string_view kind_name(Held k) {
  switch (k) {
  case Held::output: return "output";
  case Held::input_gradient: return "input grad";
  case Held::weight_gradient: return "weight grad";
  }
  return "?";
}

constexpr double magnitude_floor = 1e-3;

struct Error_ {
  double abs = 0, ref_max = 0;
  int blocks = 0;
};

} // namespace

VerifyResult verify(const graph::Graph& g, const std::vector<Snapshot>& mine, const Executor* reference, MPI_Comm comm,
                    double tolerance) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const auto flat = serialize(mine);
  const int count = static_cast<int>(flat.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  for (std::size_t i = 1; i < counts.size(); ++i) {
    displs[i] = displs[i - 1] + counts[i - 1];
  }
  std::vector<double> all(rank == 0 ? static_cast<std::size_t>(displs.back() + counts.back()) : 0);
  MPI_Gatherv(flat.data(), count, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE, 0, comm);
  VerifyResult result;
  if (rank != 0) {
    return result;
  }
  if (reference == nullptr) {
    throw Error("verify: rank 0 has no reference run");
  }
  std::map<std::pair<graph::OpId, Held>, Error_> errors;
  std::size_t p = 0;
  while (p < all.size()) {
    const auto op = static_cast<graph::OpId>(all[p]);
    const auto kind = static_cast<Held>(static_cast<int>(all[p + 1]));
    const int index = static_cast<int>(all[p + 2]);
    const auto rank_n = static_cast<std::size_t>(all[p + 3]);
    p += 4;
    Shard got;
    got.block.begin.assign(all.begin() + static_cast<std::ptrdiff_t>(p),
                           all.begin() + static_cast<std::ptrdiff_t>(p + rank_n));
    got.block.end.assign(all.begin() + static_cast<std::ptrdiff_t>(p + rank_n),
                         all.begin() + static_cast<std::ptrdiff_t>(p + 2 * rank_n));
    p += 2 * rank_n;
    const auto n = static_cast<std::size_t>(all[p]);
    ++p;
    got.data.assign(all.begin() + static_cast<std::ptrdiff_t>(p), all.begin() + static_cast<std::ptrdiff_t>(p + n));
    p += n;

    const Shard* ref = reference->held(op, kind, index);
    if (ref == nullptr) {
      throw Error(fmt::format("verify: the reference has no {} {} of op '{}'", kind_name(kind), index, g.op(op).name));
    }
    std::vector<float> expected(n);
    pack(*ref, got.block, expected.data());
    auto& e = errors[{op, kind}];
    ++e.blocks;
    for (const float v : ref->data) {
      e.ref_max = std::max(e.ref_max, static_cast<double>(std::fabs(v)));
    }
    for (std::size_t i = 0; i < n; ++i) {
      e.abs = std::max(e.abs, std::fabs(static_cast<double>(got.data[i]) - static_cast<double>(expected[i])));
    }
  }
  result.report = fmt::format("{:<4} {:<32} {:<12} {:>7} {:>12} {:>12}\n", "#", "op", "held", "blocks", "max abs err",
                              "max rel err");
  for (const auto& [key, e] : errors) {
    // Relative to the reference's largest magnitude, floored: a gradient that is zero in exact
    // arithmetic (a key bias under softmax) holds rounding noise in both runs.
    const double rel = e.abs / std::max(e.ref_max, magnitude_floor);
    const bool ok = rel <= tolerance;
    result.passed = result.passed && ok;
    result.report +=
        fmt::format("{:<4} {:<32} {:<12} {:>7} {:>12.3e} {:>12.3e}{}\n", key.first, g.op(key.first).name.substr(0, 32),
                    kind_name(key.second), e.blocks, e.abs, rel, ok ? "" : "  FAILED");
  }
  return result;
}

} // namespace partita::runtime
