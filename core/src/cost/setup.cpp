#include "partita/cost/setup.h"

namespace partita::cost {

std::string_view optimizer_name(Optimizer o) {
  switch (o) {
  case Optimizer::sgd: return "sgd";
  case Optimizer::momentum: return "momentum";
  case Optimizer::adam: return "adam";
  }
  return "adam";
}

std::string_view recompute_name(Recompute r) {
  switch (r) {
  case Recompute::none: return "none";
  case Recompute::selective: return "selective";
  case Recompute::full: return "full";
  }
  return "none";
}

double TrainingSetup::optimizer_bytes() const {
  const double state = optimizer == Optimizer::adam ? 8.0 : optimizer == Optimizer::momentum ? 4.0 : 0.0;
  return state + (mixed() ? 4.0 : 0.0);
}

double TrainingSetup::optimizer_step_bytes() const {
  const double state = optimizer == Optimizer::adam ? 8.0 : optimizer == Optimizer::momentum ? 4.0 : 0.0;
  return 3 * 4.0 + 2 * state;
}

} // namespace partita::cost
