#pragma once

// libonnx 1.12 knows operator schemas up to opset 17. Models of opsets 18 to 21 mostly use ops
// unchanged since, but a few changed form: Reduce* take axes as an input (18), Split takes
// num_outputs (18), Pad takes axes (18), Resize and AveragePool gained attributes (18, 19),
// Cast gained saturate (19). This rewrites such a node into its opset-17 form, in place, when
// the meaning is the same, so that libonnx's shape inference and our descriptions read it.

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace partita::onnx_import::detail {

// Highest default-domain opset libonnx 1.12's schemas describe.
inline constexpr int libonnx_max_opset = 17;

// Returns "" when the node is fine (rewritten or untouched), else the reason it cannot be read
// with opset-17 rules. `constant_ints(name)` gives an input's integer contents when known.
std::string
adapt_node(onnx::NodeProto& node,
           const std::function<std::optional<std::vector<std::int64_t>>(const std::string&)>& constant_ints);

} // namespace partita::onnx_import::detail
