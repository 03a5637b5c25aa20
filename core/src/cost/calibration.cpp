#include "partita/cost/calibration.h"

#include "partita/cost/op_cost.h"
#include "partita/graph/error.h"
#include "partita/graph/statistics.h"
#include "partita/proto/partita.pb.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace partita::cost {

namespace {

using cluster::Collective;

// Solves the n x n system m x = v in place (Gaussian elimination, partial pivoting); the caller
// keeps m well conditioned (every knot has data, plus a tiny ridge).
std::vector<double> solve_system(std::vector<std::vector<double>> m, std::vector<double> v) {
  const std::size_t n = v.size();
  for (std::size_t col = 0; col < n; ++col) {
    std::size_t pivot = col;
    for (std::size_t r = col + 1; r < n; ++r) {
      if (std::fabs(m[r][col]) > std::fabs(m[pivot][col])) {
        pivot = r;
      }
    }
    std::swap(m[col], m[pivot]);
    std::swap(v[col], v[pivot]);
    if (m[col][col] == 0) {
      throw Error("calibration: singular least-squares system");
    }
    for (std::size_t r = col + 1; r < n; ++r) {
      const double f = m[r][col] / m[col][col];
      for (std::size_t c = col; c < n; ++c) {
        m[r][c] -= f * m[col][c];
      }
      v[r] -= f * v[col];
    }
  }
  std::vector<double> x(n);
  for (std::size_t i = n; i-- > 0;) {
    double s = v[i];
    for (std::size_t c = i + 1; c < n; ++c) {
      s -= m[i][c] * x[c];
    }
    x[i] = s / m[i][i];
  }
  return x;
}

// A linear least-squares fit built row by row (the normal equations), solved with a tiny ridge
// (1e-12 of the mean diagonal) that keeps a knot with little data well conditioned.
class NormalEquations {
public:
  explicit NormalEquations(std::size_t n) : m_normal(n, std::vector<double>(n, 0.0)), m_rhs(n, 0.0) {}
  // One observation: sum_j row[j] c_j should be `target`.
  void add(const std::vector<double>& row, double target) {
    for (std::size_t i = 0; i < m_rhs.size(); ++i) {
      m_rhs[i] += row[i] * target;
      for (std::size_t j = 0; j < m_rhs.size(); ++j) {
        m_normal[i][j] += row[i] * row[j];
      }
    }
  }
  std::vector<double> solve() const {
    const std::size_t n = m_rhs.size();
    auto normal = m_normal;
    double trace = 0;
    for (std::size_t i = 0; i < n; ++i) {
      trace += normal[i][i];
    }
    for (std::size_t i = 0; i < n; ++i) {
      normal[i][i] += 1e-12 * trace / static_cast<double>(n);
    }
    return solve_system(std::move(normal), m_rhs);
  }

private:
  std::vector<std::vector<double>> m_normal;
  std::vector<double> m_rhs;
};

struct RateSample {
  double work = 0; // FLOPs or bytes
  double rate = 0; // per second
};

// The hat weights of log10(work) on `knots` (log10 values, ascending): linear between knots,
// constant beyond the ends, as EfficiencyCurve::at interpolates.
std::vector<double> hat_weights(const std::vector<double>& knots, double work) {
  std::vector<double> w(knots.size(), 0.0);
  const double x = std::log10(work);
  if (x <= knots.front()) {
    w.front() = 1;
  } else if (x >= knots.back()) {
    w.back() = 1;
  } else {
    const auto upper = static_cast<std::size_t>(std::upper_bound(knots.begin(), knots.end(), x) - knots.begin());
    const double t = (x - knots[upper - 1]) / (knots[upper] - knots[upper - 1]);
    w[upper - 1] = 1 - t;
    w[upper] = t;
  }
  return w;
}

// Achieved rate against work, fitted by least squares on the relative error; returns the curve as
// (work, rate) knots, one per 1/knots_per_decade of a decade that holds a sample; with
// knots_per_decade 0, one knot (a constant rate, at the samples' mean log10 work).
std::vector<std::pair<double, double>> fit_rate_curve(const std::vector<RateSample>& samples, std::string_view what,
                                                      double knots_per_decade = 2) {
  std::set<double> knot_set;
  double mean_log = 0;
  for (const auto& s : samples) {
    mean_log += std::log10(s.work) / static_cast<double>(samples.size());
    if (knots_per_decade > 0) {
      knot_set.insert(std::round(knots_per_decade * std::log10(s.work)) / knots_per_decade);
    }
  }
  if (knot_set.empty()) {
    knot_set.insert(mean_log);
  }
  const std::vector<double> knots(knot_set.begin(), knot_set.end());
  const std::size_t n = knots.size();
  NormalEquations equations(n);
  for (const auto& s : samples) {
    auto row = hat_weights(knots, s.work);
    for (auto& x : row) {
      x /= s.rate; // relative error: (sum_j c_j h_j - y) / y
    }
    equations.add(row, 1.0);
  }
  const auto c = equations.solve();
  std::vector<std::pair<double, double>> curve;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(c[i]) || c[i] <= 0) {
      throw Error(fmt::format("calibration: {}: the fitted rate at {:.3g} is {} (the timings are inconsistent; "
                              "measure again on a quieter machine)",
                              what, std::pow(10.0, knots[i]), c[i]));
    }
    curve.emplace_back(std::pow(10.0, knots[i]), c[i]);
  }
  return curve;
}

