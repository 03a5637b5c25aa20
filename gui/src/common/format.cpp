#include "common/format.h"

#include <QLocale>

#include <cmath>

namespace partita::gui {

QString formatMs(double seconds) {
  return QString::number(seconds * 1e3, 'f', 3);
}

QString formatMiB(double bytes) {
  return QLocale::c().toString(bytes / (1024.0 * 1024.0), 'f', 1);
}

QString formatGiB(double bytes) {
  return QString::number(bytes / (1024.0 * 1024.0 * 1024.0), 'f', 2);
}

QString formatPercent(double share) {
  return QString::number(share * 100.0, 'f', 1) + QLatin1Char('%');
}

QString formatSeconds(double seconds) {
  const double a = std::abs(seconds);
  if (a >= 1.0) {
    return QString::number(seconds, 'f', 2) + QStringLiteral(" s");
  }
  if (a >= 1e-3 || a == 0.0) {
    return QString::number(seconds * 1e3, 'f', 3) + QStringLiteral(" ms");
  }
  return QString::number(seconds * 1e6, 'f', 1) + QStringLiteral(" µs");
}

QString formatBytes(double bytes) {
  const double a = std::abs(bytes);
  if (a >= 1024.0 * 1024.0 * 1024.0 * 1024.0) {
    return QString::number(bytes / (1024.0 * 1024.0 * 1024.0 * 1024.0), 'f', 2) + QStringLiteral(" TiB");
  }
  if (a >= 1024.0 * 1024.0 * 1024.0) {
    return formatGiB(bytes) + QStringLiteral(" GiB");
  }
  if (a >= 1024.0 * 1024.0) {
    return QString::number(bytes / (1024.0 * 1024.0), 'f', 1) + QStringLiteral(" MiB");
  }
  return QString::number(bytes / 1024.0, 'f', 1) + QStringLiteral(" KiB");
}

QString formatRate(double samplesPerSecond) {
  auto significant = [](double v) {
    if (v >= 1000) {
      return QString::number(std::round(v), 'f', 0);
    }
    const int decimals = v >= 100 ? 0 : v >= 10 ? 1 : v >= 1 ? 2 : 3;
    return QString::number(v, 'f', decimals);
  };
  if (samplesPerSecond > 0 && samplesPerSecond < 0.1) {
    return significant(samplesPerSecond * 3600) + QStringLiteral(" samples/h");
  }
  return significant(samplesPerSecond) + QStringLiteral(" samples/s");
}

} // namespace partita::gui
