// partita compare MODEL --strategies dp,owt,... --devices 8 | --devices 1,2,4,...: families side
// by side, and a scaling sweep when several device counts are given.

#include "commands.h"
#include "model_options.h"
#include "table.h"
#include "validators.h"

#include "partita/graph/error.h"
#include "partita/search/optimizer.h"
#include "partita/search/sweep.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <iostream>
#include <memory>

namespace partita::cli {

namespace {

struct CompareOptions {
  ModelOptions model;
  SetupOptions setup;
  std::vector<int> devices{8};
  std::vector<std::string> families;
  bool json = false;
  bool additive = false;
};

using Cell = search::SweepCell;

} // namespace

void add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  std::string known;
  for (const auto& f : search::optimizers()) {
    known += fmt::format("\n  {:9} {}: {}", f->name(), f->title(), f->description());
  }
  auto* cmd = app.add_subcommand("compare", "Compare strategy families side by side, and their scaling" + known);
  o->model.add_to(*cmd);
  o->setup.add_to(*cmd);
  cmd->add_option("--devices", o->devices, "device count, or a list for a scaling sweep: 1,2,4,8")
      ->delimiter(',')
      ->check(whole(1, max_devices, "devices"));
  cmd->add_option("--strategies", o->families, "families to compare (default: all)")->delimiter(',');
  cmd->add_flag("--json", o->json, "print JSON instead of tables");
  cmd->add_flag("--additive", o->additive,
                "iteration times as their terms added up, without the simulation (overlap, pipeline schedule, shared "
                "links)");
  cmd->callback([o] {
    const auto model = o->model.load();
    const auto& g = model.graph;
    const auto setup = o->setup.setup();
    std::vector<std::string> families = o->families;
    if (families.empty()) {
      for (const auto& f : search::optimizers()) {
        if (f->name() != "given" || !o->setup.plan.empty()) {
          families.emplace_back(f->name());
        }
      }
    }
    for (const auto& f : families) {
      search::find_optimizer(f); // an unknown family is named before any of its options
    }
    o->setup.check_read_by(families, fmt::format("--strategies {}", fmt::join(families, ",")));
    search::SweepRequest request;
    request.families = families;
    request.devices = o->devices;
    request.cluster_for = [&](int devices) { return cluster_for(o->setup.cluster, devices); };
    o->setup.fill(request.base);
    request.simulate = !o->additive;
    const std::vector<Cell> cells = search::sweep(g, request);
    if (o->json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& c : cells) {
        nlohmann::json j = {{"family", c.family}, {"devices", c.devices}};
        if (!c.error.empty()) {
          j["error"] = c.error;
        } else {
          j["iteration_seconds"] = c.prediction.iteration_time;
          j["simulated"] = c.prediction.simulated;
          j["additive_iteration_seconds"] = c.prediction.additive_time;
          j["samples_per_second"] = c.prediction.samples_per_second;
          j["peak_memory_bytes"] = c.prediction.peak_memory;
          j["fits"] = c.prediction.fits;
        }
        out.push_back(std::move(j));
      }
      std::cout << out.dump(2) << "\n";
      return;
    }
    const auto first = cluster_for(o->setup.cluster, o->devices.front());
    std::cout << fmt::format("compare {} on {} (batch {}, {}, {} optimizer{})\n\n", o->model.model, first.name,
                             strategy::batch_size(g), cluster::precision_name(setup.precision),
                             cost::optimizer_name(setup.optimizer),
                             setup.zero_stage > 0 ? fmt::format(", ZeRO-{}", setup.zero_stage) : "");
    Table t({{"devices"},
             {"family", Table::Align::left},
             {"iteration ms"},
             {"samples/s"},
             {"compute ms"},
             {"comm ms"},
             {"peak GiB"},
             {"fits", Table::Align::left}});
    // Per device count, the family to choose (the core's rule: the fastest that fits).
    std::vector<char> chosen(cells.size(), 0);
    for (const int devices : o->devices) {
      std::vector<const strategy::Prediction*> alternatives;
      std::vector<std::size_t> at;
      for (std::size_t i = 0; i < cells.size(); ++i) {
        if (cells[i].devices == devices) {
          alternatives.push_back(cells[i].error.empty() ? &cells[i].prediction : nullptr);
          at.push_back(i);
        }
      }
      if (const auto best = strategy::fastest_that_fits(alternatives)) {
        chosen[at[*best]] = 1;
      }
    }
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const auto& c = cells[i];
      if (!c.error.empty()) {
        t.add_row({std::to_string(c.devices), c.family, "-", "-", "-", "-", "-", "error: " + c.error});
        continue;
      }
      const auto& p = c.prediction;
      t.add_row({std::to_string(c.devices), c.family, fmt::format("{:.2f}", p.iteration_time * 1e3),
                 fmt::format("{:.1f}", p.samples_per_second), fmt::format("{:.2f}", p.compute_time * 1e3),
                 fmt::format("{:.2f}", p.communication_time * 1e3),
                 fmt::format("{:.2f}", p.peak_memory / (1024.0 * 1024 * 1024)),
                 p.fits ? (chosen[i] != 0 ? "yes, the fastest that fits" : "yes") : "no"});
    }
    std::cout << t.render();
    std::cout << (o->additive
                      ? "iteration: the terms added up (--additive)\n"
                      : "iteration: simulated (communication beside compute, pipeline schedules, shared links); "
                        "--additive adds up the terms instead\n");
    // auto's margin over the fastest hand-made family at each device count.
    for (int devices : o->devices) {
      const Cell* mine = nullptr;
      const Cell* best = nullptr;
      for (const auto& c : cells) {
        if (c.devices != devices || !c.error.empty()) {
          continue;
        }
        if (c.family == "auto") {
          mine = &c;
        } else if (c.family != "pipeline" && c.family != "given" &&
                   (best == nullptr || c.prediction.iteration_time < best->prediction.iteration_time)) {
          best = &c;
        }
      }
      if (mine != nullptr && best != nullptr && best->prediction.iteration_time > 0) {
        const double margin = 1 - mine->prediction.iteration_time / best->prediction.iteration_time;
        std::cout << fmt::format("{}auto on {} devices: {:.1f}% {} than the fastest per-op family ({}, {:.2f} ms){}\n",
                                 devices == o->devices.front() ? "\n" : "", devices, 100 * std::abs(margin),
                                 margin >= 0 ? "faster" : "slower", best->family, best->prediction.iteration_time * 1e3,
                                 margin < 0 ? " (auto minimizes the terms added up; the simulation overlaps what they "
                                              "add)"
                                            : "");
      }
    }
    if (o->devices.size() > 1) {
      // Scaling sweep: samples/s per family and device count (the best family marked).
      std::vector<Table::Column> cols{{"devices"}};
      for (const auto& f : families) {
        cols.push_back({f});
      }
      cols.push_back({"best", Table::Align::left});
      Table sweep(cols);
      for (int devices : o->devices) {
        std::vector<std::string> row{std::to_string(devices)};
        std::vector<const strategy::Prediction*> alternatives;
        for (const auto& f : families) {
          const strategy::Prediction* evaluated = nullptr;
          for (const auto& c : cells) {
            if (c.devices == devices && c.family == f) {
              if (!c.error.empty()) {
                row.emplace_back("error");
              } else {
                row.push_back(fmt::format("{:.1f}{}", c.prediction.samples_per_second, c.prediction.fits ? "" : "*"));
                evaluated = &c.prediction;
              }
            }
          }
          alternatives.push_back(evaluated);
        }
        const auto best = strategy::fastest_that_fits(alternatives);
        row.push_back(best ? families[*best] : "-");
        sweep.add_row(std::move(row));
      }
      std::cout << "\nscaling: samples/s (* = does not fit in device memory)\n\n" << sweep.render();
    }
  });
}

} // namespace partita::cli
