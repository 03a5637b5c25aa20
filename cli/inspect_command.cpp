// partita inspect MODEL: the per-layer table of a model (an ONNX file or a zoo spec).

#include "commands.h"
#include "model_options.h"
#include "table.h"

#include "partita/graph/error.h"
#include "partita/graph/summary.h"
#include "partita/zoo/zoo.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

namespace partita::cli {
namespace {

struct InspectOptions {
  ModelOptions model;
  bool json = false;
};

nlohmann::json to_json(const onnx_import::ImportResult& r, const graph::ModelSummary& s, const std::string& model) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& row : s.rows) {
    nlohmann::json l = {{"op", row.type},
                        {"name", row.name},
                        {"class", graph::op_class_name(row.op_class)},
                        {"output_shape", row.output_shape},
                        {"params", row.params},
                        {"macs", row.macs},
                        {"fwd_flops", row.fwd_flops},
                        {"bwd_flops", row.bwd_flops},
                        {"activation_bytes", row.activation_bytes}};
    if (!row.opaque_reason.empty()) {
      l["opaque_reason"] = row.opaque_reason;
    }
    layers.push_back(std::move(l));
  }
  nlohmann::json inlined = nlohmann::json::array();
  for (const auto& i : r.inlined) {
    inlined.push_back(
        {{"node", i.node}, {"output", i.output}, {"branch", i.branch}, {"condition", i.condition}, {"nodes", i.nodes}});
  }
  return {{"model", model},
          {"opset", r.opset},
          {"inlined_ifs", inlined},
          {"interleaved_ops", r.interleaved_ops},
          {"producer", r.producer},
          {"layers", layers},
          {"totals",
           {{"ops", s.rows.size()},
            {"params", s.params},
            {"param_bytes", s.param_bytes},
            {"macs", s.macs},
            {"fwd_flops", s.fwd_flops},
            {"bwd_flops", s.bwd_flops},
            {"activation_bytes", s.activation_bytes}}},
          {"opaque_ops", s.opaque_ops},
          {"warnings", r.warnings}};
}

std::string to_text(const onnx_import::ImportResult& r, const graph::ModelSummary& s, const std::string& model) {
  Table t({{"#"},
           {"op", Table::Align::left},
           {"name", Table::Align::left},
           {"output shape", Table::Align::left},
           {"params"},
           {"fwd GFLOP"},
           {"bwd GFLOP"},
           {"act MiB"}});
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    const auto& row = s.rows[i];
    std::string name =
        row.name.size() > 48 ? row.name.substr(0, 22) + "..." + row.name.substr(row.name.size() - 23) : row.name;
    t.add_row({std::to_string(i), row.type + (row.opaque_reason.empty() ? "" : "*"), name,
               graph::shape_string(row.output_shape), with_thousands(row.params), gflop(row.fwd_flops),
               gflop(row.bwd_flops), mib(static_cast<double>(row.activation_bytes))});
  }
  t.add_rule();
  t.add_row({"", "total", fmt::format("{} ops", s.rows.size()), "", with_thousands(s.params), gflop(s.fwd_flops),
             gflop(s.bwd_flops), mib(static_cast<double>(s.activation_bytes))});
  std::string out = fmt::format("model {}  (opset {}{})\n\n", model, r.opset,
                                r.producer.empty() ? "" : ", produced by " + r.producer);
  out += t.render();
  out += fmt::format("\nparameters {} ({}, {})   forward {} GMAC   forward {} GFLOP   backward {} GFLOP\n",
                     with_thousands(s.params), count_short(static_cast<double>(s.params)),
                     bytes_short(static_cast<double>(s.param_bytes)), gflop(s.macs), gflop(s.fwd_flops),
                     gflop(s.bwd_flops));
  if (!s.opaque_ops.empty()) {
    out += fmt::format("\n{} opaque op(s) (*), costed as memory-bound:\n", s.opaque_ops.size());
    for (const auto& o : s.opaque_ops) {
      out += "  " + o + "\n";
    }
  }
  bool header = false;
  for (const auto& w : r.warnings) {
    if (w.rfind("opaque op", 0) == 0) {
      continue; // listed above
    }
    if (!header) {
      out += "\nwarnings:\n";
      header = true;
    }
    out += "  " + w + "\n";
  }
  return out;
}

} // namespace

void add_inspect_command(CLI::App& app) {
  auto opts = std::make_shared<InspectOptions>();
  auto* cmd =
      app.add_subcommand("inspect", "Print the per-layer table of a model: shapes, parameters, FLOPs, activations");
  opts->model.add_to(*cmd);
  cmd->add_flag("--json", opts->json, "print JSON instead of a table");
  cmd->callback([opts] {
    const auto result = opts->model.load();
    const auto summary = graph::summarize(result.graph);
    if (opts->json) {
      std::cout << to_json(result, summary, opts->model.spec()).dump(2) << "\n";
    } else {
      std::cout << to_text(result, summary, opts->model.spec());
    }
  });
}

} // namespace partita::cli
