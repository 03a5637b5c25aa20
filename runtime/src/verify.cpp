#include "verify.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace partita::runtime {
namespace {

// [op, kind, index, rank, begin..., end..., offset, count, values...] per snapshot, as doubles.
std::vector<double> serialize(const std::vector<Snapshot>& snaps) {
  std::vector<double> out;
  for (const auto& s : snaps) {
    out.insert(out.end(), {static_cast<double>(s.op), static_cast<double>(s.kind), static_cast<double>(s.index),
                           static_cast<double>(s.shard.block.begin.size())});
    out.insert(out.end(), s.shard.block.begin.begin(), s.shard.block.begin.end());
    out.insert(out.end(), s.shard.block.end.begin(), s.shard.block.end.end());
    out.push_back(static_cast<double>(s.offset));
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
  case Held::weight: return "weight (step)";
  }
  return "?";
}

constexpr double magnitude_floor = 1e-3;

struct Error_ {
  double abs = 0, ref_max = 0;
  double error_squares = 0, reference_squares = 0; // over the elements compared
  std::int64_t compared = 0;
  int blocks = 0;
};

} // namespace

VerifyResult verify(const graph::Graph& g, const std::vector<Snapshot>& mine, const Executor* reference, MPI_Comm comm,
                    double tolerance, const AdamParameters* adam, VerifyNorm norm) {
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
    Shard got = make_host_shard({}); // what the ranks sent, on the host
    got.block.begin.assign(all.begin() + static_cast<std::ptrdiff_t>(p),
                           all.begin() + static_cast<std::ptrdiff_t>(p + rank_n));
    got.block.end.assign(all.begin() + static_cast<std::ptrdiff_t>(p + rank_n),
                         all.begin() + static_cast<std::ptrdiff_t>(p + 2 * rank_n));
    p += 2 * rank_n;
    const auto offset = static_cast<std::size_t>(all[p]);
    const auto n = static_cast<std::size_t>(all[p + 1]);
    p += 2;
    got.data.assign(all.begin() + static_cast<std::ptrdiff_t>(p), all.begin() + static_cast<std::ptrdiff_t>(p + n));
    p += n;

    const Shard* ref = reference->held(op, kind, index);
    if (ref == nullptr) {
      throw Error(fmt::format("verify: the reference has no {} {} of op '{}'", kind_name(kind), index, g.op(op).name));
    }
    std::int64_t block_elements = 1;
    for (std::size_t d = 0; d < rank_n; ++d) {
      block_elements *= got.block.end[d] - got.block.begin[d];
    }
    if (offset + n > static_cast<std::size_t>(block_elements)) {
      throw Error(fmt::format("verify: a {} slice of op '{}' ends at {}, past its block of {} elements",
                              kind_name(kind), g.op(op).name, offset + n, block_elements));
    }
    std::vector<float> expected(static_cast<std::size_t>(block_elements));
    pack(*ref, got.block, expected.data());
    // Adam: weights whose gradient is zero up to the tolerance step by +-lr in either run.
    std::vector<char> sign_step(n, 0);
    if (adam != nullptr && kind == Held::weight) {
      const Shard* ref_gradient = reference->held(op, Held::weight_gradient, index);
      if (ref_gradient == nullptr) {
        throw Error(fmt::format("verify: the reference has no weight gradient {} of op '{}'", index, g.op(op).name));
      }
      // The gradients passed with an absolute error up to `bound` (the op's weight gradients are
      // one entry of the table); a gradient within twice that of zero may have either sign, and
      // near epsilon the step is steep in it (10 epsilon covers the slope).
      double gradient_max = 0;
      const auto& inputs = g.op(op).inputs;
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        const Shard* other = inputs[i] != graph::no_tensor && g.tensor(inputs[i]).role == graph::TensorRole::parameter
                                 ? reference->held(op, Held::weight_gradient, static_cast<int>(i))
                                 : nullptr;
        if (other != nullptr) {
          for (const float v : ConstHostView(other->data)) {
            gradient_max = std::max(gradient_max, static_cast<double>(std::fabs(v)));
          }
        }
      }
      const double bound = tolerance * std::max(gradient_max, magnitude_floor);
      const double undetermined = 2 * bound + 10 * static_cast<double>(adam->epsilon);
      std::vector<float> gradient(static_cast<std::size_t>(block_elements));
      pack(*ref_gradient, got.block, gradient.data());
      for (std::size_t i = 0; i < n; ++i) {
        sign_step[i] = std::fabs(static_cast<double>(gradient[offset + i])) <= undetermined ? 1 : 0;
      }
    }
    auto& e = errors[{op, kind}];
    ++e.blocks;
    for (const float v : ConstHostView(ref->data)) {
      e.ref_max = std::max(e.ref_max, static_cast<double>(std::fabs(v)));
    }
    const double allowed = tolerance * std::max(e.ref_max, magnitude_floor);
    for (std::size_t i = 0; i < n; ++i) {
      const double error = std::fabs(static_cast<double>(got.data[i]) - static_cast<double>(expected[offset + i]));
      if (!std::isfinite(error)) { // a NaN or an infinity on either side (std::max would drop a NaN)
        e.abs = std::numeric_limits<double>::infinity();
      } else if (sign_step[i] != 0 && error > allowed &&
                 error <= 2 * static_cast<double>(adam->learning_rate) * (1 + tolerance)) {
        ++result.sign_steps; // within one step each way: not counted as an error
      } else {
        e.abs = std::max(e.abs, error);
        e.error_squares += error * error;
      }
      e.reference_squares += static_cast<double>(expected[offset + i]) * static_cast<double>(expected[offset + i]);
      ++e.compared;
      result.weights += kind == Held::weight ? 1 : 0;
    }
  }
  result.report = fmt::format("{:<4} {:<32} {:<12} {:>7} {:>12} {:>12}\n", "#", "op", "held", "blocks", "max abs err",
                              norm == VerifyNorm::max ? "max rel err" : "rms rel err");
  for (const auto& [key, e] : errors) {
    // Relative to the reference's largest magnitude (or its root mean square), floored: a gradient
    // that is zero in exact arithmetic (a key bias under softmax) holds rounding noise in both runs.
    const double rel =
        norm == VerifyNorm::max
            ? e.abs / std::max(e.ref_max, magnitude_floor)
            : (std::isfinite(e.abs)
                   ? std::sqrt(e.error_squares / std::max(e.reference_squares, static_cast<double>(e.compared) *
                                                                                   magnitude_floor * magnitude_floor))
                   : std::numeric_limits<double>::infinity());
    const bool ok = rel <= tolerance;
    result.passed = result.passed && ok;
    result.report +=
        fmt::format("{:<4} {:<32} {:<12} {:>7} {:>12.3e} {:>12.3e}{}\n", key.first, g.op(key.first).name.substr(0, 32),
                    kind_name(key.second), e.blocks, e.abs, rel, ok ? "" : "  FAILED");
  }
  if (result.sign_steps > 0) {
    result.report += fmt::format("weights after the Adam step: {} of {} held to within 2 x lr only, their reference "
                                 "gradient within the tolerance of zero (Adam moves them by lr whatever its size)\n",
                                 result.sign_steps, result.weights);
  }
  return result;
}

} // namespace partita::runtime
