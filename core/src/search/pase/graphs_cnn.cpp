// PaSE's convolutional benchmarks as its graph.py builds them: AlexNet, ResNet-101, Inception-v3.

#include "model_builder.h"

#include <fmt/format.h>

namespace partita::search::pase::detail {

void alexnet(ModelBuilder& b, std::int64_t batch) {
  const int img = b.input({batch, 3, 227, 227});
  int x = b.conv("conv1", img, {96, 3, 11, 11}, {4, 4}, {0, 0}, 1);
  x = b.pooling("pool1", x, {3, 3}, {2, 2}, {0, 0});
  x = b.conv("conv2", x, {256, 96, 5, 5}, {1, 1}, {2, 2}, 1);
  x = b.pooling("pool2", x, {3, 3}, {2, 2}, {0, 0});
  x = b.conv("conv3", x, {384, 256, 3, 3}, {1, 1}, {1, 1}, 1);
  x = b.conv("conv4", x, {384, 384, 3, 3}, {1, 1}, {1, 1}, 1);
  x = b.conv("conv5", x, {256, 384, 3, 3}, {1, 1}, {1, 1}, 1);
  x = b.pooling("pool5", x, {3, 3}, {2, 2}, {0, 0});
  x = b.reshape("reshape", x, {batch, std::int64_t{256} * 6 * 6});
  x = b.fc("fc6", x, 4096, 1);
  x = b.fc("fc7", x, 4096, 1);
  x = b.fc("fc8", x, 1024);
  b.softmax_cross_entropy("loss", x);
}

void resnet101(ModelBuilder& b, std::int64_t batch) {
  constexpr std::int64_t expansion = 4;
  std::int64_t inplanes = 64;
  auto bottleneck = [&](const std::string& name, int img, std::int64_t planes, std::int64_t stride, bool downsample) {
    int x = b.conv(name + "/conv1", img, {planes, inplanes, 1, 1}, {1, 1}, {0, 0});
    x = b.batch_norm(name + "/bn1", x);
    x = b.conv(name + "/conv2", x, {planes, planes, 3, 3}, {stride, stride}, {1, 1});
    x = b.batch_norm(name + "/bn2", x);
    x = b.conv(name + "/conv3", x, {planes * expansion, planes, 1, 1}, {1, 1}, {0, 0});
    x = b.batch_norm(name + "/bn3", x);
    int identity = img;
    if (downsample) {
      identity = b.conv(name + "/downsample/conv", img, {planes * expansion, inplanes, 1, 1}, {stride, stride}, {0, 0});
      identity = b.batch_norm(name + "/downsample/bn", identity);
    }
    return b.elementwise(name + "/add", x, identity, 1);
  };
  auto make_layer = [&](int layer, int img, std::int64_t planes, int blocks, std::int64_t stride) {
    const bool downsample = stride != 1 || inplanes != planes * expansion;
    int x = bottleneck(fmt::format("layer{}.0", layer), img, planes, stride, downsample);
    inplanes = planes * expansion;
    for (int i = 1; i < blocks; ++i) {
      x = bottleneck(fmt::format("layer{}.{}", layer, i), x, planes, 1, false);
    }
    return x;
  };

  const int img = b.input({batch, 3, 227, 227});
  int x = b.conv("conv1", img, {64, 3, 7, 7}, {2, 2}, {3, 3});
  x = b.batch_norm("bn1", x);
  x = b.pooling("pool1", x, {3, 3}, {2, 2}, {1, 1});
  x = make_layer(1, x, 64, 3, 1);
  x = make_layer(2, x, 128, 4, 2);
  x = make_layer(3, x, 256, 23, 2);
  x = make_layer(4, x, 512, 3, 2);
  x = b.reduce_mean("avgpool", x, {2, 3}, false);
  x = b.fc("fc", x, 1000);
  b.softmax_cross_entropy("loss", x);
}

void inception3(ModelBuilder& b, std::int64_t batch) {
  auto basic_conv = [&](const std::string& name, int img, const Shape& filter, Pair stride = {1, 1},
                        Pair pad = {0, 0}) {
    return b.batch_norm(name + "/bn", b.conv(name + "/conv", img, filter, stride, pad));
  };
  auto block_a = [&](const std::string& n, int img, std::int64_t in, std::int64_t pool_features) {
    const int b1 = basic_conv(n + "/branch1x1", img, {64, in, 1, 1});
    int b5 = basic_conv(n + "/branch5x5_1", img, {48, in, 1, 1});
    b5 = basic_conv(n + "/branch5x5_2", b5, {64, 48, 5, 5}, {1, 1}, {2, 2});
    int b3 = basic_conv(n + "/branch3x3dbl_1", img, {64, in, 1, 1});
    b3 = basic_conv(n + "/branch3x3dbl_2", b3, {96, 64, 3, 3}, {1, 1}, {1, 1});
    b3 = basic_conv(n + "/branch3x3dbl_3", b3, {96, 96, 3, 3}, {1, 1}, {1, 1});
    int bp = b.pooling(n + "/branch_pool/pool", img, {3, 3}, {1, 1}, {1, 1});
    bp = basic_conv(n + "/branch_pool", bp, {pool_features, in, 1, 1});
    return b.concat(n + "/concat", {b1, b5, b3, bp}, 1);
  };
  auto block_b = [&](const std::string& n, int img, std::int64_t in) {
    const int b3 = basic_conv(n + "/branch3x3", img, {384, in, 3, 3}, {2, 2});
    int bd = basic_conv(n + "/branch3x3dbl_1", img, {64, in, 1, 1});
    bd = basic_conv(n + "/branch3x3dbl_2", bd, {96, 64, 3, 3}, {1, 1}, {1, 1});
    bd = basic_conv(n + "/branch3x3dbl_3", bd, {96, 96, 3, 3}, {2, 2});
    const int bp = b.pooling(n + "/branch_pool", img, {3, 3}, {2, 2}, {0, 0});
    return b.concat(n + "/concat", {b3, bd, bp}, 1);
  };
  auto block_c = [&](const std::string& n, int img, std::int64_t in, std::int64_t c7) {
    const int b1 = basic_conv(n + "/branch1x1", img, {192, in, 1, 1});
    int b7 = basic_conv(n + "/branch7x7_1", img, {c7, in, 1, 1});
    b7 = basic_conv(n + "/branch7x7_2", b7, {c7, c7, 1, 7}, {1, 1}, {0, 3});
    b7 = basic_conv(n + "/branch7x7_3", b7, {192, c7, 7, 1}, {1, 1}, {3, 0});
    int bd = basic_conv(n + "/branch7x7dbl_1", img, {c7, in, 1, 1});
    bd = basic_conv(n + "/branch7x7dbl_2", bd, {c7, c7, 7, 1}, {1, 1}, {3, 0});
    bd = basic_conv(n + "/branch7x7dbl_3", bd, {c7, c7, 1, 7}, {1, 1}, {0, 3});
    bd = basic_conv(n + "/branch7x7dbl_4", bd, {c7, c7, 7, 1}, {1, 1}, {3, 0});
    bd = basic_conv(n + "/branch7x7dbl_5", bd, {192, c7, 1, 7}, {1, 1}, {0, 3});
    int bp = b.pooling(n + "/branch_pool/pool", img, {3, 3}, {1, 1}, {1, 1});
    bp = basic_conv(n + "/branch_pool", bp, {192, in, 1, 1});
    return b.concat(n + "/concat", {b1, b7, bd, bp}, 1);
  };
  auto block_d = [&](const std::string& n, int img, std::int64_t in) {
    int b3 = basic_conv(n + "/branch3x3_1", img, {192, in, 1, 1});
    b3 = basic_conv(n + "/branch3x3_2", b3, {320, 192, 3, 3}, {2, 2});
    int b7 = basic_conv(n + "/branch7x7x3_1", img, {192, in, 1, 1});
    b7 = basic_conv(n + "/branch7x7x3_2", b7, {192, 192, 1, 7}, {1, 1}, {0, 3});
    b7 = basic_conv(n + "/branch7x7x3_3", b7, {192, 192, 7, 1}, {1, 1}, {3, 0});
    b7 = basic_conv(n + "/branch7x7x3_4", b7, {192, 192, 3, 3}, {2, 2});
    const int bp = b.pooling(n + "/branch_pool", img, {3, 3}, {2, 2}, {0, 0});
    return b.concat(n + "/concat", {b3, b7, bp}, 1);
  };
  auto block_e = [&](const std::string& n, int img, std::int64_t in) {
    const int b1 = basic_conv(n + "/branch1x1", img, {320, in, 1, 1});
    const int b3 = basic_conv(n + "/branch3x3_1", img, {384, in, 1, 1});
    const int b3a = basic_conv(n + "/branch3x3_2a", b3, {384, 384, 1, 3}, {1, 1}, {0, 1});
    const int b3b = basic_conv(n + "/branch3x3_2b", b3, {384, 384, 3, 1}, {1, 1}, {1, 0});
    const int b3c = b.concat(n + "/branch3x3/concat", {b3a, b3b}, 1);
    int bd = basic_conv(n + "/branch3x3dbl_1", img, {448, in, 1, 1});
    bd = basic_conv(n + "/branch3x3dbl_2", bd, {384, 448, 3, 3}, {1, 1}, {1, 1});
    const int bda = basic_conv(n + "/branch3x3dbl_3a", bd, {384, 384, 1, 3}, {1, 1}, {0, 1});
    const int bdb = basic_conv(n + "/branch3x3dbl_3b", bd, {384, 384, 3, 1}, {1, 1}, {1, 0});
    const int bdc = b.concat(n + "/branch3x3dbl/concat", {bda, bdb}, 1);
    int bp = b.pooling(n + "/branch_pool/pool", img, {3, 3}, {1, 1}, {1, 1});
    bp = basic_conv(n + "/branch_pool", bp, {192, in, 1, 1});
    return b.concat(n + "/concat", {b1, b3c, bdc, bp}, 1);
  };

  const int img = b.input({batch, 3, 299, 299});
  int x = basic_conv("conv1a", img, {32, 3, 3, 3}, {2, 2});
  x = basic_conv("conv2a", x, {32, 32, 3, 3});
  x = basic_conv("conv2b", x, {64, 32, 3, 3}, {1, 1}, {1, 1});
  x = b.pooling("pool1", x, {3, 3}, {2, 2}, {0, 0});
  x = basic_conv("conv3b", x, {80, 64, 1, 1});
  x = basic_conv("conv4a", x, {192, 80, 3, 3});
  x = b.pooling("pool2", x, {3, 3}, {2, 2}, {0, 0});
  x = block_a("mixed5b", x, 192, 32);
  x = block_a("mixed5c", x, 256, 64);
  x = block_a("mixed5d", x, 288, 64);
  x = block_b("mixed6a", x, 288);
  x = block_c("mixed6b", x, 768, 128);
  x = block_c("mixed6c", x, 768, 160);
  x = block_c("mixed6d", x, 768, 160);
  x = block_c("mixed6e", x, 768, 192);
  x = block_d("mixed7a", x, 768);
  x = block_e("mixed7b", x, 1280);
  x = block_e("mixed7c", x, 2048);
  x = b.reduce_mean("avgpool", x, {2, 3}, false);
  x = b.fc("fc", x, 1000);
  b.softmax_cross_entropy("loss", x);
}

} // namespace partita::search::pase::detail
