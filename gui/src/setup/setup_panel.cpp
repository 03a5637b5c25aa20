#include "setup/setup_panel.h"

#include "common/format.h"
#include "setup/cluster_combo.h"
#include "setup/cluster_editor.h"

#include "partita/cluster/cluster.h"
#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "partita/search/optimizer.h"
#include "partita/zoo/zoo.h"

#include <QAbstractItemView>
#include <QCheckBox>
#include <QComboBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QVBoxLayout>

#include <algorithm>
#include <initializer_list>

namespace partita::gui {

namespace {
constexpr int ZooRole = Qt::UserRole + 10; // bool: a zoo model (else an ONNX file path in UserRole)
constexpr int max_log2_devices = 10;       // the devices slider: 1 .. 1024
constexpr int max_log2_batch = 12;         // the batch slider: 1 .. 4096

const QRegularExpression& batchParameter() {
  static const QRegularExpression re(QStringLiteral("(^|&)\\s*batch\\s*=\\s*([0-9]+)\\s*(?=&|$)"));
  return re;
}

int floorLog2(int v) {
  int k = 0;
  while (v > 1) {
    v >>= 1;
    ++k;
  }
  return k;
}
} // namespace

SetupPanel::SetupPanel(QWidget* parent)
    : QWidget(parent), m_model(new QComboBox(this)), m_parameters(new QLineEdit(this)), m_values(new QLineEdit(this)),
      m_modelHelp(new QLabel(this)), m_cluster(new QComboBox(this)),
      m_editCluster(new QPushButton(tr("Edit cluster…"), this)), m_nodes(new QSpinBox(this)),
      m_devices(new QSpinBox(this)), m_devicesSlider(new QSlider(Qt::Horizontal, this)),
      m_batchSlider(new QSlider(Qt::Horizontal, this)), m_batchLabel(new QLabel(this)), m_clusterHelp(new QLabel(this)),
      m_family(new QComboBox(this)), m_precision(new QComboBox(this)), m_optimizer(new QComboBox(this)),
      m_zero(new QSpinBox(this)), m_recompute(new QComboBox(this)),
      m_sequenceParallel(new QCheckBox(tr("Sequence parallel"), this)),
      m_fp32Gradients(new QCheckBox(tr("FP32 gradients"), this)), m_tensorParallel(new QSpinBox(this)),
      m_stages(new QSpinBox(this)), m_microBatches(new QSpinBox(this)), m_schedule(new QComboBox(this)),
      m_chunks(new QSpinBox(this)), m_balance(new QComboBox(this)), m_stageLayout(new QComboBox(this)),
      m_evaluate(new QPushButton(tr("&Evaluate"), this)) {
  auto* layout = new QVBoxLayout(this);

  auto* modelBox = new QGroupBox(tr("Model"), this);
  auto* modelForm = new QFormLayout(modelBox);
  for (const auto& m : zoo::models()) {
    m_model->addItem(qs(m.name), QString(QStringLiteral("zoo:") + qs(m.name)));
    const int i = m_model->count() - 1;
    m_model->setItemData(i, true, ZooRole);
    m_model->setItemData(i, qs(m.description), Qt::ToolTipRole);
  }
  m_model->setObjectName(QStringLiteral("modelCombo"));
  auto* open = new QPushButton(tr("Open ONNX…"), this);
  open->setToolTip(tr("Open an ONNX file (or drop one on the window)"));
  modelForm->addRow(tr("Model"), m_model);
  modelForm->addRow(QString(), open);
  m_parameters->setObjectName(QStringLiteral("parametersEdit"));
  m_parameters->setClearButtonEnabled(true);
  modelForm->addRow(tr("Parameters"), m_parameters);
  m_values->setObjectName(QStringLiteral("valuesEdit"));
  m_values->setClearButtonEnabled(true);
  m_values->setPlaceholderText(tr("sr=16000 use_cache_branch=false"));
  modelForm->addRow(tr("Input values"), m_values);
  m_batchSlider->setObjectName(QStringLiteral("batchSlider"));
  m_batchSlider->setRange(0, max_log2_batch);
  m_batchSlider->setPageStep(1);
  m_batchSlider->setTickPosition(QSlider::TicksBelow);
  m_batchSlider->setToolTip(tr("The batch, in powers of two: moving it sets batch= in the parameters and re-plans"));
  auto* batchRow = new QHBoxLayout;
  batchRow->addWidget(m_batchSlider, 1);
  batchRow->addWidget(m_batchLabel);
  modelForm->addRow(tr("Batch"), batchRow);
  m_modelHelp->setWordWrap(true);
  m_modelHelp->setStyleSheet(QStringLiteral("color: palette(mid);"));
  modelForm->addRow(m_modelHelp);
  layout->addWidget(modelBox);

  auto* clusterBox = new QGroupBox(tr("Cluster"), this);
  auto* clusterForm = new QFormLayout(clusterBox);
  for (const auto& name : cluster::preset_names()) {
    m_cluster->addItem(qs(name), qs(name));
  }
  m_nodes->setRange(1, 4096);
  m_devices->setRange(1, 1 << 16);
  m_clusterHelp->setWordWrap(true);
  m_editCluster->setObjectName(QStringLiteral("editClusterButton"));
  m_editCluster->setToolTip(tr("Edit the device, the node count and the links, starting from the selected cluster"));
  clusterForm->addRow(tr("Preset"), m_cluster);
  clusterForm->addRow(QString(), m_editCluster);
  clusterForm->addRow(tr("Nodes"), m_nodes);
  clusterForm->addRow(tr("Devices"), m_devices);
  m_devicesSlider->setObjectName(QStringLiteral("devicesSlider"));
  m_devicesSlider->setRange(0, max_log2_devices);
  m_devicesSlider->setPageStep(1);
  m_devicesSlider->setTickPosition(QSlider::TicksBelow);
  m_devicesSlider->setToolTip(
      tr("Devices in powers of two, 1 to %1: moving it re-plans (presets grow by nodes)").arg(1 << max_log2_devices));
  clusterForm->addRow(QString(), m_devicesSlider);
  clusterForm->addRow(m_clusterHelp);
  layout->addWidget(clusterBox);

  auto* strategyBox = new QGroupBox(tr("Strategy and training"), this);
  auto* strategyForm = new QFormLayout(strategyBox);
  for (const auto* f : offered_families()) {
    m_family->addItem(qs(f->name()) + QStringLiteral(" — ") + qs(f->title()), qs(f->name()));
    m_family->setItemData(m_family->count() - 1, qs(f->description()), Qt::ToolTipRole);
  }
  for (auto p :
       {cluster::Precision::fp32, cluster::Precision::tf32, cluster::Precision::fp16, cluster::Precision::bf16}) {
    m_precision->addItem(qs(cluster::precision_name(p)), qs(cluster::precision_name(p)));
  }
  for (auto o : {cost::Optimizer::adam, cost::Optimizer::momentum, cost::Optimizer::sgd}) {
    m_optimizer->addItem(qs(cost::optimizer_name(o)), qs(cost::optimizer_name(o)));
  }
  m_zero->setRange(0, 3);
  m_zero->setToolTip(tr("ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also parameters"));
  for (auto r : {cost::Recompute::none, cost::Recompute::selective, cost::Recompute::full}) {
    m_recompute->addItem(qs(cost::recompute_name(r)), qs(cost::recompute_name(r)));
  }
  strategyForm->addRow(tr("Family"), m_family);
  strategyForm->addRow(tr("Precision"), m_precision);
  strategyForm->addRow(tr("Optimizer"), m_optimizer);
  strategyForm->addRow(tr("ZeRO stage"), m_zero);
  strategyForm->addRow(tr("Recompute"), m_recompute);
  m_sequenceParallel->setObjectName(QStringLiteral("sequenceParallelCheck"));
  m_sequenceParallel->setToolTip(
      tr("Megatron-LM's sequence parallelism: megatron splits LayerNorm, dropout and the residual adds along the "
         "sequence inside the tensor-parallel group; a partial sum whose one reader keeps a slice on each device is "
         "reduce-scattered"));
  m_fp32Gradients->setObjectName(QStringLiteral("fp32GradientsCheck"));
  m_fp32Gradients->setToolTip(
      tr("Mixed precision: weight gradients kept and reduced in fp32, as Megatron-LM does under bf16"));
  strategyForm->addRow(QString(), m_sequenceParallel);
  strategyForm->addRow(QString(), m_fp32Gradients);
  layout->addWidget(strategyBox);

  // The families' parallelism options, as the CLI's (0: the family's default).
  auto* parallelBox = new QGroupBox(tr("Tensor and pipeline parallelism"), this);
  auto* parallelForm = new QFormLayout(parallelBox);
  const QString automatic = tr("family's default");
  m_tensorParallel->setObjectName(QStringLiteral("tensorParallelSpin"));
  m_tensorParallel->setRange(0, 1 << 16);
  m_tensorParallel->setSpecialValueText(automatic);
  m_tensorParallel->setToolTip(tr("Tensor-parallel width (--tp): megatron's group, and inside the stages of "
                                  "pipeline and bapipe"));
  m_stages->setObjectName(QStringLiteral("stagesSpin"));
  m_stages->setRange(0, 1 << 16);
  m_stages->setSpecialValueText(automatic);
  m_stages->setToolTip(tr("Pipeline stages (--stages; megatron's --pp): pipeline, bapipe and megatron"));
  m_microBatches->setObjectName(QStringLiteral("microBatchesSpin"));
  m_microBatches->setRange(0, 1 << 30);
  m_microBatches->setSpecialValueText(automatic);
  m_microBatches->setToolTip(tr("Micro-batches per iteration (--micro-batches); a count the batch cannot give is "
                                "refused with the reason"));
  m_schedule->setObjectName(QStringLiteral("scheduleCombo"));
  m_schedule->addItem(tr("1F1B"), QStringLiteral("1f1b"));
  m_schedule->addItem(tr("GPipe"), QStringLiteral("gpipe"));
  m_schedule->addItem(tr("Interleaved 1F1B"), QStringLiteral("interleaved"));
  m_schedule->setToolTip(tr("Pipeline schedule (--schedule); interleaved gives every stage Chunks model chunks "
                            "(Megatron-LM's virtual pipeline)"));
  m_chunks->setObjectName(QStringLiteral("chunksSpin"));
  m_chunks->setRange(2, 1024);
  m_chunks->setToolTip(tr("Interleaved schedule: model chunks per stage (--chunks)"));
  parallelForm->addRow(tr("Tensor parallel"), m_tensorParallel);
  parallelForm->addRow(tr("Stages"), m_stages);
  parallelForm->addRow(tr("Micro-batches"), m_microBatches);
  parallelForm->addRow(tr("Schedule"), m_schedule);
  parallelForm->addRow(tr("Chunks"), m_chunks);
  m_balance->setObjectName(QStringLiteral("balanceCombo"));
  m_balance->addItem(tr("By time"), QStringLiteral("time"));
  m_balance->addItem(tr("Layers evenly (Megatron-LM)"), QStringLiteral("layers"));
  m_balance->addItem(tr("Layers by stage speed"), QStringLiteral("speed"));
  m_balance->addItem(tr("Ops evenly"), QStringLiteral("even"));
  m_balance->setToolTip(tr("How the pipeline family cuts its stages (--balance): by forward+backward time on each "
                           "stage's devices and what it receives from the stage before, the repeated blocks evenly as "
                           "Megatron-LM does, the repeated blocks by "
                           "each stage's speed on a cluster of mixed nodes (megatron too), or by op count"));
  parallelForm->addRow(tr("Cut"), m_balance);
  m_stageLayout->setObjectName(QStringLiteral("stageLayoutCombo"));
  m_stageLayout->addItem(tr("Data parallel (or --tp)"), QString());
  m_stageLayout->addItem(tr("Per-layer search"), QStringLiteral("searched"));
  m_stageLayout->addItem(tr("Fastest simulated"), QStringLiteral("auto"));
  m_stageLayout->setToolTip(tr("How the pipeline family lays out each stage's ops (--stage-layout): data parallel "
                               "(Megatron's layout with a tensor-parallel width), as the per-layer search splits "
                               "them on one stage's devices, or whichever of that layout and Megatron's stage "
                               "layouts the simulated pipeline runs fastest"));
  parallelForm->addRow(tr("Stage layout"), m_stageLayout);
  layout->addWidget(parallelBox);

  m_evaluate->setDefault(true);
  m_evaluate->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
  m_evaluate->setToolTip(tr("Run the strategy family and evaluate its strategy (Ctrl+Enter)"));
  layout->addWidget(m_evaluate);
  layout->addStretch(1);

  connect(open, &QPushButton::clicked, this, &SetupPanel::openFileRequested);
  connect(m_evaluate, &QPushButton::clicked, this, &SetupPanel::evaluateRequested);
  connect(m_parameters, &QLineEdit::returnPressed, this, &SetupPanel::evaluateRequested);
  connect(m_values, &QLineEdit::returnPressed, this, &SetupPanel::evaluateRequested);
  connect(m_model, &QComboBox::currentIndexChanged, this, &SetupPanel::onModelChanged);
  connect(m_cluster, &QComboBox::currentIndexChanged, this, &SetupPanel::onClusterChanged);
  connect(m_family, &QComboBox::currentIndexChanged, this, &SetupPanel::onFamilyChanged);
  connect(m_schedule, &QComboBox::currentIndexChanged, this,
          [this] { m_chunks->setEnabled(m_schedule->currentData().toString() == QStringLiteral("interleaved")); });
  connect(m_editCluster, &QPushButton::clicked, this, &SetupPanel::editCluster);
  connect(m_nodes, &QSpinBox::valueChanged, this, &SetupPanel::updateDeviceLimit);
  connect(m_devices, &QSpinBox::valueChanged, this, &SetupPanel::updateDeviceLimit);
  connect(m_devices, &QSpinBox::valueChanged, this, &SetupPanel::syncSliders);
  connect(m_parameters, &QLineEdit::textChanged, this, &SetupPanel::syncSliders);
  connect(m_devicesSlider, &QSlider::valueChanged, this, &SetupPanel::onDevicesSlider);
  connect(m_batchSlider, &QSlider::valueChanged, this, &SetupPanel::onBatchSlider);

  // Every field reports a change, and Enter in any of them evaluates.
  for (auto* combo :
       {m_model, m_cluster, m_family, m_precision, m_optimizer, m_recompute, m_schedule, m_balance, m_stageLayout}) {
    connect(combo, &QComboBox::currentIndexChanged, this, &SetupPanel::inputChanged);
    combo->installEventFilter(this);
  }
  for (auto* spin : {m_nodes, m_devices, m_zero, m_tensorParallel, m_stages, m_microBatches, m_chunks}) {
    connect(spin, &QSpinBox::valueChanged, this, &SetupPanel::inputChanged);
    spin->installEventFilter(this);
  }
  for (auto* check : {m_sequenceParallel, m_fp32Gradients}) {
    connect(check, &QCheckBox::toggled, this, &SetupPanel::inputChanged);
  }
  connect(m_parameters, &QLineEdit::textChanged, this, &SetupPanel::inputChanged);
  connect(m_values, &QLineEdit::textChanged, this, &SetupPanel::inputChanged);
  connect(this, &SetupPanel::customClusterChanged, this, &SetupPanel::inputChanged);

  onModelChanged();
  setInput(AnalysisInput{});
  onFamilyChanged();
  m_chunks->setEnabled(m_schedule->currentData().toString() == QStringLiteral("interleaved"));
}

void SetupPanel::onFamilyChanged() {
  const bool searched = m_family->currentData().toString() == QStringLiteral("3d");
  const QString note = tr("The 3d family searches this (the chosen value is in its explanation)");
  for (QWidget* field : std::initializer_list<QWidget*>{m_zero, m_recompute, m_sequenceParallel}) {
    if (!field->property("ownToolTip").isValid()) {
      field->setProperty("ownToolTip", field->toolTip());
    }
    const QString own = field->property("ownToolTip").toString();
    field->setEnabled(!searched);
    field->setToolTip(searched ? own + QStringLiteral("\n") + note : own);
  }
}

bool SetupPanel::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::KeyPress) {
    const int key = static_cast<QKeyEvent*>(event)->key();
    auto* combo = qobject_cast<QComboBox*>(watched);
    // An open combo box's popup takes Enter for itself (it gets the events, not the box).
    if ((key == Qt::Key_Return || key == Qt::Key_Enter) && (combo == nullptr || !combo->view()->isVisible())) {
      Q_EMIT evaluateRequested();
      return true;
    }
  }
  return QWidget::eventFilter(watched, event);
}

