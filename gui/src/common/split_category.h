#pragma once

// What kind of split the chosen configuration of an op is, for the graph view's colours: which
// iteration dims it splits and whether they are the batch, a reduction, or another (feature,
// channel, head, spatial) dim. Read from the configuration and the op's semantics only.

#include "partita/graph/graph.h"
#include "partita/graph/op_semantics.h"
#include "partita/sharding/config.h"

#include <QColor>
#include <QString>

#include <vector>

namespace partita::gui {

enum class SplitKind { Batch, Feature, Reduction, Mixed, Replicated };
inline constexpr int SplitKindCount = 5;

QString splitKindName(SplitKind kind);
QString splitKindDescription(SplitKind kind); // one line for the legend's tooltip
QColor splitKindColor(SplitKind kind);        // box fill: light enough for black text
// The auto family's departures from the closest hand-made family: a table cell's background, and
// darker(), a graph box's outline.
QColor differsColor();

// Per op, per iteration dim: whether it is a batch dim, i.e. carries dim 0 of a graph input
// through the ops' tensor maps (the same rule the core's data-parallel builder applies).
std::vector<std::vector<bool>> batchDims(const graph::Graph& g, const std::vector<graph::OpSemantics>& semantics);

// Replicated when nothing is split; else Batch, Reduction or Feature when every split dim is of
// that kind, Mixed when they differ.
SplitKind splitKind(const sharding::Config& config, const graph::OpSemantics& semantics,
                    const std::vector<bool>& batch);

} // namespace partita::gui
