#include "setup/cluster_editor.h"

#include "common/format.h"

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

namespace partita::gui {

namespace {

// A numeric field of the form: its path in the proto (as the core's errors name it), its label and
// the unit it is shown in (value in the file = shown x scale). scale 0: a whole number.
struct NumberField {
  const char* path;
  const char* label;
  const char* unit;
  double scale;
};

constexpr double tera = 1e12, giga = 1e9, micro = 1e-6, gib = 1024.0 * 1024.0 * 1024.0;

const NumberField device_fields[] = {
    {"device.peak_fp32", "Peak fp32", "TFLOP/s", tera},
    {"device.peak_tf32", "Peak tf32", "TFLOP/s", tera},
    {"device.peak_fp16", "Peak fp16", "TFLOP/s", tera},
    {"device.peak_bf16", "Peak bf16", "TFLOP/s", tera},
    {"device.peak_fp8", "Peak fp8", "TFLOP/s", tera},
    {"device.memory_bandwidth", "Memory bandwidth", "GB/s", giga},
    {"device.memory_capacity", "Memory capacity", "GiB", gib},
    {"device.kernel_launch_overhead", "Kernel launch", "µs", micro},
    // 0: the roofline; calibrated: a matrix product reads its operands on top of its arithmetic.
    {"device.matmul_operand_bandwidth", "Matmul operand bandwidth", "GB/s; 0: roofline", giga},
};
const NumberField shape_fields[] = {
    {"nodes", "Nodes", "", 0},
    {"devices_per_node", "Devices per node", "", 0},
};
const NumberField intra_fields[] = {
    {"intra_node.link.bandwidth", "Bandwidth", "GB/s per direction", giga},
    {"intra_node.link.latency", "Latency", "µs", micro},
};
const NumberField inter_fields[] = {
    {"inter_node.nic.bandwidth", "NIC bandwidth", "GB/s per direction", giga},
    {"inter_node.nic.latency", "NIC latency", "µs", micro},
    {"inter_node.nics_per_node", "NICs per node", "", 0},
};

struct Kind {
  proto::LinkKind kind;
  const char* name;
};
const Kind kinds[] = {{proto::NVLINK, "NVLink"},
                      {proto::NVSWITCH, "NVSwitch"},
                      {proto::PCIE, "PCIe"},
                      {proto::SHARED_MEMORY, "shared memory"},
                      {proto::INFINIBAND, "InfiniBand"},
                      {proto::ETHERNET, "Ethernet"}};

const NumberField* find_field(const QString& path) {
  auto search = [&](const auto& fields) -> const NumberField* {
    for (const auto& f : fields) {
      if (path == QLatin1String(f.path)) {
        return &f;
      }
    }
    return nullptr;
  };
  for (const auto* f : {search(device_fields), search(shape_fields), search(intra_fields), search(inter_fields)}) {
    if (f != nullptr) {
      return f;
    }
  }
  return nullptr;
}

double get(const proto::Cluster& c, const QString& path) {
  const auto& d = c.device();
  const std::string p = path.toStdString();
  if (p == "device.peak_fp32")
    return d.peak_fp32();
  if (p == "device.peak_tf32")
    return d.peak_tf32();
  if (p == "device.peak_fp16")
    return d.peak_fp16();
  if (p == "device.peak_bf16")
    return d.peak_bf16();
  if (p == "device.peak_fp8")
    return d.peak_fp8();
  if (p == "device.memory_bandwidth")
    return d.memory_bandwidth();
  if (p == "device.memory_capacity")
    return d.memory_capacity();
  if (p == "device.kernel_launch_overhead")
    return d.kernel_launch_overhead();
  if (p == "device.matmul_operand_bandwidth")
    return d.matmul_operand_bandwidth();
  if (p == "nodes")
    return c.nodes();
  if (p == "devices_per_node")
    return c.devices_per_node();
  if (p == "intra_node.link.bandwidth")
    return c.intra_node().link().bandwidth();
  if (p == "intra_node.link.latency")
    return c.intra_node().link().latency();
  if (p == "inter_node.nic.bandwidth")
    return c.inter_node().nic().bandwidth();
  if (p == "inter_node.nic.latency")
    return c.inter_node().nic().latency();
  if (p == "inter_node.nics_per_node")
    return c.inter_node().nics_per_node();
  return 0;
}

void set(proto::Cluster& c, const QString& path, double v) {
  const std::string p = path.toStdString();
  auto* d = c.mutable_device();
  auto whole = [v] { return static_cast<int>(std::clamp(v, -2e9, 2e9)); };
  if (p == "device.peak_fp32")
    d->set_peak_fp32(v);
  else if (p == "device.peak_tf32")
    d->set_peak_tf32(v);
  else if (p == "device.peak_fp16")
    d->set_peak_fp16(v);
  else if (p == "device.peak_bf16")
    d->set_peak_bf16(v);
  else if (p == "device.peak_fp8")
    d->set_peak_fp8(v);
  else if (p == "device.memory_bandwidth")
    d->set_memory_bandwidth(v);
  else if (p == "device.memory_capacity")
    d->set_memory_capacity(v);
  else if (p == "device.kernel_launch_overhead")
    d->set_kernel_launch_overhead(v);
  else if (p == "device.matmul_operand_bandwidth")
    d->set_matmul_operand_bandwidth(v);
  else if (p == "nodes")
    c.set_nodes(whole());
  else if (p == "devices_per_node")
    c.set_devices_per_node(whole());
  else if (p == "intra_node.link.bandwidth")
    c.mutable_intra_node()->mutable_link()->set_bandwidth(v);
  else if (p == "intra_node.link.latency")
    c.mutable_intra_node()->mutable_link()->set_latency(v);
  else if (p == "inter_node.nic.bandwidth")
    c.mutable_inter_node()->mutable_nic()->set_bandwidth(v);
  else if (p == "inter_node.nic.latency")
    c.mutable_inter_node()->mutable_nic()->set_latency(v);
  else if (p == "inter_node.nics_per_node")
    c.mutable_inter_node()->set_nics_per_node(whole());
}

// Small units divide by their inverse, a whole power of ten, so that "5" µs gives exactly 5e-6.
double to_si(double shown, double scale) {
  if (scale == 0) {
    return shown;
  }
  return scale < 1 ? shown / std::round(1 / scale) : shown * scale;
}

QString shown(double value, double scale) {
  if (scale != 0) {
    value = scale < 1 ? value * std::round(1 / scale) : value / scale;
  }
  return QString::number(value, 'g', 10);
}

// Fields the form has no widget for are marked on the widget that governs them.
const char* const governing[][2] = {
    {"intra_node.pairs", "intra_node.switched"}, {"intra_node.fallback", "intra_node.switched"},
    {"intra_node", "intra_node.link.bandwidth"}, {"inter_node.nic", "inter_node.nic.bandwidth"},
    {"inter_node", "inter_node.nic.bandwidth"},  {"device", "device.name"},
};

// The node-group table's columns: what each cell sets on a group's device, at which scale.
struct GroupColumn {
  const char* header;
  double scale; // display unit in SI units; 0: text (the name) or a whole number (nodes)
};
const GroupColumn group_columns[] = {
    {"Nodes", 0},           {"Device", 0},
    {"fp32 TFLOP/s", 1e12}, {"fp16/bf16 TFLOP/s", 1e12},
    {"Memory GB/s", 1e9},   {"Memory GiB", 1024.0 * 1024 * 1024},
};

double group_value(const proto::NodeGroup& g, int column) {
  const auto& d = g.device();
  switch (column) {
  case 2: return d.peak_fp32();
  case 3: return d.peak_fp16();
  case 4: return d.memory_bandwidth();
  case 5: return d.memory_capacity();
  default: return 0;
  }
}

void set_group_value(proto::NodeGroup& g, int column, double v) {
  auto* d = g.mutable_device();
  switch (column) {
  case 2: d->set_peak_fp32(v); break;
  case 3:
    d->set_peak_fp16(v);
    d->set_peak_bf16(v);
    break;
  case 4: d->set_memory_bandwidth(v); break;
  case 5: d->set_memory_capacity(v); break;
  default: break;
  }
}

} // namespace

ClusterEditor::ClusterEditor(const proto::Cluster& start, QWidget* parent)
    : QDialog(parent), m_base(std::make_unique<proto::Cluster>(start)), m_name(new QLineEdit(this)),
      m_deviceName(new QLineEdit(this)), m_switched(new QCheckBox(tr("every pair at this bandwidth (a switch)"), this)),
      m_groups(new QTableWidget(0, static_cast<int>(std::size(group_columns)), this)),
      m_addGroup(new QPushButton(tr("Add nodes of another kind"), this)),
      m_removeGroup(new QPushButton(tr("Remove"), this)), m_keptNote(new QLabel(this)), m_message(new QLabel(this)),
      m_buttons(new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this)),
      m_save(m_buttons->addButton(tr("Save As…"), QDialogButtonBox::ActionRole)),
      m_open(m_buttons->addButton(tr("Open…"), QDialogButtonBox::ActionRole)) {
  setWindowTitle(tr("Edit cluster"));
  setObjectName(QStringLiteral("clusterEditor"));
  m_fields.insert(QStringLiteral("name"), m_name);
  m_fields.insert(QStringLiteral("device.name"), m_deviceName);
  m_fields.insert(QStringLiteral("intra_node.switched"), m_switched);
  m_fields.insert(QStringLiteral("node_groups"), m_groups);

  auto* layout = new QVBoxLayout(this);
  auto* nameForm = new QFormLayout;
  nameForm->addRow(tr("Cluster name"), m_name);
  layout->addLayout(nameForm);

  auto addGroup = [&](const QString& title) {
    auto* box = new QGroupBox(title, this);
    auto* form = new QFormLayout(box);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    return std::pair{box, form};
  };
  auto addNumbers = [&](QFormLayout* form, const auto& fields) {
    for (const auto& f : fields) {
      auto* edit = addNumber(QLatin1String(f.path), QString());
      const QString unit = QString::fromUtf8(f.unit);
      form->addRow(unit.isEmpty() ? tr(f.label) : tr(f.label) + QStringLiteral(" (") + unit + QLatin1Char(')'), edit);
    }
  };

  auto [deviceBox, deviceForm] = addGroup(tr("Device"));
  m_deviceName->setMinimumWidth(m_deviceName->fontMetrics().horizontalAdvance(QStringLiteral("A100-SXM4-80GB-xx")));
  deviceForm->addRow(tr("Name"), m_deviceName);
  addNumbers(deviceForm, device_fields);
  auto* peakNote = new QLabel(tr("A peak of 0: the type runs at the nearest wider type's peak."), deviceBox);
  peakNote->setWordWrap(true);
  peakNote->setStyleSheet(QStringLiteral("color: palette(mid);"));
  deviceForm->addRow(peakNote);

  auto [shapeBox, shapeForm] = addGroup(tr("Size"));
  addNumbers(shapeForm, shape_fields);

  auto [intraBox, intraForm] = addGroup(tr("Link inside a node"));
  intraForm->addRow(tr("Kind"), addKind(QStringLiteral("intra_node.link.kind")));
  addNumbers(intraForm, intra_fields);
  intraForm->addRow(tr("Switched"), m_switched);

  auto [interBox, interForm] = addGroup(tr("Network between nodes"));
  interForm->addRow(tr("Kind"), addKind(QStringLiteral("inter_node.nic.kind")));
  addNumbers(interForm, inter_fields);

  auto* columns = new QHBoxLayout;
  auto* left = new QVBoxLayout;
  left->addWidget(deviceBox);
  left->addStretch(1);
  auto* right = new QVBoxLayout;
  right->addWidget(shapeBox);
  right->addWidget(intraBox);
  right->addWidget(interBox);
  right->addStretch(1);
  columns->addLayout(left);
  columns->addLayout(right);
  layout->addLayout(columns);

  // Nodes of other device kinds, numbered after the nodes above; they share the links.
  auto* groupsBox = new QGroupBox(tr("Nodes of other device kinds (after the nodes above, same links)"), this);
  auto* groupsLayout = new QVBoxLayout(groupsBox);
  QStringList headers;
  for (const auto& c : group_columns) {
    headers << tr(c.header);
  }
  m_groups->setObjectName(QStringLiteral("nodeGroups"));
  m_groups->setHorizontalHeaderLabels(headers);
  m_groups->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_groups->verticalHeader()->setVisible(false);
  m_groups->setMaximumHeight(m_groups->fontMetrics().height() * 7);
  m_groups->setToolTip(tr("Other figures of a group's device (efficiency curves, the other peaks) come from the "
                          "file, or from the device above for a new group"));
  groupsLayout->addWidget(m_groups);
  auto* groupButtons = new QHBoxLayout;
  groupButtons->addWidget(m_addGroup);
  groupButtons->addWidget(m_removeGroup);
  groupButtons->addStretch(1);
  groupsLayout->addLayout(groupButtons);
  layout->addWidget(groupsBox);

  m_keptNote->setObjectName(QStringLiteral("keptNote"));
  m_keptNote->setWordWrap(true);
  m_keptNote->setStyleSheet(QStringLiteral("color: palette(mid);"));
  layout->addWidget(m_keptNote);
  m_message->setObjectName(QStringLiteral("validationMessage"));
  m_message->setWordWrap(true);
  m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_message->setMinimumHeight(m_message->fontMetrics().height() * 2 + 8);
  layout->addWidget(m_message);
  layout->addWidget(m_buttons);

  m_save->setToolTip(tr("Write the cluster as a JSON file that `partita --cluster FILE` reads"));
  m_open->setToolTip(tr("Read a cluster JSON file into the form"));
  connect(m_buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(m_buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(m_save, &QPushButton::clicked, this, [this] {
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Save cluster"), qs(cluster().name()) + QStringLiteral(".json"),
                                     tr("Cluster files (*.json);;All files (*)"));
    if (!path.isEmpty()) {
      saveTo(path);
    }
  });
  connect(m_open, &QPushButton::clicked, this, [this] {
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Open cluster"), QString(), tr("Cluster files (*.json);;All files (*)"));
    if (!path.isEmpty()) {
      openFrom(path);
    }
  });
  connect(m_name, &QLineEdit::textChanged, this, &ClusterEditor::revalidate);
  connect(m_deviceName, &QLineEdit::textChanged, this, &ClusterEditor::revalidate);
  connect(m_switched, &QCheckBox::toggled, this, &ClusterEditor::revalidate);
  connect(m_groups, &QTableWidget::cellChanged, this, &ClusterEditor::revalidate);
  connect(m_addGroup, &QPushButton::clicked, this, [this] {
    // A new group starts as one node of the device above, its name marked to be changed.
    proto::NodeGroup g;
    g.set_nodes(1);
    *g.mutable_device() = cluster().device();
    g.mutable_device()->set_name(g.device().name() + " (other)");
    const int row = m_groups->rowCount();
    m_groupBase.push_back(g);
    m_filling = true;
    m_groups->insertRow(row);
    fillGroupRow(row, g);
    m_filling = false;
    revalidate();
  });
  connect(m_removeGroup, &QPushButton::clicked, this, [this] {
    const int row = m_groups->currentRow() >= 0 ? m_groups->currentRow() : m_groups->rowCount() - 1;
    if (row >= 0) {
      m_groupBase.erase(m_groupBase.begin() + row);
      m_groups->removeRow(row);
      revalidate();
    }
  });

  setCluster(start);
}

ClusterEditor::~ClusterEditor() = default;

QLineEdit* ClusterEditor::addNumber(const QString& path, const QString& tip) {
  auto* edit = new QLineEdit(this);
  edit->setObjectName(path);
  edit->setMinimumWidth(edit->fontMetrics().horizontalAdvance(QStringLiteral("0000000000")));
  edit->setToolTip(tip.isEmpty() ? path : tip);
  m_fields.insert(path, edit);
  connect(edit, &QLineEdit::textChanged, this, &ClusterEditor::revalidate);
  return edit;
}

QComboBox* ClusterEditor::addKind(const QString& path) {
  auto* combo = new QComboBox(this);
  combo->setObjectName(path);
  for (const auto& k : kinds) {
    combo->addItem(QString::fromUtf8(k.name), static_cast<int>(k.kind));
  }
  m_fields.insert(path, combo);
  connect(combo, &QComboBox::currentIndexChanged, this, &ClusterEditor::revalidate);
  return combo;
}

QPushButton* ClusterEditor::okButton() const {
  return m_buttons->button(QDialogButtonBox::Ok);
}

void ClusterEditor::fillGroupRow(int row, const proto::NodeGroup& g) {
  for (int col = 0; col < m_groups->columnCount(); ++col) {
    const QString text = col == 0   ? QString::number(g.nodes())
                         : col == 1 ? qs(g.device().name())
                                    : shown(group_value(g, col), group_columns[col].scale);
    m_groups->setItem(row, col, new QTableWidgetItem(text));
  }
}

void ClusterEditor::setCluster(const proto::Cluster& c) {
  *m_base = c;
  m_filling = true;
  m_groupBase.assign(c.node_groups().begin(), c.node_groups().end());
  m_groups->setRowCount(0);
  for (int i = 0; i < c.node_groups_size(); ++i) {
    m_groups->insertRow(i);
    fillGroupRow(i, c.node_groups(i));
  }
  m_name->setText(qs(c.name()));
  m_deviceName->setText(qs(c.device().name()));
  for (auto it = m_fields.cbegin(); it != m_fields.cend(); ++it) {
    if (const auto* f = find_field(it.key())) {
      auto* edit = static_cast<QLineEdit*>(it.value());
      const bool absent = (it.key().startsWith(QLatin1String("intra_node.")) && !c.has_intra_node()) ||
                          (it.key().startsWith(QLatin1String("inter_node.")) && !c.has_inter_node());
      // An absent network starts with one NIC per node, so that only its figures need typing.
      const bool nics = it.key() == QLatin1String("inter_node.nics_per_node");
      edit->setText(absent ? (nics ? QStringLiteral("1") : QString()) : shown(get(c, it.key()), f->scale));
    }
  }
  auto setKind = [&](const QString& path, proto::LinkKind kind) {
    auto* combo = static_cast<QComboBox*>(m_fields.value(path));
    const int i = combo->findData(static_cast<int>(kind));
    combo->setCurrentIndex(std::max(0, i));
  };
  setKind(QStringLiteral("intra_node.link.kind"), c.has_intra_node() ? c.intra_node().link().kind() : proto::NVLINK);
  setKind(QStringLiteral("inter_node.nic.kind"), c.has_inter_node() ? c.inter_node().nic().kind() : proto::INFINIBAND);
  m_switched->setChecked(!c.has_intra_node() || c.intra_node().switched());

  QStringList kept;
  if (c.intra_node().pairs_size() > 0) {
    kept << tr("%1 direct device pairs").arg(c.intra_node().pairs_size());
  }
  if (c.intra_node().has_fallback()) {
    kept << tr("a fallback link for the other pairs (%1 GB/s)").arg(c.intra_node().fallback().bandwidth() / giga);
  }
  int curves = c.device().compute_efficiency_size() + c.device().memory_efficiency_size();
  for (const auto& family : c.device().kernel_classes()) {
    curves += family.memory_efficiency_size();
  }
  for (const auto& family : c.device().compute_classes()) {
    curves += family.compute_efficiency_size();
  }
  if (curves > 0) {
    kept << tr("the efficiency curves (%1 points)").arg(curves);
  }
  // The fields show a link's base figures, its smallest messages'; say what its larger messages
  // and its collectives of their own reach, so that a small-message figure is not read as the rate.
  const auto measured = [&](const proto::Link& link, const QString& where) {
    int regimes = link.protocols_size();
    double fastest = link.bandwidth();
    for (const auto& p : link.protocols()) {
      fastest = std::max(fastest, p.bandwidth());
    }
    for (const auto& f : link.collectives()) {
      regimes += 1 + f.protocols_size();
      fastest = std::max(fastest, f.bandwidth());
      for (const auto& p : f.protocols()) {
        fastest = std::max(fastest, p.bandwidth());
      }
    }
    if (regimes > 0) {
      kept << tr("the %1's measured figures (%n regime(s) by collective and message size, up to %2 GB/s; the "
                 "fields show its smallest messages'; kept until its bandwidth or latency is changed)",
                 nullptr, regimes)
                  .arg(where, QString::number(fastest / giga, 'g', 4));
    }
  };
  if (c.node_groups_size() > 0) {
    kept << tr("the other figures of the %n other device kind(s) (curves, the other peaks)", nullptr,
               c.node_groups_size());
  }
  measured(c.intra_node().link(), tr("node link"));
  measured(c.inter_node().nic(), tr("NIC"));
  m_keptNote->setText(kept.isEmpty() ? QString() : tr("Kept as they are: %1.").arg(kept.join(QStringLiteral(", "))));
  m_filling = false;
  revalidate();
}

proto::Cluster ClusterEditor::cluster() const {
  proto::Cluster c = *m_base;
  c.set_name(m_name->text().trimmed().toStdString());
  c.mutable_device()->set_name(m_deviceName->text().trimmed().toStdString());
  auto text = [this](const char* path) { return static_cast<QLineEdit*>(m_fields.value(QLatin1String(path)))->text(); };
  // A part of the network that the cluster does not need may stay empty (one node, one device
  // per node); the core then checks it is not needed.
  const bool intra = !text("intra_node.link.bandwidth").trimmed().isEmpty() || c.has_intra_node() ||
                     text("devices_per_node").trimmed() != QLatin1String("1");
  const bool inter = !text("inter_node.nic.bandwidth").trimmed().isEmpty() || c.has_inter_node() ||
                     text("nodes").trimmed() != QLatin1String("1");
  if (!intra) {
    c.clear_intra_node();
  }
  if (!inter) {
    c.clear_inter_node();
  }
  for (auto it = m_fields.cbegin(); it != m_fields.cend(); ++it) {
    const auto* f = find_field(it.key());
    if (f == nullptr || (!intra && it.key().startsWith(QLatin1String("intra_node."))) ||
        (!inter && it.key().startsWith(QLatin1String("inter_node.")))) {
      continue;
    }
    const QString t = static_cast<QLineEdit*>(it.value())->text().trimmed();
    if (!t.isEmpty() && t == shown(get(*m_base, it.key()), f->scale)) {
      continue; // as loaded: the exact value, not its decimal text read back
    }
    bool ok = true;
    double v = t.isEmpty() ? 0.0 : QLocale::c().toDouble(t, &ok);
    if (!ok) {
      v = std::numeric_limits<double>::quiet_NaN();
    }
    set(c, it.key(), to_si(v, f->scale));
  }
  // A link's measured figures (protocols by message size, collectives' own figures: calibrated or
  // published) describe the link as loaded; once its bandwidth or latency is typed anew, they no
  // longer do, and what was typed counts for every collective.
  const auto typedAnew = [&](const char* path) {
    const auto* f = find_field(QLatin1String(path));
    return text(path).trimmed() != shown(get(*m_base, QLatin1String(path)), f->scale);
  };
  if (intra && (typedAnew("intra_node.link.bandwidth") || typedAnew("intra_node.link.latency"))) {
    c.mutable_intra_node()->mutable_link()->clear_protocols();
    c.mutable_intra_node()->mutable_link()->clear_collectives();
  }
  if (inter && (typedAnew("inter_node.nic.bandwidth") || typedAnew("inter_node.nic.latency"))) {
    c.mutable_inter_node()->mutable_nic()->clear_protocols();
    c.mutable_inter_node()->mutable_nic()->clear_collectives();
  }
  c.clear_node_groups();
  for (int row = 0; row < m_groups->rowCount() && row < static_cast<int>(m_groupBase.size()); ++row) {
    proto::NodeGroup g = m_groupBase[static_cast<std::size_t>(row)];
    const auto cell = [&](int col) {
      const auto* item = m_groups->item(row, col);
      return item != nullptr ? item->text().trimmed() : QString();
    };
    if (cell(0) != QString::number(g.nodes())) {
      bool ok = false;
      const int n = cell(0).toInt(&ok);
      g.set_nodes(ok ? n : -1); // the core names a count that is not one
    }
    g.mutable_device()->set_name(cell(1).toStdString());
    for (int col = 2; col < m_groups->columnCount(); ++col) {
      const double scale = group_columns[col].scale;
      if (cell(col) == shown(group_value(g, col), scale)) {
        continue; // as loaded: the exact value
      }
      bool ok = false;
      const double v = QLocale::c().toDouble(cell(col), &ok);
      set_group_value(g, col, ok ? v * scale : std::numeric_limits<double>::quiet_NaN());
    }
    *c.add_node_groups() = std::move(g);
  }
  if (intra) {
    auto* combo = static_cast<QComboBox*>(m_fields.value(QStringLiteral("intra_node.link.kind")));
    c.mutable_intra_node()->mutable_link()->set_kind(static_cast<proto::LinkKind>(combo->currentData().toInt()));
    c.mutable_intra_node()->set_switched(m_switched->isChecked());
  }
  if (inter) {
    auto* combo = static_cast<QComboBox*>(m_fields.value(QStringLiteral("inter_node.nic.kind")));
    c.mutable_inter_node()->mutable_nic()->set_kind(static_cast<proto::LinkKind>(combo->currentData().toInt()));
  }
  return c;
}

void ClusterEditor::revalidate() {
  if (m_filling) {
    return;
  }
  m_error.clear();
  m_invalidField.clear();
  QString field;
  // Text that is not a number is the form's to reject; every other rule is the core's.
  for (auto it = m_fields.cbegin(); it != m_fields.cend() && field.isEmpty(); ++it) {
    const auto* f = find_field(it.key());
    if (f == nullptr) {
      continue;
    }
    const QString t = static_cast<QLineEdit*>(it.value())->text().trimmed();
    bool ok = true;
    if (f->scale == 0) {
      (void)t.toInt(&ok);
    } else {
      (void)QLocale::c().toDouble(t, &ok);
    }
    if (!t.isEmpty() && !ok) {
      field = it.key();
      m_error = tr("field '%1': '%2' is not a %3").arg(field, t, f->scale == 0 ? tr("whole number") : tr("number"));
    }
  }
  const auto c = cluster();
  if (field.isEmpty()) {
    if (const auto e = cluster::validate(c)) {
      field = qs(e->field);
      m_error = QStringLiteral("field '") + field + QStringLiteral("': ") + qs(e->reason);
    }
  }
  mark(field);
  const bool ok = m_error.isEmpty();
  if (ok) {
    m_message->setStyleSheet(QStringLiteral("color: #207020;"));
    m_message->setText(tr("Valid: %1 node(s) × %2 %3 = %4 devices.")
                           .arg(c.nodes())
                           .arg(c.devices_per_node())
                           .arg(qs(c.device().name()).toHtmlEscaped())
                           .arg(static_cast<long long>(c.nodes()) * c.devices_per_node()));
  } else {
    m_message->setStyleSheet(QStringLiteral("color: #c02020; font-weight: bold;"));
    m_message->setText(m_error);
  }
  okButton()->setEnabled(ok);
  m_save->setEnabled(ok);
  Q_EMIT validated(ok);
}

void ClusterEditor::mark(const QString& path) {
  for (auto* w : std::as_const(m_fields)) {
    w->setProperty("invalid", false);
    w->setStyleSheet(QString());
  }
  if (path.isEmpty()) {
    return;
  }
  QString key = path;
  while (!key.isEmpty() && !m_fields.contains(key)) {
    QString governed;
    for (const auto& [from, to] : governing) {
      if (key == QLatin1String(from)) {
        governed = QLatin1String(to);
      }
    }
    if (!governed.isEmpty()) {
      key = governed;
      break;
    }
    const auto cut = std::max(key.lastIndexOf(QLatin1Char('.')), key.lastIndexOf(QLatin1Char('[')));
    key = cut > 0 ? key.left(cut) : QString();
  }
  if (auto* w = m_fields.value(key)) {
    m_invalidField = key;
    w->setProperty("invalid", true);
    w->setStyleSheet(qobject_cast<QCheckBox*>(w) != nullptr ? QStringLiteral("color: #c02020;")
                                                            : QStringLiteral("border: 2px solid #c02020;"));
  }
}

bool ClusterEditor::saveTo(const QString& path) {
  if (!isValid()) {
    return false;
  }
  try {
    io::write_json_file(std::filesystem::path(path.toStdU16String()), cluster());
  } catch (const std::exception& e) {
    m_message->setStyleSheet(QStringLiteral("color: #c02020; font-weight: bold;"));
    m_message->setText(QString::fromUtf8(e.what()));
    return false;
  }
  m_message->setText(tr("Saved to %1; the command line reads it with --cluster %1").arg(path));
  return true;
}

bool ClusterEditor::openFrom(const QString& path) {
  proto::Cluster c;
  try {
    io::read_json_file(std::filesystem::path(path.toStdU16String()), c);
  } catch (const std::exception& e) {
    m_message->setStyleSheet(QStringLiteral("color: #c02020; font-weight: bold;"));
    m_message->setText(QString::fromUtf8(e.what()));
    return false;
  }
  setCluster(c);
  return true;
}

} // namespace partita::gui
