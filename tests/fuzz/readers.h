#pragma once

// The file readers the fuzz targets drive, one call per input: bytes through the whole path a
// real file takes (protobuf's JSON parse, core's validation, then the computation the file
// feeds), shared by the libFuzzer targets and the regression test of the inputs kept in
// tests/fuzz/<reader>/. A partita::Error is the expected outcome of bad input; anything else (a
// crash, another exception, a sanitizer report, NaN taken for a result) is a bug.

#include <string_view>

namespace partita::fuzz {

// A cluster file (partita cluster / --cluster FILE), then data parallelism of a small MLP on it.
void cluster_file(std::string_view bytes);
// A plan file (partita plan -o, --strategy given, partita-run) of a small MLP, then its prediction.
void plan_file(std::string_view bytes);
// A measurements file (partita-run --measurements), then the comparison with a small MLP's prediction.
void measurements_file(std::string_view bytes);

} // namespace partita::fuzz
