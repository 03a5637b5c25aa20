#include "safe_output.h"

#include <cstdio>

namespace partita::cli {

namespace {
bool is_control(unsigned char c) {
  return (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f;
}
} // namespace

SafeOutput::int_type SafeOutput::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) {
    return traits_type::not_eof(c);
  }
  const char ch = traits_type::to_char_type(c);
  return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
}

std::streamsize SafeOutput::xsputn(const char* s, std::streamsize n) {
  std::streamsize start = 0;
  for (std::streamsize i = 0; i < n; ++i) {
    if (!is_control(static_cast<unsigned char>(s[i]))) {
      continue;
    }
    if (i > start && m_inner->sputn(s + start, i - start) != i - start) {
      return start;
    }
    char escaped[8];
    const int len = std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned char>(s[i]));
    if (m_inner->sputn(escaped, len) != len) {
      return i;
    }
    start = i + 1;
  }
  if (n > start && m_inner->sputn(s + start, n - start) != n - start) {
    return start;
  }
  return n;
}

} // namespace partita::cli
