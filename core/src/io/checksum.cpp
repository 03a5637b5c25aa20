#include "partita/io/checksum.h"

#include "partita/graph/error.h"

#include <fmt/format.h>

#include <array>
#include <fstream>

namespace partita::io {

std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t hash) {
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string checksum_text(std::uint64_t hash) {
  return fmt::format("fnv1a64:{:016x}", hash);
}

std::string file_checksum(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw Error(fmt::format("{}: {}", path.string(),
                            std::filesystem::exists(path, ec) ? "not a regular file" : "no such file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(fmt::format("{}: cannot be read", path.string()));
  }
  std::array<char, 1 << 20> chunk{};
  std::uint64_t hash = fnv1a64({});
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    hash = fnv1a64(std::string_view(chunk.data(), static_cast<std::size_t>(in.gcount())), hash);
  }
  if (in.bad()) {
    throw Error(fmt::format("{}: a read failed", path.string()));
  }
  return checksum_text(hash);
}

} // namespace partita::io
