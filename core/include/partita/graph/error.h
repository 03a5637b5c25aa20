#pragma once

#include <stdexcept>
#include <string>

namespace partita {

// Every error Partita reports to a user: the message names the file, node or field and the reason.
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

} // namespace partita