// Compute families other than GEMMs (convolutions): the logarithm of the rate, piecewise linear in
// log10(work), fitted by least squares on log residuals. Why not fit_rate_curve's shape:
// - A family's kernels of one size scatter by shape (a 3x3 layer runs several times faster than a
//   1x1 one of the same FLOPs). A rate linear between knots, fitted on the relative error, can
//   swing far below every sample near a knot or below zero; its logarithm cannot, and a log
//   residual weighs an overestimate and an underestimate of the time alike.
// - Small kernels cost a fixed time per call: there the rate grows in proportion to the work, a
//   straight line in log-log; linear interpolation of the rate overestimates it up to 1.7x halfway
//   between knots a decade apart.
// The fit stays a function of the FLOPs alone: on the H100 sweep (bench/results/h100-2026-11-25)
// adding the arithmetic intensity or a 3x3-stride-1 indicator as a second variable reduced the
// scatter of the large convolutions by a point at most (median 18% either way).
// Knots: the smallest and largest work and one every 1/knots_per_decade decade strictly between
// them (none within half a spacing of an end). Each knot is clamped into the range of the rates of
// the samples its hat touches, and the last one to at least the median rate of the largest samples
// (those within 10% of the largest work: one size, several shapes). Beyond the largest work the
// curve follows the marginal rate of the largest kernels (extend_by_marginal_rate) instead of
// stopping at the last knot's.
// Returned as (work, rate) points dense enough (neighbours within 25% of each other) that
// EfficiencyCurve's linear interpolation follows the log-log line to within 0.7%.
// Beyond the largest kernel timed, a larger one of the family runs at least as fast (more work to
// fill the machine with), and its extra FLOPs cost what the extra FLOPs of the largest ones did:
// time = a + W / m over the samples in the top 1/knots_per_decade decade (least squares on the
// relative error), so the rate beyond the last point W_max, rate_max is
// W / (W_max / rate_max + (W - W_max) / m): rising from rate_max towards m (capped at twice the
// fastest rate measured in the family, should noise flatten the slope). Held at the last point where that cannot be
// fitted (fewer than 3 such samples, less than a factor 2 of work between them, m not above rate_max). Points every
// quarter decade for 3 decades; EfficiencyCurve holds the last one beyond.
void extend_by_marginal_rate(const std::vector<RateSample>& samples, double knots_per_decade,
                             std::vector<std::pair<double, double>>& curve) {
  const double w_max = curve.back().first, rate_max = curve.back().second;
  double s11 = 0, s1w = 0, sww = 0, s1 = 0, sw = 0, w_low = w_max, fastest = 0;
  int count = 0;
  for (const auto& s : samples) {
    fastest = std::max(fastest, s.rate);
    if (s.work < w_max / std::pow(10.0, 1 / knots_per_decade)) {
      continue;
    }
    const double t = s.work / s.rate, p = 1 / t, q = s.work / t; // a p + u q = 1
    s11 += p * p;
    s1w += p * q;
    sww += q * q;
    s1 += p;
    sw += q;
    w_low = std::min(w_low, s.work);
    ++count;
  }
  const double det = s11 * sww - s1w * s1w;
  if (count < 3 || w_max < 2 * w_low || !(det > 0)) {
    return;
  }
  const double u = (s11 * sw - s1w * s1) / det; // seconds per FLOP at the margin
  if (!(u > 0)) {
    return;
  }
  const double marginal = std::min(1 / u, 2 * fastest); // a guard against a slope lost in noise
  if (marginal <= rate_max) {
    return;
  }
  for (int k = 1; k <= 12; ++k) {
    const double w = w_max * std::pow(10.0, k / 4.0);
    curve.emplace_back(w, w / (w_max / rate_max + (w - w_max) / marginal));
  }
}

