#include "compare/sweep_panel.h"

#include "common/format.h"
#include "models/chart_adapter.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

#include <algorithm>
#include <limits>

namespace partita::gui {

namespace {

// One colour per family, stable across sweeps (offered_families() order).
QColor familyColor(const std::string& family) {
  static const QColor palette[] = {QColor(0x4c, 0x72, 0xb0), QColor(0xdd, 0x84, 0x52), QColor(0x55, 0xa8, 0x68),
                                   QColor(0xc4, 0x4e, 0x52), QColor(0x81, 0x72, 0xb3), QColor(0x93, 0x78, 0x60),
                                   QColor(0xda, 0x8b, 0xc3), QColor(0x8c, 0x8c, 0x8c), QColor(0xcc, 0xb9, 0x74),
                                   QColor(0x64, 0xb5, 0xcd)};
  const auto families = offered_families();
  for (std::size_t i = 0; i < families.size(); ++i) {
    if (families[i]->name() == family) {
      return palette[i % std::size(palette)];
    }
  }
  return QColor(Qt::black);
}

const char* const default_families[] = {"dp", "hybrid", "megatron", "gholami", "pipeline"};

} // namespace

SweepPanel::SweepPanel(QWidget* parent)
    : QWidget(parent), m_families(new QListWidget(this)), m_devices(new QLineEdit(this)), m_metric(new QComboBox(this)),
      m_run(new QPushButton(tr("Run scaling sweep"), this)), m_header(new QLabel(this)),
      m_chart(new ChartWidget(this)) {
  for (const auto* f : offered_families()) {
    auto* item = new QListWidgetItem(qs(f->name()) + QStringLiteral(" — ") + qs(f->title()), m_families);
    item->setData(Qt::UserRole, qs(f->name()));
    item->setToolTip(qs(f->description()));
    item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
    bool on = false;
    for (const char* d : default_families) {
      on = on || f->name() == d;
    }
    item->setCheckState(on ? Qt::Checked : Qt::Unchecked);
  }
  m_families->setFixedHeight(m_families->sizeHintForRow(0) * m_families->count() + 2 * m_families->frameWidth() + 4);
  m_devices->setObjectName(QStringLiteral("sweepDevicesEdit"));
  m_devices->setPlaceholderText(tr("1,2,4,… up to the cluster's devices"));
  m_devices->setToolTip(tr("Device counts, comma separated; empty: powers of two up to the cluster's size"));
  m_devices->setClearButtonEnabled(true);
  m_metric->addItem(tr("Samples/s (higher is better)"), static_cast<int>(Metric::Throughput));
  m_metric->addItem(tr("Iteration time (lower is better)"), static_cast<int>(Metric::IterationTime));
  m_run->setToolTip(tr("Run each checked family at each device count on the model and cluster chosen on the left"));
  m_header->setWordWrap(true);

  auto* form = new QFormLayout;
  form->addRow(tr("Device counts"), m_devices);
  form->addRow(tr("Plot"), m_metric);
  auto* controls = new QVBoxLayout;
  controls->addLayout(form);
  controls->addWidget(m_run);
  controls->addStretch(1);
  auto* top = new QHBoxLayout;
  top->addWidget(m_families, 1);
  top->addLayout(controls, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(top);
  layout->addWidget(m_header);
  layout->addWidget(m_chart, 1);

  connect(m_run, &QPushButton::clicked, this, &SweepPanel::sweepRequested);
  connect(m_devices, &QLineEdit::returnPressed, this, &SweepPanel::sweepRequested);
  connect(m_metric, &QComboBox::currentIndexChanged, this, &SweepPanel::plot);
  setSweep(nullptr);
}

std::vector<std::string> SweepPanel::selectedFamilies() const {
  std::vector<std::string> out;
  for (int i = 0; i < m_families->count(); ++i) {
    if (m_families->item(i)->checkState() == Qt::Checked) {
      out.push_back(m_families->item(i)->data(Qt::UserRole).toString().toStdString());
    }
  }
  return out;
}

void SweepPanel::setSelectedFamilies(const std::vector<std::string>& families) {
  for (int i = 0; i < m_families->count(); ++i) {
    const auto name = m_families->item(i)->data(Qt::UserRole).toString().toStdString();
    const bool on = std::find(families.begin(), families.end(), name) != families.end();
    m_families->item(i)->setCheckState(on ? Qt::Checked : Qt::Unchecked);
  }
}

std::vector<int> SweepPanel::deviceCounts(int clusterDevices) const {
  const QString text = m_devices->text().trimmed();
  return text.isEmpty() ? default_sweep_devices(clusterDevices) : parse_device_list(text.toStdString());
}

SweepPanel::Metric SweepPanel::metric() const {
  return static_cast<Metric>(m_metric->currentData().toInt());
}

void SweepPanel::setMetric(Metric metric) {
  m_metric->setCurrentIndex(m_metric->findData(static_cast<int>(metric)));
}

double SweepPanel::value(const search::SweepCell& cell, Metric metric) {
  if (!cell.error.empty()) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return metric == Metric::Throughput ? cell.prediction.samples_per_second : cell.prediction.iteration_time * 1e3;
}

void SweepPanel::setSweep(std::shared_ptr<const Sweep> sweep) {
  m_sweep = std::move(sweep);
  plot();
}

void SweepPanel::plot() {
  if (!m_sweep) {
    m_header->setText(tr("Runs the checked families at each device count, as <tt>partita compare --devices "
                         "1,2,4,…</tt> does."));
    m_chart->clear(tr("Scaling"));
    return;
  }
  const auto& s = *m_sweep;
  const Metric m = metric();
  QList<ChartLine> lines;
  QStringList gaps;
  for (std::size_t i = 0; i < s.families.size(); ++i) {
    ChartLine line{qs(s.families[i]), {}, {}, familyColor(s.families[i])};
    for (int n : s.devices) {
      const auto* cell = s.cell(s.families[i], n);
      line.x << n;
      line.y << (cell != nullptr ? value(*cell, m) : std::numeric_limits<double>::quiet_NaN());
      if (cell != nullptr && !cell->error.empty()) {
        gaps << QStringLiteral("%1 at %2: %3").arg(qs(s.families[i])).arg(n).arg(qs(cell->error).toHtmlEscaped());
      }
    }
    lines << line;
  }
  const auto& in = s.input;
  QString header = tr("<b>%1</b> on %2, %3, %4")
                       .arg(qs(s.model_label).toHtmlEscaped(), qs(s.cluster_name), qs(in.precision), qs(in.optimizer));
  if (!gaps.isEmpty()) {
    header += tr("<br>Gaps (the family does not apply): ") + gaps.join(QStringLiteral("; "));
  }
  m_header->setText(header);
  const bool throughput = m == Metric::Throughput;
  m_chart->showLines(throughput ? tr("Throughput against devices (samples/s, higher is better)")
                                : tr("Iteration time against devices (ms, lower is better)"),
                     lines, tr("devices (log 2)"), throughput ? tr("samples/s") : tr("iteration ms"), true);
}

} // namespace partita::gui
