#pragma once

// Checksums that tell whether a file changed (FNV-1a, 64 bits: a change detector, not a guard
// against someone forging a collision): a plan records its model file's, partita-run's ranks
// compare their plan's before starting.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace partita::io {

std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t hash = 0xcbf29ce484222325ULL);
// "fnv1a64:" and 16 hex digits.
std::string checksum_text(std::uint64_t hash);
// The checksum of a regular file's bytes, read in chunks (a model of gigabytes too); throws
// partita::Error naming the path when it is missing, not a regular file or unreadable.
std::string file_checksum(const std::filesystem::path& path);

} // namespace partita::io