std::vector<std::pair<double, double>> fit_log_rate_curve(std::vector<RateSample> samples, std::string_view what,
                                                          double knots_per_decade) {
  std::sort(samples.begin(), samples.end(), [](const RateSample& a, const RateSample& b) { return a.work < b.work; });
  const double x_min = std::log10(samples.front().work), x_max = std::log10(samples.back().work);
  const double spacing = 1 / knots_per_decade;
  std::vector<double> knots{x_min};
  if (x_max - x_min > 1e-9) {
    for (double k = std::ceil(x_min / spacing); k * spacing < x_max; ++k) {
      if (k * spacing > x_min + spacing / 2 && k * spacing < x_max - spacing / 2) {
        knots.push_back(k * spacing);
      }
    }
    knots.push_back(x_max);
  }
  const std::size_t n = knots.size();
  NormalEquations equations(n);
  std::vector<double> low(n, std::numeric_limits<double>::infinity()), high(n, -low.front());
  for (const auto& s : samples) {
    const auto row = hat_weights(knots, s.work);
    const double y = std::log(s.rate);
    equations.add(row, y);
    for (std::size_t i = 0; i < n; ++i) {
      if (row[i] > 0) {
        low[i] = std::min(low[i], y);
        high[i] = std::max(high[i], y);
      }
    }
  }
  auto c = equations.solve();
  std::vector<double> top;
  for (const auto& s : samples) {
    if (s.work >= samples.back().work / 1.1) {
      top.push_back(s.rate);
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(c[i])) {
      throw Error(
          fmt::format("calibration: {}: the fitted rate at {:.3g} is not finite", what, std::pow(10.0, knots[i])));
    }
    c[i] = std::clamp(c[i], low[i], high[i]);
  }
  c.back() = std::max(c.back(), std::log(median(top)));

  std::vector<std::pair<double, double>> curve{{std::pow(10.0, knots.front()), std::exp(c.front())}};
  const double step = std::log(1.25);
  for (std::size_t i = 1; i < n; ++i) {
    const int parts = std::max(1, static_cast<int>(std::ceil(std::fabs(c[i] - c[i - 1]) / step)));
    for (int k = 1; k <= parts; ++k) {
      const double t = static_cast<double>(k) / parts;
      curve.emplace_back(std::pow(10.0, knots[i - 1] + t * (knots[i] - knots[i - 1])),
                         std::exp(c[i - 1] + t * (c[i] - c[i - 1])));
    }
  }
  extend_by_marginal_rate(samples, knots_per_decade, curve);
  return curve;
}

std::vector<RateSample> rates(const std::vector<KernelSample>& samples, bool flops, std::string_view what) {
  std::vector<RateSample> out;
  for (const auto& s : samples) {
    const double work = flops ? s.flops : s.bytes;
    if (!(std::isfinite(work) && work > 0 && std::isfinite(s.seconds) && s.seconds > 0)) {
      throw Error(fmt::format("calibration: {} sample '{}': work {} and time {} s must be positive and finite", what,
                              s.kernel, work, s.seconds));
    }
    out.push_back({work, work / s.seconds});
  }
  if (out.size() < 2) {
    throw Error(fmt::format("calibration: {} needs at least 2 timed kernels, got {}", what, out.size()));
  }
  return out;
}

// Memory-bound kernels, one curve per family over one bandwidth: the highest rate of any family,
// so that every family's fractions lie in (0, 1]. Eltwise (or, without it, every sample) gives the
// default curve; the other families with samples get their own.
void fit_memory(const std::vector<KernelSample>& all, cluster::Device& dev, std::vector<std::string>& warnings) {
  std::vector<KernelSample> samples;
  std::map<graph::KernelClass, std::vector<KernelSample>> by_class;
  for (const auto& s : all) {
    if (s.fresh_bytes <= 0) {
      samples.push_back(s);
      by_class[s.kernel_class].push_back(s);
    }
  }
  const auto eltwise = by_class.find(graph::KernelClass::eltwise);
  const auto default_rates =
      fit_rate_curve(rates(eltwise != by_class.end() ? eltwise->second : samples, false, "memory (eltwise kernels)"),
                     "memory bandwidth");
  std::map<graph::KernelClass, std::vector<std::pair<double, double>>> class_rates;
  for (const auto& [k, list] : by_class) {
    if (k != graph::KernelClass::eltwise) {
      const auto what = fmt::format("memory ({} kernels)", graph::kernel_class_name(k));
      try {
        class_rates[k] = fit_rate_curve(rates(list, false, what), what);
      } catch (const Error& e) { // an optional family: its fallback's curve (or the default) stands in for it
        const auto fallback = graph::kernel_class_fallback(k);
        const bool own = fallback != k && class_rates.contains(fallback); // fitted before it (enum order)
        warnings.push_back(fmt::format("{}; {} kernels use the {} curve", e.what(), graph::kernel_class_name(k),
                                       own ? graph::kernel_class_name(fallback) : "eltwise"));
      }
    }
  }
  double peak = 0;
  const auto raise_peak = [&](const std::vector<std::pair<double, double>>& r) {
    for (const auto& [work, rate] : r) {
      peak = std::max(peak, rate);
    }
  };
  raise_peak(default_rates);
  for (const auto& [k, r] : class_rates) {
    raise_peak(r);
  }
  const auto to_curve = [&](const std::vector<std::pair<double, double>>& r) {
    cluster::EfficiencyCurve curve;
    for (const auto& [work, rate] : r) {
      curve.points.emplace_back(work, std::clamp(rate / peak, 1e-9, 1.0));
    }
    return curve;
  };
  dev.memory_bandwidth = peak;
  dev.memory_efficiency = to_curve(default_rates);
  dev.memory_efficiency_by_class.clear();
  for (const auto& [k, r] : class_rates) {
    dev.memory_efficiency_by_class[k] = to_curve(r);
  }
}

