#include "compare/side_by_side_panel.h"

#include "common/format.h"
#include "models/side_by_side_model.h"
#include "setup/cluster_combo.h"

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QTableView>
#include <QVBoxLayout>

namespace partita::gui {

namespace {}

SideBySidePanel::SideBySidePanel(QWidget* parent)
    : QWidget(parent), m_model(new SideBySideModel(this)), m_family(new QComboBox(this)),
      m_cluster(new QComboBox(this)), m_nodes(new QSpinBox(this)), m_devices(new QSpinBox(this)),
      m_run(new QPushButton(tr("Show side by side"), this)), m_header(new QLabel(this)), m_view(new QTableView(this)) {
  for (const auto* f : offered_families()) {
    m_family->addItem(qs(f->name()) + QStringLiteral(" — ") + qs(f->title()), qs(f->name()));
  }
  m_cluster->addItem(tr("same as A"), QString());
  for (const auto& name : cluster::preset_names()) {
    m_cluster->addItem(qs(name), qs(name));
  }
  m_nodes->setRange(1, 4096);
  m_nodes->setToolTip(tr("Nodes of B's preset; it grows to hold B's devices"));
  m_devices->setRange(0, 1 << 16);
  m_devices->setSpecialValueText(tr("same as A"));
  m_run->setToolTip(tr("Evaluate A (the set-up on the left) and B, and show them layer by layer"));
  m_header->setWordWrap(true);
  m_view->setModel(m_model);
  m_view->verticalHeader()->hide();
  m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_view->horizontalHeader()->setStretchLastSection(false);
  m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 6);
  m_view->setWordWrap(false);

  auto* form = new QFormLayout;
  form->addRow(tr("B: family"), m_family);
  auto* clusterRow = new QHBoxLayout;
  clusterRow->addWidget(m_cluster, 1);
  clusterRow->addWidget(new QLabel(tr("nodes"), this));
  clusterRow->addWidget(m_nodes);
  form->addRow(tr("B: cluster"), clusterRow);
  form->addRow(tr("B: devices"), m_devices);
  auto* top = new QHBoxLayout;
  top->addLayout(form, 1);
  top->addWidget(m_run, 0, Qt::AlignBottom);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(top);
  layout->addWidget(m_header);
  layout->addWidget(m_view, 1);

  connect(m_run, &QPushButton::clicked, this, &SideBySidePanel::sideBySideRequested);
  connect(m_cluster, &QComboBox::currentIndexChanged, this, [this] {
    m_nodes->setEnabled(!m_cluster->currentData().toString().isEmpty() &&
                        !m_cluster->currentData(EditedClusterRole).toBool());
  });
  setChoice(SideBySideChoice{});
  setSideBySide(nullptr);
}

SideBySideChoice SideBySidePanel::choice() const {
  SideBySideChoice c;
  c.family = m_family->currentData().toString().toStdString();
  c.cluster = m_cluster->currentData().toString().toStdString();
  if (m_cluster->currentData(EditedClusterRole).toBool()) {
    c.custom_cluster = m_customCluster;
  }
  c.nodes = m_nodes->value();
  c.devices = m_devices->value();
  return c;
}

void SideBySidePanel::setChoice(const SideBySideChoice& c) {
  const int f = m_family->findData(qs(c.family));
  if (f >= 0) {
    m_family->setCurrentIndex(f);
  }
  if (!c.custom_cluster.empty()) {
    const int i = setCustomItem(c.custom_cluster, c.cluster);
    m_cluster->setCurrentIndex(i);
  } else {
    int i = 0;
    for (int k = 0; k < m_cluster->count(); ++k) {
      if (!m_cluster->itemData(k, EditedClusterRole).toBool() && m_cluster->itemData(k).toString() == qs(c.cluster)) {
        i = k;
      }
    }
    m_cluster->setCurrentIndex(i);
  }
  m_nodes->setValue(c.nodes);
  m_devices->setValue(c.devices);
  m_nodes->setEnabled(!m_cluster->currentData().toString().isEmpty() &&
                      !m_cluster->currentData(EditedClusterRole).toBool());
}

int SideBySidePanel::setCustomItem(const std::string& json, const std::string& fallbackName) {
  proto::Cluster p;
  try {
    io::parse_json(json, "edited cluster", p);
  } catch (const Error&) {
    p.set_name(fallbackName);
  }
  m_customCluster = json;
  const int i = setEditedClusterItem(m_cluster, qs(p.name()));
  return i;
}

void SideBySidePanel::offerCustomCluster(const std::string& json) {
  (void)setCustomItem(json, "edited");
}

void SideBySidePanel::setSideBySide(std::shared_ptr<const SideBySide> sideBySide) {
  m_model->setSideBySide(sideBySide);
  if (!sideBySide) {
    m_header->setText(tr("A is the set-up on the left; B changes its family, cluster or device count. Rows whose "
                         "configuration differs are highlighted."));
    return;
  }
  auto describe = [](const Analysis& x) {
    return tr("%1 on %2, %3 devices: %4 ms/iteration")
        .arg(qs(x.input.family), qs(x.cluster.name))
        .arg(x.input.devices)
        .arg(formatMs(x.prediction.iteration_time));
  };
  const auto& a = *sideBySide->a;
  const auto& b = *sideBySide->b;
  const double delta = b.prediction.iteration_time - a.prediction.iteration_time;
  m_header->setText(tr("<b>%1</b> — <b>A</b>: %2; <b>B</b>: %3. %4 of %5 layers configured differently; B − A = %6 "
                       "ms.")
                        .arg(qs(a.model_label).toHtmlEscaped(), describe(a), describe(b))
                        .arg(m_model->differingRows())
                        .arg(a.layers.size())
                        .arg((delta > 0 ? QStringLiteral("+") : QString()) + formatMs(delta)));
  m_view->resizeColumnsToContents();
  m_view->horizontalHeader()->setSectionResizeMode(SideBySideModel::Layer, QHeaderView::Stretch);
}

} // namespace partita::gui
