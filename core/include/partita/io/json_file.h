#pragma once

// Files are protobuf's JSON mapping of partita.proto messages, parsed by protobuf, never by hand.
// Writers replace files atomically; readers name the file and the field that does not parse.

#include <google/protobuf/message.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace partita::io {

// Parses `json` into `message`; throws partita::Error "<source>: <protobuf's reason, naming the
// field>". Unknown fields are errors (a misspelt field must not be silently ignored).
void parse_json(std::string_view json, std::string_view source, google::protobuf::Message& message);
void read_json_file(const std::filesystem::path& path, google::protobuf::Message& message);

// The largest text file a reader takes (plans, clusters, sessions, measurements): far above any
// real one, and a bound on what a wrong path (a device, a huge log) can make us read.
inline constexpr std::uintmax_t max_text_file_bytes = std::uintmax_t{256} << 20;

// The whole of a regular file of at most `max_bytes`; throws partita::Error naming the path when it
// is missing, not a regular file (a directory, a device such as /dev/zero, a FIFO), larger, or
// unreadable. Every text file reader goes through this.
std::string read_text_file(const std::filesystem::path& path, std::uintmax_t max_bytes = max_text_file_bytes);

// Pretty-printed JSON with every field present (defaults included), so files are diffable.
std::string to_json(const google::protobuf::Message& message);
// Writes `path` atomically (temporary file in the same folder, then rename); throws
// partita::Error naming the path on failure, leaving any previous file intact.
void write_json_file(const std::filesystem::path& path, const google::protobuf::Message& message);
// Writes any text atomically, same guarantees. A symbolic link is written through to its target.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);
// Throws partita::Error naming the path when a file could not be written there now (its folder
// missing or read-only, the path a directory): checked before work whose result would be lost.
void check_writable(const std::filesystem::path& path);

} // namespace partita::io
