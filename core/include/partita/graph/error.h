#pragma once

#include <stdexcept>
#include <string>

namespace partita {

// Every error Partita reports to a user: the message names the file, node or field and the reason.
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Long work (a search, a layout) stopped because its caller asked it to.
class Cancelled : public Error {
public:
  Cancelled() : Error("cancelled") {}
};

} // namespace partita
