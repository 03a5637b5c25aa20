#pragma once

// Number and text formatting shared by the views (display only; sorting uses raw values).

#include <QString>

#include <string>
#include <string_view>

namespace partita::gui {

inline QString qs(std::string_view s) {
  return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size()));
}

QString formatMs(double seconds);      // "12.345"
QString formatMiB(double bytes);       // "1,234.5"
QString formatGiB(double bytes);       // "12.34"
QString formatPercent(double share);   // "12.3%"
QString formatSeconds(double seconds); // "12.3 ms", "450 µs", "1.20 s"
QString formatBytes(double bytes);     // "12.3 KiB", "12.3 MiB", "1.20 GiB", "1.20 TiB"
// Throughput with at least three significant digits: "1784 samples/s", "0.512 samples/s", and per hour
// below 0.1 a second ("3.6 samples/h").
QString formatRate(double samplesPerSecond);

// Where a numeric column keeps its raw value for sorting.
inline constexpr int SortRole = Qt::UserRole + 1;
inline constexpr int OpIdRole = Qt::UserRole + 2; // graph::OpId of a layer row

} // namespace partita::gui
