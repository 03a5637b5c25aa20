#pragma once

// Reads an ONNX ModelProto without loading weight bytes: the wire stream is filtered while it is
// read, and every tensor payload larger than a small bound (raw_data, float_data, ...) is skipped
// before protobuf parses what remains. Shapes, types and the small integer tensors that shape
// computation needs are kept.

#include <onnx/onnx_pb.h>

#include <filesystem>
#include <string_view>

namespace partita::onnx_import::detail {

// Payloads up to this many bytes are kept (Reshape targets, Slice starts, axes...).
inline constexpr int kept_payload_bytes = 64 * 1024;

// Throws partita::Error naming `source` and the reason (missing, unreadable, truncated, not
// protobuf, nested too deep).
onnx::ModelProto read_model_file(const std::filesystem::path& path);
onnx::ModelProto read_model_bytes(std::string_view bytes, std::string_view source);

} // namespace partita::onnx_import::detail
