// Inception-v3 in torchvision's layout without the auxiliary classifier: every convolution is a
// BasicConv2d (conv without bias, BN with epsilon 1e-3, ReLU). 23,834,568 parameters (torchvision's
// 27,161,264 minus the 3,326,696 of AuxLogits) and 5.71 G MACs at 299x299.

#include "zoo/models.h"
#include "zoo/onnx_builder.h"

#include <fmt/format.h>

namespace partita::zoo::detail {

namespace {

constexpr float bn_epsilon = 1e-3f;

struct Net {
  OnnxBuilder& b;

  // BasicConv2d `name` (nodes name.conv, name.bn, name.relu); kernel kh x kw, "same" padding
  // unless `valid`.
  std::string basic(const std::string& name, const std::string& x, std::int64_t in, std::int64_t out, std::int64_t kh,
                    std::int64_t kw, std::int64_t stride = 1, bool valid = false) const {
    const std::int64_t ph = valid ? 0 : kh / 2, pw = valid ? 0 : kw / 2;
    return conv_bn_relu(b, name + ".conv", name + ".bn", name + ".relu", x, {in, out, kh, kw, stride, ph, pw},
                        bn_epsilon);
  }

  std::string max_pool(const std::string& name, const std::string& x) const {
    return b.op("MaxPool", {x}, name, {attr("kernel_shape", Dims{3, 3}), attr("strides", Dims{2, 2})});
  }

  // F.avg_pool2d(x, 3, stride=1, padding=1), which counts the padding in the average.
  std::string avg_pool(const std::string& name, const std::string& x) const {
    return b.op("AveragePool", {x}, name,
                {attr("kernel_shape", Dims{3, 3}), attr("strides", Dims{1, 1}), attr("pads", Dims{1, 1, 1, 1}),
                 attr("count_include_pad", std::int64_t{1})});
  }

  std::string concat(const std::string& name, const std::vector<std::string>& parts) const {
    return b.op("Concat", parts, name, {attr("axis", std::int64_t{1})});
  }

  // Output channels 224 + pool_features.
  std::string block_a(const std::string& n, const std::string& x, std::int64_t in, std::int64_t pool_features) const {
    const auto b1 = basic(n + ".branch1x1", x, in, 64, 1, 1);
    auto b5 = basic(n + ".branch5x5_1", x, in, 48, 1, 1);
    b5 = basic(n + ".branch5x5_2", b5, 48, 64, 5, 5);
    auto b3 = basic(n + ".branch3x3dbl_1", x, in, 64, 1, 1);
    b3 = basic(n + ".branch3x3dbl_2", b3, 64, 96, 3, 3);
    b3 = basic(n + ".branch3x3dbl_3", b3, 96, 96, 3, 3);
    auto bp = avg_pool(n + ".branch_pool.avg_pool", x);
    bp = basic(n + ".branch_pool", bp, in, pool_features, 1, 1);
    return concat(n + ".concat", {b1, b5, b3, bp});
  }

  // Halves the grid; output channels 480 + in.
  std::string block_b(const std::string& n, const std::string& x, std::int64_t in) const {
    const auto b3 = basic(n + ".branch3x3", x, in, 384, 3, 3, 2, true);
    auto bd = basic(n + ".branch3x3dbl_1", x, in, 64, 1, 1);
    bd = basic(n + ".branch3x3dbl_2", bd, 64, 96, 3, 3);
    bd = basic(n + ".branch3x3dbl_3", bd, 96, 96, 3, 3, 2, true);
    const auto bp = max_pool(n + ".branch_pool", x);
    return concat(n + ".concat", {b3, bd, bp});
  }

  // Factorized 7x7 convolutions; output channels 768.
  std::string block_c(const std::string& n, const std::string& x, std::int64_t in, std::int64_t c7) const {
    const auto b1 = basic(n + ".branch1x1", x, in, 192, 1, 1);
    auto b7 = basic(n + ".branch7x7_1", x, in, c7, 1, 1);
    b7 = basic(n + ".branch7x7_2", b7, c7, c7, 1, 7);
    b7 = basic(n + ".branch7x7_3", b7, c7, 192, 7, 1);
    auto bd = basic(n + ".branch7x7dbl_1", x, in, c7, 1, 1);
    bd = basic(n + ".branch7x7dbl_2", bd, c7, c7, 7, 1);
    bd = basic(n + ".branch7x7dbl_3", bd, c7, c7, 1, 7);
    bd = basic(n + ".branch7x7dbl_4", bd, c7, c7, 7, 1);
    bd = basic(n + ".branch7x7dbl_5", bd, c7, 192, 1, 7);
    auto bp = avg_pool(n + ".branch_pool.avg_pool", x);
    bp = basic(n + ".branch_pool", bp, in, 192, 1, 1);
    return concat(n + ".concat", {b1, b7, bd, bp});
  }

