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
  st.explanation = fmt::format("Read from {}{}{}", r.plan_file, st.explanation.empty() ? "" : ": ", st.explanation);
  st.family = "given";
  return st;
}

} // namespace partita::search::detail
