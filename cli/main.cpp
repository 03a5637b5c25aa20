// partita: the command line of the Partita explorer.

#include "commands.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
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
