#include "partita/strategy/plan_file.h"

#include "partita/io/checksum.h"

#include "partita/graph/error.h"
#include "partita/proto/partita.pb.h"

#include <fmt/format.h>

#include <filesystem>

#include <array>
#include <set>

namespace partita::strategy {

namespace {

template <typename Enum, std::size_t N>
Enum parse_enum(std::string_view value, const std::array<Enum, N>& values, std::string_view (*name)(Enum),
                std::string_view source, std::string_view field) {
  std::vector<std::string_view> names;
  for (Enum e : values) {
    if (name(e) == value) {
      return e;
    }
    names.push_back(name(e));
  }
  throw Error(fmt::format("{}: field '{}': '{}' is not one of {}", source, field, value, fmt::join(names, ", ")));
}

} // namespace

proto::TrainingSetup setup_to_proto(const cost::TrainingSetup& setup) {
  proto::TrainingSetup p;
  p.set_precision(std::string(cluster::precision_name(setup.precision)));
  p.set_optimizer(std::string(cost::optimizer_name(setup.optimizer)));
  p.set_zero_stage(setup.zero_stage);
  p.set_recompute(std::string(cost::recompute_name(setup.recompute)));
  p.set_fp32_gradients(setup.fp32_gradients);
  p.set_sequence_parallel(setup.sequence_parallel);
  return p;
}

cost::TrainingSetup setup_from_proto(const proto::TrainingSetup& p, std::string_view source) {
  using cluster::Precision;
  cost::TrainingSetup s;
  s.precision =
      parse_enum(p.precision().empty() ? "fp32" : p.precision(),
                 std::array{Precision::fp32, Precision::tf32, Precision::fp16, Precision::bf16, Precision::fp8},
                 cluster::precision_name, source, "setup.precision");
  s.optimizer = parse_enum(p.optimizer().empty() ? "adam" : p.optimizer(),
                           std::array{cost::Optimizer::sgd, cost::Optimizer::momentum, cost::Optimizer::adam},
                           cost::optimizer_name, source, "setup.optimizer");
  s.recompute = parse_enum(p.recompute().empty() ? "none" : p.recompute(),
                           std::array{cost::Recompute::none, cost::Recompute::selective, cost::Recompute::full},
                           cost::recompute_name, source, "setup.recompute");
  if (p.zero_stage() < 0 || p.zero_stage() > 3) {
    throw Error(fmt::format("{}: field 'setup.zero_stage': {} is not 0, 1, 2 or 3", source, p.zero_stage()));
  }
  s.zero_stage = p.zero_stage();
  s.fp32_gradients = p.fp32_gradients();
  s.sequence_parallel = p.sequence_parallel();
  return s;
}

void check_model_checksum(const proto::Plan& plan, std::string_view source) {
  if (plan.model_checksum().empty() || plan.model().rfind("zoo:", 0) == 0) {
    return;
  }
  const std::string now = io::file_checksum(std::filesystem::path(plan.model()));
  if (now != plan.model_checksum()) {
    throw Error(fmt::format("{}: field 'model_checksum': the model file '{}' has changed since the plan was made "
                            "(checksum {} then, {} now): make the plan again for this model",
                            source, plan.model(), plan.model_checksum(), now));
  }
}

proto::Plan to_plan(const graph::Graph& g, const cluster::Cluster& cluster, const Strategy& st,
                    const Prediction& prediction, const cost::TrainingSetup& setup, const std::string& model) {
  proto::Plan plan;
  plan.set_model(model);
  std::error_code ec;
  if (model.rfind("zoo:", 0) != 0 && std::filesystem::is_regular_file(std::filesystem::path(model), ec)) {
    plan.set_model_checksum(io::file_checksum(std::filesystem::path(model)));
  }
  plan.set_batch(prediction.batch);
  plan.set_family(st.family);
  plan.set_explanation(st.explanation);
  plan.set_devices(st.devices);
  *plan.mutable_cluster() = cluster::to_proto(cluster);
  *plan.mutable_setup() = setup_to_proto(st.setup.value_or(setup));
  for (std::size_t i = 0; i < st.ops.size(); ++i) {
    const auto id = static_cast<graph::OpId>(i);
    const auto s = graph::describe(g, id);
    auto* op = plan.add_ops();
    op->set_name(g.op(id).name);
    op->set_type(g.op(id).type);
    for (std::size_t d = 0; d < s.dims.size(); ++d) {
      if (st.ops[i].config.splits[d] > 1) {
        auto* split = op->add_splits();
        split->set_dim(s.dims[d].name);
        split->set_factor(st.ops[i].config.splits[d]);
      }
    }
    for (int dev : st.ops[i].devices) {
      op->add_devices(dev);
    }
    if (i < prediction.ops.size()) {
      op->set_time_seconds(prediction.ops[i].time);
      op->set_memory_bytes(prediction.ops[i].cost.memory_total());
    }
  }
  if (st.pipeline) {
    auto* p = plan.mutable_pipeline();
    p->set_stages(st.pipeline->stages);
    p->set_micro_batches(st.pipeline->micro_batches);
    p->set_schedule(std::string(schedule_name(st.pipeline->schedule)));
    if (st.pipeline->chunks > 1) {
      p->set_chunks(st.pipeline->chunks);
    }
    for (int s : st.pipeline->stage_of_op) {
      p->add_stage_of_op(s);
    }
  }
  plan.set_iteration_seconds(prediction.iteration_time);
  plan.set_samples_per_second(prediction.samples_per_second);
  plan.set_peak_memory_bytes(prediction.peak_memory);
  plan.set_fits(prediction.fits);
  return plan;
}

Strategy from_plan(const proto::Plan& plan, const graph::Graph& g, std::string_view source) {
  if (static_cast<std::size_t>(plan.ops_size()) != g.ops().size()) {
    throw Error(
        fmt::format("{}: field 'ops': {} entries, the model has {} ops", source, plan.ops_size(), g.ops().size()));
  }
  Strategy st;
  st.family = plan.family().empty() ? "given" : plan.family();
  st.explanation = plan.explanation();
  st.devices = plan.devices();
  for (int i = 0; i < plan.ops_size(); ++i) {
    const auto& p = plan.ops(i);
    const auto id = static_cast<graph::OpId>(i);
    const auto& op = g.op(id);
    const std::string field = fmt::format("ops[{}]", i);
    if (p.name() != op.name) {
      throw Error(
          fmt::format("{}: field '{}.name': '{}' but the model's op {} is '{}'", source, field, p.name(), i, op.name));
    }
    const auto s = graph::describe(g, id);
    std::vector<std::pair<std::string, int>> splits;
    for (const auto& sp : p.splits()) {
      splits.emplace_back(sp.dim(), sp.factor());
    }
    OpAssignment a;
    try {
      a.config = sharding::make_config(s, splits);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: field '{}.splits': {}", source, field, e.what()));
    }
    a.devices.assign(p.devices().begin(), p.devices().end());
    if (a.devices.empty() || a.devices.size() % static_cast<std::size_t>(a.config.devices()) != 0) {
      throw Error(fmt::format("{}: field '{}.devices': {} devices for a configuration of {}", source, field,
                              a.devices.size(), a.config.devices()));
    }
    // Each device once, and one of the plan's (partita-run gave a device listed twice two blocks
    // of the same op, and crashed).
    std::set<int> seen;
    for (const int d : a.devices) {
      if (d < 0 || (plan.devices() > 0 && d >= plan.devices())) {
        throw Error(fmt::format("{}: field '{}.devices': device {} is not one of the plan's {} devices (0..{})", source,
                                field, d, plan.devices(), plan.devices() - 1));
      }
      if (!seen.insert(d).second) {
        throw Error(fmt::format("{}: field '{}.devices': device {} is listed twice", source, field, d));
      }
    }
    st.ops.push_back(std::move(a));
  }
  // One stage with micro-batches is gradient accumulation (megatron --micro-batch-size): kept.
  if (plan.has_pipeline() && (plan.pipeline().stages() > 1 || plan.pipeline().micro_batches() > 1)) {
    Pipeline pipe;
    pipe.stages = plan.pipeline().stages();
    pipe.micro_batches = plan.pipeline().micro_batches();
    // Each micro-batch holds at least one sample of the batch the plan was made at (a hostile
    // count would have the simulator and the schedule's program run for hours).
    const int batch = std::max(1, plan.batch() > 0 ? plan.batch() : batch_size(g));
    if (pipe.micro_batches < 1 || pipe.micro_batches > batch) {
      throw Error(fmt::format("{}: field 'pipeline.micro_batches': {} micro-batches; the batch of {} allows 1 to {}",
                              source, pipe.micro_batches, batch, batch));
    }
    if (plan.pipeline().schedule() == "gpipe") {
      pipe.schedule = Schedule::gpipe;
    } else if (plan.pipeline().schedule() == "1f1b" || plan.pipeline().schedule().empty()) {
      pipe.schedule = Schedule::one_f_one_b;
    } else if (plan.pipeline().schedule() == "interleaved") {
      pipe.schedule = Schedule::interleaved;
    } else {
      throw Error(fmt::format("{}: field 'pipeline.schedule': '{}' is not gpipe, 1f1b or interleaved", source,
                              plan.pipeline().schedule()));
    }
    if (plan.pipeline().chunks() < 0 || plan.pipeline().chunks() > 4096) {
      throw Error(fmt::format("{}: field 'pipeline.chunks': {} chunks per stage; expected 1 to 4096", source,
                              plan.pipeline().chunks()));
    }
    pipe.chunks = std::max(1, plan.pipeline().chunks());
    try {
      check_schedule(pipe);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: field 'pipeline': {}", source, e.what()));
    }
    pipe.stage_of_op.assign(plan.pipeline().stage_of_op().begin(), plan.pipeline().stage_of_op().end());
    for (int s : pipe.stage_of_op) {
      if (s < 0 || s >= pipe.virtual_stages()) {
        throw Error(fmt::format("{}: field 'pipeline.stage_of_op': stage {} outside 0..{}", source, s,
                                pipe.virtual_stages() - 1));
      }
    }
    st.pipeline = std::move(pipe);
  }
  return st;
}

} // namespace partita::strategy
