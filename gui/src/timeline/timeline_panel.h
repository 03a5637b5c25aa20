#pragma once

// The Timeline tab: the predicted iteration as the event simulator runs it (SimTimelineView), with
// zoom buttons, a filter to the critical path, a legend of task kinds and a summary: the simulated
// iteration against the additive prediction and where each device spends it. Plans with a pipeline
// can be shown by stage instead: micro-batches coloured, the bubble hatched, each stage's idle share.

#include "common/analysis.h"

#include <QWidget>

#include <memory>

class QCheckBox;
class QLabel;
class QToolButton;

namespace partita::gui {

class SimTimelineView;

class TimelinePanel : public QWidget {
  Q_OBJECT
public:
  explicit TimelinePanel(QWidget* parent = nullptr);

  void setAnalysis(std::shared_ptr<const Analysis> analysis);

  SimTimelineView* view() const { return m_view; }
  QLabel* summaryLabel() const { return m_summary; }
  QCheckBox* criticalOnlyBox() const { return m_criticalOnly; }
  QCheckBox* pipelineBox() const { return m_byStage; } // the pipeline view (plans with a pipeline)
  QLabel* legendLabel() const { return m_legend; }
  QToolButton* zoomInButton() const { return m_zoomIn; }
  QToolButton* zoomOutButton() const { return m_zoomOut; }

private:
  void updateSpanLabel();
  void updateLegend();

  std::shared_ptr<const Analysis> m_analysis;
  SimTimelineView* m_view;
  QLabel* m_summary;
  QLabel* m_span;
  QCheckBox* m_criticalOnly;
  QCheckBox* m_byStage;
  QLabel* m_legend;
  QToolButton* m_zoomIn;
  QToolButton* m_zoomOut;
  QToolButton* m_fit;
};

} // namespace partita::gui
