#include "validators.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace partita::cli {

CLI::Validator whole(std::int64_t lo, std::int64_t hi, const std::string& unit) {
  const std::string expected = fmt::format("a whole number of {} from {} to {}", unit, lo, hi);
  return {[lo, hi, expected](std::string& text) -> std::string {
            std::int64_t v = 0;
            const auto* end = text.data() + text.size();
            const auto [stop, ec] = std::from_chars(text.data(), end, v);
            if (ec != std::errc() || stop != end || v < lo || v > hi) {
              return fmt::format("expected {}, got '{}'", expected, text);
            }
            return {};
          },
          expected};
}

CLI::Validator real(double lo, double hi, const std::string& unit) {
  const std::string expected = fmt::format("a number of {} from {:g} to {:g}", unit, lo, hi);
  return {[lo, hi, expected](std::string& text) -> std::string {
            char* stop = nullptr;
            const double v = std::strtod(text.c_str(), &stop);
            if (text.empty() || stop != text.c_str() + text.size() || !std::isfinite(v) || v < lo || v > hi) {
              return fmt::format("expected {}, got '{}'", expected, text);
            }
            return {};
          },
          expected};
}

} // namespace partita::cli
