#pragma once

// The `partita` subcommands. Each registers itself on the CLI11 app; the work happens in core.

#include <CLI/CLI.hpp>

namespace partita::cli {

void add_inspect_command(CLI::App& app);
void add_zoo_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_compare_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);

} // namespace partita::cli
