#pragma once

// The Side by side tab: the configuration on the left (A) beside a second one (B) that changes its
// family, cluster or device count, layer by layer (SideBySideModel).

#include "common/analysis.h"

#include <QWidget>

#include <memory>

class QComboBox;
class QLabel;
class QPushButton;
class QSpinBox;
class QTableView;

namespace partita::gui {

class SideBySideModel;

class SideBySidePanel : public QWidget {
  Q_OBJECT
public:
  explicit SideBySidePanel(QWidget* parent = nullptr);

  SideBySideChoice choice() const;
  void setChoice(const SideBySideChoice& choice);
  // Lists an edited cluster among B's clusters (replacing a previous one) without selecting it.
  void offerCustomCluster(const std::string& json);
  void setSideBySide(std::shared_ptr<const SideBySide> sideBySide);

  SideBySideModel* model() const { return m_model; }
  QComboBox* familyCombo() const { return m_family; }
  QComboBox* clusterCombo() const { return m_cluster; }
  QSpinBox* devicesSpin() const { return m_devices; }
  QPushButton* runButton() const { return m_run; }
  QTableView* view() const { return m_view; }

Q_SIGNALS:
  void sideBySideRequested();

private:
  int setCustomItem(const std::string& json, const std::string& fallbackName);

  SideBySideModel* m_model;
  QComboBox* m_family;
  QComboBox* m_cluster;
  QSpinBox* m_nodes;
  QSpinBox* m_devices;
  QPushButton* m_run;
  QLabel* m_header;
  QTableView* m_view;
  std::string m_customCluster; // the edited cluster the choice names, if any
};

} // namespace partita::gui
