#pragma once

// The only door to Qt Charts (GPL-3, deprecated from Qt 6.10 in favour of Qt Graphs): views ask
// for bar charts of plain data here and never include a Qt Charts header, so another backend
// can replace this file alone.

#include <QColor>
#include <QList>
#include <QString>
#include <QStringList>
#include <QWidget>

#include <optional>

namespace partita::gui {

struct ChartSeries {
  QString name;
  QList<double> values; // one per category
  QColor color;
};

struct ScatterPoint {
  double x = 0, y = 0;
  QString label; // tooltip
};

// A line through (x, y) points; a NaN y is a gap: the line breaks there instead of falling to 0.
struct ChartLine {
  QString name;
  QList<double> x;
  QList<double> y; // one per x
  QColor color;
};

struct ChartLimit {
  QString name; // "capacity"
  double value = 0;
};

class ChartWidget : public QWidget {
  Q_OBJECT
public:
  enum class Orientation { Vertical, Horizontal };

  explicit ChartWidget(QWidget* parent = nullptr);
  ~ChartWidget() override;

  // Bars per category, the series stacked on one another (or side by side when !stacked), with
  // an optional horizontal limit line (memory capacity) and optional markers, one per category
  // (measured times over predicted bars).
  void showBars(const QString& title, const QStringList& categories, const QList<ChartSeries>& series,
                const QString& valueTitle, bool stacked, Orientation orientation,
                std::optional<ChartLimit> limit = std::nullopt, std::optional<ChartSeries> markers = std::nullopt);
  // Points on log-log axes with the y = x diagonal: predicted (x) against measured (y).
  void showScatter(const QString& title, const QList<ScatterPoint>& points, const QString& xTitle,
                   const QString& yTitle, const QString& diagonalName);
  // Lines over a numeric x axis (log base 2 when log2X: 1, 2, 4, ... evenly spaced), each point
  // marked, one legend entry per line however many pieces its gaps cut it into.
  void showLines(const QString& title, const QList<ChartLine>& lines, const QString& xTitle, const QString& yTitle,
                 bool log2X);
  // A trade-off front: points (x: memory, y: time) joined in x order, the point `marked` (-1:
  // none) drawn larger in another colour, an optional vertical limit line at x (memory capacity).
  // Both axes start at 0. A click on a point emits pointClicked with its index in `points`.
  void showFront(const QString& title, const QList<ScatterPoint>& points, int marked, const QString& markedName,
                 const QString& xTitle, const QString& yTitle, std::optional<ChartLimit> xLimit = std::nullopt);
  void clear(const QString& title);

  int seriesCount() const; // for tests: bar sets, limit lines, or lines (not their pieces)
  QString title() const;

Q_SIGNALS:
  void pointClicked(int index); // showFront's points

private:
  struct Impl;
  Impl* m_impl;
};

} // namespace partita::gui
