#include "models/chart_adapter.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QHorizontalBarSeries>
#include <QHorizontalStackedBarSeries>
#include <QLegendMarker>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QPainter>
#include <QScatterSeries>
#include <QStackedBarSeries>
#include <QToolTip>
#include <QVBoxLayout>
#include <QValueAxis>

#include <algorithm>
#include <cmath>
#include <limits>

namespace partita::gui {

struct ChartWidget::Impl {
  QChartView* view = nullptr;
  QString title;
  int series = 0;
};

ChartWidget::ChartWidget(QWidget* parent) : QWidget(parent), m_impl(new Impl) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  m_impl->view = new QChartView(new QChart, this);
  m_impl->view->setRenderHint(QPainter::Antialiasing);
  layout->addWidget(m_impl->view);
  clear({});
}

ChartWidget::~ChartWidget() {
  delete m_impl;
}

int ChartWidget::seriesCount() const {
  return m_impl->series;
}

QString ChartWidget::title() const {
  return m_impl->title;
}

void ChartWidget::clear(const QString& title) {
  auto* chart = new QChart;
  chart->setTitle(title);
  chart->legend()->hide();
  auto* old = m_impl->view->chart();
  m_impl->view->setChart(chart);
  delete old;
  m_impl->title = title;
  m_impl->series = 0;
}

void ChartWidget::showBars(const QString& title, const QStringList& categories, const QList<ChartSeries>& series,
                           const QString& valueTitle, bool stacked, Orientation orientation,
                           std::optional<ChartLimit> limit, std::optional<ChartSeries> markers) {
  clear(title);
  auto* chart = m_impl->view->chart();
  const bool horizontal = orientation == Orientation::Horizontal;
  QAbstractBarSeries* bars = nullptr;
  if (horizontal) {
    bars = stacked ? static_cast<QAbstractBarSeries*>(new QHorizontalStackedBarSeries)
                   : static_cast<QAbstractBarSeries*>(new QHorizontalBarSeries);
  } else {
    bars = stacked ? static_cast<QAbstractBarSeries*>(new QStackedBarSeries)
                   : static_cast<QAbstractBarSeries*>(new QBarSeries);
  }
  double top = 0;
  QList<double> sums(categories.size(), 0.0);
  for (const auto& s : series) {
    auto* set = new QBarSet(s.name);
    if (s.color.isValid()) {
      set->setColor(s.color);
      set->setBorderColor(s.color.darker(130));
    }
    for (qsizetype i = 0; i < s.values.size(); ++i) {
      set->append(s.values[i]);
      if (i < sums.size()) {
        sums[i] += s.values[i];
      }
      top = std::max(top, s.values[i]);
    }
    bars->append(set);
  }
  if (stacked) {
    for (double v : sums) {
      top = std::max(top, v);
    }
  }
  if (limit) {
    top = std::max(top, limit->value);
  }
  if (markers) {
    for (const double v : markers->values) {
      top = std::max(top, v);
    }
  }
  chart->addSeries(bars);
  m_impl->series = static_cast<int>(series.size());

  auto* categoryAxis = new QBarCategoryAxis;
  categoryAxis->append(categories);
  auto* valueAxis = new QValueAxis;
  valueAxis->setTitleText(valueTitle);
  valueAxis->setRange(0, top > 0 ? top * 1.08 : 1.0);
  valueAxis->applyNiceNumbers();
  chart->addAxis(categoryAxis, horizontal ? Qt::AlignLeft : Qt::AlignBottom);
  chart->addAxis(valueAxis, horizontal ? Qt::AlignBottom : Qt::AlignLeft);
  bars->attachAxis(categoryAxis);
  bars->attachAxis(valueAxis);

  if (limit && !categories.isEmpty()) {
    // Drawn across every category: category i sits at x = i on a bar category axis.
    auto* line = new QLineSeries;
    line->setName(limit->name);
    QPen pen(QColor(0xc0, 0x20, 0x20));
    pen.setWidth(2);
    pen.setStyle(Qt::DashLine);
    line->setPen(pen);
    const double last = std::max<double>(0.0, static_cast<double>(categories.size() - 1));
    if (horizontal) {
      line->append(limit->value, 0);
      line->append(limit->value, last);
    } else {
      line->append(0, limit->value);
      line->append(last, limit->value);
    }
    chart->addSeries(line);
    line->attachAxis(categoryAxis);
    line->attachAxis(valueAxis);
    ++m_impl->series;
  }
  if (markers && !categories.isEmpty()) {
    auto* points = new QScatterSeries;
    points->setName(markers->name);
    points->setMarkerSize(9);
    points->setMarkerShape(QScatterSeries::MarkerShapeRectangle);
    points->setColor(markers->color.isValid() ? markers->color : QColor(0x20, 0x20, 0x20));
    for (qsizetype i = 0; i < markers->values.size() && i < categories.size(); ++i) {
      if (horizontal) {
        points->append(markers->values[i], static_cast<double>(i));
      } else {
        points->append(static_cast<double>(i), markers->values[i]);
      }
    }
    chart->addSeries(points);
    points->attachAxis(categoryAxis);
    points->attachAxis(valueAxis);
    ++m_impl->series;
  }
  chart->legend()->setVisible(series.size() > 1 || limit.has_value() || markers.has_value());
  chart->legend()->setAlignment(Qt::AlignBottom);
}