AnalysisInput SetupPanel::input() const {
  AnalysisInput in;
  const QString params = m_parameters->text().trimmed();
  if (m_model->currentData(ZooRole).toBool()) {
    in.model = m_model->currentData().toString().toStdString();
    if (!params.isEmpty()) {
      in.model += '?' + params.toStdString();
    }
  } else {
    in.model = m_model->currentData().toString().toStdString();
    in.dims = params.toStdString();
    in.values = m_values->text().trimmed().toStdString();
  }
  in.cluster = m_cluster->currentData().toString().toStdString();
  if (m_cluster->currentData(EditedClusterRole).toBool()) {
    in.custom_cluster = m_customCluster;
  }
  in.nodes = m_nodes->value();
  in.devices = m_devices->value();
  in.family = m_family->currentData().toString().toStdString();
  in.precision = m_precision->currentData().toString().toStdString();
  in.optimizer = m_optimizer->currentData().toString().toStdString();
  in.zero_stage = m_zero->value();
  in.recompute = m_recompute->currentData().toString().toStdString();
  in.sequence_parallel = m_sequenceParallel->isChecked();
  in.fp32_gradients = m_fp32Gradients->isChecked();
  in.tensor_parallel = m_tensorParallel->value();
  in.stages = m_stages->value();
  in.micro_batches = m_microBatches->value();
  in.schedule = m_schedule->currentData().toString().toStdString();
  in.chunks = m_chunks->value();
  in.balance = m_balance->currentData().toString().toStdString();
  in.stage_layout = m_stageLayout->currentData().toString().toStdString();
  return in;
}

