#include "onnx/opset_adapter.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace partita::onnx_import::detail {
namespace {

onnx::AttributeProto* find_attr(onnx::NodeProto& n, const std::string& key) {
  for (auto& a : *n.mutable_attribute()) {
    if (a.name() == key) {
      return &a;
    }
  }
  return nullptr;
}

void remove_attr(onnx::NodeProto& n, const std::string& key) {
  auto* attrs = n.mutable_attribute();
  for (int i = 0; i < attrs->size(); ++i) {
    if (attrs->Get(i).name() == key) {
      attrs->DeleteSubrange(i, 1);
      return;
    }
  }
}

void set_ints(onnx::NodeProto& n, const std::string& key, const std::vector<std::int64_t>& values) {
  remove_attr(n, key);
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::INTS);
  for (auto v : values) {
    a->add_ints(v);
  }
}

void truncate_inputs(onnx::NodeProto& n, int count) {
  while (n.input_size() > count) {
    n.mutable_input()->RemoveLast();
  }
}

const std::set<std::string> reduce_ops = {"ReduceMean", "ReduceMax",    "ReduceMin",       "ReduceProd",     "ReduceL1",
                                          "ReduceL2",   "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};

} // namespace

std::string
adapt_node(onnx::NodeProto& node,
           const std::function<std::optional<std::vector<std::int64_t>>(const std::string&)>& constant_ints) {
  const std::string& type = node.op_type();
  if (reduce_ops.count(type) != 0 && node.input_size() >= 2) {
    // Reduce-18: axes is an optional input; Reduce-13 had it as an attribute.
    const std::string axes_name = node.input(1);
    if (!axes_name.empty()) {
      auto axes = constant_ints(axes_name);
      if (!axes) {
        return fmt::format("the axes of {} (input '{}') are computed at run time", type, axes_name);
      }
      if (axes->empty()) {
        const auto* noop = find_attr(node, "noop_with_empty_axes");
        if (noop != nullptr && noop->i() != 0) {
          return "noop_with_empty_axes=1 with empty axes is not supported";
        }
      } else {
        set_ints(node, "axes", *axes);
      }
    }
    truncate_inputs(node, 1);
    remove_attr(node, "noop_with_empty_axes");
    return {};
  }
  if (type == "ReduceSum") {
    return {}; // axes became an input at 13 already
  }
  if (type == "Split") {
    // Split-18 num_outputs: equal parts, the last one smaller; Split-13 without `split` splits
    // equally into the number of outputs.
    remove_attr(node, "num_outputs");
    return {};
  }
  if (type == "Pad" && node.input_size() >= 4 && !node.input(3).empty()) {
    return "Pad with an 'axes' input (opset 18) is not supported";
  }
  if (type == "Cast" || type == "CastLike") {
    remove_attr(node, "saturate"); // fp8 overflow policy: no effect on shapes
    return {};
  }
  if (type == "Resize") {
    remove_attr(node, "antialias");
    if (find_attr(node, "axes") != nullptr) {
      return "Resize with 'axes' (opset 18) is not supported";
    }
    if (const auto* k = find_attr(node, "keep_aspect_ratio_policy"); k != nullptr && k->s() != "stretch") {
      return fmt::format("Resize with keep_aspect_ratio_policy '{}' (opset 18) is not supported", k->s());
    }
    remove_attr(node, "keep_aspect_ratio_policy");
    return {};
  }
  if (type == "AveragePool") {
    if (const auto* d = find_attr(node, "dilations"); d != nullptr) {
      if (std::any_of(d->ints().begin(), d->ints().end(), [](std::int64_t x) { return x != 1; })) {
        return "AveragePool with dilations (opset 19) is not supported";
      }
      remove_attr(node, "dilations");
    }
    return {};
  }
  return {};
}

} // namespace partita::onnx_import::detail
