#include "common/export.h"

#include "common/format.h"

#include <QBuffer>
#include <QCoreApplication>
#include <QFileInfo>
#include <QImage>
#include <QPainter>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QWidget>

#include <cmath>

namespace partita::gui {

namespace {

constexpr double maxPixels = 40e6; // a PNG bigger than this is scaled down

QString tr(const char* text) {
  return QCoreApplication::translate("Export", text);
}

QString csvField(const QString& text) {
  if (!text.contains(QLatin1Char(',')) && !text.contains(QLatin1Char('"')) && !text.contains(QLatin1Char('\n'))) {
    return text;
  }
  QString quoted = text;
  quoted.replace(QStringLiteral("\""), QStringLiteral("\"\""));
  return QLatin1Char('"') + quoted + QLatin1Char('"');
}

QString number(double value) {
  return QString::number(value, 'g', 10);
}

QString writeAtomically(const QString& path, const QByteArray& bytes) {
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly)) {
    return tr("%1: cannot write: %2").arg(path, file.errorString());
  }
  if (file.write(bytes) != bytes.size() || !file.commit()) {
    return tr("%1: cannot write: %2").arg(path, file.errorString());
  }
  return {};
}

enum class Format { Png, Svg, Unknown };

Format formatOf(const QString& path) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (suffix == QStringLiteral("png")) {
    return Format::Png;
  }
  if (suffix == QStringLiteral("svg")) {
    return Format::Svg;
  }
  return Format::Unknown;
}

QString unknownFormat(const QString& path) {
  return tr("%1: unknown picture format: name it .png or .svg").arg(path);
}

QByteArray svgBytes(const QSize& size, const QString& title, const std::function<void(QPainter&)>& paint) {
  QBuffer buffer;
  buffer.open(QIODevice::WriteOnly);
  QSvgGenerator svg;
  svg.setOutputDevice(&buffer);
  svg.setSize(size);
  svg.setViewBox(QRect(QPoint(0, 0), size));
  svg.setTitle(title);
  svg.setDescription(tr("Exported by partita-gui"));
  {
    QPainter painter(&svg);
    paint(painter);
  }
  return buffer.data();
}

QByteArray pngBytes(const QImage& image) {
  QBuffer buffer;
  buffer.open(QIODevice::WriteOnly);
  image.save(&buffer, "PNG");
  return buffer.data();
}

} // namespace

QString layerTableCsv(const Analysis& analysis) {
  QString csv = QStringLiteral("index,op,name,output_shape,configuration,stage,chunk,compute_s,communication_s,"
                               "redistribution_s,time_s,memory_bytes,share\n");
  for (const auto& l : analysis.layers) {
    const QStringList fields = {QString::number(l.op),
                                csvField(qs(l.type)),
                                csvField(qs(l.name)),
                                csvField(qs(l.output_shape)),
                                csvField(qs(l.configuration)),
                                l.stage < 0 ? QString() : QString::number(l.stage),
                                l.chunk < 0 ? QString() : QString::number(l.chunk),
                                number(l.compute),
                                number(l.communication),
                                number(l.redistribution),
                                number(l.time),
                                number(l.memory),
                                number(l.share)};
    csv += fields.join(QLatin1Char(',')) + QLatin1Char('\n');
  }
  return csv;
}

QString exportLayerTable(const Analysis& analysis, const QString& path) {
  return writeAtomically(path, layerTableCsv(analysis).toUtf8());
}

QString exportPicture(const QString& path, const QSizeF& size,
                      const std::function<void(QPainter& painter, double scale)>& paint) {
  switch (formatOf(path)) {
  case Format::Svg: {
    const QSize whole = size.toSize();
    return writeAtomically(path, svgBytes(whole, QFileInfo(path).completeBaseName(), [&](QPainter& painter) {
                             painter.setRenderHint(QPainter::Antialiasing);
                             paint(painter, 1.0);
                           }));
  }
  case Format::Png: {
    const double scale = std::min(1.0, std::sqrt(maxPixels / std::max(1.0, size.width() * size.height())));
    QImage image((size * scale).toSize().expandedTo(QSize(1, 1)), QImage::Format_ARGB32_Premultiplied);
    image.fill(Qt::white);
    {
      QPainter painter(&image);
      painter.setRenderHints(QPainter::Antialiasing | QPainter::TextAntialiasing);
      paint(painter, scale);
    }
    return writeAtomically(path, pngBytes(image));
  }
  case Format::Unknown: break;
  }
  return unknownFormat(path);
}

QString exportWidget(QWidget* widget, const QString& path) {
  switch (formatOf(path)) {
  case Format::Svg:
    return writeAtomically(path, svgBytes(widget->size(), QFileInfo(path).completeBaseName(),
                                          [widget](QPainter& painter) { widget->render(&painter); }));
  case Format::Png: return writeAtomically(path, pngBytes(widget->grab().toImage()));
  case Format::Unknown: break;
  }
  return unknownFormat(path);
}

} // namespace partita::gui
