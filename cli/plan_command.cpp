// partita plan MODEL --cluster C --devices P --strategy NAME: the per-layer plan of one family.

#include "commands.h"
#include "model_options.h"
#include "table.h"
#include "validators.h"

#include "partita/graph/error.h"
#include "partita/graph/summary.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "partita/search/auto_search.h"
#include "partita/search/optimizer.h"
#include "partita/search/pase.h"
#include "partita/strategy/plan_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <set>

namespace partita::cli {

namespace {

struct PlanOptions {
  ModelOptions model;
  SetupOptions setup;
  int devices = 8;
  std::string family = "auto";
  std::string output;
  bool json = false;
  std::vector<std::string> terms; // --terms: ops whose every term is printed with its formula
  // --cost-model pase: PaSE's benchmark graphs in its own cost model.
  std::string cost_model = "partita";
  double flops = search::pase::Options{}.flops;
  double bw = search::pase::Options{}.bw;
  CLI::Option* flops_option = nullptr;
  CLI::Option* bw_option = nullptr;
};

// --cost-model pase: the optimum of one of PaSE's graphs as its reference implementation prices it
// (FLOP units), layer by layer, and its total cost (what the reference prints).
void plan_pase(const PlanOptions& o, const CLI::App& cmd) {
  if (o.family != "auto") {
    throw Error(
        fmt::format("--cost-model pase is searched by the exact per-layer search only: drop --strategy {}", o.family));
  }
  // PaSE's model has the graph, its batch, the device count and --flops and --bw: every other
  // option typed (a cluster, a precision, a ZeRO stage, a family's settings) would pass unread.
  for (const auto* option : cmd.get_options()) {
    const std::string name = option->get_name(false, true);
    static const std::set<std::string, std::less<>> read{"model",     "--cost-model", "--flops",   "--bw",
                                                         "--devices", "--batch",      "--strategy"};
    if (option->count() > 0 && !read.contains(name)) {
      throw Error(fmt::format("{} does not apply with --cost-model pase (PaSE's graphs are not ONNX models, its "
                              "machine is --flops and --bw, and it prices neither precision nor optimizer)",
                              name));
    }
  }
  search::pase::Options options;
  const auto graph = search::pase::parse_spec(o.model.model, options);
  if (o.model.batch > 0) {
    if (o.model.model.find("batch=") != std::string::npos) {
      throw Error(fmt::format("{}: batch given twice (in the model and by --batch)", o.model.model));
    }
    options.batch = o.model.batch;
  }
  options.procs = o.devices;
  options.flops = o.flops;
  options.bw = o.bw;
  if (!(options.flops > 0) || !(options.bw > 0)) {
    throw Error(fmt::format("--flops and --bw must be positive (got {} and {})", options.flops, options.bw));
  }
  const auto r = search::pase::search(graph, options);
  std::cout << fmt::format("plan {} in PaSE's cost model: {} devices, batch {}, {} TFLOP/s per device, {} GB/s "
                           "between devices (a word moved costs {:.6g} FLOP)\n\n",
                           o.model.model, options.procs, options.batch, options.flops, options.bw,
                           search::pase::comm_ratio(options));
  Table t({{"#"}, {"layer", Table::Align::left}, {"op", Table::Align::left}, {"split", Table::Align::left}, {"cost"}});
  for (std::size_t i = 0; i < r.layers.size(); ++i) {
    const auto& l = r.layers[i];
    t.add_row({std::to_string(i), l.name, l.op, l.split, search::pase::format_cost(l.cost)});
  }
  std::cout << t.render();
  std::cout << fmt::format("\nTotal cost {} (PaSE's units: FLOPs, communication converted by the ratio above; the "
                           "layers' own costs plus the redistributions between them)\n",
                           search::pase::format_cost(r.total_cost));
  std::cout << fmt::format("search: {} configurations of {} layers (at most {} per layer), {} edges, widest dependent "
                           "set {}, largest table {:.3g} entries, {:.1f} MiB at peak\n",
                           r.configs, r.vertices, r.max_configs, r.edges, r.stats.width, r.stats.largest_table,
                           r.stats.peak_bytes / (1024.0 * 1024));
}

std::string ms(double seconds) {
  return fmt::format("{:.3f}", seconds * 1e3);
}
std::string gib(double bytes) {
  return fmt::format("{:.2f}", bytes / (1024.0 * 1024.0 * 1024.0));
}

// The 3-D search's Pareto front: each point a plan, with the megatron options that make it.
void print_pareto_front(const search::three_d::Result& r, const PlanOptions& o) {
  Table t(
      {{"#"}, {"iteration ms"}, {"predicted by", Table::Align::left}, {"memory MiB"}, {"plan", Table::Align::left}});
  for (std::size_t i = 0; i < r.pareto.size(); ++i) {
    const auto& point = r.pareto[i];
    t.add_row({std::to_string(i + 1), ms(point.iteration_time), point.simulated ? "simulation" : "terms added up",
               mib(point.peak_memory), point.candidate.text()});
  }
  std::cout << fmt::format("\nPareto front of the 3-D search: iteration time against memory per device, {} plans "
                           "that fit in {} GiB, fastest first\n",
                           r.pareto.size(), gib(r.memory_limit));
  std::cout << t.render();
  std::cout << fmt::format("each is `partita plan {} --devices {}` with:\n", o.model.model, o.devices);
  for (std::size_t i = 0; i < r.pareto.size(); ++i) {
    std::cout << fmt::format("  {}: {}\n", i + 1, r.pareto[i].candidate.options());
  }
}

// How auto's plan differs from the hand-made families: its margin over the fastest, and the ops
// where it departs from the closest.
void print_family_comparison(const search::AutoResult& r, const strategy::Prediction& mine, const graph::Graph& g,
                             const cluster::Cluster& cl, const PlanOptions& o) {
  search::Request request;
  request.graph = &g;
  request.cluster = &cl;
  request.devices = o.devices;
  o.setup.fill(request);
  const auto cmp = search::compare_with_families(request, r.strategy);
  if (cmp.closest.empty()) {
    return;
  }
  std::cout << fmt::format("\nhand-made families: {}\nauto is {:.1f}% faster than the fastest, {}", cmp.table,
                           cmp.best_family_time > 0 ? 100 * (1 - mine.iteration_time / cmp.best_family_time) : 0.0,
                           cmp.best_family);
  if (r.lower_bound < r.objective) {
    std::cout << fmt::format("; within {:.2f}% of the fastest plan{} ({} bound {:.3f} ms)",
                             100 * (r.objective / r.lower_bound - 1), r.memory_priced ? " that fits" : "",
                             r.exact ? "Lagrangian"
                                     : (r.memory_priced ? "Lagrangian and bounded search" : "bounded search"),
                             r.lower_bound * 1e3);
  }
  std::vector<std::string> names;
  for (std::size_t i = 0; i < cmp.different.size() && i < 12; ++i) {
    names.push_back(g.op(cmp.different[i]).name);
  }
  std::cout << fmt::format("\nlike {}, except {} ops{}{}{}\n", cmp.closest, cmp.different.size(),
                           names.empty() ? "" : ": ", fmt::join(names, ", "),
                           cmp.different.size() > names.size() ? ", ..." : "");
  std::cout << fmt::format("search: {:.0f} configurations of {} ops ({} distinct), widest dependent set {}, largest "
                           "table {:.3g} entries{}, {:.1f} MiB of tables\n",
                           r.stats.configurations, r.stats.ops, r.stats.distinct_ops, r.stats.dp.width,
                           r.stats.dp.largest_table,
                           r.exact ? "" : fmt::format(" (bounded: exactly, {:.3g})", r.stats.dp.too_wide_table),
                           (r.stats.table_bytes + r.stats.dp.peak_bytes) / (1024.0 * 1024));
}

// --terms NAME: every time and memory term the plan gives an op, with the formula that priced it.
void print_op_terms(const graph::Graph& g, const strategy::Prediction& p, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    const auto& ops = g.ops();
    const auto it = std::find_if(ops.begin(), ops.end(), [&](const graph::Op& op) { return op.name == name; });
    if (it == ops.end()) {
      continue; // checked before planning
    }
    const auto id = static_cast<std::size_t>(it - ops.begin());
    const auto& c = p.ops[id].cost;
    std::cout << fmt::format("\nterms of op {} '{}' ({}): {} ms in all\n", id, name, it->type, ms(p.ops[id].time));
    Table t({{"term", Table::Align::left}, {"ms"}, {"of it backward"}, {"formula", Table::Align::left}});
    for (const auto& term : c.time) {
      t.add_row({term.name, fmt::format("{:.4f}", term.value * 1e3),
                 term.backward > 0 ? fmt::format("{:.4f}", term.backward * 1e3) : "", term.formula});
    }
    for (const auto& term : c.memory) {
      t.add_row({term.name, mib(term.value) + " MiB", "", term.formula});
    }
    std::cout << t.render();
  }
}

} // namespace

