#pragma once

// Collective shapes as NCCL 2.28.9 would run them on one rank of a 2-node, 16-GPU job (8 GPUs
// per node, NVLink inside a node, one 400 Gb/s NIC per GPU): the ProxyOps the rank's proxy
// thread runs for one collective, with the ProxyStep events NCCL's chunking gives each, and the
// collective's duration under NCCL's own tuning model, for fabricscope_bench_nccl_shapes.
//
// Sources (NVIDIA/nccl v2.28.9-1):
// - buffer sizes: src/init.cc DEFAULT_BUFFSIZE 4 MiB (SIMPLE), DEFAULT_LL_BUFFSIZE 512 KiB,
//   DEFAULT_LL128_BUFFSIZE 4,915,200; NCCL_STEPS 8 (src/include/device.h): a step is 1/8;
// - collectives: src/enqueue.cc calcCollChunking: chunkSteps/sliceSteps 4/2 for ring SIMPLE
//   AllReduce/AllGather/ReduceScatter (src/include/collectives.h), 1/1 otherwise; chunkSize =
//   stepSize * chunkSteps, halved for LL, 15/16 for LL128; nsteps = nstepsPerLoop * nLoops *
//   chunkSteps with nLoops = ceil(nBytes / (nChannels * nchunksPerLoop * chunkSize)),
//   nstepsPerLoop 2(n-1) (ring all-reduce), n-1 (ring all-gather), 1 (tree), nchunksPerLoop n
//   (ring) or 1 (tree);
// - the ProxyOp descriptor: src/plugin/profiler.cc, nSteps = DIVUP(nsteps, sliceSteps) ProxyStep
//   events, chunkSize = chunkSize * sliceSteps;
// - which ProxyOps: the rank at a ring's node boundary has one network send and one receive per
//   channel (the others talk over NVLink: P2P transport, no proxy steps); in the tree
//   (src/graph/trees.cc, double binary tree between nodes) a node's boundary rank has a parent
//   and a child node: a send and a receive to each per channel;
// - P2P: src/enqueue.cc (p2p chunking): NCCL_P2P_NET_CHUNKSIZE 128 KiB, halved under 8 chunks,
//   quartered under one; LL up to NCCL_P2P_LL_THRESHOLD 16 KiB per channel; each channel a part
//   of ncclP2pPartBounds; sliceSteps 1;
// - duration: src/graph/tuning.cc, latency = baseLatencies + per-step hwLatencies (NVLINK inside
//   the node, NET between), busBw 50 GB/s (400 Gb/s), times 0.5 for ring LL and 0.92 for LL128;
//   time = latency + busBw factor * bytes / busBw (ncclTopoGetAlgoTime).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace fabricscope::bench {

enum class Proto { kLL, kLL128, kSimple };
enum class Algo { kRing, kTree, kP2p };

struct Shape {
  const char* func;  // "AllReduce", "AllGather", "Send" (a Send/Recv pair)
  Algo algo;
  Proto proto;
  uint64_t bytes;  // count * type size as the Coll descriptor gives it (per rank for AllGather)
  int channels;
};

inline constexpr int kRanks = 16;
inline constexpr int kNodes = 2;

struct ProxyOpShape {
  int peer;
  bool is_send;
  int channel;
  int steps;       // ProxyStep events (the descriptor's nSteps)
  int chunk_size;  // the descriptor's chunkSize
  uint64_t bytes;  // wire bytes the op moves (the sum of its steps' transSize)
};

inline const char* ProtoName(Proto p) {
  return p == Proto::kLL ? "LL" : p == Proto::kLL128 ? "LL128" : "SIMPLE";
}
inline const char* AlgoName(Algo a) {
  return a == Algo::kRing ? "RING" : a == Algo::kTree ? "TREE" : "P2P";
}

inline std::string ShapeName(const Shape& s) {
  char size[32];
  if (s.bytes >= (1u << 30)) {
    std::snprintf(size, sizeof(size), "%lluG", static_cast<unsigned long long>(s.bytes >> 30));
  } else if (s.bytes >= (1u << 20)) {
    std::snprintf(size, sizeof(size), "%lluM", static_cast<unsigned long long>(s.bytes >> 20));
  } else {
    std::snprintf(size, sizeof(size), "%lluK", static_cast<unsigned long long>(s.bytes >> 10));
  }
  return std::string(s.func) + " " + AlgoName(s.algo) + "/" + ProtoName(s.proto) + " " + size +
         " x" + std::to_string(s.channels) + "ch";
}

// Data bytes per step (calcCollChunking's chunkSize) and the protocol's wire bytes per data byte.
inline uint64_t StepBytes(Proto p) {
  return p == Proto::kLL ? 65536 : p == Proto::kLL128 ? 614400 : 524288;
}
inline double WireFactor(Proto p) {
  return p == Proto::kLL ? 2.0 : p == Proto::kLL128 ? 16.0 / 15.0 : 1.0;
}

