#pragma once

// What a number typed on the command line may be, said in the option's own units: "--devices:
// expected a whole number of devices from 1 to 65536, got '0'". Every numeric option checks
// through these (CLI11 puts the option's name in front), so that no value is out of range,
// non-finite or silently replaced.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace partita::cli {

// The most devices a command plans for (the GUI's limit too): larger counts are refused.
inline constexpr std::int64_t max_devices = 65536;

// A whole number in [lo, hi]; `unit` names what it counts ("devices", "iterations").
CLI::Validator whole(std::int64_t lo, std::int64_t hi, const std::string& unit);
// A finite real number in [lo, hi] (NaN and infinities refused); `unit` says in what ("seconds").
CLI::Validator real(double lo, double hi, const std::string& unit);

} // namespace partita::cli
