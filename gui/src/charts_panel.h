#pragma once

// The Charts tab: per-layer time (compute / communication / redistribution, stacked) for the most
// expensive layers, and memory per device (parameters, gradients, optimizer state, activations)
// against the device's capacity.

#include "analysis.h"

#include <QWidget>

#include <memory>

namespace partita::gui {

class ChartWidget;

class ChartsPanel : public QWidget {
  Q_OBJECT
public:
  static constexpr int MaxLayers = 25;

  explicit ChartsPanel(QWidget* parent = nullptr);

  void setAnalysis(const std::shared_ptr<const Analysis>& analysis);

  ChartWidget* layerChart() const { return m_layers; }
  ChartWidget* memoryChart() const { return m_memory; }

private:
  ChartWidget* m_layers;
  ChartWidget* m_memory;
};

} // namespace partita::gui
