// DenseNet-121/169/201 (Huang et al. 2017) in torchvision's layout, as torch.onnx exports it: every
// dense layer concatenates the block's input and every earlier layer's output (one Concat per
// layer), then BN-ReLU-Conv1x1 (4 x growth channels) and BN-ReLU-Conv3x3 (growth channels); a
// transition halves the channels (BN-ReLU-Conv1x1) and the resolution (AveragePool 2x2).
//
// DenseNet-121 by hand (224x224, batch 1), parameters counting BN scale and bias: 7,978,856
// (torchvision's figure); 2.834 G MACs (torchvision's 2.83 GFLOPS).

#include "zoo/models.h"
#include "zoo/onnx_builder.h"

#include <fmt/format.h>

#include <array>
#include <map>
#include <vector>

namespace partita::zoo::detail {

namespace {

constexpr float bn_epsilon = 1e-5f;

std::string bn_relu(OnnxBuilder& b, const std::string& bn, const std::string& relu, const std::string& x,
                    std::int64_t channels) {
  return b.op("Relu", {batch_norm(b, bn, x, channels, bn_epsilon)}, relu);
}

} // namespace

onnx::ModelProto build_densenet(const Params& p) {
  static const std::map<std::string, std::array<std::int64_t, 4>> sizes{
      {"121", {6, 12, 24, 16}}, {"169", {6, 12, 32, 32}}, {"201", {6, 12, 48, 32}}};
  auto blocks = sizes.at(p.text("size"));
  if (const auto layers = p.optional_integer("layers")) {
    blocks.fill(*layers);
  }
  const auto batch = p.integer("batch");
  const auto image = p.integer("image");
  const auto growth = p.integer("growth");
  const std::int64_t bottleneck = 4 * growth; // torchvision's bn_size 4
  OnnxBuilder b(fmt::format("densenet{}", p.text("size")),
                fmt::format("DenseNet-{} (torchvision layout), growth {}, {} layers per block", p.text("size"), growth,
                            fmt::join(blocks, "/")));
  auto y = b.input("image", {batch, 3, image, image});
  auto size = window_out(p, "features.conv0", image, 7, 2, 6);
  size = window_out(p, "features.pool0", size, 3, 2, 2);
  y = conv(b, "features.conv0", y, {3, 2 * growth, 7, 7, 2, 3, 3});
  y = batch_norm(b, "features.norm0", y, 2 * growth, bn_epsilon);
  y = b.op("Relu", {y}, "features.relu0");
  y = b.op("MaxPool", {y}, "features.pool0",
           {attr("kernel_shape", Dims{3, 3}), attr("strides", Dims{2, 2}), attr("pads", Dims{1, 1, 1, 1})});
  std::int64_t channels = 2 * growth;
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    const auto block = fmt::format("features.denseblock{}", k + 1);
    std::vector<std::string> features{y};
    for (std::int64_t i = 0; i < blocks[k]; ++i) {
      const auto name = fmt::format("{}.denselayer{}", block, i + 1);
      const std::int64_t in = channels + i * growth;
      auto x = b.op("Concat", features, name + ".cat", {attr("axis", std::int64_t{1})});
      x = bn_relu(b, name + ".norm1", name + ".relu1", x, in);
      x = conv(b, name + ".conv1", x, {in, bottleneck, 1, 1, 1, 0, 0});
      x = bn_relu(b, name + ".norm2", name + ".relu2", x, bottleneck);
      x = conv(b, name + ".conv2", x, {bottleneck, growth, 3, 3, 1, 1, 1});
      features.push_back(x);
    }
    channels += blocks[k] * growth;
    y = b.op("Concat", features, block + ".cat", {attr("axis", std::int64_t{1})});
    if (k + 1 < blocks.size()) {
      const auto name = fmt::format("features.transition{}", k + 1);
      y = bn_relu(b, name + ".norm", name + ".relu", y, channels);
      y = conv(b, name + ".conv", y, {channels, channels / 2, 1, 1, 1, 0, 0});
      size = window_out(p, name + ".pool", size, 2, 2, 0);
      y = b.op("AveragePool", {y}, name + ".pool", {attr("kernel_shape", Dims{2, 2}), attr("strides", Dims{2, 2})});
      channels /= 2;
    }
  }
  y = batch_norm(b, "features.norm5", y, channels, bn_epsilon);
  y = b.op("Relu", {y}, "features.relu5");
  y = b.op("GlobalAveragePool", {y}, "avgpool");
  y = b.op("Flatten", {y}, "flatten", {attr("axis", std::int64_t{1})});
  y = gemm(b, "classifier", y, channels, p.integer("classes"));
  b.output(y);
  return b.finish();
}

} // namespace partita::zoo::detail
