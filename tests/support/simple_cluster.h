#pragma once

// A cluster whose figures make the cost formulas exact: efficiency 1, no launch overhead, no
// latency, one switched node.

#include "partita/cluster/cluster.h"

namespace partita::test {

inline cluster::Cluster simple_cluster(int devices, double link_bandwidth = 1e10) {
  cluster::Cluster c;
  c.name = "simple";
  c.nodes = 1;
  c.devices_per_node = devices;
  c.device.name = "unit";
  c.device.peak_fp32 = 1e12;
  c.device.peak_fp16 = 4e12;
  c.device.memory_bandwidth = 1e11;
  c.device.memory_capacity = 16e9;
  c.intra_link = {cluster::LinkKind::nvswitch, link_bandwidth, 0.0};
  c.intra_switched = true;
  c.intra_fallback = c.intra_link;
  c.nic = {cluster::LinkKind::infiniband, 1e10, 0.0};
  c.nics_per_node = 1;
  return c;
}

} // namespace partita::test
