#pragma once

// Sessions: what the user set in the side panel (and the selected op), saved as the `Session`
// message of partita.proto in protobuf's JSON mapping, written atomically. Predictions are not
// saved: opening a session re-runs the evaluation. Real runs are (they cannot be recomputed).

#include "common/analysis.h"
#include "run/run_record.h"

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace partita::gui {

struct SessionState {
  AnalysisInput input;
  std::string selectedOp; // op name, empty when none
  SideBySideChoice sideBySide;
  std::vector<std::shared_ptr<const RunRecord>> runs; // restored without a comparison

  // Runs compare by what they hold, not by address.
  bool operator==(const SessionState& other) const;
};

// Throws partita::Error naming the path on failure; a previous file stays intact.
void saveSession(const std::filesystem::path& path, const SessionState& state);
// Throws partita::Error naming the file and the field that does not parse or validate.
SessionState loadSession(const std::filesystem::path& path);
// The same from the file's contents (`path` names it in errors): what loadSession reads, and what
// the session reader's fuzz target (tests/fuzz/session_fuzz.cpp) drives.
SessionState sessionFromJson(std::string_view json, const std::filesystem::path& path);

} // namespace partita::gui