// Fresh reads: each fresh timing against the same kernel timed cold. With a fraction phi of its
// bytes read fresh at a cost r of a cold read, time / cold time = 1 - phi + phi r, so r = (ratio -
// 1 + phi) / phi; the kernels timed at one size (within 10% of each other's bytes) give one point,
// their mean. One curve per family timed so: element-wise kernels' is Device::fresh_read, the
// others' (Erf's) Device::fresh_read_by_class. No fresh timings (measurements of an earlier
// partita-calibrate): no curve, reads cost as much as from memory.
void fit_fresh_read(const std::vector<KernelSample>& samples, cluster::Device& dev,
                    std::vector<std::string>& warnings) {
  std::map<graph::KernelClass, std::vector<std::pair<double, double>>> by_class; // (bytes, r)
  for (const auto& s : samples) {
    if (s.fresh_bytes <= 0) {
      continue;
    }
    if (!(std::isfinite(s.seconds) && s.seconds > 0 && std::isfinite(s.cold_seconds) && s.cold_seconds > 0 &&
          std::isfinite(s.bytes) && s.bytes > 0 && s.fresh_bytes <= s.bytes)) {
      throw Error(fmt::format("calibration: fresh-read sample '{}': time {} s, cold time {} s, {} bytes of which {} "
                              "fresh: the times must be positive and the fresh bytes at most the bytes",
                              s.kernel, s.seconds, s.cold_seconds, s.bytes, s.fresh_bytes));
    }
    const double phi = s.fresh_bytes / s.bytes;
    by_class[s.kernel_class].emplace_back(s.bytes, std::clamp((s.seconds / s.cold_seconds - 1 + phi) / phi, 0.05, 1.0));
  }
  dev.fresh_read.points.clear();
  dev.fresh_read_by_class.clear();
  for (auto& [k, points] : by_class) {
    if (k != graph::KernelClass::eltwise && !dev.memory_efficiency_by_class.contains(k)) {
      // A family's fresh reads are kept beside its own curve (the cluster file's kernel_classes).
      warnings.push_back(fmt::format("{} kernels were timed on fresh inputs but not on inputs in memory; their fresh "
                                     "reads are left out",
                                     graph::kernel_class_name(k)));
      continue;
    }
    std::sort(points.begin(), points.end());
    cluster::EfficiencyCurve& curve = k == graph::KernelClass::eltwise ? dev.fresh_read : dev.fresh_read_by_class[k];
    for (std::size_t i = 0; i < points.size();) {
      std::size_t j = i;
      double log_bytes = 0, r = 0;
      for (; j < points.size() && points[j].first <= points[i].first * 1.1; ++j) {
        log_bytes += std::log(points[j].first);
        r += points[j].second;
      }
      const auto n = static_cast<double>(j - i);
      curve.points.emplace_back(std::exp(log_bytes / n), r / n);
      i = j;
    }
  }
}

// A matrix product reads its operands from memory on top of its arithmetic: time = FLOPs /
// rate(FLOPs) + the bytes of A and B / beta. For each candidate beta (1 GB/s to 1 TB/s, 20 a
// decade) the rate curve is fitted on what remains of each GEMM's time, and the beta whose curve
// and term reproduce the GEMMs best (mean relative error) is kept, unless the rate curve alone
// (the roofline, beta 0) does within one point: GEMMs of one size but different bytes (the sweep's
// wide family: a large weight, few rows) tell the two terms apart. On this machine a 128x2048x2048
// product ran 13% slower than a 256x1024x2048 one of the same FLOPs; the FLOPs alone missed the
// sweep's GEMMs by 9% on average, with the operands' bytes by 5%.
struct OperandFit {
  double bandwidth = 0;                         // 0: none, the roofline
  std::vector<std::pair<double, double>> rates; // the rate curve's knots (FLOPs, FLOP/s)
};

OperandFit fit_operand_bandwidth(const std::vector<KernelSample>& gemms) {
  // The fit with operand bandwidth beta (0: none) and its mean relative error over the GEMMs; none
  // where the bytes alone would take most of a GEMM's time.
  using Candidate = std::pair<OperandFit, double>;
  const auto fit_with = [&](double beta) -> std::optional<Candidate> {
    const auto term = [&](const KernelSample& s) { return beta > 0 ? s.operand_bytes / beta : 0.0; };
    std::vector<KernelSample> rest = gemms;
    for (auto& s : rest) {
      if (beta > 0 && term(s) > 0.75 * s.seconds) {
        return std::nullopt;
      }
      s.seconds -= term(s);
    }
    OperandFit f{beta, fit_rate_curve(rates(rest, true, "compute (GEMMs)"), "compute rate")};
    double peak = 0;
    for (const auto& [work, rate] : f.rates) {
      peak = std::max(peak, rate);
    }
    cluster::EfficiencyCurve curve;
    for (const auto& [work, rate] : f.rates) {
      curve.points.emplace_back(work, std::max(rate, 1e-9 * peak) / peak);
    }
    double error = 0;
    for (const auto& s : gemms) {
      const double t = s.flops / (peak * curve.at(s.flops)) + term(s);
      error += std::fabs(t - s.seconds) / s.seconds / static_cast<double>(gemms.size());
    }
    return Candidate{std::move(f), error};
  };
  Candidate roofline = *fit_with(0); // bad timings throw here, as the rate fit always did
  std::optional<Candidate> best;
  for (int i = 0; i <= 60; ++i) {
    try {
      auto c = fit_with(std::pow(10.0, 9 + i / 20.0));
      if (c && (!best || c->second < best->second)) {
        best = std::move(c);
      }
    } catch (const Error&) { // a curve that cannot be fitted on what remains: not this beta
    }
  }
  return best && best->second < roofline.second - 0.01 ? std::move(best->first) : std::move(roofline.first);
}