inline std::vector<ProxyOpShape> PlanProxyOps(const Shape& s) {
  std::vector<ProxyOpShape> ops;
  if (s.algo == Algo::kP2p) {
    const uint64_t per_channel_ll = 16384;
    const bool ll = s.bytes <= per_channel_ll * static_cast<uint64_t>(s.channels);
    uint64_t chunk = ll ? StepBytes(Proto::kLL) / 2 : 131072;
    if (!ll && s.bytes < 131072)
      chunk /= 4;
    else if (!ll && s.bytes < 8 * 131072)
      chunk /= 2;
    for (int c = 0; c < s.channels; ++c) {
      const uint64_t lo = s.bytes * c / s.channels, hi = s.bytes * (c + 1) / s.channels;
      const int steps = static_cast<int>(std::max<uint64_t>(1, (hi - lo + chunk - 1) / chunk));
      const uint64_t wire = (hi - lo) * (ll ? 2 : 1);
      const int descr = static_cast<int>(ll ? chunk * 2 : chunk);
      ops.push_back({1, true, c, steps, descr, wire});
      ops.push_back({1, false, c, steps, descr, wire});
    }
    return ops;
  }
  const bool all_reduce = std::string(s.func) == "AllReduce";
  const bool ring_simple = s.algo == Algo::kRing && s.proto == Proto::kSimple;
  const uint64_t chunk_steps = ring_simple ? 4 : 1, slice_steps = ring_simple ? 2 : 1;
  uint64_t chunk = StepBytes(s.proto) * chunk_steps;
  if (s.proto == Proto::kLL) chunk /= 2;
  if (s.proto == Proto::kLL128) chunk = chunk / 16 * 15;
  const uint64_t n = kRanks;
  const uint64_t nbytes = all_reduce ? s.bytes : s.bytes * n;  // AllGather: count per rank
  const uint64_t per_loop = s.algo == Algo::kRing ? n : 1;
  const uint64_t loop_size = static_cast<uint64_t>(s.channels) * per_loop * chunk;
  const uint64_t loops = (nbytes + loop_size - 1) / loop_size;
  const uint64_t steps_per_loop = s.algo == Algo::kTree ? 1 : all_reduce ? 2 * (n - 1) : n - 1;
  const uint64_t nsteps = steps_per_loop * loops * chunk_steps;
  const int events = static_cast<int>((nsteps + slice_steps - 1) / slice_steps);
  const int descr_chunk = static_cast<int>(chunk * slice_steps);
  // Data each edge carries per channel (as proxy_bytes.h reasons), on the wire.
  double share = static_cast<double>(s.bytes) / s.channels;
  if (all_reduce && s.algo == Algo::kRing) share = share * 2 * (n - 1) / n;
  if (!all_reduce) share *= static_cast<double>(n - 1);
  const uint64_t wire = static_cast<uint64_t>(share * WireFactor(s.proto));
  const int peers = s.algo == Algo::kTree ? 2 : 1;  // tree: parent and child node
  for (int c = 0; c < s.channels; ++c) {
    for (int p = 0; p < peers; ++p) {
      ops.push_back({p + 1, true, c, events, descr_chunk, wire});
      ops.push_back({p + 1, false, c, events, descr_chunk, wire});
    }
  }
  return ops;
}

// NCCL's modelled duration of the collective in microseconds (tuning.cc, see the top).
inline double DurationUs(const Shape& s) {
  const int pi = s.proto == Proto::kLL ? 0 : s.proto == Proto::kLL128 ? 1 : 2;
  static constexpr double kBaseRing[3] = {6.6, 14.0, 8.4}, kBaseTree[3] = {6.8, 14.0, 8.4};
  static constexpr double kNvlRing[3] = {0.6, 1.9, 3.4}, kNvlTree[3] = {0.6, 1.25, 4.0};
  static constexpr double kNetRing[3] = {2.7, 4.0, 14.0}, kNetTree[3] = {5.0, 8.5, 14.0};
  const double n = kRanks, nodes = kNodes;
  double bus_bw = 50e3;  // bytes per microsecond: 400 Gb/s
  if (s.algo == Algo::kRing && s.proto == Proto::kLL) bus_bw *= 0.5;
  if (s.proto == Proto::kLL128) bus_bw *= 0.92;
  const bool all_reduce = std::string(s.func) == "AllReduce";
  double lat = 0, factor = 1;
  if (s.algo == Algo::kP2p) {
    lat = kBaseRing[2] + kNetRing[2];
  } else if (s.algo == Algo::kTree) {
    lat = kBaseTree[pi] + 2 * ((n / nodes - 1) * kNvlTree[pi] + 1 * kNetTree[pi]);  // log2(2)
    factor = 2 * (n - 1) / n;
  } else {
    const double steps = all_reduce ? 2 * (n - 1) : n - 1;
    const double inter = all_reduce ? 2 * (nodes - 1) : nodes - 1;
    lat = kBaseRing[pi] + (steps - inter) * kNvlRing[pi] + inter * kNetRing[pi];
    factor = all_reduce ? 2 * (n - 1) / n : (n - 1);
  }
  return lat + factor * static_cast<double>(s.bytes) / bus_bw;
}

// The shapes the benchmark prints: 8 KB to 1 GB, 2 to 32 channels, ring and tree, all-gather,
// and Send/Recv pairs (2 channels per peer: NCCL_NCHANNELS_PER_NET_PEER's default).
inline std::vector<Shape> BenchShapes() {
  return {
      {"AllReduce", Algo::kRing, Proto::kLL, 8u << 10, 2},
      {"AllReduce", Algo::kRing, Proto::kLL, 64u << 10, 4},
      {"AllReduce", Algo::kRing, Proto::kLL128, 1u << 20, 8},
      {"AllReduce", Algo::kRing, Proto::kSimple, 16u << 20, 16},
      {"AllReduce", Algo::kRing, Proto::kSimple, 256u << 20, 32},
      {"AllReduce", Algo::kRing, Proto::kSimple, 1u << 30, 32},
      {"AllReduce", Algo::kTree, Proto::kLL128, 256u << 10, 4},
      {"AllReduce", Algo::kTree, Proto::kSimple, 64u << 20, 16},
      {"AllGather", Algo::kRing, Proto::kSimple, 8u << 20, 16},
      {"Send", Algo::kP2p, Proto::kSimple, 1u << 20, 2},
      {"Send", Algo::kP2p, Proto::kSimple, 64u << 20, 2},
  };
}

}  // namespace fabricscope::bench
