#pragma once

// Sessions: what the user set in the side panel (and the selected op), saved as the `Session`
// message of partita.proto in protobuf's JSON mapping, written atomically. Results are not saved:
// opening a session re-runs the evaluation.

#include "analysis.h"

#include <filesystem>
#include <string>

namespace partita::gui {

struct SessionState {
  AnalysisInput input;
  std::string selectedOp; // op name, empty when none
  SideBySideChoice sideBySide;

  bool operator==(const SessionState&) const = default;
};

// Throws partita::Error naming the path on failure; a previous file stays intact.
void saveSession(const std::filesystem::path& path, const SessionState& state);
// Throws partita::Error naming the file and the field that does not parse or validate.
SessionState loadSession(const std::filesystem::path& path);

} // namespace partita::gui
