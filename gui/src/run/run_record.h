#pragma once

// One finished run, as the Run tab shows it and a session keeps it (Qt Core only: what the
// session reader needs, without the job that makes it).

#include "partita/proto/partita.pb.h"
#include "partita/strategy/measured.h"

#include <QDateTime>
#include <QString>

#include <optional>

namespace partita::gui {

struct RunRecord {
  QString label; // "dp on 2 ranks, 10:41:07"
  QDateTime started;
  proto::Plan plan; // what ran
  proto::RunResult result;
  QString log; // everything the job printed
  // Against the prediction of the analysis it was started from (absent when restored for another
  // model, or when the analysis no longer matches).
  std::optional<strategy::RunComparison> comparison;
};

} // namespace partita::gui