  // Halves the grid; output channels 512 + in.
  std::string block_d(const std::string& n, const std::string& x, std::int64_t in) const {
    auto b3 = basic(n + ".branch3x3_1", x, in, 192, 1, 1);
    b3 = basic(n + ".branch3x3_2", b3, 192, 320, 3, 3, 2, true);
    auto b7 = basic(n + ".branch7x7x3_1", x, in, 192, 1, 1);
    b7 = basic(n + ".branch7x7x3_2", b7, 192, 192, 1, 7);
    b7 = basic(n + ".branch7x7x3_3", b7, 192, 192, 7, 1);
    b7 = basic(n + ".branch7x7x3_4", b7, 192, 192, 3, 3, 2, true);
    const auto bp = max_pool(n + ".branch_pool", x);
    return concat(n + ".concat", {b3, b7, bp});
  }

  // Expanded filter bank; output channels 2048.
  std::string block_e(const std::string& n, const std::string& x, std::int64_t in) const {
    const auto b1 = basic(n + ".branch1x1", x, in, 320, 1, 1);
    const auto b3 = basic(n + ".branch3x3_1", x, in, 384, 1, 1);
    const auto b3a = basic(n + ".branch3x3_2a", b3, 384, 384, 1, 3);
    const auto b3b = basic(n + ".branch3x3_2b", b3, 384, 384, 3, 1);
    auto bd = basic(n + ".branch3x3dbl_1", x, in, 448, 1, 1);
    bd = basic(n + ".branch3x3dbl_2", bd, 448, 384, 3, 3);
    const auto bda = basic(n + ".branch3x3dbl_3a", bd, 384, 384, 1, 3);
    const auto bdb = basic(n + ".branch3x3dbl_3b", bd, 384, 384, 3, 1);
    auto bp = avg_pool(n + ".branch_pool.avg_pool", x);
    bp = basic(n + ".branch_pool", bp, in, 192, 1, 1);
    return concat(n + ".concat", {b1, b3a, b3b, bda, bdb, bp});
  }
};

} // namespace

onnx::ModelProto build_inception_v3(const Params& p) {
  const auto batch = p.integer("batch");
  const auto image = p.integer("image");
  // Every valid window along the way must fit: stem convolutions and pools, then the two
  // grid reductions (stride-2 3x3 windows).
  std::int64_t size = image;
  const std::pair<const char*, std::int64_t> reductions[] = {
      {"Conv2d_1a_3x3", 2}, {"Conv2d_2a_3x3", 1}, {"maxpool1", 2}, {"Conv2d_4a_3x3", 1},
      {"maxpool2", 2},      {"Mixed_6a", 2},      {"Mixed_7a", 2}};
  for (const auto& [where, stride] : reductions)
    size = window_out(p, where, size, 3, stride, 0);

  OnnxBuilder b("inception-v3", "Inception-v3 (torchvision layout, without the auxiliary classifier)");
  const Net net{b};
  auto y = b.input("image", {batch, 3, image, image});
  y = net.basic("Conv2d_1a_3x3", y, 3, 32, 3, 3, 2, true);
  y = net.basic("Conv2d_2a_3x3", y, 32, 32, 3, 3, 1, true);
  y = net.basic("Conv2d_2b_3x3", y, 32, 64, 3, 3);
  y = net.max_pool("maxpool1", y);
  y = net.basic("Conv2d_3b_1x1", y, 64, 80, 1, 1);
  y = net.basic("Conv2d_4a_3x3", y, 80, 192, 3, 3, 1, true);
  y = net.max_pool("maxpool2", y);
  y = net.block_a("Mixed_5b", y, 192, 32);
  y = net.block_a("Mixed_5c", y, 256, 64);
  y = net.block_a("Mixed_5d", y, 288, 64);
  y = net.block_b("Mixed_6a", y, 288);
  y = net.block_c("Mixed_6b", y, 768, 128);
  y = net.block_c("Mixed_6c", y, 768, 160);
  y = net.block_c("Mixed_6d", y, 768, 160);
  y = net.block_c("Mixed_6e", y, 768, 192);
  y = net.block_d("Mixed_7a", y, 768);
  y = net.block_e("Mixed_7b", y, 1280);
  y = net.block_e("Mixed_7c", y, 2048);
  y = b.op("GlobalAveragePool", {y}, "avgpool");
  y = b.op("Flatten", {y}, "flatten", {attr("axis", std::int64_t{1})});
  y = gemm(b, "fc", y, 2048, 1000);
  b.output(y);
  return b.finish();
}

} // namespace partita::zoo::detail