// Compute kernels, one curve per family over one peak: the highest rate of any family, so that
// every family's fractions lie in (0, 1]. GEMMs give compute_efficiency and must be there; the
// other families with samples (convolutions) get their own curve (fit_log_rate_curve), or, when
// they cannot be fitted or were not measured, a warning and the GEMM curve.
void fit_compute(const std::vector<KernelSample>& samples, cluster::Device& dev, std::vector<std::string>& warnings) {
  std::map<graph::ComputeClass, std::vector<KernelSample>> by_class;
  for (const auto& s : samples) {
    by_class[s.compute_class].push_back(s);
  }
  const auto gemms = by_class.find(graph::ComputeClass::matmul);
  const auto gemm_fit = fit_operand_bandwidth(gemms != by_class.end() ? gemms->second : std::vector<KernelSample>{});
  const auto& gemm_rates = gemm_fit.rates;
  dev.matmul_operand_bandwidth = gemm_fit.bandwidth;
  std::map<graph::ComputeClass, std::vector<std::pair<double, double>>> class_rates;
  if (!by_class.contains(graph::ComputeClass::matmul_backward)) {
    warnings.push_back("calibration: no backward product was timed (measurements of an earlier partita-calibrate?); "
                       "the products' backward passes use the matmul (GEMM) curve");
  } else if (!by_class.contains(graph::ComputeClass::matmul_batched_backward)) {
    warnings.push_back("calibration: no batched product's backward pass was timed; batched products' backward passes "
                       "use the matmul_backward curve");
  }
  for (const auto& [k, list] : by_class) {
    if (k != graph::ComputeClass::matmul) {
      const auto what = fmt::format("compute ({} kernels)", graph::compute_class_name(k));
      try {
        if (k == graph::ComputeClass::matmul_backward || k == graph::ComputeClass::matmul_batched_backward) {
          // Backward products read their operands on top of their arithmetic as GEMMs do, at the
          // GEMMs' operand bandwidth: the curve is fitted on what remains, as the GEMMs' is.
          std::vector<KernelSample> rest = list;
          for (auto& x : rest) {
            const double term = gemm_fit.bandwidth > 0 ? x.operand_bytes / gemm_fit.bandwidth : 0.0;
            if (term >= x.seconds) {
              throw Error(fmt::format("calibration: {}: {} took {:.4g} s, less than reading its operands at the "
                                      "GEMMs' operand bandwidth ({:.4g} s)",
                                      what, x.kernel, x.seconds, term));
            }
            x.seconds -= term;
          }
          class_rates[k] = fit_rate_curve(rates(rest, true, what), what);
          continue;
        }
        // A knot a decade: a convolution's rate follows its shape as much as its FLOPs (layers of
        // one size scatter by several times), and closer knots would chase that scatter.
        class_rates[k] = fit_log_rate_curve(rates(list, true, what), what, 1.0);
      } catch (const Error& e) { // an optional family: the GEMM curve stands in for it
        warnings.push_back(
            fmt::format("{}; {} ops use the matmul (GEMM) curve", e.what(), graph::compute_class_name(k)));
      }
    }
  }
  if (!by_class.contains(graph::ComputeClass::convolution)) {
    warnings.push_back("calibration: no convolution was timed (measurements of an earlier partita-calibrate?); "
                       "convolutions use the matmul (GEMM) curve");
  }
  double peak = 0;
  for (const auto& [work, rate] : gemm_rates) {
    peak = std::max(peak, rate);
  }
  // Only rates within the sizes timed raise the peak: an extrapolated one (beyond a family's
  // largest kernel) would scale the reduced-precision peaks too; it is held at the peak instead.
  for (const auto& [k, r] : class_rates) {
    double largest = 0;
    for (const auto& s : by_class.at(k)) {
      largest = std::max(largest, s.flops);
    }
    for (const auto& [work, rate] : r) {
      if (work <= largest) {
        peak = std::max(peak, rate);
      }
    }
  }
  const auto to_curve = [&](const std::vector<std::pair<double, double>>& r) {
    cluster::EfficiencyCurve curve;
    for (const auto& [work, rate] : r) {
      curve.points.emplace_back(work, std::clamp(rate / peak, 1e-9, 1.0));
    }
    return curve;
  };
  dev.peak_fp32 = peak;
  dev.compute_efficiency = to_curve(gemm_rates);
  dev.compute_efficiency_by_class.clear();
  for (const auto& [k, r] : class_rates) {
    dev.compute_efficiency_by_class[k] = to_curve(r);
  }
}

enum class LinkClass : std::uint8_t { intra, inter, mixed };

LinkClass link_class(const cluster::Cluster& c, const std::vector<int>& devices) {
  std::set<int> nodes;
  for (const int d : devices) {
    nodes.insert(c.node_of(d));
  }
  if (nodes.size() == 1) {
    return LinkClass::intra;
  }
  return nodes.size() == devices.size() ? LinkClass::inter : LinkClass::mixed;
}