void ChartWidget::showScatter(const QString& title, const QList<ScatterPoint>& points, const QString& xTitle,
                              const QString& yTitle, const QString& diagonalName) {
  clear(title);
  auto* chart = m_impl->view->chart();
  auto* scatter = new QScatterSeries;
  scatter->setName(title);
  scatter->setMarkerSize(8);
  scatter->setColor(QColor(0x4c, 0x72, 0xb0));
  double low = std::numeric_limits<double>::max(), high = 0;
  QList<QString> labels;
  for (const auto& p : points) {
    if (p.x <= 0 || p.y <= 0) {
      continue; // not on a log axis
    }
    scatter->append(p.x, p.y);
    labels << p.label;
    low = std::min({low, p.x, p.y});
    high = std::max({high, p.x, p.y});
  }
  if (scatter->count() == 0) {
    delete scatter;
    return;
  }
  low /= 2;
  high *= 2;
  auto* diagonal = new QLineSeries;
  diagonal->setName(diagonalName);
  QPen pen(QColor(0x80, 0x80, 0x80));
  pen.setStyle(Qt::DashLine);
  diagonal->setPen(pen);
  diagonal->append(low, low);
  diagonal->append(high, high);
  chart->addSeries(diagonal);
  chart->addSeries(scatter);
  auto* x = new QLogValueAxis;
  x->setTitleText(xTitle);
  x->setLabelFormat(QStringLiteral("%g"));
  x->setRange(low, high);
  auto* y = new QLogValueAxis;
  y->setTitleText(yTitle);
  y->setLabelFormat(QStringLiteral("%g"));
  y->setRange(low, high);
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  for (auto* s : {static_cast<QXYSeries*>(diagonal), static_cast<QXYSeries*>(scatter)}) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
  QObject::connect(scatter, &QScatterSeries::hovered, scatter, [scatter, labels](const QPointF& point, bool state) {
    if (!state) {
      QToolTip::hideText();
      return;
    }
    const auto pts = scatter->points();
    for (qsizetype i = 0; i < pts.size() && i < labels.size(); ++i) {
      if (pts[i] == point) {
        QToolTip::showText(QCursor::pos(), labels[i]);
        return;
      }
    }
  });
  m_impl->series = 2;
  chart->legend()->setVisible(true);
  chart->legend()->setAlignment(Qt::AlignBottom);
}

} // namespace partita::gui

