// The convolution sweep's layers (partita-calibrate): realistic shapes over the requested range of
// FLOPs, their work counted as core's Conv description counts it (no MPI, nothing timed).

#include "sweeps.h"

#include "partita/graph/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

namespace partita::runtime {
namespace {

TEST(ConvSweep, CountsFlopsAsCoreDoes) {
  const auto cases = conv_cases(5, 10, {1, 8, 32});
  ASSERT_GE(cases.size(), 20U);
  for (const auto& c : cases) {
    const auto& s = c.shape;
    // Y[n, co, oh, ow] sums over ci and the window: one multiply-add each.
    const double macs =
        static_cast<double>(s.n * s.c_out * s.oh * s.ow) * static_cast<double>(s.c_in * s.window.kh * s.window.kw);
    EXPECT_DOUBLE_EQ(c.fwd_flops, 2 * macs) << c.name;
    // Backward: weights always; data unless the layer reads the data (a stem), as partita-run does.
    EXPECT_DOUBLE_EQ(c.bwd_flops, (c.data_gradient ? 4 : 2) * macs) << c.name;
    const double x = static_cast<double>(s.n * s.c_in * s.h * s.w);
    const double w = static_cast<double>(s.c_out * s.c_in * s.window.kh * s.window.kw);
    const double y = static_cast<double>(s.n * s.c_out * s.oh * s.ow);
    EXPECT_DOUBLE_EQ(c.fwd_bytes, 4 * (x + w + y)) << c.name;
    if (c.data_gradient) {
      EXPECT_GT(c.bwd_bytes, c.fwd_bytes) << c.name;
    } else { // a stem's backward reads x and dY and writes dW: W itself is not read
      EXPECT_DOUBLE_EQ(c.bwd_bytes, 4 * (x + y + w)) << c.name;
    }
    EXPECT_EQ(s.oh, (s.h + s.window.pad_top + s.window.pad_bottom - s.window.kh) / s.window.stride_h + 1) << c.name;
  }
}

TEST(ConvSweep, QuickCasesCoverTheShapesCnnsRun) {
  const auto cases = conv_cases(5, 9, {1, 2});
  std::set<std::int64_t> kernels, strides, batches, first_layer_channels;
  std::int64_t widest = 0;
  for (const auto& c : cases) {
    EXPECT_GE(std::log10(c.fwd_flops), 4.75) << c.name;
    EXPECT_LE(std::log10(c.fwd_flops), 9.25) << c.name;
    kernels.insert(c.shape.window.kh);
    strides.insert(c.shape.window.stride_h);
    batches.insert(c.shape.n);
    widest = std::max(widest, c.shape.c_out);
    if (!c.data_gradient) {
      first_layer_channels.insert(c.shape.c_in);
    }
  }
  EXPECT_EQ(kernels, (std::set<std::int64_t>{1, 3, 7}));
  EXPECT_EQ(strides, (std::set<std::int64_t>{1, 2}));
  EXPECT_EQ(batches, (std::set<std::int64_t>{1, 2}));
  EXPECT_EQ(first_layer_channels, (std::set<std::int64_t>{3}));
  EXPECT_GE(widest, 512);
  const auto stem = std::find_if(cases.begin(), cases.end(), [](const ConvCase& c) {
    return c.shape.window.kh == 7 && c.shape.window.stride_h == 2 && c.shape.n == 1;
  });
  ASSERT_NE(stem, cases.end());
  EXPECT_EQ(stem->name, "conv 7x7/2 3>64 224 n1");
  EXPECT_EQ(stem->shape.oh, 112);
  // A narrower range keeps fewer layers: the range is honoured, not ignored.
  EXPECT_LT(conv_cases(5, 7, {1, 2}).size(), cases.size());
}

TEST(CollectiveSweep, EachSizeKeepsItsMedianPass) {
  using cluster::Collective;
  const auto pass = [](double small, double large) {
    return std::vector<CollectiveTiming>{{Collective::all_reduce, 1024, 256, small},
                                         {Collective::all_reduce, 4096, 1024, large}};
  };
  // Three passes: the middle time of each size, whichever pass it came from.
  const auto three = median_of_passes({pass(3e-6, 9e-6), pass(1e-6, 20e-6), pass(2e-6, 10e-6)});
  ASSERT_EQ(three.size(), 2U);
  EXPECT_DOUBLE_EQ(three[0].seconds, 2e-6);
  EXPECT_DOUBLE_EQ(three[1].seconds, 10e-6);
  EXPECT_DOUBLE_EQ(three[1].bytes, 4096);
  EXPECT_EQ(three[1].count, 1024);
  // Two: their mean. One: itself.
  EXPECT_DOUBLE_EQ(median_of_passes({pass(1e-6, 8e-6), pass(3e-6, 12e-6)})[1].seconds, 10e-6);
  EXPECT_DOUBLE_EQ(median_of_passes({pass(1e-6, 8e-6)})[0].seconds, 1e-6);
  EXPECT_TRUE(median_of_passes(std::vector<std::vector<CollectiveTiming>>{}).empty());
  // Passes that timed other sizes are not one sweep.
  auto other = pass(1e-6, 8e-6);
  other[1].bytes = 8192;
  try {
    median_of_passes({pass(1e-6, 8e-6), other});
    FAIL() << "passes of other sizes were combined";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sweep pass 2 differs from the first at row 1"), std::string::npos)
        << e.what();
  }
}

TEST(KernelSweep, EachKernelKeepsItsMedianPass) {
  const auto pass = [](double gemm, double fresh, double cold) {
    std::vector<KernelTiming> rows(2);
    rows[0].kernel = "gemm 64x64x64";
    rows[0].seconds = gemm;
    rows[1].kernel = "relu fresh";
    rows[1].seconds = fresh;
    rows[1].fresh_bytes = 1e6;
    rows[1].cold_seconds = cold;
    return rows;
  };
  // A slow spell in one pass of three (the second) moves nothing; the fresh and the cold time each
  // take their own median.
  const auto rows =
      median_of_passes({pass(1.0e-3, 5e-5, 1.0e-4), pass(2.0e-3, 9e-5, 2.0e-4), pass(1.1e-3, 4e-5, 1.1e-4)});
  ASSERT_EQ(rows.size(), 2U);
  EXPECT_DOUBLE_EQ(rows[0].seconds, 1.1e-3);
  EXPECT_DOUBLE_EQ(rows[1].seconds, 5e-5);
  EXPECT_DOUBLE_EQ(rows[1].cold_seconds, 1.1e-4);
  EXPECT_DOUBLE_EQ(rows[1].fresh_bytes, 1e6);
  auto renamed = pass(1e-3, 5e-5, 1e-4);
  renamed[1].kernel = "add fresh";
  try {
    median_of_passes({pass(1e-3, 5e-5, 1e-4), pass(1e-3, 5e-5, 1e-4), renamed});
    FAIL() << "passes of other kernels were combined";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("sweep pass 3 differs from the first at row 1"), std::string::npos) << what;
    EXPECT_NE(what.find("'add fresh' there, 'relu fresh' in the first"), std::string::npos) << what;
  }
}

} // namespace
} // namespace partita::runtime
