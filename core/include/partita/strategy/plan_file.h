#pragma once

// A strategy bound to its model and cluster, as partita.proto's Plan: what `partita plan -o`
// writes, what "as given" strategies and partita-run read.

#include "partita/cost/setup.h"
#include "partita/strategy/strategy.h"

#include <string>
#include <string_view>

namespace partita::proto {
class Plan;
class TrainingSetup;
} // namespace partita::proto

namespace partita::strategy {

// A model given as a file gets its checksum recorded (model_checksum).
proto::Plan to_plan(const graph::Graph& g, const cluster::Cluster& cluster, const Strategy& st,
                    const Prediction& prediction, const cost::TrainingSetup& setup, const std::string& model);

// The strategy of a plan, checked against the model: one entry per op with the same names in the
// same order, known dim names, device lists that fit the configuration. Errors name `source`,
// the op and the field.
Strategy from_plan(const proto::Plan& plan, const graph::Graph& g, std::string_view source);

// Throws partita::Error naming `source` and the field when the plan records its model file's
// checksum (model_checksum) and the file now has another: the model changed since the plan was
// made. Nothing to check for zoo models and plans without a checksum.
void check_model_checksum(const proto::Plan& plan, std::string_view source);

proto::TrainingSetup setup_to_proto(const cost::TrainingSetup& setup);
// Errors name the field and list the accepted values.
cost::TrainingSetup setup_from_proto(const proto::TrainingSetup& p, std::string_view source);

} // namespace partita::strategy
