// protobuf's JSON mapping through partita::io: round trips, errors that name the field, and
// atomic replacement that never loses the previous file.

#include "partita/graph/error.h"
#include "partita/io/json_file.h"
#include "partita/proto/partita.pb.h"
#include "test_support.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include <sys/resource.h>
#include <sys/stat.h>

namespace partita {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

proto::Cluster sample() {
  proto::Cluster c;
  c.set_name("sample");
  c.set_nodes(2);
  c.set_devices_per_node(4);
  c.mutable_device()->set_name("gpu");
  c.mutable_device()->set_peak_fp32(1.5e13);
  auto* point = c.mutable_device()->add_compute_efficiency();
  point->set_work(1e9);
  point->set_fraction(0.5);
  c.mutable_intra_node()->mutable_link()->set_kind(proto::NVLINK);
  c.mutable_intra_node()->mutable_link()->set_bandwidth(2.5e10);
  auto* pair = c.mutable_intra_node()->add_pairs();
  pair->set_a(0);
  pair->set_b(3);
  pair->set_lanes(2);
  return c;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(JsonFile, RoundTripKeepsEveryField) {
  const auto original = sample();
  const std::string json = io::to_json(original);
  proto::Cluster back;
  io::parse_json(json, "memory", back);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(original, back)) << json;
}

TEST(JsonFile, WritesProtoNamesAndDefaults) {
  const std::string json = io::to_json(sample());
  EXPECT_THAT(json, HasSubstr("\"devices_per_node\": 4"));
  EXPECT_THAT(json, HasSubstr("\"peak_fp8\": 0")); // defaults are written, so files diff well
  EXPECT_THAT(json, HasSubstr("\"kind\": \"NVLINK\""));
  EXPECT_THAT(json, HasSubstr("\n")); // pretty-printed
}

TEST(JsonFile, UnknownFieldIsAnErrorNamingIt) {
  proto::Cluster c;
  try {
    io::parse_json(R"({"name": "x", "devices_per_nod": 8})", "my.json", c);
    FAIL() << "a misspelt field must not be ignored";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("my.json: "));
    EXPECT_THAT(e.what(), HasSubstr("devices_per_nod"));
  }
}

TEST(JsonFile, WrongTypeIsAnErrorNamingTheField) {
  proto::Cluster c;
  try {
    io::parse_json(R"({"nodes": "many"})", "my.json", c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("my.json: "));
    EXPECT_THAT(e.what(), HasSubstr("nodes"));
  }
  try {
    io::parse_json(R"({"intra_node": {"link": {"bandwidth": true}}})", "my.json", c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("bandwidth"));
  }
}

TEST(JsonFile, MalformedJsonIsAnError) {
  proto::Cluster c;
  EXPECT_THROW(io::parse_json(R"({"nodes": 2)", "broken.json", c), Error);
  EXPECT_THROW(io::parse_json("", "empty.json", c), Error);
}

TEST(JsonFile, MissingFileIsNamed) {
  proto::Cluster c;
  const fs::path path = fs::path(test::scratch_dir()) / "absent.json";
  try {
    io::read_json_file(path, c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path.string()));
  }
}

// What is not a regular file of a sensible size is refused before anything is read: a device that
// never ends, a FIFO no one writes to, a directory, a file past the limit.
TEST(JsonFile, ReadsOnlyRegularFilesOfBoundedSize) {
  proto::Cluster c;
  auto refused = [&c](const fs::path& path, const char* why) {
    EXPECT_THAT([&] { io::read_json_file(path, c); }, ::testing::ThrowsMessage<Error>(HasSubstr(why))) << path;
  };
  refused("/dev/zero", "not a regular file (a device or socket)");
  refused("/dev/urandom", "not a regular file (a device or socket)");
  const fs::path dir = test::scratch_dir();
  refused(dir, "not a regular file (a directory)");
  const fs::path fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  refused(fifo, "not a regular file (a FIFO)");
  const fs::path big = dir / "big.json";
  std::ofstream(big) << std::string(4096, ' ') << "{}";
  EXPECT_THAT([&] { (void)io::read_text_file(big, 1024); },
              ::testing::ThrowsMessage<Error>(HasSubstr("larger than 1024 bytes")));
  EXPECT_EQ(io::read_text_file(big).size(), 4098u);
}