cluster::CollectiveCost cost_of(const cluster::Cluster& c, const CollectiveSample& s,
                                cluster::Algorithm a = cluster::Algorithm::automatic) {
  return cluster::collective_cost(c, s.collective, s.devices, s.bytes, a);
}

// One timed collective as t = a L + u W, divided by t: a fit of (a, u) has relative residual
// a l + u w - 1.
struct LinkTerms {
  double l = 0, w = 0;
  double message = 0; // message_bytes: the protocol it ran
};

struct LineFit {
  double a = 0, u = 0, sse = 0;
  bool ok = false;
};

// Least squares of a l + u w = 1 over terms [first, last); latency below resolution (a < 0):
// bandwidth alone.
LineFit fit_line(const std::vector<LinkTerms>& t, std::size_t first, std::size_t last) {
  double sll = 0, slw = 0, sww = 0, sl = 0, sw = 0;
  for (std::size_t i = first; i < last; ++i) {
    sll += t[i].l * t[i].l;
    slw += t[i].l * t[i].w;
    sww += t[i].w * t[i].w;
    sl += t[i].l;
    sw += t[i].w;
  }
  LineFit f;
  const double det = sll * sww - slw * slw;
  f.a = det > 0 ? (sl * sww - sw * slw) / det : -1;
  f.u = det > 0 ? (sll * sw - slw * sl) / det : 0;
  if (f.a < 0) {
    f.a = 0;
    f.u = sww > 0 ? sw / sww : 0;
  }
  f.ok = f.u > 0 && std::isfinite(f.u);
  for (std::size_t i = first; i < last; ++i) {
    const double r = f.a * t[i].l + f.u * t[i].w - 1;
    f.sse += r * r;
  }
  return f;
}

// t = a L + u W over the samples of one link class, L and W read off collective_cost on a probe
// cluster whose link of that class has unit latency and bandwidth. Where the link changes protocol
// with message size (shared-memory MPI switches around a few KiB), one (a, u) per range of
// message sizes: up to four ranges, split where the Bayesian information criterion of the
// relative residuals is lowest (each range adds a, u and its boundary), at least 3 samples each.
// (Open MPI's shared-memory all-reduce on this machine has four: below 4 KiB, to 4 MiB at
// 10-12 GB/s, 8-32 MiB at 5 GB/s, and from 64 MiB at 0.4 GB/s.)
// `ring`: the samples are fitted as figures of their collective's own, which the cost model prices
// by the ring formula (collectives.cpp); otherwise by the algorithm the nominal figures pick.
LinkFit fit_link(const cluster::Cluster& nominal, const std::vector<const CollectiveSample*>& samples, LinkClass cls,
                 cluster::LinkKind kind, bool ring = false) {
  cluster::Cluster probe = nominal;
  const cluster::Link unit{kind, 1.0, 1.0};
  (cls == LinkClass::intra ? probe.intra_link : probe.nic) = unit;
  const char* what = cls == LinkClass::intra ? "intra-node link" : "inter-node link";
  if (samples.size() < 2) {
    throw Error(fmt::format("calibration: the {} needs at least 2 timed collectives, got {}", what, samples.size()));
  }
  std::vector<LinkTerms> terms;
  for (const auto* s : samples) {
    if (!(std::isfinite(s->seconds) && s->seconds > 0)) {
      throw Error(fmt::format("calibration: {} sample of {} B: time {} s must be positive and finite",
                              cluster::collective_name(s->collective), s->bytes, s->seconds));
    }
    // The algorithm the cost model picks with the nominal figures, probed for its terms.
    const auto algorithm = ring ? cluster::Algorithm::ring : cost_of(nominal, *s).algorithm;
    const auto t = cost_of(probe, *s, algorithm);
    terms.push_back({t.latency_seconds / s->seconds, t.bandwidth_seconds / s->seconds,
                     cluster::message_bytes(s->collective, s->bytes, static_cast<int>(s->devices.size()))});
  }
  std::sort(terms.begin(), terms.end(), [](const LinkTerms& x, const LinkTerms& y) { return x.message < y.message; });
  const std::size_t n = terms.size();
  std::vector<std::size_t> cuts; // where a new message size starts
  for (std::size_t i = 1; i < n; ++i) {
    if (terms[i].message > terms[i - 1].message) {
      cuts.push_back(i);
    }
  }
  constexpr std::size_t min_samples = 3, max_ranges = 4;
  struct Choice {
    std::vector<std::size_t> bounds; // segment starts after the first
    std::vector<LineFit> fits;
    double score = std::numeric_limits<double>::infinity();
  };
  const auto evaluate = [&](std::vector<std::size_t> bounds) {
    Choice c;
    c.bounds = std::move(bounds);
    double sse = 0;
    std::size_t begin = 0;
    for (std::size_t k = 0; k <= c.bounds.size(); ++k) {
      const std::size_t end = k < c.bounds.size() ? c.bounds[k] : n;
      if (end - begin < min_samples && !(c.bounds.empty())) {
        return c;
      }
      c.fits.push_back(fit_line(terms, begin, end));
      if (!c.fits.back().ok) {
        return c;
      }
      sse += c.fits.back().sse;
      begin = end;
    }
    const double params = 2.0 + 3.0 * static_cast<double>(c.bounds.size());
    // Timings are not more precise than one part in a million: exact data keeps one range.
    c.score = static_cast<double>(n) * std::log(std::max(sse / static_cast<double>(n), 1e-12)) +
              params * std::log(static_cast<double>(n));
    return c;
  };
  Choice best = evaluate({});
  if (!best.fits.empty() && !best.fits.front().ok) {
    throw Error(fmt::format("calibration: the {}'s collective times do not grow with size (fitted 1/bandwidth {}); "
                            "measure larger sizes",
                            what, best.fits.front().u));
  }
  // Every way of placing up to max_ranges - 1 boundaries at the cuts (in order).
  std::vector<std::size_t> bounds;
  const std::function<void(std::size_t)> place = [&](std::size_t from) {
    for (std::size_t i = from; i < cuts.size(); ++i) {
      bounds.push_back(cuts[i]);
      auto choice = evaluate(bounds);
      if (choice.score < best.score) {
        best = std::move(choice);
      }
      if (bounds.size() + 1 < max_ranges) {
        place(i + 1);
      }
      bounds.pop_back();
    }
  };
  place(0);
  cluster::Link link{kind, 1 / best.fits[0].u, best.fits[0].a};
  for (std::size_t k = 0; k < best.bounds.size(); ++k) {
    const std::size_t b = best.bounds[k];
    link.protocols.push_back(
        {std::sqrt(terms[b - 1].message * terms[b].message), 1 / best.fits[k + 1].u, best.fits[k + 1].a});
  }
  return {link, static_cast<int>(samples.size())};
}

} // namespace