void SetupPanel::setInput(const AnalysisInput& in) {
  auto select = [](QComboBox* combo, const std::string& value) {
    const int i = combo->findData(qs(value));
    if (i >= 0) {
      combo->setCurrentIndex(i);
    }
  };
  {
    // The cluster, nodes and devices are checked together once all three are set: one at a time,
    // a preset would grow by nodes for the devices of the previous input.
    const QSignalBlocker cluster(m_cluster), nodes(m_nodes), devices(m_devices);
    setClusterFields(in);
  }
  onClusterChanged();
  const QString model = qs(in.model);
  if (model.startsWith(QStringLiteral("zoo:"))) {
    const auto q = model.indexOf(QLatin1Char('?'));
    select(m_model, model.left(q).toStdString());
    m_parameters->setText(q < 0 ? QString() : model.mid(q + 1));
  } else {
    selectModelFile(model);
    m_parameters->setText(qs(in.dims));
    m_values->setText(qs(in.values));
  }
  select(m_family, in.family);
  select(m_precision, in.precision);
  select(m_optimizer, in.optimizer);
  m_zero->setValue(in.zero_stage);
  select(m_recompute, in.recompute);
  m_sequenceParallel->setChecked(in.sequence_parallel);
  m_fp32Gradients->setChecked(in.fp32_gradients);
  m_tensorParallel->setValue(in.tensor_parallel);
  m_stages->setValue(in.stages);
  m_microBatches->setValue(in.micro_batches);
  select(m_schedule, in.schedule);
  m_chunks->setValue(in.chunks);
  select(m_balance, in.balance);
  m_stageLayout->setCurrentIndex(
      in.stage_layout.empty() ? 0 : std::max(0, m_stageLayout->findData(QString::fromStdString(in.stage_layout))));
}

