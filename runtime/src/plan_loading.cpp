#include "plan_loading.h"

#include "micro_batch.h"
#include "pipeline_executor.h"

#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "partita/strategy/plan_file.h"
#include "partita/zoo/zoo.h"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>

namespace partita::runtime {
namespace {

// The values of the model's float Constant nodes: the importer reads shapes only, so they come
// from the model itself (rebuilt for a zoo spec, parsed for a file).
std::map<std::string, std::vector<float>, std::less<>> float_constants(const std::string& model) {
  onnx::ModelProto proto;
  if (model.rfind("zoo:", 0) == 0) {
    proto = zoo::build(model);
  } else {
    std::ifstream in(model, std::ios::binary);
    if (!in || !proto.ParseFromIstream(&in)) {
      throw Error(fmt::format("{}: cannot read the ONNX model for its constant values", model));
    }
  }
  std::map<std::string, std::vector<float>, std::less<>> out;
  for (const auto& node : proto.graph().node()) {
    if (node.op_type() != "Constant" || node.output_size() != 1) {
      continue;
    }
    for (const auto& a : node.attribute()) {
      if (a.name() == "value_float") {
        out[node.output(0)] = {a.f()};
      } else if (a.name() == "value_floats") {
        out[node.output(0)] = {a.floats().begin(), a.floats().end()};
      } else if (a.name() == "value" && a.t().data_type() == onnx::TensorProto::FLOAT) {
        const auto& t = a.t();
        std::vector<float> v(t.float_data().begin(), t.float_data().end());
        if (v.empty() && !t.raw_data().empty()) {
          v.resize(t.raw_data().size() / sizeof(float));
          std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
        }
        out[node.output(0)] = std::move(v);
      }
    }
  }
  return out;
}

} // namespace

LoadedPlan load_plan(const std::filesystem::path& path, int ranks) {
  const std::string source = path.string();
  proto::Plan plan;
  io::read_json_file(path, plan);
  LoadedPlan out;
  out.model = plan.model();
  out.family = plan.family();
  out.devices = plan.devices();
  out.predicted_iteration_seconds = plan.iteration_seconds();
  if (plan.has_pipeline() && plan.pipeline().stages() > 1 && plan.devices() != ranks) {
    throw Error(fmt::format("{}: field 'pipeline.stages': the plan's {} stages run on {} devices but the job has {} "
                            "ranks (start it with mpirun -np {})",
                            source, plan.pipeline().stages(), plan.devices(), ranks, plan.devices()));
  }
  if (plan.devices() != ranks) {
    throw Error(fmt::format("{}: the plan is for {} devices but the job has {} ranks (start it with mpirun -np {})",
                            source, plan.devices(), ranks, plan.devices()));
  }
  try {
    // The symbolic dimension values the plan was made with; an older plan of an ONNX file gives
    // its 'batch' dim the plan's batch.
    onnx_import::ImportOptions options;
    for (const auto& [name, value] : plan.dims()) {
      options.dims[name] = value;
    }
    for (const auto& text : plan.values()) {
      auto [name, contents] = onnx_import::parse_value(text);
      options.values[name] = std::move(contents);
    }
    if (plan.model().rfind("zoo:", 0) != 0 && plan.batch() > 0 && options.dims.count("batch") == 0) {
      options.dims["batch"] = plan.batch();
    }
    out.imported = zoo::load(plan.model(), options);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: field 'model': {}", source, e.what()));
  }
  strategy::check_model_checksum(plan, source); // the file imported is the one planned
  out.constants = float_constants(plan.model());
  out.strategy = strategy::from_plan(plan, out.imported.graph, source);
  out.setup = strategy::setup_from_proto(plan.setup(), source);
  if (out.pipelined()) {
    stage_ranks(out.imported.graph, out.strategy, ranks, source);
    const int micro = out.strategy.pipeline->micro_batches;
    const int batch = strategy::batch_size(out.imported.graph);
    if (micro > 1) {
      if (batch % micro != 0) {
        throw Error(fmt::format("{}: field 'pipeline.micro_batches': {} micro-batches do not divide the batch of {}",
                                source, micro, batch));
      }
      const std::string spec = with_batch(out.model, batch / micro);
      try {
        out.micro = zoo::load(spec);
        (void)strategy::from_plan(plan, out.micro->graph, source);
      } catch (const Error& e) {
        throw Error(
            fmt::format("{}: the model at the micro-batch size {} ({}): {}", source, batch / micro, spec, e.what()));
      }
      // Every tensor must be a slice of its full-batch self (or the same whole tensor).
      const auto& mg = out.micro->graph;
      const auto& fg = out.imported.graph;
      for (std::size_t id = 0; id < mg.ops().size(); ++id) {
        const auto& a = mg.op(static_cast<graph::OpId>(id));
        const auto& b = fg.op(static_cast<graph::OpId>(id));
        for (std::size_t i = 0; i < std::min(a.inputs.size(), b.inputs.size()); ++i) {
          if (a.inputs[i] != graph::no_tensor && b.inputs[i] != graph::no_tensor) {
            batch_slice(mg.tensor(a.inputs[i]).shape, fg.tensor(b.inputs[i]).shape, micro, mg.tensor(a.inputs[i]).name);
          }
        }
      }
      out.micro_constants = float_constants(spec);
    }
  }
  for (std::size_t i = 0; i < out.strategy.ops.size(); ++i) {
    for (const int d : out.strategy.ops[i].devices) {
      if (d < 0 || d >= ranks) {
        throw Error(
            fmt::format("{}: field 'ops[{}].devices': device {} is not one of the {} ranks", source, i, d, ranks));
      }
    }
  }
  if (out.setup.recompute != cost::Recompute::none) {
    out.notes.push_back("the plan recomputes activations; partita-run keeps them all");
  }
  return out;
}

strategy::Strategy single_device(const graph::Graph& g) {
  strategy::Strategy st;
  st.family = "reference";
  st.devices = 1;
  for (std::size_t id = 0; id < g.ops().size(); ++id) {
    const auto s = graph::describe(g, static_cast<graph::OpId>(id));
    st.ops.push_back({sharding::Config{std::vector<int>(s.dims.size(), 1)}, {0}});
  }
  return st;
}

} // namespace partita::runtime
