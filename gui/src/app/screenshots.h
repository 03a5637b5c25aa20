#pragma once

// Renders the documentation's screenshots (main window, inspector, charts, graph, comparison) of a
// window whose set-up panel is filled in, after evaluating it; used by `partita-gui --screenshots`.

#include <QString>

namespace partita::gui {

class MainWindow;

// Returns a process exit code: 0 when every PNG was written.
int render_screenshots(MainWindow& window, const QString& directory);

} // namespace partita::gui