namespace partita::gui {

void ChartWidget::showLines(const QString& title, const QList<ChartLine>& lines, const QString& xTitle,
                            const QString& yTitle, bool log2X) {
  clear(title);
  auto* chart = m_impl->view->chart();
  double xMin = std::numeric_limits<double>::infinity();
  double xMax = -xMin;
  double yMax = 0;
  for (const auto& line : lines) {
    for (qsizetype i = 0; i < line.x.size() && i < line.y.size(); ++i) {
      xMin = std::min(xMin, line.x[i]);
      xMax = std::max(xMax, line.x[i]);
      if (std::isfinite(line.y[i])) {
        yMax = std::max(yMax, line.y[i]);
      }
    }
  }
  if (!std::isfinite(xMin)) {
    xMin = 1;
    xMax = 2;
  }
  QAbstractAxis* xAxis = nullptr;
  if (log2X) {
    auto* axis = new QLogValueAxis;
    axis->setBase(2);
    axis->setLabelFormat(QStringLiteral("%g"));
    // Whole powers of two at the ends, so that each one gets a grid line and a label.
    const double lo = std::exp2(std::floor(std::log2(std::max(xMin, 1.0))));
    const double hi = std::exp2(std::ceil(std::log2(std::max(xMax, 2.0))));
    axis->setRange(lo, std::max(hi, lo * 2));
    axis->setMinorTickCount(0);
    xAxis = axis;
  } else {
    auto* axis = new QValueAxis;
    axis->setRange(xMin, xMax > xMin ? xMax : xMin + 1);
    axis->setLabelFormat(QStringLiteral("%g"));
    xAxis = axis;
  }
  xAxis->setTitleText(xTitle);
  auto* yAxis = new QValueAxis;
  yAxis->setTitleText(yTitle);
  yAxis->setRange(0, yMax > 0 ? yMax * 1.08 : 1.0);
  yAxis->applyNiceNumbers();
  chart->addAxis(xAxis, Qt::AlignBottom);
  chart->addAxis(yAxis, Qt::AlignLeft);

  for (const auto& line : lines) {
    // One QLineSeries per unbroken run of points; the first carries the legend entry.
    bool first = true;
    QLineSeries* piece = nullptr;
    auto addPiece = [&] {
      piece = new QLineSeries;
      piece->setName(line.name);
      piece->setPointsVisible(true);
      QPen pen(line.color.isValid() ? line.color : QColor(Qt::black));
      pen.setWidth(2);
      piece->setPen(pen);
      piece->setColor(pen.color());
      chart->addSeries(piece);
      piece->attachAxis(xAxis);
      piece->attachAxis(yAxis);
      const auto markers = chart->legend()->markers(piece);
      for (auto* marker : markers) {
        marker->setVisible(first);
      }
      first = false;
    };
    for (qsizetype i = 0; i < line.x.size() && i < line.y.size(); ++i) {
      if (!std::isfinite(line.y[i])) {
        piece = nullptr; // a gap: the next point starts a new piece
        continue;
      }
      if (piece == nullptr) {
        addPiece();
      }
      piece->append(line.x[i], line.y[i]);
    }
    if (first) {
      addPiece(); // no point at all: still in the legend
    }
  }
  m_impl->series = static_cast<int>(lines.size());
  chart->legend()->setVisible(!lines.isEmpty());
  chart->legend()->setAlignment(Qt::AlignBottom);
}

} // namespace partita::gui

