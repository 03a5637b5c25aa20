#pragma once

// Edit a cluster (Setup > Edit cluster…): the device's peaks, memory and launch overhead, the node
// count and devices per node, the link inside a node and the network, starting from the selected
// preset, and nodes of other device kinds after them. Every keystroke re-validates with the core's own
// cluster::validate(): the first invalid field is marked, the core's message shown, and OK and Save disabled until it
// is fixed. What the form does not show (direct device pairs, a fallback link, efficiency curves) is kept as it was.

#include <QDialog>
#include <QHash>

#include <memory>
#include <optional>
#include <vector>

class QCheckBox;
class QComboBox;
class QDialogButtonBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTableWidget;

namespace partita::proto {
class Cluster;
class NodeGroup;
} // namespace partita::proto

namespace partita::gui {

class ClusterEditor : public QDialog {
  Q_OBJECT
public:
  explicit ClusterEditor(const proto::Cluster& start, QWidget* parent = nullptr);
  ~ClusterEditor() override;

  // The cluster as the form says, valid or not.
  proto::Cluster cluster() const;
  void setCluster(const proto::Cluster& cluster);
  bool isValid() const { return m_error.isEmpty(); }
  // "field 'intra_node.link.bandwidth': must be positive, got -1e+09"; empty when valid.
  QString errorText() const { return m_error; }
  // The path of the widget marked invalid: the field the error names, or the widget that governs
  // it ("intra_node.switched" for "intra_node.pairs[3].b"); "" when valid.
  QString invalidField() const { return m_invalidField; }
  // The widget of a field path ("device.peak_fp32", "nodes", "intra_node.switched", ...).
  QWidget* fieldWidget(const QString& path) const { return m_fields.value(path); }
  QPushButton* okButton() const;
  QPushButton* saveButton() const { return m_save; }
  // Nodes of other device kinds (a cluster of mixed nodes): one row per group, columns
  // nodes, device name, fp32 and fp16/bf16 peaks (TFLOP/s), memory bandwidth (GB/s) and size (GiB).
  QTableWidget* nodeGroupsTable() const { return m_groups; }
  QPushButton* addGroupButton() const { return m_addGroup; }
  QPushButton* removeGroupButton() const { return m_removeGroup; }

  // Writes the cluster as a JSON file (atomically) that `partita --cluster FILE` reads; on failure
  // the message is shown in the dialog and false returned.
  bool saveTo(const QString& path);
  // Reads a cluster JSON file into the form; false with the core's message shown on failure.
  bool openFrom(const QString& path);

Q_SIGNALS:
  void validated(bool valid);

private:
  QLineEdit* addNumber(const QString& path, const QString& tip);
  QComboBox* addKind(const QString& path);
  void revalidate();
  void mark(const QString& path);
  void fillGroupRow(int row, const proto::NodeGroup& g);

  std::unique_ptr<proto::Cluster> m_base; // what the form does not show comes from here
  QHash<QString, QWidget*> m_fields;
  QLineEdit* m_name;
  QLineEdit* m_deviceName;
  QCheckBox* m_switched;
  QTableWidget* m_groups;
  QPushButton* m_addGroup;
  QPushButton* m_removeGroup;
  std::vector<proto::NodeGroup> m_groupBase; // per row: what its cells do not show comes from here
  QLabel* m_keptNote;
  QLabel* m_message;
  QDialogButtonBox* m_buttons;
  QPushButton* m_save;
  QPushButton* m_open;
  QString m_error;
  QString m_invalidField;
  bool m_filling = false;
};

} // namespace partita::gui
