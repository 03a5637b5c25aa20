// partita calibrate --cluster C -np P [-o FILE] [--quick]: runs `mpirun -np P partita-calibrate`
// (kernel and collective sweeps on this machine), fits the cluster profile on what it measured
// (cost/calibration.h: the figures with which kernel_time and collective_cost reproduce the
// timings), prints the fit per point, and writes the calibrated cluster file that plan, compare
// and run read with --cluster FILE.

#include "commands.h"
#include "launch.h"
#include "model_options.h"
#include "table.h"
#include "validators.h"

#include "partita/cluster/cluster.h"
#include "partita/cost/calibration.h"
#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/launch/launch.h"
#include "partita/proto/partita.pb.h"
#include "partita/search/sweep.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

namespace partita::cli {

namespace {

namespace fs = std::filesystem;

struct CalibrateOptions {
  std::string cluster = "localhost-cpu";
  int ranks = 2;
  std::string output;
  bool quick = false;
  int threads = 1;
  int passes = 0; // 0: partita-calibrate's default
  std::string backend = "cpu";
  LaunchSettings launch;
  int timeout = 1800;
  std::string work_dir;
  std::string measurements; // fit this file instead of running
  // Models whose plans' matrix products are timed at their own shapes (partita-calibrate --products).
  std::vector<std::string> for_models;
};

cluster::Collective collective_named(const std::string& name, const std::string& where) {
  using cluster::Collective;
  for (const auto c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                       Collective::all_to_all, Collective::broadcast, Collective::send_recv}) {
    if (cluster::collective_name(c) == name) {
      return c;
    }
  }
  throw Error(fmt::format("{}: unknown collective '{}'", where, name));
}

struct Measurements {
  cost::CalibrationData data;
  std::string date, host;
  std::string backend; // the kernels' backend as partita-calibrate named it (its device); empty in older files
  int ranks = 0;
  bool quick = false;
  int passes = 1; // of the sweeps
  // How a timing is taken from the passes: "median" (kernels and collectives), or in measurements
  // of earlier versions "fastest" (kernels; their collectives were swept once).
  std::string pass_statistic = "fastest";
};

// partita-calibrate's file; errors name the file and the entry.
Measurements read_measurements(const fs::path& path) {
  const std::string text = io::read_text_file(path);
  Measurements m;
  std::string where = path.string();
  try {
    const auto doc = nlohmann::json::parse(text);
    if (doc.value("format", "") != "partita-calibrate measurements 1") {
      throw Error(fmt::format("{}: field 'format': not a partita-calibrate measurements file", path.string()));
    }
    // Files of earlier versions have no "sweeps": they hold all three.
    if (doc.contains("sweeps") && doc.at("sweeps").size() != 3) {
      throw Error(fmt::format("{}: field 'sweeps': the file holds the sweeps of {} alone (partita-calibrate "
                              "--sweeps), and a fit needs compute, memory and collectives; merge its rows into a full "
                              "calibration's measurements in place of theirs",
                              path.string(), doc.at("sweeps").dump()));
    }
    m.date = doc.at("date").get<std::string>();
    m.host = doc.at("host").get<std::string>();
    m.ranks = doc.at("ranks").get<int>();
    m.quick = doc.at("quick").get<bool>();
    m.passes = doc.value("passes", 1); // absent in measurements of earlier versions: one pass
    m.pass_statistic = doc.value("pass_statistic", "fastest");
    m.backend = doc.value("backend", "");
    m.data.nodes = doc.at("nodes").get<int>();
    m.data.devices_per_node = doc.at("devices_per_node").get<int>();
    m.data.threads = doc.at("threads").get<int>();
    for (const char* field : {"compute", "memory"}) {
      auto& into = std::string(field) == "compute" ? m.data.compute : m.data.memory;
      const auto& rows = doc.at(field);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        where = fmt::format("{}: field '{}[{}]'", path.string(), field, i);
        const auto& r = rows[i];
        cost::KernelSample sample{r.at("kernel").get<std::string>(), r.at("flops").get<double>(),
                                  r.at("bytes").get<double>(), r.at("seconds").get<double>()};
        if (r.contains("class")) { // absent in measurements of earlier versions: eltwise
          const auto name = r.at("class").get<std::string>();
          const auto k = graph::parse_kernel_class(name);
          if (!k) {
            throw Error(fmt::format("{}.class: unknown kernel family '{}'", where, name));
          }
          sample.kernel_class = *k;
        }
        if (r.contains("compute_class")) { // absent in measurements of earlier versions: matmul (GEMMs)
          const auto name = r.at("compute_class").get<std::string>();
          const auto k = graph::parse_compute_class(name);
          if (!k) {
            std::vector<std::string_view> names;
            for (const auto c : graph::all_compute_classes()) {
              names.push_back(graph::compute_class_name(c));
            }
            throw Error(
                fmt::format("{}.compute_class: unknown compute family '{}' ({})", where, name, fmt::join(names, ", ")));
          }
          sample.compute_class = *k;
        }
        // Fresh-read timings (absent in measurements of earlier versions).
        sample.fresh_bytes = r.value("fresh_bytes", 0.0);
        sample.cold_seconds = r.value("cold_seconds", 0.0);
        sample.operand_bytes = r.value("operand_bytes", 0.0); // GEMMs; absent before: no operand bandwidth
        into.push_back(std::move(sample));
      }
    }
    // Products timed at a model's shapes (partita-calibrate --products; absent otherwise).
    if (doc.contains("products")) {
      const auto& products = doc.at("products");
      for (std::size_t i = 0; i < products.size(); ++i) {
        where = fmt::format("{}: field 'products[{}]'", path.string(), i);
        const auto& r = products[i];
        m.data.products.push_back({r.at("batch").get<std::int64_t>(), r.at("m").get<std::int64_t>(),
                                   r.at("n").get<std::int64_t>(), r.at("k").get<std::int64_t>(),
                                   r.at("forward").get<double>(), r.at("data_gradient").get<double>(),
                                   r.at("weight_gradient").get<double>()});
      }
    }
    const auto& rows = doc.at("collectives");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      where = fmt::format("{}: field 'collectives[{}]'", path.string(), i);
      const auto& r = rows[i];
      m.data.collectives.push_back({collective_named(r.at("collective").get<std::string>(), where),
                                    r.at("devices").get<std::vector<int>>(), r.at("bytes").get<double>(),
                                    r.at("seconds").get<double>()});
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  return m;
}

std::string percent(double x) {
  return fmt::format("{:+.1f}%", 100 * x);
}

std::string fit_table(const std::vector<cost::FitPoint>& points, const char* work_title, double work_unit,
                      const char* unit_name) {
  Table t({{"measurement", Table::Align::left},
           {fmt::format("{} ({})", work_title, unit_name)},
           {"measured us"},
           {"predicted us"},
           {"error"}});
  for (const auto& p : points) {
    t.add_row({p.what, fmt::format("{:.4g}", p.work / work_unit), fmt::format("{:.2f}", p.measured * 1e6),
               fmt::format("{:.2f}", p.predicted * 1e6), percent(p.error())});
  }
  const auto q = cost::fit_quality(points);
  return t.render() + fmt::format("median |error| {:.1f}%, largest {:.1f}% over {} points\n", 100 * q.median_abs,
                                  100 * q.max_abs, points.size());
}

// The fitted fraction of peak of every compute family at a few sizes, the GEMM curve first.
std::string efficiency_table(const cluster::Device& d) {
  std::vector<Table::Column> columns{{"FLOP per call"}, {"matmul"}};
  for (const auto& [family, curve] : d.compute_efficiency_by_class) {
    columns.push_back({std::string(graph::compute_class_name(family))});
  }
  Table t(columns);
  for (const double flops : {1e5, 1e6, 1e7, 1e8, 1e9, 1e10}) {
    std::vector<std::string> row{fmt::format("{:.0e}", flops), fmt::format("{:.3f}", d.compute_efficiency.at(flops))};
    for (const auto& [family, curve] : d.compute_efficiency_by_class) {
      row.push_back(fmt::format("{:.3f}", curve.at(flops)));
    }
    t.add_row(row);
  }
  return t.render();
}

std::string quality_text(const char* what, const std::vector<cost::FitPoint>& points) {
  const auto q = cost::fit_quality(points);
  return fmt::format("{} median |error| {:.1f}% (largest {:.1f}%, {} points)", what, 100 * q.median_abs,
                     100 * q.max_abs, points.size());
}

} // namespace