void SetupPanel::setClusterFields(const AnalysisInput& in) {
  if (!in.custom_cluster.empty()) {
    setCustomCluster(in.custom_cluster);
  } else {
    const int i = m_cluster->findData(qs(in.cluster));
    if (i >= 0 && !m_cluster->itemData(i, EditedClusterRole).toBool()) {
      m_cluster->setCurrentIndex(i);
    }
  }
  m_nodes->setValue(in.nodes);
  m_devices->setValue(in.devices);
}

void SetupPanel::selectModelFile(const QString& path) {
  int i = m_model->findData(path);
  if (i < 0) {
    m_model->addItem(QFileInfo(path).fileName(), path);
    i = m_model->count() - 1;
    m_model->setItemData(i, false, ZooRole);
    m_model->setItemData(i, path, Qt::ToolTipRole);
  }
  m_model->setCurrentIndex(i);
}

void SetupPanel::setCustomCluster(const std::string& json) {
  proto::Cluster p;
  try {
    io::parse_json(json, "edited cluster", p);
  } catch (const Error& e) {
    m_clusterHelp->setText(QString::fromUtf8(e.what()));
    m_clusterHelp->setStyleSheet(QStringLiteral("color: #c02020;"));
    return;
  }
  m_customCluster = json;
  const QString name = qs(p.name());
  const int i = setEditedClusterItem(m_cluster, name);
  m_cluster->setItemData(i, tr("An edited cluster; Edit cluster… changes it, Save As… in the editor writes it"),
                         Qt::ToolTipRole);
  if (m_cluster->currentIndex() == i) {
    onClusterChanged(); // same item, new contents
  } else {
    m_cluster->setCurrentIndex(i);
  }
  Q_EMIT customClusterChanged(m_customCluster);
}

