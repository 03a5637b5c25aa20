#pragma once

// What the CLI prints comes partly from files others wrote (node and tensor names, graph names):
// a name carrying terminal escape sequences must not drive the user's terminal. SafeOutput wraps a
// stream's buffer and writes control characters other than newline and tab as \xNN, for
// everything printed through that stream, so no printer can forget to.

#include <ostream>
#include <streambuf>

namespace partita::cli {

class SafeOutput : public std::streambuf {
public:
  explicit SafeOutput(std::ostream& stream) : m_stream(stream), m_inner(stream.rdbuf(this)) {}
  ~SafeOutput() override { m_stream.rdbuf(m_inner); }
  SafeOutput(const SafeOutput&) = delete;
  SafeOutput& operator=(const SafeOutput&) = delete;

protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override { return m_inner->pubsync(); }

private:
  std::ostream& m_stream;
  std::streambuf* m_inner;
};

} // namespace partita::cli
