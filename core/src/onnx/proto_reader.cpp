#include "onnx/proto_reader.h"

#include "partita/graph/error.h"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace partita::onnx_import::detail {
namespace {

using google::protobuf::io::CodedInputStream;

// The message kinds whose fields the filter must look into; everything else is copied.
enum class Kind { model, graph, node, attribute, tensor, function, other };

constexpr int max_depth = 64;

// Field numbers from onnx.proto (ONNX 1.12).
Kind child_kind(Kind parent, std::uint32_t field) {
  switch (parent) {
  case Kind::model:
    if (field == 7)
      return Kind::graph; // graph
    if (field == 25)
      return Kind::function; // functions
    return Kind::other;
  case Kind::graph:
    if (field == 1)
      return Kind::node; // node
    if (field == 5)
      return Kind::tensor; // initializer
    return Kind::other;
  case Kind::function:
    if (field == 7)
      return Kind::node; // node
    return Kind::other;
  case Kind::node:
    if (field == 5)
      return Kind::attribute; // attribute
    return Kind::other;
  case Kind::attribute:
    if (field == 5 || field == 10)
      return Kind::tensor; // t, tensors
    if (field == 6 || field == 11)
      return Kind::graph; // g, graphs
    return Kind::other;
  case Kind::tensor:
  case Kind::other: return Kind::other;
  }
  return Kind::other;
}

// TensorProto payload fields: float_data, int32_data, string_data, int64_data, raw_data,
// double_data, uint64_data.
bool is_payload(std::uint32_t field) {
  return field == 4 || field == 5 || field == 6 || field == 7 || field == 9 || field == 10 || field == 11;
}

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

class Filter {
public:
  Filter(CodedInputStream& in, std::string_view source) : m_in(in), m_source(source) {}

  // Copies one message of `kind` (up to the current limit) into `out`, dropping large payloads.
  void message(Kind kind, std::string& out, int depth) {
    if (depth > max_depth) {
      fail("messages are nested more than 64 deep");
    }
    for (;;) {
      const std::uint32_t tag = m_in.ReadTag();
      if (tag == 0) {
        if (!m_in.ConsumedEntireMessage()) {
          fail("invalid field tag");
        }
        return;
      }
      const std::uint32_t field = tag >> 3;
      const std::uint32_t wire = tag & 7;
      if (field == 0) {
        fail("field number 0");
      }
      switch (wire) {
      case 0: { // varint
        std::uint64_t v = 0;
        if (!m_in.ReadVarint64(&v))
          fail("truncated varint");
        put_varint(out, tag);
        put_varint(out, v);
        break;
      }
      case 1: { // 64-bit
        std::uint64_t v = 0;
        if (!m_in.ReadLittleEndian64(&v))
          fail("truncated 64-bit field");
        put_varint(out, tag);
        for (int i = 0; i < 8; ++i)
          out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
        break;
      }
      case 5: { // 32-bit
        std::uint32_t v = 0;
        if (!m_in.ReadLittleEndian32(&v))
          fail("truncated 32-bit field");
        put_varint(out, tag);
        for (int i = 0; i < 4; ++i)
          out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
        break;
      }
      case 2: { // length-delimited
        std::uint32_t length = 0;
        if (!m_in.ReadVarint32(&length) || length > static_cast<std::uint32_t>(INT_MAX))
          fail("bad length");
        if (m_in.BytesUntilLimit() >= 0 && static_cast<std::int64_t>(length) > m_in.BytesUntilLimit()) {
          fail("a field is longer than the data that remains (truncated file?)");
        }
        if (kind == Kind::tensor && is_payload(field) && length > static_cast<std::uint32_t>(kept_payload_bytes)) {
          if (!m_in.Skip(static_cast<int>(length)))
            fail("truncated tensor data");
          ++skipped_payloads;
          break;
        }
        const Kind child = child_kind(kind, field);
        std::string body;
        if (child == Kind::other) {
          if (!m_in.ReadString(&body, static_cast<int>(length)))
            fail("truncated field");
        } else {
          const auto limit = m_in.PushLimit(static_cast<int>(length));
          message(child, body, depth + 1);
          if (m_in.BytesUntilLimit() != 0)
            fail("truncated nested message");
          m_in.PopLimit(limit);
        }
        put_varint(out, tag);
        put_varint(out, body.size());
        out += body;
        break;
      }
      default: fail(fmt::format("unsupported wire type {} in field {}", wire, field));
      }
    }
  }

  int skipped_payloads = 0;

private:
  [[noreturn]] void fail(const std::string& reason) const {
    throw Error(fmt::format("{}: not a valid ONNX model: {} at byte {}", m_source, reason, m_in.CurrentPosition()));
  }

  CodedInputStream& m_in;
  std::string_view m_source;
};

onnx::ModelProto parse(google::protobuf::io::ZeroCopyInputStream& stream, std::string_view source) {
  CodedInputStream in(&stream);
  in.SetTotalBytesLimit(INT_MAX);
  in.SetRecursionLimit(max_depth * 2);
  std::string filtered;
  Filter filter(in, source);
  filter.message(Kind::model, filtered, 0);
  onnx::ModelProto model;
  if (!model.ParseFromString(filtered)) {
    throw Error(fmt::format("{}: not a valid ONNX model: the protobuf does not parse as a ModelProto", source));
  }
  if (!model.has_graph()) {
    throw Error(fmt::format("{}: not a valid ONNX model: it has no graph", source));
  }
  return model;
}

} // namespace

onnx::ModelProto read_model_file(const std::filesystem::path& path) {
  const std::string source = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw Error(fmt::format("{}: no such file", source));
  }
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(fmt::format("{}: is a directory, not an ONNX file", source));
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    throw Error(fmt::format("{}: cannot read: {}", source, ec.message()));
  }
  if (size == 0) {
    throw Error(fmt::format("{}: the file is empty", source));
  }
  if (size > static_cast<std::uintmax_t>(INT_MAX)) {
    throw Error(fmt::format("{}: {} bytes is over protobuf's 2 GiB limit; large models keep their weights as "
                            "external data (onnx.save(..., save_as_external_data=True))",
                            source, size));
  }
  const int fd = ::open(source.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw Error(fmt::format("{}: cannot open: {}", source, std::strerror(errno)));
  }
  google::protobuf::io::FileInputStream stream(fd);
  stream.SetCloseOnDelete(true);
  return parse(stream, source);
}

onnx::ModelProto read_model_bytes(std::string_view bytes, std::string_view source) {
  if (bytes.empty()) {
    throw Error(fmt::format("{}: the model is empty", source));
  }
  google::protobuf::io::ArrayInputStream stream(bytes.data(), static_cast<int>(bytes.size()));
  return parse(stream, source);
}

} // namespace partita::onnx_import::detail
