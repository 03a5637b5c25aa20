// partita zoo list | partita zoo export NAME -o FILE

#include "commands.h"
#include "table.h"

#include "partita/zoo/zoo.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

namespace partita::cli {

void add_zoo_command(CLI::App& app) {
  auto* zoo_cmd = app.add_subcommand("zoo", "The built-in models");
  zoo_cmd->require_subcommand(1);

  auto* list = zoo_cmd->add_subcommand("list", "List the built-in models and their parameters");
  list->callback([] {
    Table t({{"model", Table::Align::left}, {"parameters", Table::Align::left}, {"description", Table::Align::left}});
    for (const auto& m : zoo::models()) {
      std::string params;
      for (const auto& p : m.params) {
        params += (params.empty() ? "" : " ") + p.name + "=" + (p.default_value.empty() ? "(size)" : p.default_value);
      }
      t.add_row({"zoo:" + m.name, params, m.description});
    }
    std::cout << t.render();
  });

  auto spec = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto* exp = zoo_cmd->add_subcommand("export", "Write a built-in model as an ONNX file (shapes only, no weight data)");
  exp->add_option("model", *spec, "a zoo spec, e.g. resnet50?batch=32")->required();
  exp->add_option("-o,--output", *out, "the ONNX file to write")->required();
  exp->callback([spec, out] {
    zoo::export_onnx(*spec, *out);
    std::cout << fmt::format("wrote {} to {}\n", *spec, *out);
  });
}

} // namespace partita::cli