void SetupPanel::editCluster() {
  proto::Cluster start;
  try {
    start = input_cluster_proto(input());
  } catch (const Error& e) {
    m_clusterHelp->setText(QString::fromUtf8(e.what()));
    m_clusterHelp->setStyleSheet(QStringLiteral("color: #c02020;"));
    return;
  }
  ClusterEditor editor(start, this);
  if (editor.exec() == QDialog::Accepted) {
    setCustomCluster(io::to_json(editor.cluster()));
  }
}

void SetupPanel::onClusterChanged() {
  // An edited cluster has its own node count, changed in the editor only.
  const bool edited = m_cluster->currentData(EditedClusterRole).toBool();
  m_nodes->setEnabled(!edited);
  m_nodes->setToolTip(edited ? tr("The edited cluster's node count: change it with Edit cluster…")
                             : tr("Nodes of the preset; it grows to hold the devices asked for"));
  updateDeviceLimit();
}

void SetupPanel::onModelChanged() {
  m_parameters->clear();
  m_values->clear();
  const bool zooModel = m_model->currentData(ZooRole).toBool();
  m_values->setEnabled(!zooModel);
  m_values->setToolTip(
      zooModel ? tr("Built-in models have no inputs to fix: input values are for ONNX files")
               : tr("Contents of integer or boolean inputs that are settings rather than data (the CLI's --value): "
                    "INPUT=VALUE or INPUT=[V1,V2,...], separated by spaces; what follows from them folds, and an "
                    "If on them is replaced by the branch it takes"));
  if (zooModel) {
    const auto name = m_model->currentText().toStdString();
    QStringList params;
    for (const auto& m : zoo::models()) {
      if (m.name == name) {
        for (const auto& p : m.params) {
          params << qs(p.name) + QLatin1Char('=') + qs(p.default_value);
        }
        m_modelHelp->setText(qs(m.description));
      }
    }
    m_parameters->setPlaceholderText(params.join(QLatin1Char('&')));
    m_parameters->setToolTip(
        tr("Zoo parameters, NAME=VALUE joined by '&'; defaults: %1").arg(params.join(QLatin1Char(' '))));
  } else {
    m_parameters->setPlaceholderText(tr("batch=32&seq=128"));
    m_parameters->setToolTip(tr("Values of the file's symbolic dimensions, NAME=VALUE joined by '&'"));
    m_modelHelp->setText(tr("ONNX file %1").arg(m_model->currentData().toString()));
  }
}