namespace partita::gui {

void ChartWidget::showFront(const QString& title, const QList<ScatterPoint>& points, int marked,
                            const QString& markedName, const QString& xTitle, const QString& yTitle,
                            std::optional<ChartLimit> xLimit) {
  clear(title);
  auto* chart = m_impl->view->chart();
  // Joined in x order; the indices of the caller's points are kept for clicks and tooltips.
  QList<int> order;
  for (int i = 0; i < points.size(); ++i) {
    order << i;
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return points[a].x < points[b].x; });
  auto* line = new QLineSeries;
  line->setName(title);
  QPen linePen(QColor(0x4c, 0x72, 0xb0));
  linePen.setWidth(2);
  line->setPen(linePen);
  auto* dots = new QScatterSeries;
  dots->setName(tr("Pareto point (click to open)"));
  dots->setMarkerSize(10);
  dots->setColor(QColor(0x4c, 0x72, 0xb0));
  auto* chosen = new QScatterSeries;
  chosen->setName(markedName);
  chosen->setMarkerSize(16);
  chosen->setColor(QColor(0xdd, 0x84, 0x52));
  double xMax = 0, yMax = 0;
  for (const int i : order) {
    const auto& p = points[i];
    line->append(p.x, p.y);
    dots->append(p.x, p.y);
    if (i == marked) {
      chosen->append(p.x, p.y);
    }
    xMax = std::max(xMax, p.x);
    yMax = std::max(yMax, p.y);
  }
  QList<QXYSeries*> all = {line, dots, chosen};
  QLineSeries* limitLine = nullptr;
  if (xLimit) {
    xMax = std::max(xMax, xLimit->value);
  }
  auto* x = new QValueAxis;
  x->setTitleText(xTitle);
  x->setLabelFormat(QStringLiteral("%g"));
  x->setRange(0, xMax > 0 ? xMax * 1.08 : 1.0);
  x->applyNiceNumbers();
  auto* y = new QValueAxis;
  y->setTitleText(yTitle);
  y->setLabelFormat(QStringLiteral("%g"));
  y->setRange(0, yMax > 0 ? yMax * 1.1 : 1.0);
  y->applyNiceNumbers();
  if (xLimit) {
    limitLine = new QLineSeries;
    limitLine->setName(xLimit->name);
    QPen pen(QColor(0xc4, 0x4e, 0x52));
    pen.setStyle(Qt::DashLine);
    pen.setWidth(2);
    limitLine->setPen(pen);
    limitLine->append(xLimit->value, 0);
    limitLine->append(xLimit->value, y->max());
    all.prepend(limitLine);
  }
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  for (auto* s : all) {
    chart->addSeries(s);
    s->attachAxis(x);
    s->attachAxis(y);
  }
  // The line and an empty "chosen" series need no legend entry.
  for (auto* hidden : {static_cast<QXYSeries*>(line), static_cast<QXYSeries*>(chosen)}) {
    if (hidden == chosen && chosen->count() > 0) {
      continue;
    }
    for (auto* marker : chart->legend()->markers(hidden)) {
      marker->setVisible(false);
    }
  }
  // The index of the caller's point nearest `p` among those the series holds.
  const auto indexAt = [points, order](const QPointF& p) {
    int best = -1;
    double bestDistance = std::numeric_limits<double>::infinity();
    for (const int i : order) {
      const double d = std::hypot(points[i].x - p.x(), points[i].y - p.y());
      if (d < bestDistance) {
        bestDistance = d;
        best = i;
      }
    }
    return best;
  };
  for (auto* s : {dots, chosen}) {
    QObject::connect(s, &QScatterSeries::clicked, this, [this, indexAt](const QPointF& p) {
      const int i = indexAt(p);
      if (i >= 0) {
        Q_EMIT pointClicked(i);
      }
    });
    QObject::connect(s, &QScatterSeries::hovered, s, [points, indexAt](const QPointF& p, bool state) {
      if (!state) {
        QToolTip::hideText();
        return;
      }
      const int i = indexAt(p);
      if (i >= 0) {
        QToolTip::showText(QCursor::pos(), points[i].label);
      }
    });
  }
  m_impl->series = static_cast<int>(all.size());
  chart->legend()->setVisible(true);
  chart->legend()->setAlignment(Qt::AlignBottom);
}

} // namespace partita::gui
