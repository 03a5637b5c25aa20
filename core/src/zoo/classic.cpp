// The plain feed-forward models: a multilayer perceptron, AlexNet and VGG-16 (torchvision
// layouts and node numbering).

#include "zoo/models.h"
#include "zoo/onnx_builder.h"

#include <fmt/format.h>

namespace partita::zoo::detail {

namespace {

std::string max_pool(OnnxBuilder& b, const std::string& name, const std::string& x, std::int64_t kernel,
                     std::int64_t stride) {
  return b.op("MaxPool", {x}, name,
              {attr("kernel_shape", Dims{kernel, kernel}), attr("strides", Dims{stride, stride})});
}

// Flatten + Gemm/Relu stack of torchvision's classifiers; `indices` are the Linear layers'
// positions in the classifier Sequential (dropouts, omitted here, take some of the others).
std::string classifier(OnnxBuilder& b, const std::string& x, const std::vector<std::int64_t>& widths,
                       const std::vector<int>& indices) {
  auto y = b.op("Flatten", {x}, "flatten", {attr("axis", std::int64_t{1})});
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    y = gemm(b, fmt::format("classifier.{}", indices[i]), y, widths[i], widths[i + 1]);
    if (i + 2 < widths.size())
      y = b.op("Relu", {y}, fmt::format("classifier.{}", indices[i] + 1));
  }
  return y;
}

} // namespace

std::int64_t window_out(const Params& p, const std::string& where, std::int64_t in, std::int64_t kernel,
                        std::int64_t stride, std::int64_t pad_total) {
  if (in + pad_total < kernel)
    p.fail(fmt::format("image too small: {} gets {}x{} pixels, fewer than its {}x{} window", where, in, in, kernel,
                       kernel));
  return (in + pad_total - kernel) / stride + 1;
}

onnx::ModelProto build_mlp(const Params& p) {
  const auto batch = p.integer("batch");
  const auto input = p.integer("input");
  const auto hidden = p.integer("hidden");
  const auto layers = p.integer("layers");
  const auto classes = p.integer("classes");
  OnnxBuilder b("mlp", "Multilayer perceptron: Linear+ReLU hidden layers and a linear classifier");
  auto y = b.input("input", {batch, input});
  std::int64_t width = input;
  for (std::int64_t i = 0; i < layers; ++i) {
    y = linear(b, fmt::format("layers.{}", i), y, width, hidden);
    y = b.op("Relu", {y}, fmt::format("layers.{}.relu", i));
    width = hidden;
  }
  y = linear(b, "classifier", y, width, classes);
  b.output(y);
  return b.finish();
}

// torchvision alexnet: 61,100,840 parameters and 0.714 G MACs at 224x224.
onnx::ModelProto build_alexnet(const Params& p) {
  const auto batch = p.integer("batch");
  const auto image = p.integer("image");
  OnnxBuilder b("alexnet", "AlexNet (torchvision layout, single tower)");
  auto y = b.input("image", {batch, 3, image, image});
  struct Layer {
    std::int64_t out, kernel, stride, pad;
    bool pool_after;
  };
  const Layer layers[] = {
      {64, 11, 4, 2, true}, {192, 5, 1, 2, true}, {384, 3, 1, 1, false}, {256, 3, 1, 1, false}, {256, 3, 1, 1, true}};
  std::int64_t channels = 3, size = image;
  int index = 0;
  for (const auto& l : layers) {
    const auto name = fmt::format("features.{}", index);
    size = window_out(p, name, size, l.kernel, l.stride, 2 * l.pad);
    y = conv(b, name, y, {channels, l.out, l.kernel, l.kernel, l.stride, l.pad, l.pad, true});
    y = b.op("Relu", {y}, fmt::format("features.{}", index + 1));
    channels = l.out;
    index += 2;
    if (l.pool_after) {
      const auto pool = fmt::format("features.{}", index++);
      size = window_out(p, pool, size, 3, 2, 0);
      y = max_pool(b, pool, y, 3, 2);
    }
  }
  // torchvision pools adaptively to 6x6, the identity at 224x224; other sizes keep their own
  // feature map, as the original network did.
  y = classifier(b, y, {channels * size * size, 4096, 4096, 1000}, {1, 4, 6});
  b.output(y);
  return b.finish();
}

// torchvision vgg16: 138,357,544 parameters (14,714,688 in the convolutions, 123,642,856 in the
// classifier) and 15.47 G MACs at 224x224 (15.35 G convolutions + 0.124 G classifier).
onnx::ModelProto build_vgg16(const Params& p) {
  const auto batch = p.integer("batch");
  const auto image = p.integer("image");
  OnnxBuilder b("vgg16", "VGG-16 (torchvision layout, configuration D without batch norm)");
  auto y = b.input("image", {batch, 3, image, image});
  constexpr std::int64_t pool = 0;
  const std::int64_t config[] = {64,   64,  pool, 128, 128,  pool, 256, 256, 256,
                                 pool, 512, 512,  512, pool, 512,  512, 512, pool};
  std::int64_t channels = 3, size = image;
  int index = 0;
  for (auto c : config) {
    const auto name = fmt::format("features.{}", index);
    if (c == pool) {
      size = window_out(p, name, size, 2, 2, 0);
      y = max_pool(b, name, y, 2, 2);
      index += 1;
      continue;
    }
    y = conv(b, name, y, {channels, c, 3, 3, 1, 1, 1, true});
    y = b.op("Relu", {y}, fmt::format("features.{}", index + 1));
    channels = c;
    index += 2;
  }
  y = classifier(b, y, {channels * size * size, 4096, 4096, 1000}, {0, 3, 6});
  b.output(y);
  return b.finish();
}

} // namespace partita::zoo::detail
