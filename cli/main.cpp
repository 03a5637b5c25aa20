// partita: the command line of the Partita explorer.

#include "commands.h"
#include "safe_output.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

namespace {

// Levenshtein distance, for "did you mean".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

} // namespace

int main(int argc, char** argv) {
  // Names from files (nodes, tensors, graphs) may carry control characters: printed escaped.
  const partita::cli::SafeOutput safe_out(std::cout), safe_err(std::cerr);
  CLI::App app{"Partita: explore parallelization strategies for training deep neural networks", "partita"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "partita 0.1.0");
  partita::cli::add_inspect_command(app);
  partita::cli::add_zoo_command(app);
  partita::cli::add_plan_command(app);
  partita::cli::add_simulate_command(app);
  partita::cli::add_compare_command(app);
  partita::cli::add_run_command(app);
  partita::cli::add_calibrate_command(app);
  // An unknown command is named, with the nearest known one (CLI11 would only say that one is
  // required).
  if (argc > 1 && argv[1][0] != '-') {
    const std::string given = argv[1];
    std::vector<std::string> names;
    for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
    }
    if (std::find(names.begin(), names.end(), given) == names.end()) {
      std::string nearest;
      std::size_t best = 3; // at most two edits away
      for (const auto& n : names) {
        const auto d = edit_distance(given, n);
        if (d < best) {
          best = d;
          nearest = n;
        }
      }
      std::cerr << fmt::format("partita: error: unknown command '{}' (commands: {}){}\n", given, fmt::join(names, ", "),
                               nearest.empty() ? "" : "; did you mean '" + nearest + "'?");
      return 1;
    }
  }
  // `partita run|calibrate ... -np P`, as mpirun spells it: CLI11 would read "-np" as -n with the value "p".
  std::vector<std::string> args(argv + 1, argv + argc);
  for (auto& a : args) {
    if (a == "-np") {
      a = "--np";
    }
  }
  std::reverse(args.begin(), args.end()); // CLI11's vector form takes the arguments last to first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const partita::Error& e) {
    std::cerr << "partita: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "partita: internal error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