int SetupPanel::currentBatch() const {
  const auto match = batchParameter().match(m_parameters->text());
  if (match.hasMatch()) {
    bool ok = false;
    const int batch = match.captured(2).toInt(&ok);
    return ok ? batch : 0;
  }
  if (!m_model->currentData(ZooRole).toBool()) {
    return 0; // a file's dimensions are known once it is loaded; batch= in the parameters names one
  }
  const auto name = m_model->currentText().toStdString();
  for (const auto& m : zoo::models()) {
    for (const auto& p : m.params) {
      if (m.name == name && p.name == "batch") {
        return QString::fromStdString(p.default_value).toInt();
      }
    }
  }
  return 0;
}

void SetupPanel::syncSliders() {
  const QSignalBlocker devices(m_devicesSlider), batch(m_batchSlider);
  m_devicesSlider->setValue(std::min(max_log2_devices, floorLog2(m_devices->value())));
  const int b = currentBatch();
  m_batchSlider->setEnabled(b > 0);
  m_batchSlider->setValue(b > 0 ? std::min(max_log2_batch, floorLog2(b)) : 0);
  m_batchLabel->setText(b > 0 ? QString::number(b) : tr("n/a"));
  m_batchLabel->setToolTip(b > 0 ? QString()
                                 : tr("This model names no batch: give batch=N in the parameters for a file whose "
                                      "batch dimension is called 'batch'"));
}