void add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  auto* cmd = app.add_subcommand("calibrate",
                                 "Measure this machine (mpirun + partita-calibrate: kernel and collective sweeps) and "
                                 "write a calibrated cluster file for --cluster");
  cmd->add_option("--cluster", o->cluster, "the cluster to calibrate (preset or file): names, capacity and link kinds")
      ->capture_default_str();
  cmd->add_option("-n,--np", o->ranks, "MPI ranks, one per device (-np P also works)")
      ->check(whole(1, 4096, "ranks"))
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "the calibrated cluster file (default: <cluster>-calibrated.json)");
  cmd->add_flag("--quick", o->quick, "fewer sizes and shorter trials (collectives up to 4 MiB)");
  cmd->add_option("--threads", o->threads, "compute threads per rank (OMP_NUM_THREADS)")
      ->check(whole(1, 1024, "threads"))
      ->capture_default_str();
  cmd->add_option("--passes", o->passes,
                  "passes of the kernel and collective sweeps, each timing keeping its median, against a shared "
                  "host's slow spells and swings (default 3; 1 with --quick)")
      ->check(whole(1, 100, "passes"));
  cmd->add_option("--backend", o->backend,
                  "whose kernels are measured: cpu (oneDNN) or cuda (cuBLAS/cuDNN, one GPU per rank; the collectives "
                  "are MPI's either way)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout, "seconds before mpirun ends a run that hangs")
      ->check(whole(1, 7 * 24 * 3600, "seconds"))
      ->capture_default_str();
  cmd->add_option("--work-dir", o->work_dir, "where the measurements go (default: a new temporary directory)");
  add_launch_options(*cmd, o->launch,
                     "partita-calibrate must be at the same path on every host, and rank 0 (the first host) writes "
                     "the measurements into --work-dir, which this machine must see. Ranks are placed node by node, "
                     "as the calibrated cluster numbers its devices");
  cmd->add_option("--for-model", o->for_models,
                  "a model (zoo spec or ONNX file) whose matrix products are timed at the shapes its plans run them "
                  "on these devices (every family but pipelines); the cost model prices those shapes at their "
                  "measured times instead of the efficiency curve's (a product's rate follows its shape, not only its "
                  "FLOPs). Give it once per model");
  cmd->add_option("--measurements", o->measurements,
                  "fit a measurements file written by partita-calibrate instead of running it");
  cmd->callback([o] {
    if (!o->output.empty()) {
      io::check_writable(o->output); // before minutes of calibration, not after
    }
    fs::path measurements = o->measurements;
    if (!measurements.empty()) {
      // What would start a calibration run means nothing to a fit of an earlier one.
      for (const auto& [given, what] :
           {std::pair{!o->launch.hostfile.empty(), "--hostfile"}, std::pair{!o->for_models.empty(), "--for-model"},
            std::pair{o->launch.launcher != "mpirun", "--launcher"}, std::pair{o->backend != "cpu", "--backend"}}) {
        if (given) {
          throw Error(fmt::format("{} is a setting of the calibration run, and --measurements fits the file of an "
                                  "earlier one instead of starting one: give one or the other",
                                  what));
        }
      }
    }
    if (measurements.empty()) {
      launch::MpiJob job = checked_job(o->launch, o->ranks, o->threads, o->timeout);
      const fs::path program = launch::find_runtime_program("partita-calibrate", "PARTITA_CALIBRATE");
      require_launcher(launch::launcher_program(job));
      const fs::path dir = launch::make_work_dir(o->work_dir, "partita-calibrate");
      measurements = dir / "measurements.json";
      std::vector<std::string> arguments{"-o", measurements.string(), "--threads", std::to_string(o->threads)};
      if (o->quick) {
        arguments.emplace_back("--quick");
      }
      if (o->passes > 0) {
        arguments.insert(arguments.end(), {"--passes", std::to_string(o->passes)});
      }
      if (o->backend != "cpu") {
        arguments.insert(arguments.end(), {"--backend", o->backend});
      }
      if (!o->for_models.empty()) {
        // The products every family's plan of each model runs on one of these devices.
        const cluster::Cluster target = cluster_for(o->cluster, o->ranks);
        std::vector<std::string> families;
        for (const auto& f : search::optimizers()) {
          if (f->name() != "given") {
            families.emplace_back(f->name());
          }
        }
        nlohmann::json shapes = nlohmann::json::array();
        std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>> seen;
        for (const auto& spec : o->for_models) {
          ModelOptions model;
          model.model = spec;
          const auto imported = model.load();
          const auto products = search::plan_products(imported.graph, target, o->ranks, families);
          std::cout << fmt::format("{}: {} matrix product shape(s) in its plans on {} devices\n", spec, products.size(),
                                   o->ranks);
          for (const auto& p : products) {
            if (seen.emplace(p.batch, p.m, p.n, p.k).second) {
              shapes.push_back({{"batch", p.batch}, {"m", p.m}, {"n", p.n}, {"k", p.k}});
            }
          }
        }
        const fs::path products = dir / "products.json";
        io::write_file_atomically(products, shapes.dump(1) + "\n");
        arguments.insert(arguments.end(), {"--products", products.string()});
      }
      job.program = program;
      job.arguments = arguments;
      const std::string command = launch::shell_line(launch::job_command(job));
      std::cout << fmt::format("running: {}\n", command) << std::flush;
      const auto [status, output] = run_streaming(command);
      if (status != 0) {
        throw Error(fmt::format("the calibration run failed (exit status {}); its output is above", status));
      }
      if (!fs::exists(measurements)) {
        throw Error(fmt::format("the calibration run ended without writing {}", measurements.string()));
      }
    }
    const Measurements m = read_measurements(measurements);
    const auto& d = m.data;
    const cluster::Cluster base = cluster_for(o->cluster, d.nodes * d.devices_per_node);
    auto cal = cost::calibrate(base, d);
    auto& c = cal.cluster;

    for (const auto& w : cal.warnings) {
      std::cerr << "partita calibrate: warning: " << w << "\n";
    }
    std::cout << "\nfit: compute (GEMMs; kernel_time with the calibrated peak and compute efficiency curve"
              << (c.device.matmul_operand_bandwidth > 0 ? ", and the operands at the matmul operand bandwidth" : "")
              << ")\n"
              << fit_table(cal.compute, "work", 1, "FLOP");
    for (const auto& [family, points] : cal.compute_by_class) {
      std::cout << fmt::format("\nfit: compute ({} kernels; kernel_time with the calibrated peak and the {} "
                               "efficiency curve)\n",
                               graph::compute_class_name(family), graph::compute_class_name(family))
                << fit_table(points, "work", 1, "FLOP");
    }
    if (!c.device.compute_efficiency_by_class.empty()) {
      std::cout << fmt::format("\ncompute efficiency by family (fraction of peak_fp32 {:.4g} GFLOP/s)\n",
                               c.device.peak_fp32 / 1e9)
                << efficiency_table(c.device);
    }
    if (!cal.products.empty()) {
      std::cout << fmt::format("\nproducts timed at the models' shapes ({}; priced at these times for those shapes, "
                               "device.timed_products): measured against the curves above\n",
                               o->for_models.empty() ? std::string("as the measurements hold them")
                                                     : fmt::format("{}", fmt::join(o->for_models, ", ")))
                << fit_table(cal.products, "work", 1, "FLOP");
    }
    std::cout << "\nfit: memory-bound kernels (kernel_time with the calibrated bandwidth and memory efficiency curve)\n"
              << fit_table(cal.memory, "bytes", 1, "B");
    if (!cal.collectives.empty()) {
      std::cout << "\nfit: collectives (collective_cost with the fitted latency and bandwidth)\n"
                << fit_table(cal.collectives, "size", 1, "B");
    }

    const auto link_text = [](const cost::LinkFit& f) {
      std::string text = fmt::format("alpha {:.3g} us, beta {:.3g} GB/s", f.link.latency * 1e6, f.link.bandwidth / 1e9);
      for (const auto& p : f.link.protocols) {
        text += fmt::format(", from {:.4g} B messages alpha {:.3g} us, beta {:.3g} GB/s", p.from_bytes, p.latency * 1e6,
                            p.bandwidth / 1e9);
      }
      std::vector<std::string> own;
      for (const auto& c : f.link.collectives) {
        std::string figures = fmt::format("{} beta {:.3g} GB/s", c.collective, c.bandwidth / 1e9);
        for (const auto& p : c.protocols) {
          figures += fmt::format(" (from {:.4g} B {:.3g} GB/s)", p.from_bytes, p.bandwidth / 1e9);
        }
        own.push_back(std::move(figures));
      }
      return fmt::format("{} ({} collective timings){}", text, f.samples,
                         own.empty()
                             ? std::string()
                             : fmt::format("; figures of their own (Link.collectives): {}", fmt::join(own, ", ")));
    };
    std::string links;
    if (cal.intra) {
      links += "; inside a node " + link_text(*cal.intra);
    }
    if (cal.inter) {
      links += "; between nodes " + link_text(*cal.inter);
    }
    // GEMMs set compute_efficiency; the other families (convolutions) their own curves, over one peak.
    std::string families, family_fits;
    for (const auto& [family, points] : cal.compute_by_class) {
      families += fmt::format(" and {} {} timings (their own curve in device.compute_classes)", points.size(),
                              graph::compute_class_name(family));
      family_fits += "; " + quality_text(std::string(graph::compute_class_name(family)).c_str(), points);
    }
    // Fresh reads: the range of the fitted fraction, beside the kernels that gave it.
    std::string fresh;
    if (!c.device.fresh_read.points.empty()) {
      double lo = 1, hi = 0;
      for (const auto& [bytes, r] : c.device.fresh_read.points) {
        lo = std::min(lo, r);
        hi = std::max(hi, r);
      }
      fresh = fmt::format("; a read of what the kernel before just wrote costs {:.2f} to {:.2f} of a read from memory "
                          "(device.fresh_read, from ReLU and Add timed on fresh and on cold inputs)",
                          lo, hi);
    }
    for (const auto& [k, curve] : c.device.fresh_read_by_class) {
      double lo = 1, hi = 0;
      for (const auto& [bytes, r] : curve.points) {
        lo = std::min(lo, r);
        hi = std::max(hi, r);
      }
      fresh += fmt::format("; {} kernels' {:.2f} to {:.2f} (their device.kernel_classes entry's fresh_read)",
                           graph::kernel_class_name(k), lo, hi);
    }
    // GEMMs that read their operands from memory on top of their arithmetic (a large weight on few rows).
    if (c.device.matmul_operand_bandwidth > 0) {
      families += fmt::format(", the matrix products' operands read from memory at {:.3g} GB/s on top of the "
                              "arithmetic "
                              "(device.matmul_operand_bandwidth)",
                              c.device.matmul_operand_bandwidth / 1e9);
    }
    if (!c.device.timed_products.empty()) {
      families += fmt::format(
          ", and {} matrix products timed at the shapes models' plans run them (--for-model; "
          "device.timed_products: those shapes are priced at their measured times; median |error| of the curves "
          "on them {:.1f}%)",
          c.device.timed_products.size(), 100 * cost::fit_quality(cal.products).median_abs);
    }
    c.name = base.name + "-calibrated";
    c.description = fmt::format(
        "Calibrated by `partita calibrate{}` on {} on host {}{}: {} MPI rank(s) on {} node(s), {} compute thread(s) "
        "per rank, from '{}' (whose device name and memory capacity it keeps); {}. "
        "peak_fp32 {:.4g} GFLOP/s is the highest "
        "compute rate fitted over {} GEMMs{}, "
        "memory_bandwidth "
        "{:.4g} GB/s the highest memory-bound rate fitted over {} kernels (eltwise, and per kernel family: "
        "transcendental, reduction, normalization, gather, copy, transpose); the efficiency curves are the fitted "
        "rates over it{}, and kernel_launch_overhead is 0 because the curves carry the per-call cost{}. "
        "Collective latency/bandwidth are least squares on core's alpha-beta formulas, one pair per range of message "
        "sizes where the link changes protocol. Fit: {}{}; {}; {}. Valid for runs "
        "with the same ranks per node and threads per rank.",
        m.quick ? " --quick" : "", m.date, m.host,
        m.backend.empty() ? std::string() : fmt::format(", backend {}", m.backend), m.ranks, d.nodes, d.threads,
        base.name,
        m.pass_statistic == "median"
            ? fmt::format("each kernel and collective timing is the median of {} pass(es)", m.passes)
            : fmt::format("each kernel timing is the fastest of {} pass(es)", m.passes),
        c.device.peak_fp32 / 1e9, cal.compute.size(), families, c.device.memory_bandwidth / 1e9, d.memory.size(), fresh,
        links, quality_text("compute", cal.compute), family_fits, quality_text("memory", cal.memory),
        quality_text("collectives", cal.collectives));

    const fs::path output = o->output.empty() ? fs::path(base.name + "-calibrated.json") : fs::path(o->output);
    io::write_json_file(output, cluster::to_proto(c));
    cluster::load_cluster(output.string()); // what plan/compare/run will read: it must validate
    std::cout << fmt::format(
        "\ncalibrated cluster '{}' ({} x {} devices): peak_fp32 {:.4g} GFLOP/s (was {:.4g}), memory bandwidth {:.4g} "
        "GB/s (was {:.4g}){}{}\nwritten to {} (use --cluster {})\n",
        c.name, c.nodes, c.devices_per_node, c.device.peak_fp32 / 1e9, base.device.peak_fp32 / 1e9,
        c.device.memory_bandwidth / 1e9, base.device.memory_bandwidth / 1e9,
        c.device.matmul_operand_bandwidth > 0
            ? fmt::format(", matmul operand bandwidth {:.3g} GB/s", c.device.matmul_operand_bandwidth / 1e9)
            : std::string(),
        links, output.string(), output.string());
  });
}

} // namespace partita::cli
