// ResNet-50 and ResNet-101 with bottleneck blocks in torchvision's v1.5 layout: the stride of a
// downsampling block sits on its 3x3 convolution, not on the first 1x1.
//
// ResNet-50 by hand (224x224, batch 1), parameters counting BN scale and bias but not the running
// statistics: stem 9,408 + 128; stages 215,808, 1,219,584, 7,098,368, 14,964,736 (convolutions
// and BN affine); fc 2,049,000; total 25,557,032. MACs: stem conv 118.0 M, stages 3.97 G in all,
// fc 2.05 M: 4.09 G.

#include "zoo/models.h"
#include "zoo/onnx_builder.h"

#include <fmt/format.h>

#include <array>

namespace partita::zoo::detail {

namespace {

constexpr float bn_epsilon = 1e-5f;

std::string bottleneck(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t in,
                       std::int64_t width, std::int64_t stride) {
  const std::int64_t out = 4 * width;
  auto y = conv_bn_relu(b, name + ".conv1", name + ".bn1", name + ".relu1", x, {in, width, 1, 1, 1, 0, 0}, bn_epsilon);
  y = conv_bn_relu(b, name + ".conv2", name + ".bn2", name + ".relu2", y, {width, width, 3, 3, stride, 1, 1},
                   bn_epsilon);
  y = conv(b, name + ".conv3", y, {width, out, 1, 1, 1, 0, 0});
  y = batch_norm(b, name + ".bn3", y, out, bn_epsilon);
  auto identity = x;
  if (stride != 1 || in != out) {
    identity = conv(b, name + ".downsample.0", x, {in, out, 1, 1, stride, 0, 0});
    identity = batch_norm(b, name + ".downsample.1", identity, out, bn_epsilon);
  }
  y = b.op("Add", {y, identity}, name + ".add");
  return b.op("Relu", {y}, name + ".relu3");
}

onnx::ModelProto build_resnet(const Params& p, const std::string& name, const std::array<int, 4>& blocks) {
  const auto batch = p.integer("batch");
  const auto image = p.integer("image");
  OnnxBuilder b(name, fmt::format("{} (torchvision v1.5 layout: stride on the 3x3 convolution)", name));
  auto y = b.input("image", {batch, 3, image, image});
  auto size = window_out(p, "conv1", image, 7, 2, 6);
  size = window_out(p, "maxpool", size, 3, 2, 2);
  y = conv_bn_relu(b, "conv1", "bn1", "relu", y, {3, 64, 7, 7, 2, 3, 3}, bn_epsilon);
  y = b.op("MaxPool", {y}, "maxpool",
           {attr("kernel_shape", Dims{3, 3}), attr("strides", Dims{2, 2}), attr("pads", Dims{1, 1, 1, 1})});
  std::int64_t channels = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const std::int64_t width = std::int64_t{64} << stage;
    for (int block = 0; block < blocks[static_cast<std::size_t>(stage)]; ++block) {
      const std::int64_t stride = (stage > 0 && block == 0) ? 2 : 1;
      if (stride == 2)
        size = window_out(p, fmt::format("layer{}", stage + 1), size, 3, 2, 2);
      y = bottleneck(b, fmt::format("layer{}.{}", stage + 1, block), y, channels, width, stride);
      channels = 4 * width;
    }
  }
  y = b.op("GlobalAveragePool", {y}, "avgpool");
  y = b.op("Flatten", {y}, "flatten", {attr("axis", std::int64_t{1})});
  y = gemm(b, "fc", y, channels, 1000);
  b.output(y);
  return b.finish();
}

} // namespace

onnx::ModelProto build_resnet50(const Params& p) {
  return build_resnet(p, "resnet50", {3, 4, 6, 3});
}

// 44,549,160 parameters, 7.80 G MACs at 224x224.
onnx::ModelProto build_resnet101(const Params& p) {
  return build_resnet(p, "resnet101", {3, 4, 23, 3});
}

} // namespace partita::zoo::detail