cluster::Cluster cluster_for(const std::string& spec, int devices) {
  auto c = cluster::load_cluster(spec);
  if (devices > c.device_count() && spec.find('?') == std::string::npos && spec.find('/') == std::string::npos &&
      spec.find(".json") == std::string::npos) {
    // A preset grows by whole nodes to fit the request.
    c = cluster::load_cluster(
        fmt::format("{}?nodes={}", spec, (devices + c.devices_per_node - 1) / c.devices_per_node));
  }
  if (devices > c.device_count()) {
    throw Error(fmt::format("{} devices requested, cluster '{}' has {}", devices, c.name, c.device_count()));
  }
  return c;
}

std::string config_text(const strategy::OpAssignment& a, const graph::OpSemantics& s) {
  std::string text = sharding::to_string(a.config, s);
  if (a.copies() > 1) {
    text += fmt::format(" x{} copies", a.copies());
  }
  return text;
}

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand("plan", "Plan one strategy family: per-layer split, time and memory terms");
  o->model.add_to(*cmd);
  o->setup.add_to(*cmd);
  cmd->add_option("--devices", o->devices, "devices to use")
      ->check(whole(1, max_devices, "devices"))
      ->capture_default_str();
  std::vector<std::string> families;
  for (const auto& f : search::optimizers()) {
    families.emplace_back(f->name());
  }
  o->setup.strategy_option =
      cmd->add_option("--strategy", o->family,
                      fmt::format("strategy family: {} (see partita compare --help)", fmt::join(families, ", ")))
          ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "write the plan as JSON (partita.proto's Plan)");
  cmd->add_flag("--json", o->json, "print the plan as JSON instead of a table");
  cmd->add_option("--terms", o->terms,
                  "after the table, every time and memory term of the named op (repeatable), with the formula that "
                  "priced it");
  cmd->add_option("--cost-model", o->cost_model,
                  "partita, or pase: PaSE's benchmark graphs (zoo:pase?graph=alexnet|resnet101|inception3|rnnlm|"
                  "transformer[&batch=N]) priced as its reference implementation does, in FLOPs")
      ->check(CLI::IsMember({"partita", "pase"}))
      ->capture_default_str();
  o->flops_option = cmd->add_option("--flops", o->flops, "with --cost-model pase: TFLOP/s of a device")
                        ->check(real(1e-9, 1e9, "TFLOP/s"))
                        ->capture_default_str();
  o->bw_option = cmd->add_option("--bw", o->bw, "with --cost-model pase: GB/s between devices")
                     ->check(real(1e-9, 1e9, "GB/s"))
                     ->capture_default_str();
  cmd->callback([o, cmd] {
    if (o->cost_model == "pase") {
      plan_pase(*o, *cmd);
      return;
    }
    if (o->flops_option->count() > 0 || o->bw_option->count() > 0) {
      throw Error("--flops and --bw set PaSE's machine: they apply with --cost-model pase only (the partita cost "
                  "model reads the cluster)");
    }
    o->model.check_output(o->output, "-o");
    const auto model = o->model.load();
    const auto& g = model.graph;
    for (const auto& name : o->terms) { // before anything is planned or printed
      if (std::none_of(g.ops().begin(), g.ops().end(), [&](const graph::Op& op) { return op.name == name; })) {
        throw Error(
            fmt::format("--terms {}: {} has no op of that name (partita inspect lists them)", name, o->model.model));
      }
    }
    if (o->json && !o->terms.empty()) {
      throw Error("--terms prints a table: it does not go with --json (the plan's JSON carries no formulas)");
    }
    const auto cl = cluster_for(o->setup.cluster, o->devices);
    const auto planned = make_plan(g, cl, o->devices, o->setup, o->family, o->model);
    const auto& st = planned.strategy;
    const auto& p = planned.prediction;
    const auto& plan = planned.plan;
    const auto& family = search::find_optimizer(st.family);
    if (!o->output.empty()) {
      io::write_json_file(o->output, plan);
    }
    if (o->json) {
      std::cout << io::to_json(plan);
      return;
    }
    std::vector<Table::Column> columns{{"#"},
                                       {"op", Table::Align::left},
                                       {"name", Table::Align::left},
                                       {"configuration", Table::Align::left},
                                       {"compute ms"},
                                       {"comm ms"},
                                       {"redist ms"},
                                       {"memory MiB"},
                                       {"share"}};
    if (st.pipeline) {
      columns.insert(columns.begin() + 1, {"stage"});
    }
    if (planned.search) {
      columns.push_back({"runner-up (+ms)", Table::Align::left});
    }
    Table t(columns);
    for (graph::OpId id : g.topological_order()) {
      const auto& op = g.op(id);
      const auto& pred = p.ops[static_cast<std::size_t>(id)];
      const double redist = pred.cost.redistribution_time();
      const double comm = std::max(0.0, pred.cost.communication_time() - redist);
      std::vector<std::string> row{
          std::to_string(id),
          op.type,
          op.name.size() > 40 ? op.name.substr(0, 37) + "..." : op.name,
          config_text(st.ops[static_cast<std::size_t>(id)], graph::describe(g, id)),
          ms(pred.cost.compute_time()),
          ms(comm),
          ms(redist),
          mib(pred.cost.memory_total()),
          fmt::format("{:.1f}%", p.additive_time > 0 ? 100 * pred.time / p.additive_time : 0.0)};
      if (st.pipeline) {
        row.insert(row.begin() + 1, std::to_string(st.pipeline->stage_of_op[static_cast<std::size_t>(id)]));
      }
      if (planned.search) {
        const auto& r = planned.search->ops[static_cast<std::size_t>(id)];
        row.push_back(r.has_runner_up
                          ? fmt::format("{} (+{:.3f})", sharding::to_string(r.runner_up, graph::describe(g, id)),
                                        r.runner_up_delta * 1e3)
                          : "-");
      }
      t.add_row(std::move(row));
    }
    std::cout << fmt::format("plan {} on {} ({} of {} devices), {}: {}\n{}\n\n", o->model.model, cl.name, o->devices,
                             cl.device_count(), family.name(), family.title(), st.explanation);
    std::cout << t.render();
    std::string terms;
    for (const auto& term : p.iteration) {
      terms += fmt::format("{}{} {} ms", terms.empty() ? "" : ", ", term.name, ms(term.value));
    }
    if (p.simulated) {
      std::cout << fmt::format(
          "\niteration {} ms simulated (overlap, pipeline schedule, shared links); its terms add up "
          "to {} ms: {}\nthroughput {:.1f} samples/s at batch {}\n",
          ms(p.iteration_time), ms(p.additive_time), terms, p.samples_per_second, p.batch);
    } else {
      std::cout << fmt::format("\niteration {} ms ({})\nthroughput {:.1f} samples/s at batch {}\n",
                               ms(p.iteration_time), terms, p.samples_per_second, p.batch);
    }
    std::cout << fmt::format("peak memory {} GiB of {} GiB per device: {}\n", gib(p.peak_memory),
                             gib(p.memory_capacity), p.fits ? "fits" : "DOES NOT FIT");
    for (const auto& note : p.notes) {
      std::cout << "note: " << note << '\n';
    }
    if (planned.search) {
      print_family_comparison(*planned.search, planned.prediction, g, cl, *o);
    }
    if (planned.three_d) {
      print_pareto_front(*planned.three_d, *o);
    }
    print_op_terms(g, p, o->terms);
    if (!o->output.empty()) {
      std::cout << fmt::format("plan written to {}\n", o->output);
    }
  });
}

} // namespace partita::cli
