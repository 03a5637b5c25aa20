#pragma once

// The side panel: which model (a zoo model with its parameters, or an ONNX file with values for
// its symbolic dimensions), which cluster and how many devices, which strategy family and
// training set-up. Every list comes from the core (zoo::models(), cluster::preset_names(),
// search::optimizers()).

#include "common/analysis.h"

#include <QWidget>

class QCheckBox;

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSlider;
class QSpinBox;

namespace partita::gui {

class SetupPanel : public QWidget {
  Q_OBJECT
public:
  explicit SetupPanel(QWidget* parent = nullptr);

  AnalysisInput input() const;
  // Selects what `input` names (a file model is added to the list).
  void setInput(const AnalysisInput& input);
  // Adds an ONNX file to the model list (once) and selects it.
  void selectModelFile(const QString& path);
  // Makes an edited cluster (partita.proto Cluster as io::to_json) the selected cluster: it joins the
  // preset list as "name (edited)", replacing a previous edit.
  void setCustomCluster(const std::string& json);
  // Opens the cluster editor on the selected cluster; OK makes the result the selection.
  void editCluster();

  QComboBox* modelCombo() const { return m_model; }
  QLineEdit* parametersEdit() const { return m_parameters; }
  QLineEdit* valuesEdit() const { return m_values; }
  QComboBox* clusterCombo() const { return m_cluster; }
  QPushButton* editClusterButton() const { return m_editCluster; }
  QSpinBox* nodesSpin() const { return m_nodes; }
  QSpinBox* devicesSpin() const { return m_devices; }
  QSlider* devicesSlider() const { return m_devicesSlider; }
  QSlider* batchSlider() const { return m_batchSlider; }
  QComboBox* familyCombo() const { return m_family; }
  QPushButton* evaluateButton() const { return m_evaluate; }

Q_SIGNALS:
  void evaluateRequested();
  // A slider moved: re-plan now (a new request supersedes the one in flight).
  void replanRequested();
  // Any field changed (what input() returns may differ from what was evaluated).
  void inputChanged();

  void openFileRequested();
  void customClusterChanged(const std::string& json); // an edited cluster joined the list

protected:
  // Enter in any field evaluates.
  bool eventFilter(QObject* watched, QEvent* event) override;

private:
  void onModelChanged();
  void onClusterChanged();
  // The 3d family searches the ZeRO stage, recomputation and sequence parallelism: their fields
  // are disabled then, saying so.
  void onFamilyChanged();
  void setClusterFields(const AnalysisInput& input);
  void updateDeviceLimit();
  // The sliders follow the fields: devices from the spin box, batch from the parameters.
  void syncSliders();
  void onDevicesSlider(int position);
  void onBatchSlider(int position);
  // The batch the parameters give (or the zoo model's default); 0 when the model has none known.
  int currentBatch() const;

  QComboBox* m_model;
  QLineEdit* m_parameters;
  QLineEdit* m_values;
  QLabel* m_modelHelp;
  QComboBox* m_cluster;
  QPushButton* m_editCluster;
  std::string m_customCluster; // JSON of the edited cluster in the list, if any
  QSpinBox* m_nodes;
  QSpinBox* m_devices;
  QSlider* m_devicesSlider; // log2 of the devices
  QSlider* m_batchSlider;   // log2 of the batch
  QLabel* m_batchLabel;
  QLabel* m_clusterHelp;
  QComboBox* m_family;
  QComboBox* m_precision;
  QComboBox* m_optimizer;
  QSpinBox* m_zero;
  QComboBox* m_recompute;
  QCheckBox* m_sequenceParallel;
  QCheckBox* m_fp32Gradients;
  QSpinBox* m_tensorParallel; // 0: the family's default
  QSpinBox* m_stages;
  QSpinBox* m_microBatches;
  QComboBox* m_schedule;
  QSpinBox* m_chunks;
  QComboBox* m_balance;
  QComboBox* m_stageLayout;
  QPushButton* m_evaluate;
};

} // namespace partita::gui
