#include "charts/charts_panel.h"

#include "common/format.h"
#include "models/chart_adapter.h"

#include <QSplitter>
#include <QVBoxLayout>

#include <algorithm>

namespace partita::gui {

namespace {
const QColor compute_color(0x4c, 0x72, 0xb0);
const QColor communication_color(0xdd, 0x84, 0x52);
const QColor redistribution_color(0x8c, 0x61, 0xa4);

QString shortName(const std::string& name) {
  QString n = qs(name);
  return n.size() > 28 ? n.left(12) + QStringLiteral("…") + n.right(14) : n;
}
} // namespace

ChartsPanel::ChartsPanel(QWidget* parent)
    : QWidget(parent), m_layers(new ChartWidget(this)), m_memory(new ChartWidget(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* splitter = new QSplitter(Qt::Horizontal, this);
  splitter->addWidget(m_layers);
  splitter->addWidget(m_memory);
  splitter->setStretchFactor(0, 1);
  splitter->setStretchFactor(1, 1);
  layout->addWidget(splitter);
  setAnalysis(nullptr);
}

void ChartsPanel::setAnalysis(const std::shared_ptr<const Analysis>& analysis) {
  m_analysis = analysis;
  m_measured.reset();
  show();
}

void ChartsPanel::setMeasured(std::optional<strategy::RunComparison> measured) {
  if (measured && (!m_analysis || measured->ops.size() != m_analysis->model.graph.ops().size())) {
    measured.reset();
  }
  m_measured = std::move(measured);
  show();
}

void ChartsPanel::show() {
  const auto& analysis = m_analysis;
  if (!analysis) {
    m_layers->clear(tr("Per-layer time: evaluate a model"));
    m_memory->clear(tr("Memory per device: evaluate a model"));
    return;
  }
  const auto& a = *analysis;
  // The most expensive layers, most expensive on top.
  std::vector<const LayerResult*> layers;
  for (const auto& l : a.layers) {
    layers.push_back(&l);
  }
  std::stable_sort(layers.begin(), layers.end(), [](auto* x, auto* y) { return x->time > y->time; });
  if (layers.size() > static_cast<std::size_t>(MaxLayers)) {
    layers.resize(static_cast<std::size_t>(MaxLayers));
  }
  std::reverse(layers.begin(), layers.end()); // horizontal bars grow upwards
  QStringList categories;
  ChartSeries compute{tr("compute"), {}, compute_color};
  ChartSeries communication{tr("communication"), {}, communication_color};
  ChartSeries redistribution{tr("redistribution"), {}, redistribution_color};
  ChartSeries measured{tr("measured (run)"), {}, QColor(0x20, 0x20, 0x20)};
  for (const auto* l : layers) {
    categories << shortName(l->name);
    compute.values << l->compute * 1e3;
    communication.values << l->communication * 1e3;
    redistribution.values << l->redistribution * 1e3;
    if (m_measured) {
      measured.values << m_measured->ops[static_cast<std::size_t>(l->op)].measured.total() * 1e3;
    }
  }
  const QString layerTitle =
      a.layers.size() > layers.size()
          ? tr("Time of the %1 most expensive of %2 layers").arg(layers.size()).arg(a.layers.size())
          : tr("Time per layer");
  m_layers->showBars(layerTitle, categories, {compute, communication, redistribution}, tr("ms per iteration"), true,
                     ChartWidget::Orientation::Horizontal, std::nullopt,
                     m_measured ? std::optional<ChartSeries>(measured) : std::nullopt);

  // Memory of the devices the strategy uses.
  const auto& memory = a.prediction.memory;
  const auto used = std::min<std::size_t>(memory.size(), static_cast<std::size_t>(std::max(1, a.strategy.devices)));
  QStringList devices;
  ChartSeries parameters{tr("parameters"), {}, QColor(0x55, 0xa8, 0x68)};
  ChartSeries gradients{tr("gradients"), {}, QColor(0xc4, 0x4e, 0x52)};
  ChartSeries optimizer{tr("optimizer state"), {}, QColor(0x81, 0x72, 0xb2)};
  ChartSeries activations{tr("activations"), {}, QColor(0x93, 0x78, 0x60)};
  ChartSeries workspace{tr("workspace"), {}, QColor(0xcc, 0xb9, 0x74)};
  constexpr double gib = 1024.0 * 1024.0 * 1024.0;
  for (std::size_t d = 0; d < used; ++d) {
    devices << QString::number(d);
    parameters.values << memory[d].parameters / gib;
    gradients.values << memory[d].gradients / gib;
    optimizer.values << memory[d].optimizer_state / gib;
    activations.values << memory[d].activations / gib;
    workspace.values << memory[d].workspace / gib;
  }
  // The capacity line would flatten bars far below it: then the title alone states the capacity.
  std::optional<ChartLimit> capacity;
  if (a.prediction.peak_memory >= 0.2 * a.prediction.memory_capacity) {
    capacity = ChartLimit{tr("capacity"), a.prediction.memory_capacity / gib};
  }
  m_memory->showBars(tr("Memory per device: peak %1 of %2 capacity%3")
                         .arg(formatBytes(a.prediction.peak_memory), formatBytes(a.prediction.memory_capacity),
                              a.prediction.fits ? QString() : tr(", DOES NOT FIT")),
                     devices, {parameters, gradients, optimizer, activations, workspace}, tr("GiB"), true,
                     ChartWidget::Orientation::Vertical, capacity);
}

} // namespace partita::gui
