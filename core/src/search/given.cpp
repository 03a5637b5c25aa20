// "As given": a strategy read from a plan file (partita.proto's Plan as JSON), so that users can
// write their own and compare it with the families.

#include "search/families.h"

#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "partita/strategy/plan_file.h"

namespace partita::search::detail {

strategy::Strategy given(const Request& r) {
  if (r.plan_file.empty()) {
    throw Error("given: no plan file (partita plan ... -o plan.json writes one; pass it with --plan)");
  }
  proto::Plan plan;
  io::read_json_file(r.plan_file, plan);
  auto st = strategy::from_plan(plan, *r.graph, r.plan_file);
  for (const auto& a : st.ops) {
    for (int d : a.devices) {
      if (d >= r.devices) {
        throw Error(
            fmt::format("{}: the plan uses device {}, but only {} devices are available", r.plan_file, d, r.devices));
      }
    }
  }
  st.devices = r.devices;
  if (plan.family() == "3d") {
    // The 3-D search chose the ZeRO stage, recomputation and sequence parallelism with the layout:
    // they are part of the plan. One given on the command line that differs is refused, not
    // silently replaced either way.
    const auto chosen = strategy::setup_from_proto(plan.setup(), r.plan_file);
    cost::TrainingSetup setup = r.setup;
    const auto hold = [&](bool held, auto typed, auto planned, const char* option, const std::string& text) {
      if (held && typed != planned) {
        throw Error(fmt::format("{}: the 3-D search chose {} for this plan; {} on the command line differs (leave "
                                "it out, or plan again with it held)",
                                r.plan_file, text, option));
      }
    };
    hold(r.held.zero, r.setup.zero_stage, chosen.zero_stage, "--zero", fmt::format("ZeRO stage {}", chosen.zero_stage));
    hold(r.held.recompute, r.setup.recompute, chosen.recompute, "--recompute",
         fmt::format("recompute {}", cost::recompute_name(chosen.recompute)));
    hold(r.held.sequence_parallel, r.setup.sequence_parallel, chosen.sequence_parallel, "--sequence-parallel",
         chosen.sequence_parallel ? "sequence parallelism" : "no sequence parallelism");
    setup.zero_stage = chosen.zero_stage;
    setup.recompute = chosen.recompute;
    setup.sequence_parallel = chosen.sequence_parallel;
    st.setup = setup;
  }
  st.explanation = fmt::format("Read from {}{}{}", r.plan_file, st.explanation.empty() ? "" : ": ", st.explanation);
  st.family = "given";
  return st;
}

} // namespace partita::search::detail
