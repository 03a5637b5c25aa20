#pragma once

// Exports of what the window shows: the layer table as CSV, pictures as PNG or SVG (chosen by
// the file's suffix). Every file is written atomically (QSaveFile): a failed export leaves any
// previous file as it was. Functions return an error message, empty on success.

#include "common/analysis.h"

#include <QSizeF>
#include <QString>

#include <functional>

class QPainter;
class QWidget;

namespace partita::gui {

// One line per op in op order: index, type, name, output shape, configuration, then the time
// terms in seconds, memory in bytes and the share of the iteration, unrounded.
QString layerTableCsv(const Analysis& analysis);
QString exportLayerTable(const Analysis& analysis, const QString& path);

// A picture of `size` (logical pixels): `paint` draws it with the painter scaled by `scale`
// (PNG rasters are scaled down when huge; SVG uses 1).
QString exportPicture(const QString& path, const QSizeF& size,
                      const std::function<void(QPainter& painter, double scale)>& paint);
// A widget as it is on screen (PNG) or drawn into an SVG.
QString exportWidget(QWidget* widget, const QString& path);

} // namespace partita::gui
