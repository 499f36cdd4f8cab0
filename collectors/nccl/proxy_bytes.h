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
#include <cstring>

namespace fabricscope::collectors::nccl {

// The collective a ProxyOp belongs to, as its Coll/P2p event described it.
struct ProxyOpParent {
  const char* func = nullptr;   // "AllReduce", "Send", ... (NCCL's static literals)
  const char* algo = nullptr;   // "RING", "TREE", ...; nullptr for P2P
  const char* proto = nullptr;  // "LL", "LL128", "SIMPLE"; nullptr for P2P
  uint64_t bytes = 0;           // count * type size (per rank for AllGather/ReduceScatter)
  int32_t nranks = 0;
  int32_t nchannels = 0;
  bool p2p = false;
};

// The estimate in bytes; 0 when the descriptor gives nothing to go on (nSteps or chunkSize not
// positive). `n_steps`, `chunk_size`: the ProxyOp descriptor's fields. Without a parent (PXN,
// or a ProxyOp NCCL started after its collective closed), the descriptor's bound alone.
inline uint64_t EstimateProxyOpBytes(int32_t n_steps, int32_t chunk_size,
                                     const ProxyOpParent* parent) {
  if (n_steps <= 0 || chunk_size <= 0) return 0;
  const uint64_t announced = static_cast<uint64_t>(n_steps) * static_cast<uint64_t>(chunk_size);
  if (parent == nullptr || parent->func == nullptr) return announced;
  const char* f = parent->func;
  if (parent->p2p) return parent->bytes < announced ? parent->bytes : announced;
  const char* proto = parent->proto != nullptr ? parent->proto : "";
  const bool ring = parent->algo != nullptr && std::strcmp(parent->algo, "RING") == 0;
  const bool all_reduce = std::strcmp(f, "AllReduce") == 0;
  const bool per_rank = std::strcmp(f, "AllGather") == 0 || std::strcmp(f, "ReduceScatter") == 0;
  const bool simple = std::strcmp(proto, "SIMPLE") == 0;
  const uint64_t chunk_steps = ring && simple && (all_reduce || per_rank) ? 4 : 1;
  const uint64_t n = parent->nranks > 0 ? static_cast<uint64_t>(parent->nranks) : 1;
  const uint64_t ch = parent->nchannels > 0 ? static_cast<uint64_t>(parent->nchannels) : 1;
  // Data bytes; long double: a 2^40-byte collective times 2(n-1) would not fit 64 bits.
  long double share = static_cast<long double>(parent->bytes) / static_cast<long double>(ch);
  if (all_reduce && ring) {
    share = share * 2 * static_cast<long double>(n - 1) / static_cast<long double>(n);
  } else if (per_rank) {
    share *= static_cast<long double>(n - 1);
  }
  const long double bound = static_cast<long double>(announced / chunk_steps);
  long double data = share < bound ? share : bound;
  if (std::strcmp(proto, "LL") == 0) data *= 2;
  if (std::strcmp(proto, "LL128") == 0) data = data * 16 / 15;
  return static_cast<uint64_t>(data + 0.5L);
}

}  // namespace fabricscope::collectors::nccl
