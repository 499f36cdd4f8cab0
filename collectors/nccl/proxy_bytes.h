#pragma once

// Bytes of one ProxyOp without its ProxyStep events (the default mask, issue 38): an estimate
// from the ProxyOp descriptor's own fields and its collective's, so that the rank-pair traffic
// and the transfer ledger keep their bytes when NCCL's per-step events are not subscribed.
//
// Sources (NVIDIA/nccl v2.28.9-1; the same in 2.29 and 2.30):
// - the descriptor: src/plugin/profiler.cc ncclProfilerStartProxyOpEvent sets
//   nSteps = DIVUP(sub->nsteps, sliceSteps) (one ProxyStep event per slice) and
//   chunkSize = args->chunkSize * sliceSteps, where args->chunkSize = op->chunkSize
//   (src/proxy.cc ncclProxyOpToArgs) = stepSize * chunkSteps for ring SIMPLE
//   (src/enqueue.cc calcCollChunking); a slice moves at most stepSize * sliceSteps bytes
//   (src/transport/net.cc sendProxyProgress/recvProxyProgress: `sizes = stepSize*sliceSteps`),
//   so per ProxyStep event at most chunkSize / chunkSteps;
// - chunkSteps: 4 (NCCL_STEPS/2) for ring SIMPLE AllReduce, AllGather and ReduceScatter, 1
//   otherwise (src/include/collectives.h *_CHUNKSTEPS; calcCollChunking uses 1 for every
//   algorithm but ring and protocol but SIMPLE);
// - the data each rank sends per channel on each ring edge: 2(n-1)/n of its channel's share for
//   an all-reduce (reduce-scatter then all-gather, src/device/all_reduce.h runRing), (n-1) times
//   the per-rank count for AllGather/ReduceScatter (whose descriptor count is per rank, ABI §4),
//   the whole share for Broadcast/Reduce and for each tree edge (runTreeUpDown);
// - wire bytes per data byte: 2 for LL (8 data bytes per 16-byte line, src/include/device.h
//   ncclLLFifoLine), 16/15 for LL128 (NCCL_LL128_LINEELEMS / NCCL_LL128_DATAELEMS), 1 for
//   SIMPLE; ProxyStep transSize counts wire bytes.
// The estimate is min(nSteps * chunkSize / chunkSteps, share) in data bytes (calcCollChunking's
// chunkSize counts data: it halves LL's step and takes 15 of LL128's 16 words), times the wire
// factor: exact for ring and tree SIMPLE up to NCCL's 16-byte alignment of chunks, within one
// line per chunk for LL and LL128. A P2P op (Send/Recv) is min(its bytes, nSteps * chunkSize):
// its op's bytes are split over channels and its last chunk may be short, so at most one chunk
// over; its LL sends (at most NCCL_P2P_LL_THRESHOLD, 16 KiB, per channel) are counted as data,
// not LL's doubled wire bytes.

#include <cstdint>

