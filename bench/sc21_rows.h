#pragma once

// SC21 Table 1 (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
// Using Megatron-LM"): the ten GPT runs as the paper prints them, shared by the published-runs
// benchmark and the 3-D search's.

namespace {

struct Row {
  const char* name;
  int heads, hidden, layers, tp, pp, gpus, batch, micro_batch;
  int layers_per_chunk; // the interleaved schedule's chunk (0: plain 1F1B)
  double published;     // teraFLOP/s per GPU
};

// SC21 Table 1, as the paper prints it (sequence 2048, vocabulary 51,200).
constexpr Row rows[] = {
    {"1.7B", 24, 2304, 24, 1, 1, 32, 512, 16, 0, 137},       {"3.6B", 32, 3072, 30, 2, 1, 64, 512, 16, 0, 138},
    {"7.5B", 32, 4096, 36, 4, 1, 128, 512, 16, 0, 142},      {"18B", 48, 6144, 40, 8, 1, 256, 1024, 8, 0, 135},
    {"39B", 64, 8192, 48, 8, 2, 512, 1536, 4, 0, 138},       {"76B", 80, 10240, 60, 8, 4, 1024, 1792, 2, 5, 140},
    {"145B", 96, 12288, 80, 8, 8, 1536, 2304, 2, 5, 148},    {"310B", 128, 16384, 96, 8, 16, 1920, 2160, 1, 3, 155},
    {"530B", 128, 20480, 105, 8, 35, 2520, 2520, 1, 1, 163}, {"1T", 160, 25600, 128, 8, 64, 3072, 3072, 1, 0, 163},
};
constexpr int sequence = 2048;
constexpr int vocabulary = 51200;

} // namespace
