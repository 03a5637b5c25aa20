// Checksums that tell whether a file changed: FNV-1a's published values, a file's checksum in
// chunks equal to its bytes' at once, and readable errors for what is not a file.

#include "partita/graph/error.h"
#include "partita/io/checksum.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace partita::io {
namespace {

TEST(Checksum, Fnv1a64KnownValues) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(checksum_text(0xaf63dc4c8601ec8cULL), "fnv1a64:af63dc4c8601ec8c");
}

TEST(Checksum, FileChecksumReadsInChunks) {
  const auto dir = std::filesystem::temp_directory_path() / "partita-checksum-test";
  std::filesystem::create_directories(dir);
  const auto path = dir / "bytes.bin";
  std::string bytes(3 * (1 << 20) + 17, '\0'); // more than one chunk, not a multiple of it
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>((i * 131) % 251);
  }
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(file_checksum(path), checksum_text(fnv1a64(bytes)));
  std::ofstream(path, std::ios::binary | std::ios::app) << "x"; // one byte more: another checksum
  EXPECT_NE(file_checksum(path), checksum_text(fnv1a64(bytes)));
  try {
    (void)file_checksum(dir);
    FAIL() << "a directory was checksummed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)file_checksum(dir / "missing"), Error);
  std::filesystem::remove_all(dir);
}

} // namespace
} // namespace partita::io