namespace fabricscope::collectors::nccl {

// The collective a ProxyOp belongs to, as its Coll/P2p event described it.
struct ProxyOpParent {
  const char* func = nullptr;   // "AllReduce", "Send", ... (NCCL's static literals)
  const char* algo = nullptr;   // "RING", "TREE", ...; nullptr for P2P
  const char* proto = nullptr;  // "LL", "LL128", "SIMPLE"; nullptr for P2P
  uint64_t bytes = 0;           // count * type size (per rank for AllGather/ReduceScatter)
  bool bytes_known = true;      // false: an unknown datatype; the descriptor's bound alone
  int32_t nranks = 0;
  int32_t nchannels = 0;
  bool p2p = false;
};

// What every ProxyOp of one collective shares: its wire bytes per op from the collective's
// share, the chunkSteps that turn the descriptor's chunkSize into one step's bytes, and the
// protocol's wire factor. The same for all the collective's ops: the plugin computes it once.
struct ProxyOpShare {
  uint64_t share_wire = 0;  // the share per channel and edge, on the wire (bytes)
  uint8_t chunk_steps = 1;  // 4 for ring SIMPLE AllReduce/AllGather/ReduceScatter
  uint8_t wire = 0;         // 0: data = wire (SIMPLE, P2P, unknown); 1: LL (x2); 2: LL128 (x16/15)
};

namespace proxy_bytes_internal {
// strcmp without the call: these run on NCCL's proxy thread.
inline bool Same(const char* a, const char* b) {
  if (a == nullptr) return false;
  for (;; ++a, ++b) {
    if (*a != *b) return false;
    if (*a == '\0') return true;
  }
}
}  // namespace proxy_bytes_internal

inline ProxyOpShare ShareOf(const ProxyOpParent& parent) {
  using proxy_bytes_internal::Same;
  ProxyOpShare out;
  constexpr uint64_t kUnbounded = (uint64_t{1} << 60) - 1;  // PackShare's largest
  if (parent.p2p || parent.func == nullptr) {
    out.share_wire = parent.bytes_known ? parent.bytes : kUnbounded;
    return out;
  }
  const bool ring = Same(parent.algo, "RING");
  const bool all_reduce = Same(parent.func, "AllReduce");
  const bool per_rank = Same(parent.func, "AllGather") || Same(parent.func, "ReduceScatter");
  out.wire = Same(parent.proto, "LL") ? 1 : Same(parent.proto, "LL128") ? 2 : 0;
  out.chunk_steps = ring && Same(parent.proto, "SIMPLE") && (all_reduce || per_rank) ? 4 : 1;
  const uint64_t n = parent.nranks > 0 ? static_cast<uint64_t>(parent.nranks) : 1;
  const uint64_t ch = parent.nchannels > 0 ? static_cast<uint64_t>(parent.nchannels) : 1;
  // Data bytes; long double: a 2^40-byte collective times 2(n-1) would not fit 64 bits.
  long double share = static_cast<long double>(parent.bytes) / static_cast<long double>(ch);
  if (all_reduce && ring) {
    share = share * 2 * static_cast<long double>(n - 1) / static_cast<long double>(n);
  } else if (per_rank) {
    share *= static_cast<long double>(n - 1);
  }
  if (out.wire == 1) share *= 2;
  if (out.wire == 2) share = share * 16 / 15;
  constexpr long double kMax = static_cast<long double>(kUnbounded);
  out.share_wire =
      parent.bytes_known ? static_cast<uint64_t>((share < kMax ? share : kMax) + 0.5L) : kUnbounded;
  return out;
}

// The estimate in wire bytes for one ProxyOp: min(nSteps * chunkSize / chunkSteps in wire
// bytes, the share); 0 when the descriptor gives nothing to go on (nSteps or chunkSize not
// positive) or without its collective (`share` nullptr: a PXN op of another process's
// collective, or one NCCL started after its collective closed), since the descriptor's figure
// alone is up to chunkSteps (4) times the bytes. `n_steps`, `chunk_size`: the ProxyOp
// descriptor's fields; `share`: ShareOf its collective.
inline uint64_t EstimateWithShare(int32_t n_steps, int32_t chunk_size, const ProxyOpShare* share) {
  if (n_steps <= 0 || chunk_size <= 0 || share == nullptr) return 0;
  const uint64_t announced = static_cast<uint64_t>(n_steps) * static_cast<uint64_t>(chunk_size);
  uint64_t bound = announced / share->chunk_steps;
  if (share->wire == 1) bound *= 2;
  if (share->wire == 2) bound = bound / 15 * 16 + bound % 15 * 16 / 15;
  return bound < share->share_wire ? bound : share->share_wire;
}

// The same from the collective's fields (tests, and where no ProxyOpShare is kept).
inline uint64_t EstimateProxyOpBytes(int32_t n_steps, int32_t chunk_size,
                                     const ProxyOpParent* parent) {
  if (parent == nullptr) return EstimateWithShare(n_steps, chunk_size, nullptr);
  const ProxyOpShare share = ShareOf(*parent);
  return EstimateWithShare(n_steps, chunk_size, &share);
}

// ProxyOpShare in one word, for the collective's slot (0 = not computed yet): share_wire in
// the top 60 bits (at most 2^60 bytes: more is cut there), chunk_steps 4 as bit 3, wire in
// bits 1-2, bit 0 set.
inline uint64_t PackShare(const ProxyOpShare& s) {
  const uint64_t share =
      s.share_wire < (uint64_t{1} << 60) ? s.share_wire : (uint64_t{1} << 60) - 1;
  return share << 4 | (s.chunk_steps == 4 ? 8u : 0u) | static_cast<uint64_t>(s.wire & 3) << 1 | 1;
}
inline ProxyOpShare UnpackShare(uint64_t w) {
  ProxyOpShare s;
  s.share_wire = w >> 4;
  s.chunk_steps = (w & 8) != 0 ? 4 : 1;
  s.wire = static_cast<uint8_t>(w >> 1 & 3);
  return s;
}

}  // namespace fabricscope::collectors::nccl
