#pragma once

// Fixed-width text tables for the CLI: columns left- or right-aligned, widths from the content.

#include <cstdint>
#include <string>
#include <vector>

namespace partita::cli {

class Table {
public:
  enum class Align { left, right };
  struct Column {
    std::string title;
    Align align = Align::right;
  };

  explicit Table(std::vector<Column> columns) : m_columns(std::move(columns)) {}
  void add_row(std::vector<std::string> cells);
  void add_rule(); // a separator line, e.g. before totals
  std::string render() const;

private:
  std::vector<Column> m_columns;
  std::vector<std::vector<std::string>> m_rows; // an empty row is a rule
};

// 1234567 -> "1,234,567"
std::string with_thousands(std::int64_t v);
// FLOPs in GFLOP with 3 significant decimals ("0.118", "4.11")
std::string gflop(double flops);
// Bytes in MiB with two decimals
std::string mib(double bytes);
// A count in the unit that fits: "40", "124.44 M", "174.60 B", "1.02 T"
std::string count_short(double v);
// Bytes in the unit that fits: "512 B", "1.50 KiB", "650.45 GiB", "3.00 TiB"
std::string bytes_short(double bytes);

} // namespace partita::cli
