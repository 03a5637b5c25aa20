#pragma once

// The Graph tab: the model as a layered top-to-bottom DAG, each op coloured by the kind of its
// chosen split (legend above). Wheel zooms, dragging pans, F (or Fit) fits, Ctrl+F finds an op by
// name and centres it. The layout runs off the GUI thread with its own progress and Cancel; a
// new strategy for the same model only recolours.

#include "common/analysis.h"
#include "graph/graph_layout.h"

#include <QWidget>

#include <memory>

class QAction;
class QGraphicsView;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;

namespace partita::gui {

class GraphLayoutJob;
class GraphScene;

class GraphView : public QWidget {
  Q_OBJECT
public:
  explicit GraphView(QWidget* parent = nullptr);
  ~GraphView() override;

  // Shows the graph of `analysis` (a layout job unless the model is the one already laid out).
  void setAnalysis(const std::shared_ptr<const Analysis>& analysis);
  void cancelLayout();
  bool isLayingOut() const;
  // Whether the graph on screen is the last analysis's (not while its layout runs or after it
  // was cancelled); selection is synchronized only then.
  bool showsCurrent() const;

  void selectOp(graph::OpId id); // and centres it, without emitting opSelected
  graph::OpId selectedOp() const;
  // Selects and centres the next op whose name or type contains `text`; false when none does.
  bool find(const QString& text);
  void fit();
  // Shows the op at its boxes' natural size (zoom 1), centred.
  void zoomTo(double scale, graph::OpId centre = -1);
  double zoom() const;

  // The whole graph with its legend, as PNG or SVG by the path's suffix, written atomically.
  // Returns an error message, empty on success.
  QString exportImage(const QString& path) const;

  GraphScene* scene() const { return m_scene; }
  QGraphicsView* canvas() const { return m_canvas; }
  GraphLayoutJob* layoutJob() const { return m_job; }
  QLineEdit* findEdit() const { return m_find; }
  QLabel* statusLabel() const { return m_status; }

Q_SIGNALS:
  void opSelected(graph::OpId id);
  void layoutShown(); // a new layout (or a recolouring) is on screen
  void layoutCancelled();
  void layoutFailed(const QString& message);

protected:
  void showEvent(QShowEvent* event) override;

private:
  void setBusy(bool busy);
  void showStatus();
  void findNext();

  GraphScene* m_scene;
  QGraphicsView* m_canvas;
  GraphLayoutJob* m_job;
  QLineEdit* m_find;
  QLabel* m_status;
  QProgressBar* m_progress;
  QPushButton* m_cancel;
  QWidget* m_legend;
  QAction* m_progressAction = nullptr;
  QAction* m_cancelAction = nullptr;
  std::shared_ptr<const Analysis> m_current; // the last one given to setAnalysis
  QString m_lastFind;
  std::size_t m_findIndex = 0;
  bool m_fitPending = false;
};

} // namespace partita::gui
