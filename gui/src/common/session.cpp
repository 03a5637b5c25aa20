#include "common/session.h"

#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "partita/search/optimizer.h"
#include "partita/strategy/measured.h"

#include <fmt/format.h>

#include <algorithm>

namespace partita::gui {

namespace {

[[noreturn]] void invalid(const std::filesystem::path& path, std::string_view field, std::string_view reason) {
  throw Error(fmt::format("{}: field '{}': {}", path.string(), field, reason));
}

} // namespace

bool SessionState::operator==(const SessionState& other) const {
  if (!(input == other.input && selectedOp == other.selectedOp && sideBySide == other.sideBySide &&
        runs.size() == other.runs.size())) {
    return false;
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& a = *runs[i];
    const auto& b = *other.runs[i];
    if (a.label != b.label || a.log != b.log || a.started != b.started ||
        a.plan.SerializeAsString() != b.plan.SerializeAsString() ||
        a.result.SerializeAsString() != b.result.SerializeAsString()) {
      return false;
    }
  }
  return true;
}

void saveSession(const std::filesystem::path& path, const SessionState& state) {
  const auto& in = state.input;
  proto::Session s;
  s.set_model(in.model);
  s.set_dims(in.dims);
  s.set_values(in.values);
  s.set_cluster(in.cluster);
  s.set_nodes(in.nodes);
  s.set_devices(in.devices);
  s.set_family(in.family);
  *s.mutable_setup() = input_setup_proto(in);
  auto* parallelism = s.mutable_parallelism();
  parallelism->set_tensor_parallel(in.tensor_parallel);
  parallelism->set_stages(in.stages);
  parallelism->set_micro_batches(in.micro_batches);
  parallelism->set_schedule(in.schedule);
  parallelism->set_chunks(in.chunks);
  parallelism->set_balance(in.balance);
  parallelism->set_stage_layout(in.stage_layout);
  s.set_selected_op(state.selectedOp);
  if (!in.custom_cluster.empty()) {
    io::parse_json(in.custom_cluster, "edited cluster", *s.mutable_custom_cluster());
  }
  const auto& b = state.sideBySide;
  auto* side = s.mutable_side_by_side();
  side->set_family(b.family);
  side->set_cluster(b.cluster);
  side->set_nodes(b.nodes);
  side->set_devices(b.devices);
  if (!b.custom_cluster.empty()) {
    io::parse_json(b.custom_cluster, "edited cluster", *side->mutable_custom_cluster());
  }
  for (const auto& run : state.runs) {
    auto& saved = *s.add_runs();
    saved.set_label(run->label.toStdString());
    saved.set_started(run->started.toString(Qt::ISODateWithMs).toStdString());
    *saved.mutable_plan() = run->plan;
    *saved.mutable_result() = run->result;
    saved.set_log(run->log.toStdString());
  }
  io::write_json_file(path, s);
}

SessionState loadSession(const std::filesystem::path& path) {
  return sessionFromJson(io::read_text_file(path), path);
}

SessionState sessionFromJson(std::string_view json, const std::filesystem::path& path) {
  proto::Session s;
  io::parse_json(json, path.string(), s);
  if (s.model().empty()) {
    invalid(path, "model", "missing: a zoo spec (zoo:NAME?...) or an ONNX file path");
  }
  if (s.cluster().empty()) {
    invalid(path, "cluster", "missing: a preset name or a cluster file");
  }
  if (s.devices() < 1) {
    invalid(path, "devices", fmt::format("{} is not a device count (at least 1)", s.devices()));
  }
  if (s.nodes() < 0) {
    invalid(path, "nodes", fmt::format("{} is not a node count", s.nodes()));
  }
  if (s.family().empty()) {
    invalid(path, "family", "missing: a strategy family such as hybrid");
  }
  SessionState state;
  auto& in = state.input;
  in.model = s.model();
  in.dims = s.dims();
  in.values = s.values();
  in.cluster = s.cluster();
  in.nodes = std::max(1, s.nodes());
  in.devices = s.devices();
  in.family = s.family();
  if (s.has_setup()) {
    const auto& setup = s.setup();
    if (!setup.precision().empty()) {
      in.precision = setup.precision();
    }
    if (!setup.optimizer().empty()) {
      in.optimizer = setup.optimizer();
    }
    in.zero_stage = setup.zero_stage();
    if (!setup.recompute().empty()) {
      in.recompute = setup.recompute();
    }
    in.sequence_parallel = setup.sequence_parallel();
    in.fp32_gradients = setup.fp32_gradients();
  }
  if (s.has_parallelism()) {
    const auto& p = s.parallelism();
    in.tensor_parallel = p.tensor_parallel();
    in.stages = p.stages();
    in.micro_batches = p.micro_batches();
    if (!p.schedule().empty()) {
      in.schedule = p.schedule();
    }
    if (p.chunks() != 0) {
      in.chunks = p.chunks();
    }
    if (!p.balance().empty()) {
      in.balance = p.balance();
    }
    in.stage_layout = p.stage_layout();
  }
  // Checked by the core now, so that a bad session changes nothing on screen.
  auto check = [&](std::string_view field, auto&& probe) {
    try {
      probe();
    } catch (const Error& e) {
      invalid(path, field, e.what());
    }
  };
  check("setup", [&] { (void)input_setup(in); });
  check("parallelism", [&] { check_parallelism(in); });
  check("family", [&] { (void)search::find_optimizer(in.family); });
  // An edited cluster is checked by the core's validation, field by field.
  auto custom = [&](std::string_view field, const proto::Cluster& c) {
    if (const auto e = cluster::validate(c)) {
      invalid(path, fmt::format("{}.{}", field, e->field), e->reason);
    }
    return io::to_json(c);
  };
  if (s.has_custom_cluster()) {
    in.custom_cluster = custom("custom_cluster", s.custom_cluster());
  } else {
    check("cluster", [&] { (void)cluster::load_cluster(in.cluster); });
  }
  if (s.has_side_by_side()) {
    const auto& side = s.side_by_side();
    auto& b = state.sideBySide;
    b.family = side.family().empty() ? b.family : side.family();
    b.cluster = side.cluster();
    b.nodes = std::max(1, side.nodes());
    b.devices = std::max(0, side.devices());
    check("side_by_side.family", [&] { (void)search::find_optimizer(b.family); });
    if (side.has_custom_cluster()) {
      b.custom_cluster = custom("side_by_side.custom_cluster", side.custom_cluster());
    } else if (!b.cluster.empty()) {
      check("side_by_side.cluster", [&] { (void)cluster::load_cluster(b.cluster); });
    }
  }
  if (in.model.rfind("zoo:", 0) != 0 && !std::filesystem::exists(in.model)) {
    invalid(path, "model", fmt::format("ONNX file '{}' not found", in.model));
  }
  state.selectedOp = s.selected_op();
  for (int i = 0; i < s.runs_size(); ++i) {
    const auto& saved = s.runs(i);
    const std::string field = fmt::format("runs[{}]", i);
    if (saved.result().ops_size() == 0) {
      invalid(path, field + ".result.ops", "empty: a run measures every op of its model");
    }
    strategy::validate(saved.result(), fmt::format("{}: {}.result", path.string(), field)); // names the field
    auto run = std::make_shared<RunRecord>();
    run->label = QString::fromStdString(saved.label());
    run->started = QDateTime::fromString(QString::fromStdString(saved.started()), Qt::ISODateWithMs);
    if (!saved.started().empty() && !run->started.isValid()) {
      invalid(path, field + ".started", fmt::format("'{}' is not an ISO 8601 date and time", saved.started()));
    }
    run->plan = saved.plan();
    run->result = saved.result();
    run->log = QString::fromStdString(saved.log());
    state.runs.push_back(std::move(run));
  }
  return state;
}

} // namespace partita::gui
