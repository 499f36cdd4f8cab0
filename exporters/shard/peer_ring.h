#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabricscope::exporters {

// One aggregator of a sharded set (issue 18): the address its agents and peers stream to
// (gRPC, HOST:PORT) and the one its HTTP API is served on (HOST:PORT), where the others
// redirect requests for the communicators it owns.
struct Peer {
  std::string grpc;
  std::string http;
};

// Parses a peer list: comma-separated GRPC_HOST:PORT=HTTP_HOST:PORT entries, e.g.
// "10.0.0.1:50051=10.0.0.1:9400,10.0.0.2:50051=10.0.0.2:9400". InvalidArgument names the bad
// entry (no '=', a side without a port, a port outside 1..65535) or a gRPC address listed twice.
absl::StatusOr<std::vector<Peer>> ParsePeers(absl::string_view text);

class PeerRing;
// The ring of `peers_text` (ParsePeers) as the peer `self` (its gRPC address, exactly as
// listed) sees it. Errors: ParsePeers', and InvalidArgument when `self` is not in the list.
absl::StatusOr<std::shared_ptr<const PeerRing>> MakePeerRing(absl::string_view peers_text,
                                                             absl::string_view self);

// Which aggregator of a peer list owns a communicator: rendezvous (highest random weight)
// hashing (Thaler & Ravishankar, "Using name-based mappings to increase hit rates", IEEE/ACM
// ToN 6(1), 1998). Every peer's weight for a key is a 64-bit mix of the peer's name and the key;
// the highest wins. Adding or removing one of N peers moves only the keys it gains or held,
// about 1/N of them, and every aggregator given the same list (in any order) picks the same
// owner, with no coordination.
//
// The key is the communicator's label, the top 32 bits of its hash (common::CommLabel), so
// that an HTTP request naming a communicator by its label (?comm=) maps to the same owner as
// the records carrying the full hash. The peer's name is its gRPC address as listed.
// Hashes are fixed functions (FNV-1a 64 of the name, the splitmix64 finalizer), not the
// process-seeded absl::Hash: aggregators in different processes must agree.
class PeerRing {
 public:
  // `peers` non-empty, names distinct; `self` indexes this aggregator in it.
  PeerRing(std::vector<Peer> peers, size_t self);

  // Index of the owner of a communicator (by its full hash; only the label bits count).
  size_t OwnerOf(uint64_t comm_hash) const { return OwnerOfLabel(comm_hash >> 32); }
  size_t OwnerOfLabel(uint32_t label) const;
  bool Owns(uint64_t comm_hash) const { return OwnerOf(comm_hash) == self_; }
  const std::vector<Peer>& peers() const { return peers_; }
  size_t self() const { return self_; }
  // The index of the peer whose gRPC address is `grpc` exactly, or -1 when none is.
  int IndexOf(absl::string_view grpc) const;

 private:
  std::vector<Peer> peers_;
  std::vector<uint64_t> name_hashes_;
  size_t self_;
};

}  // namespace fabricscope::exporters
