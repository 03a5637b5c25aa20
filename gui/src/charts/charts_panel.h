#pragma once

// The Charts tab: per-layer time (compute / communication / redistribution, stacked) for the most
// expensive layers, and memory per device (parameters, gradients, optimizer state, activations)
// against the device's capacity.

#include "common/analysis.h"

#include "partita/strategy/measured.h"

#include <QWidget>

#include <memory>
#include <optional>

namespace partita::gui {

class ChartWidget;

class ChartsPanel : public QWidget {
  Q_OBJECT
public:
  static constexpr int MaxLayers = 25;

  explicit ChartsPanel(QWidget* parent = nullptr);

  void setAnalysis(const std::shared_ptr<const Analysis>& analysis);
  // Measured per-layer times of a run of this plan, drawn as markers over the predicted bars
  // (nothing: the bars alone).
  void setMeasured(std::optional<strategy::RunComparison> measured);

  ChartWidget* layerChart() const { return m_layers; }
  ChartWidget* memoryChart() const { return m_memory; }

private:
  void show();

  std::shared_ptr<const Analysis> m_analysis;
  std::optional<strategy::RunComparison> m_measured;
  ChartWidget* m_layers;
  ChartWidget* m_memory;
};

} // namespace partita::gui
