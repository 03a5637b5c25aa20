#pragma once

// Help > Partita Help and Help > About: what the explorer shows and how to read it, built from the
// core's own descriptions (the families are listed as the optimizer registry describes them, so
// the help cannot fall behind it).

#include <QString>

class QDialog;
class QWidget;

namespace partita::gui {

// The guide as HTML: the strategy families (name, title, one sentence each), how to read a
// configuration in the layer table, the terms an iteration time is made of, and the keys.
QString helpHtml();
// The about text as HTML: version, what Partita implements and from which papers.
QString aboutHtml();

// The help window (not yet shown; deleted when closed), which showHelp shows.
QDialog* makeHelpDialog(QWidget* parent);
void showHelp(QWidget* parent);
void showAbout(QWidget* parent);

} // namespace partita::gui