Calibration calibrate(const cluster::Cluster& base, const CalibrationData& data) {
  if (data.nodes < 1 || data.devices_per_node < 1) {
    throw Error(
        fmt::format("calibration: {} node(s) of {} device(s) is not a cluster", data.nodes, data.devices_per_node));
  }
  Calibration out;
  cluster::Cluster& c = out.cluster;
  c = base;
  c.nodes = data.nodes;
  c.node_groups.clear(); // the measured machine: its nodes are of the device timed
  if (data.devices_per_node != base.devices_per_node) {
    c.devices_per_node = data.devices_per_node;
    c.intra_switched = true; // the base's direct pairs were for another node size
    c.intra_pairs.clear();
  }

  cluster::Device& dev = c.device;
  dev.kernel_launch_overhead = 0; // inside the curves: they are fitted on whole calls
  fit_memory(data.memory, dev, out.warnings);
  fit_fresh_read(data.memory, dev, out.warnings);
  const double old_peak = dev.peak_fp32;
  fit_compute(data.compute, dev, out.warnings);
  // Reduced-precision units keep their ratio to fp32 (there is nothing measured for them).
  for (double* p : {&dev.peak_tf32, &dev.peak_fp16, &dev.peak_bf16, &dev.peak_fp8}) {
    if (*p > 0 && old_peak > 0) {
      *p *= dev.peak_fp32 / old_peak;
    }
  }

  std::vector<const CollectiveSample*> intra, inter;
  for (const auto& s : data.collectives) {
    switch (link_class(c, s.devices)) {
    case LinkClass::intra: intra.push_back(&s); break;
    case LinkClass::inter: inter.push_back(&s); break;
    case LinkClass::mixed: break; // checked below, fitted through neither class
    }
  }
  if (data.nodes > 1 && inter.empty()) {
    throw Error(fmt::format("calibration: the job spans {} nodes but no collective between nodes (one device per "
                            "node) was timed",
                            data.nodes));
  }
  if (data.devices_per_node > 1 && intra.empty()) {
    throw Error(fmt::format("calibration: {} devices per node but no collective inside a node was timed",
                            data.devices_per_node));
  }
  // A base without a network (or a node link) still needs figures for the cost model to pick an
  // algorithm before the fit replaces them.
  cluster::Cluster nominal = c;
  if (nominal.nic.bandwidth <= 0) {
    nominal.nic = {nominal.nic.kind, 1e9, 1e-5};
  }
  if (nominal.intra_link.bandwidth <= 0) {
    nominal.intra_link = {nominal.intra_link.kind, 1e10, 1e-6};
  }
  // One fit over every collective; then each collective timed at enough sizes that the common
  // figures miss (median error over 10%) gets figures of its own (shared-memory MPI: an
  // all-reduce also sums what it receives and runs at a fraction of a send's bandwidth).
  const auto per_collective = [&](const std::vector<const CollectiveSample*>& samples, LinkClass cls,
                                  cluster::LinkKind kind, cluster::Link& link) {
    constexpr std::size_t enough = 8;
    constexpr double missed = 0.1;
    cluster::Cluster common = nominal;
    (cls == LinkClass::intra ? common.intra_link : common.nic) = link;
    std::map<cluster::Collective, std::vector<const CollectiveSample*>> by_kind;
    for (const auto* s : samples) {
      by_kind[s->collective].push_back(s);
    }
    for (const auto& [kind_of, list] : by_kind) {
      if (list.size() < enough || by_kind.size() < 2) {
        continue;
      }
      std::vector<double> errors;
      for (const auto* s : list) {
        errors.push_back(std::fabs(cost_of(common, *s).seconds - s->seconds) / s->seconds);
      }
      std::nth_element(errors.begin(), errors.begin() + static_cast<std::ptrdiff_t>(errors.size() / 2), errors.end());
      if (errors[errors.size() / 2] <= missed) {
        continue;
      }
      const auto own = fit_link(nominal, list, cls, kind, true).link;
      link.collectives.push_back(
          {std::string(cluster::collective_name(kind_of)), own.bandwidth, own.latency, own.protocols});
    }
  };
  if (!intra.empty()) {
    out.intra = fit_link(nominal, intra, LinkClass::intra, base.intra_link.kind);
    per_collective(intra, LinkClass::intra, base.intra_link.kind, out.intra->link);
    c.intra_link = out.intra->link;
  }
  if (!inter.empty()) {
    out.inter = fit_link(nominal, inter, LinkClass::inter, base.nic.kind);
    per_collective(inter, LinkClass::inter, base.nic.kind, out.inter->link);
    c.nic = out.inter->link;
  }

  for (const auto& s : data.compute) {
    FitPoint p{
        s.kernel, s.flops, s.seconds,
        kernel_time(s.flops, s.bytes, dev, cluster::Precision::fp32, graph::KernelClass::eltwise, s.compute_class, 0,
                    packs_operands(graph::OpClass::contraction, s.compute_class, dev) ? std::optional(s.operand_bytes)
                                                                                      : std::nullopt)};
    (s.compute_class == graph::ComputeClass::matmul ? out.compute : out.compute_by_class[s.compute_class])
        .push_back(std::move(p));
  }
  // Products timed at a model's shapes: kept as measured (one per shape), each set beside what the
  // curves would have priced it at. Extents beyond the file's 32 bits are refused here, before
  // they are written there.
  dev.timed_products.clear();
  for (const auto& p : data.products) {
    const double flops = 2.0 * static_cast<double>(p.batch) * static_cast<double>(p.m) * static_cast<double>(p.n) *
                         static_cast<double>(p.k);
    constexpr std::int64_t largest = std::numeric_limits<std::int32_t>::max(); // the cluster file's
    if (std::min({p.batch, p.m, p.n, p.k}) < 1 || std::max({p.batch, p.m, p.n, p.k}) > largest) {
      throw Error(fmt::format("calibration: timed product {}x{}x{}x{}: every extent must be from 1 to {}", p.batch, p.m,
                              p.n, p.k, largest));
    }
    const auto a = static_cast<double>(p.batch * p.m * p.k) * 4, b = static_cast<double>(p.batch * p.k * p.n) * 4,
               y = static_cast<double>(p.batch * p.m * p.n) * 4;
    const bool packs = packs_operands(graph::OpClass::contraction, graph::ComputeClass::matmul, dev);
    const auto curve = [&](double operand_bytes, graph::ComputeClass family) {
      return kernel_time(flops, a + b + y, dev, cluster::Precision::fp32, graph::KernelClass::eltwise, family, 0,
                         packs ? std::optional(operand_bytes) : std::nullopt);
    };
    const auto bwd_family = p.batch > 1 && dev.has_compute_curve(graph::ComputeClass::matmul_batched_backward)
                                ? graph::ComputeClass::matmul_batched_backward
                                : graph::ComputeClass::matmul_backward;
    const auto name = fmt::format("{}x{}x{}x{}", p.batch, p.m, p.n, p.k);
    out.products.push_back({name + " forward", flops, p.forward, curve(a + b, graph::ComputeClass::matmul)});
    out.products.push_back({name + " backward", 2 * flops, p.data_gradient + p.weight_gradient,
                            curve(b, bwd_family) + curve(a, bwd_family)});
    dev.timed_products.push_back(p);
  }
  if (!dev.timed_products.empty()) {
    // The cluster file's own checks (each time within 1 ns to a day, each shape once), before the
    // file is written; its entries are the measurements' products in their order.
    if (const auto e = cluster::validate(cluster::to_proto(c))) {
      throw Error(
          fmt::format("calibration: the calibrated cluster does not validate: field '{}': {}", e->field, e->reason));
    }
    std::sort(dev.timed_products.begin(), dev.timed_products.end());
  }
  for (const auto& s : data.memory) {
    out.memory.push_back({s.kernel, s.bytes, s.seconds,
                          kernel_time(0, s.bytes, dev, cluster::Precision::fp32, s.kernel_class,
                                      graph::ComputeClass::matmul, s.fresh_bytes)});
  }
  for (const auto& s : data.collectives) {
    out.collectives.push_back(
        {fmt::format("{} on {} devices", cluster::collective_name(s.collective), s.devices.size()), s.bytes, s.seconds,
         cost_of(c, s).seconds});
  }
  return out;
}

FitQuality fit_quality(const std::vector<FitPoint>& points) {
  FitQuality q;
  if (points.empty()) {
    return q;
  }
  std::vector<double> e;
  for (const auto& p : points) {
    e.push_back(std::fabs(p.error()));
  }
  q.max_abs = *std::max_element(e.begin(), e.end());
  q.median_abs = median(e);
  return q;
}

} // namespace partita::cost
