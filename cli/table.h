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

} // namespace partita::cli
