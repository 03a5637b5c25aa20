#pragma once

// The simulated timeline's geometry, shared by its input and paint code (pixels).

namespace partita::gui::timeline_layout {

inline constexpr int labelWidth = 132; // lane names on the left
inline constexpr int rightMargin = 8;
inline constexpr int axisHeight = 26; // the time axis on top
inline constexpr int laneHeight = 18;
inline constexpr int laneGap = 2;   // between a device's streams
inline constexpr int deviceGap = 8; // between devices

} // namespace partita::gui::timeline_layout
