#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace partita::graph {

using Shape = std::vector<std::int64_t>;

enum class DType : std::uint8_t { f32, f64, f16, bf16, f8, i64, i32, i16, i8, u8, boolean, string, unknown };

// Bytes per element (1 for boolean and f8, 0 for string/unknown).
std::int64_t dtype_size(DType t);
std::string_view dtype_name(DType t);
bool is_floating(DType t);

// What a tensor is to training.
enum class TensorRole : std::uint8_t {
  activation, // produced by an op
  input,      // graph input fed with data (images, token ids)
  parameter,  // trainable weight: has a gradient and optimizer state
  state,      // non-trainable buffer (BatchNorm running mean/var)
  constant,   // shape plumbing, indices, folded values
};
std::string_view role_name(TensorRole r);

// Element count with overflow check; throws partita::Error naming `what` on overflow or a
// negative dimension.
std::int64_t element_count(const Shape& s, std::string_view what);
std::string shape_string(const Shape& s);

} // namespace partita::graph