TEST(JsonFile, WritesThroughASymbolicLink) {
  const fs::path dir = test::scratch_dir();
  fs::create_directory(dir / "real");
  fs::create_symlink("real/cluster.json", dir / "link.json"); // dangling until written
  io::write_json_file(dir / "link.json", sample());
  EXPECT_TRUE(fs::is_symlink(dir / "link.json")) << "the link stays a link";
  EXPECT_TRUE(fs::is_regular_file(dir / "real" / "cluster.json"));
  proto::Cluster back;
  io::read_json_file(dir / "link.json", back);
  EXPECT_EQ(back.name(), "sample");
  io::check_writable(dir / "link.json");
  EXPECT_THAT([&] { io::check_writable(dir / "missing-folder" / "x.json"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("cannot be written")));
  EXPECT_THAT([&] { io::check_writable(dir / "real"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("not a regular file")));
}

// A device or a pipe is written in place, as any program writes it, and a failure to is said
// (/dev/full); it is never replaced by a file, nor is a folder. Replacing /dev/full (as root, the
// folder being writable) had turned the device into a regular file.
TEST(JsonFile, WritesDevicesInPlaceAndNeverReplacesWhatIsNotAFile) {
  io::write_file_atomically("/dev/null", "discarded\n");
  EXPECT_NO_THROW(io::check_writable("/dev/null"));
  EXPECT_THAT([] { io::write_file_atomically("/dev/full", "lost\n"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("/dev/full: cannot write")));
  struct stat st {};
  ASSERT_EQ(::stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/full is still the device";
  const fs::path dir = test::scratch_dir();
  fs::create_directory(dir / "folder");
  EXPECT_THAT([&] { io::write_json_file(dir / "folder", sample()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("not a regular file")));
  EXPECT_TRUE(fs::is_directory(dir / "folder"));
  const fs::path fifo = dir / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] {
    std::ifstream in(fifo);
    received.assign(std::istreambuf_iterator<char>(in), {});
  });
  io::write_file_atomically(fifo, "through the pipe\n");
  reader.join();
  EXPECT_EQ(received, "through the pipe\n");
  EXPECT_EQ(fs::status(fifo).type(), fs::file_type::fifo);
}

TEST(JsonFile, WriteThenReadLeavesNoTemporary) {
  const fs::path dir = test::scratch_dir();
  const fs::path path = dir / "cluster.json";
  io::write_json_file(path, sample());
  proto::Cluster back;
  io::read_json_file(path, back);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(sample(), back));
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"cluster.json"});
}

TEST(JsonFile, ReplacesAnExistingFile) {
  const fs::path path = fs::path(test::scratch_dir()) / "cluster.json";
  io::write_file_atomically(path, "old");
  io::write_json_file(path, sample());
  proto::Cluster back;
  io::read_json_file(path, back);
  EXPECT_EQ(back.name(), "sample");
}

TEST(JsonFile, WriteIntoMissingFolderNamesThePath) {
  const fs::path path = fs::path(test::scratch_dir()) / "no" / "such" / "folder" / "cluster.json";
  try {
    io::write_json_file(path, sample());
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path.string()));
  }
}

// A write that fails half-way (the file size limit makes write(2) fail with EFBIG) must leave the
// previous file as it was and no temporary behind.
TEST(JsonFile, FailedWriteKeepsTheOldFile) {
  const fs::path dir = test::scratch_dir();
  const fs::path path = dir / "plan.json";
  io::write_file_atomically(path, "previous contents");

  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    io::write_file_atomically(path, std::string(1 << 20, 'x'));
  } catch (const Error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previous_handler);

  EXPECT_THAT(message, HasSubstr(path.string()));
  EXPECT_EQ(slurp(path), "previous contents");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"plan.json"});
}

TEST(JsonFile, KeepsTheModeOfTheReplacedFile) {
  const fs::path path = fs::path(test::scratch_dir()) / "shared.json";
  io::write_file_atomically(path, "a");
  fs::permissions(path, fs::perms(0640));
  io::write_file_atomically(path, "b");
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::mask, fs::perms(0640));
  EXPECT_EQ(slurp(path), "b");
}

} // namespace
} // namespace partita
