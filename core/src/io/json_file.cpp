#include "partita/io/json_file.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace partita::io {

namespace {

std::string errno_text(int error) {
  return std::strerror(error);
}

// Closes a file descriptor and removes the temporary file unless the write was committed, so a
// failure at any step leaves neither a stray temporary nor a half-written target.
class TemporaryFile {
public:
  TemporaryFile(int fd, std::string path) : m_fd(fd), m_path(std::move(path)) {}
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (m_fd >= 0) {
      ::close(m_fd);
    }
    if (!m_committed) {
      ::unlink(m_path.c_str());
    }
  }

  int fd() const { return m_fd; }
  const std::string& path() const { return m_path; }
  // Returns 0 or the errno of close (which can report a deferred write error).
  int close() {
    const int result = ::close(m_fd);
    m_fd = -1;
    return result == 0 ? 0 : errno;
  }
  void commit() { m_committed = true; }

private:
  int m_fd;
  std::string m_path;
  bool m_committed = false;
};

void write_all(int fd, std::string_view contents, const std::filesystem::path& target) {
  while (!contents.empty()) {
    const ssize_t written = ::write(fd, contents.data(), contents.size());
    if (written < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw Error(fmt::format("{}: cannot write: {}", target.string(), errno_text(errno)));
    }
    contents.remove_prefix(static_cast<std::size_t>(written));
  }
}

} // namespace

void parse_json(std::string_view json, std::string_view source, google::protobuf::Message& message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  message.Clear();
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &message, options);
  if (!status.ok()) {
    throw Error(fmt::format("{}: {}", source, std::string(status.message())));
  }
}

std::string read_text_file(const std::filesystem::path& path, std::uintmax_t max_bytes) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    throw Error(fmt::format("{}: cannot open: no such file", path.string()));
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw Error(fmt::format("{}: not a regular file ({}): give the path of a file", path.string(),
                            std::filesystem::is_directory(status) ? "a directory"
                            : std::filesystem::is_fifo(status)    ? "a FIFO"
                                                                  : "a device or socket"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(fmt::format("{}: cannot open: {}", path.string(), errno_text(errno)));
  }
  // Read at most one byte past the limit: a file that grows while read is bounded too.
  std::string text;
  std::array<char, 1 << 16> chunk{};
  while (in) {
    in.read(chunk.data(), chunk.size());
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
    if (text.size() > max_bytes) {
      throw Error(fmt::format(
          "{}: larger than {}, more than any file of this kind: is it the right file?", path.string(),
          max_bytes >= (1u << 20) ? fmt::format("{} MiB", max_bytes >> 20) : fmt::format("{} bytes", max_bytes)));
    }
  }
  if (in.bad()) {
    throw Error(fmt::format("{}: cannot read", path.string()));
  }
  return text;
}

void read_json_file(const std::filesystem::path& path, google::protobuf::Message& message) {
  parse_json(read_text_file(path), path.string(), message);
}

std::string to_json(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  const auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    throw Error(fmt::format("cannot convert {} to JSON: {}", message.GetTypeName(), std::string(status.message())));
  }
  return out;
}

void write_json_file(const std::filesystem::path& path, const google::protobuf::Message& message) {
  write_file_atomically(path, to_json(message));
}

namespace {
// Whether `path` (its links followed, as the kernel follows them: /dev/stdout too) is a character
// device or a pipe, which are written in place as any program writes them; never replaced.
bool written_in_place(const std::filesystem::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode));
}

// A symbolic link is written through to its target (replacing the link with a file would cut it).
std::filesystem::path write_target(const std::filesystem::path& path) {
  std::filesystem::path p = path;
  std::error_code ec;
  // Follow the chain (a dangling link too: its target is created), as the kernel's 40 levels do.
  for (int level = 0; level < 40 && std::filesystem::is_symlink(p, ec); ++level) {
    auto target = std::filesystem::read_symlink(p, ec);
    if (ec) {
      break;
    }
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  return p;
}
} // namespace

void check_writable(const std::filesystem::path& requested) {
  if (written_in_place(requested)) {
    if (::access(requested.c_str(), W_OK) != 0) {
      throw Error(fmt::format("{}: cannot be written: {}", requested.string(), errno_text(errno)));
    }
    return;
  }
  const auto path = write_target(requested);
  if (path.filename().empty()) {
    throw Error(fmt::format("{}: not a file name", requested.string()));
  }
  const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::string pattern = (folder / ("." + path.filename().string() + ".tmp-XXXXXX")).string();
  const int fd = ::mkstemp(pattern.data());
  if (fd < 0) {
    throw Error(fmt::format("{}: cannot be written: cannot create a file in {}: {}", requested.string(),
                            folder.string(), errno_text(errno)));
  }
  ::close(fd);
  ::unlink(pattern.c_str());
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    throw Error(fmt::format("{}: cannot be written: it exists and is not a regular file", requested.string()));
  }
}

void write_file_atomically(const std::filesystem::path& requested, std::string_view contents) {
  if (written_in_place(requested)) {
    // A device or a pipe (/dev/stdout, /dev/null): written, and a failure to (/dev/full) said.
    const int fd = ::open(requested.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      throw Error(fmt::format("{}: cannot open for writing: {}", requested.string(), errno_text(errno)));
    }
    try {
      write_all(fd, contents, requested);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0) {
      throw Error(fmt::format("{}: cannot write: {}", requested.string(), errno_text(errno)));
    }
    return;
  }
  const auto path = write_target(requested);
  if (path.filename().empty()) {
    throw Error(fmt::format("{}: not a file name", path.string()));
  }
  // Anything else that is not a regular file (a folder, a block device, a socket) is never
  // replaced by the file written.
  std::error_code kind_error;
  if (std::filesystem::exists(path, kind_error) && !std::filesystem::is_regular_file(path, kind_error)) {
    throw Error(fmt::format("{}: cannot be written: it exists and is not a regular file", requested.string()));
  }
  // The temporary lives beside the target: rename(2) is atomic only within one file system.
  const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::string pattern = (folder / ("." + path.filename().string() + ".tmp-XXXXXX")).string();
  const int fd = ::mkstemp(pattern.data());
  if (fd < 0) {
    throw Error(
        fmt::format("{}: cannot create a temporary file in {}: {}", path.string(), folder.string(), errno_text(errno)));
  }
  TemporaryFile tmp(fd, pattern);

  // mkstemp creates 0600; keep the mode of the file being replaced, else the usual 0644.
  struct stat old {};
  const mode_t mode = ::stat(path.c_str(), &old) == 0 ? (old.st_mode & 07777) : 0644;
  (void)::fchmod(tmp.fd(), mode);

  write_all(tmp.fd(), contents, path);
  if (::fsync(tmp.fd()) != 0) {
    throw Error(fmt::format("{}: cannot flush to disk: {}", path.string(), errno_text(errno)));
  }
  if (const int error = tmp.close(); error != 0) {
    throw Error(fmt::format("{}: cannot write: {}", path.string(), errno_text(error)));
  }
  if (::rename(tmp.path().c_str(), path.c_str()) != 0) {
    throw Error(fmt::format("{}: cannot replace the file: {}", path.string(), errno_text(errno)));
  }
  tmp.commit();

  // Make the rename itself durable; failing here loses nothing already written, so it is not an error.
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

} // namespace partita::io