void SetupPanel::onDevicesSlider(int position) {
  const int devices = 1 << position;
  if (devices != m_devices->value()) {
    m_devices->setValue(devices); // grows a preset by nodes through updateDeviceLimit
    Q_EMIT replanRequested();
  }
}

void SetupPanel::onBatchSlider(int position) {
  const int batch = 1 << position;
  if (batch == currentBatch()) {
    return;
  }
  QString text = m_parameters->text().trimmed();
  const auto match = batchParameter().match(text);
  const QString item = QStringLiteral("batch=%1").arg(batch);
  if (match.hasMatch()) {
    text.replace(match.capturedStart(0), match.capturedLength(0), match.captured(1) + item);
  } else {
    text += (text.isEmpty() ? QString() : QStringLiteral("&")) + item;
  }
  m_parameters->setText(text); // syncSliders follows through textChanged
  Q_EMIT replanRequested();
}

void SetupPanel::updateDeviceLimit() {
  // Validates as you type: the cluster's size is the core's, loaded from the preset; a preset
  // grows by whole nodes to hold the devices asked for, as the CLI's does.
  try {
    AnalysisInput in;
    in.cluster = m_cluster->currentData().toString().toStdString();
    if (m_cluster->currentData(EditedClusterRole).toBool()) {
      in.custom_cluster = m_customCluster;
    }
    in.nodes = m_nodes->value();
    in.devices = m_devices->value();
    const int nodes = nodes_for(in);
    if (nodes != m_nodes->value()) {
      m_nodes->setValue(nodes); // re-enters through valueChanged
      return;
    }
    in.devices = 1;
    const auto c = load_input_cluster(in);
    const bool ok = m_devices->value() <= c.device_count();
    m_clusterHelp->setText(
        tr("%1: %2 × %3 devices, %4 each%5")
            .arg(qs(c.name))
            .arg(c.nodes)
            .arg(c.devices_per_node)
            .arg(formatBytes(c.device.memory_capacity))
            .arg(ok ? QString() : tr(" — too few for %1 devices: add nodes").arg(m_devices->value())));
    m_clusterHelp->setStyleSheet(ok ? QString() : QStringLiteral("color: #c02020;"));
  } catch (const Error& e) {
    m_clusterHelp->setText(QString::fromUtf8(e.what()));
    m_clusterHelp->setStyleSheet(QStringLiteral("color: #c02020;"));
  }
}

} // namespace partita::gui
