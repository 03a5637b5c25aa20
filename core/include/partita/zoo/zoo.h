#pragma once

// The built-in model zoo: builders parametric in batch size (and image size, sequence length,
// width, heads, depth where that applies), producing ONNX models without weight data
// (initializers are declared with external data that is never read), so that every built-in
// model goes through the same importer as a user's file.

#include "partita/onnx/import.h"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace onnx {
class ModelProto;
}

namespace partita::zoo {

struct ZooParam {
  std::string name;
  std::string default_value;
  std::string help;
};

struct ZooModel {
  std::string name;        // "resnet50"
  std::string description; // one line
  std::vector<ZooParam> params;
};

const std::vector<ZooModel>& models();

// A zoo spec: "resnet50", "resnet50?batch=64", "gpt2?layers=2&hidden=128&heads=4&seq=32&batch=4".
// An optional "zoo:" prefix is accepted. Throws partita::Error naming an unknown model, an
// unknown parameter (with the list of known ones) or a bad value.
onnx::ModelProto build(std::string_view spec);

// Writes build(spec) to `path` atomically (temporary file + rename).
void export_onnx(std::string_view spec, const std::string& path);

// Loads a model for any front end: "zoo:NAME?..." builds and imports a zoo model; anything
// else is an ONNX file path.
onnx_import::ImportResult load(std::string_view model, const onnx_import::ImportOptions& options = {});

} // namespace partita::zoo
