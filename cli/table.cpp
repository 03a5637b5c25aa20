#include "table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace partita::cli {

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(m_columns.size());
  m_rows.push_back(std::move(cells));
}

void Table::add_rule() {
  m_rows.emplace_back();
}

std::string Table::render() const {
  std::vector<std::size_t> width(m_columns.size());
  for (std::size_t c = 0; c < m_columns.size(); ++c) {
    width[c] = m_columns[c].title.size();
    for (const auto& row : m_rows) {
      if (!row.empty()) {
        width[c] = std::max(width[c], row[c].size());
      }
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < m_columns.size(); ++c) {
      if (c != 0) {
        out += "  ";
      }
      const bool left = m_columns[c].align == Align::left;
      const bool last = c + 1 == m_columns.size();
      if (left && last) {
        out += cells[c];
      } else if (left) {
        out += fmt::format("{:<{}}", cells[c], width[c]);
      } else {
        out += fmt::format("{:>{}}", cells[c], width[c]);
      }
    }
    return out + "\n";
  };
  std::size_t total = 0;
  std::vector<std::string> titles;
  for (std::size_t c = 0; c < m_columns.size(); ++c) {
    titles.push_back(m_columns[c].title);
    total += width[c] + (c == 0 ? 0 : 2);
  }
  std::string out = line(titles);
  out += std::string(total, '-') + "\n";
  for (const auto& row : m_rows) {
    out += row.empty() ? std::string(total, '-') + "\n" : line(row);
  }
  return out;
}

std::string with_thousands(std::int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) {
      out += ',';
    }
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string gflop(double flops) {
  const double g = flops / 1e9;
  if (g == 0) {
    return "0";
  }
  if (g >= 100) {
    return fmt::format("{:.1f}", g);
  }
  if (g >= 0.001) {
    return fmt::format("{:.3f}", g);
  }
  return fmt::format("{:.2e}", g);
}

std::string mib(double bytes) {
  return fmt::format("{:.2f}", bytes / (1024.0 * 1024.0));
}

std::string count_short(double v) {
  const double a = std::abs(v);
  return a >= 1e12  ? fmt::format("{:.2f} T", v / 1e12)
         : a >= 1e9 ? fmt::format("{:.2f} B", v / 1e9)
         : a >= 1e6 ? fmt::format("{:.2f} M", v / 1e6)
         : a >= 1e3 ? fmt::format("{:.2f} K", v / 1e3)
                    : fmt::format("{:.0f}", v);
}

std::string bytes_short(double bytes) {
  const double a = std::abs(bytes);
  constexpr double k = 1024.0;
  return a >= k * k * k * k ? fmt::format("{:.2f} TiB", bytes / (k * k * k * k))
         : a >= k * k * k   ? fmt::format("{:.2f} GiB", bytes / (k * k * k))
         : a >= k * k       ? fmt::format("{:.2f} MiB", bytes / (k * k))
         : a >= k           ? fmt::format("{:.2f} KiB", bytes / k)
                            : fmt::format("{:.0f} B", bytes);
}

} // namespace partita::cli
