#include "timeline/timeline_panel.h"

#include "common/format.h"
#include "timeline/sim_timeline_view.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>

namespace partita::gui {

namespace {

QString deviceLine(int device, const sim::DeviceTime& d) {
  return QObject::tr("device %1: busy %2, exposed comm %3, idle %4")
      .arg(QString::number(device), formatSeconds(d.busy), formatSeconds(d.exposed_communication),
           formatSeconds(d.idle));
}

QString legend() {
  using sim::TaskKind;
  QString html;
  for (auto k :
       {TaskKind::forward, TaskKind::backward, TaskKind::recompute, TaskKind::collective, TaskKind::parameter_gather,
        TaskKind::redistribution, TaskKind::send, TaskKind::gradient_sync, TaskKind::optimizer_step}) {
    html += QStringLiteral("<span style='color:%1'>■</span>&nbsp;%2&nbsp;&nbsp; ")
                .arg(SimTimelineView::colorOf(k).name(), qs(sim::task_kind_name(k)));
  }
  return html + QStringLiteral("<span style='color:#d01020'>▀</span>&nbsp;") + QObject::tr("critical path");
}

} // namespace

TimelinePanel::TimelinePanel(QWidget* parent)
    : QWidget(parent), m_view(new SimTimelineView(this)), m_summary(new QLabel(this)), m_span(new QLabel(this)),
      m_criticalOnly(new QCheckBox(tr("Only the &critical path"), this)),
      m_byStage(new QCheckBox(tr("By pipeline &stage"), this)), m_legend(new QLabel(this)),
      m_zoomIn(new QToolButton(this)), m_zoomOut(new QToolButton(this)), m_fit(new QToolButton(this)) {
  m_summary->setWordWrap(true);
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_zoomIn->setText(tr("Zoom in"));
  m_zoomIn->setToolTip(tr("Zoom in (Ctrl+wheel over the timeline)"));
  m_zoomOut->setText(tr("Zoom out"));
  m_fit->setText(tr("Fit"));
  m_fit->setToolTip(tr("The whole iteration"));
  m_criticalOnly->setToolTip(tr("Show only the tasks that make up the iteration time, one after another"));
  m_byStage->setObjectName(QStringLiteral("pipelineViewCheck"));
  m_byStage->setToolTip(tr("One lane per pipeline stage: each micro-batch's forward (F), backward (B) and "
                           "recomputation (R) through the stage as one box, coloured by micro-batch; the time a "
                           "stage computes nothing (the bubble) hatched"));
  m_legend->setWordWrap(true);

  auto* bar = new QHBoxLayout;
  bar->addWidget(m_zoomIn);
  bar->addWidget(m_zoomOut);
  bar->addWidget(m_fit);
  bar->addSpacing(12);
  bar->addWidget(m_criticalOnly);
  bar->addWidget(m_byStage);
  bar->addSpacing(12);
  bar->addWidget(m_span, 1);

  auto* layout = new QVBoxLayout(this);
  layout->addWidget(m_summary);
  layout->addLayout(bar);
  layout->addWidget(m_legend);
  layout->addWidget(m_view, 1);

  connect(m_zoomIn, &QToolButton::clicked, m_view, &SimTimelineView::zoomIn);
  connect(m_zoomOut, &QToolButton::clicked, m_view, &SimTimelineView::zoomOut);
  connect(m_fit, &QToolButton::clicked, m_view, &SimTimelineView::zoomToFit);
  connect(m_criticalOnly, &QCheckBox::toggled, this, [this](bool only) {
    m_view->setCriticalOnly(only);
    updateLegend();
  });
  connect(m_byStage, &QCheckBox::toggled, this, [this](bool on) {
    m_view->setPipelineView(on);
    updateLegend();
  });
  connect(m_view, &SimTimelineView::viewChanged, this, &TimelinePanel::updateSpanLabel);
  setAnalysis(nullptr);
}

void TimelinePanel::setAnalysis(std::shared_ptr<const Analysis> analysis) {
  m_analysis = std::move(analysis);
  m_view->setAnalysis(m_analysis);
  const bool simulated = m_analysis && m_analysis->simulation;
  for (QWidget* w : std::initializer_list<QWidget*>{m_zoomIn, m_zoomOut, m_fit, m_criticalOnly}) {
    w->setEnabled(simulated);
  }
  const bool pipelined = simulated && m_analysis->strategy.pipeline.has_value();
  m_byStage->setEnabled(pipelined);
  m_view->setPipelineView(pipelined && m_byStage->isChecked());
  updateLegend();
  m_summary->setToolTip({});
  if (!m_analysis) {
    m_summary->setText(tr("Evaluate a model to see its predicted iteration."));
    return;
  }
  if (!simulated) {
    m_summary->setText(qs(m_analysis->simulation_note));
    return;
  }
  const auto& sim = *m_analysis->simulation;
  const auto& r = sim.result;
  const double additive = m_analysis->prediction.additive_time;
  QString text = tr("Simulated iteration <b>%1</b> (communication overlapped), the prediction; its terms add up to %2")
                     .arg(formatSeconds(r.iteration_time), formatSeconds(additive));
  if (additive > 0) {
    const double change = r.iteration_time / additive - 1;
    text += tr(" (%1%2)").arg(change <= 0 ? QStringLiteral("−") : QStringLiteral("+"), formatPercent(std::abs(change)));
  }
  text += tr("; %1 tasks, %2 on the critical path.").arg(sim.tasks.tasks.size()).arg(r.critical_path.size());
  QStringList lines;
  const sim::DeviceTime* most_idle = nullptr;
  int most_idle_device = -1;
  for (std::size_t d = 0; d < r.devices.size(); ++d) {
    const auto& dev = r.devices[d];
    if (!dev.used) {
      continue;
    }
    lines << deviceLine(static_cast<int>(d), dev);
    if (most_idle == nullptr || dev.idle > most_idle->idle) {
      most_idle = &dev;
      most_idle_device = static_cast<int>(d);
    }
  }
  if (lines.size() <= 4) {
    text += QStringLiteral("<br>") + lines.join(QStringLiteral("; "));
  } else {
    text += QStringLiteral("<br>") + tr("%1 devices; the most idle: %2 (hover for all)")
                                         .arg(lines.size())
                                         .arg(deviceLine(most_idle_device, *most_idle));
    m_summary->setToolTip(lines.join(QLatin1Char('\n')));
  }
  m_summary->setText(text);
}

void TimelinePanel::updateLegend() {
  if (!m_view->pipelineView()) {
    m_legend->setText(legend());
    return;
  }
  // The pipeline view: what colours mean, and how much of the iteration each stage idles.
  QString html = tr("F forward, <b>B</b> backward (darker), R recomputation (dotted), one colour per micro-batch; "
                    "<span style='color:#888'>▨</span> the stage computes nothing (bubble).");
  QStringList idle;
  for (int lane = 0; lane < m_view->laneCount(); ++lane) {
    idle << tr("%1 %2").arg(m_view->laneLabel(lane).section(QLatin1Char(' '), 0, 1),
                            formatPercent(m_view->idleShare(lane)));
  }
  if (!idle.isEmpty()) {
    html += QStringLiteral("<br>") + tr("Idle share of the iteration: %1").arg(idle.join(QStringLiteral(", ")));
  }
  m_legend->setText(html);
}

void TimelinePanel::updateSpanLabel() {
  if (m_view->iterationTime() <= 0) {
    m_span->clear();
    return;
  }
  m_span->setText(tr("showing %1 from %2 · %3 tasks")
                      .arg(formatSeconds(m_view->visibleSpan()), formatSeconds(m_view->visibleStart()))
                      .arg(m_view->taskCount()));
}

} // namespace partita::gui
