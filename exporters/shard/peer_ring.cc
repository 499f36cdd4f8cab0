#include "exporters/shard/peer_ring.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fabricscope::exporters {
namespace {

// FNV-1a, 64 bits (Fowler, Noll, Vo; offset basis 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t Fnv1a64(absl::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// The splitmix64 finalizer (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014): a bijection of 64-bit words whose output bits each depend on all
// input bits.
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// HOST:PORT with a port in 1..65535 (a bracketed IPv6 host is kept as written).
bool IsHostPort(absl::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  uint32_t port = 0;
  return absl::SimpleAtoi(s.substr(colon + 1), &port) && port >= 1 && port <= 65535;
}

}  // namespace

absl::StatusOr<std::vector<Peer>> ParsePeers(absl::string_view text) {
  std::vector<Peer> peers;
  absl::flat_hash_set<std::string> seen;
  for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    const std::vector<absl::string_view> sides = absl::StrSplit(entry, '=');
    if (sides.size() != 2 || !IsHostPort(sides[0]) || !IsHostPort(sides[1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "peer \"", entry, "\": expected GRPC_HOST:PORT=HTTP_HOST:PORT, ports 1-65535"));
    }
    Peer p{std::string(sides[0]), std::string(sides[1])};
    if (!seen.insert(p.grpc).second) {
      return absl::InvalidArgumentError(absl::StrCat("peer ", p.grpc, " is listed twice"));
    }
    peers.push_back(std::move(p));
  }
  return peers;
}

absl::StatusOr<std::shared_ptr<const PeerRing>> MakePeerRing(absl::string_view peers_text,
                                                             absl::string_view self) {
  auto peers = ParsePeers(peers_text);
  if (!peers.ok()) return peers.status();
  for (size_t i = 0; i < peers->size(); ++i) {
    if ((*peers)[i].grpc == self) return std::make_shared<const PeerRing>(*std::move(peers), i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("this aggregator (", self, ") is not in the peer list \"", peers_text,
                   "\": every aggregator's list names all of them, itself included"));
}

int PeerRing::IndexOf(absl::string_view grpc) const {
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i].grpc == grpc) return static_cast<int>(i);
  }
  return -1;
}

PeerRing::PeerRing(std::vector<Peer> peers, size_t self) : peers_(std::move(peers)), self_(self) {
  for (const Peer& p : peers_) name_hashes_.push_back(Fnv1a64(p.grpc));
}

size_t PeerRing::OwnerOfLabel(uint32_t label) const {
  size_t best = 0;
  uint64_t best_weight = 0;
  for (size_t i = 0; i < peers_.size(); ++i) {
    const uint64_t w = Mix64(name_hashes_[i] ^ Mix64(label));
    // Ties (2^-64 a pair) go to the smaller name, so the list's order never matters.
    if (i == 0 || w > best_weight || (w == best_weight && peers_[i].grpc < peers_[best].grpc)) {
      best = i;
      best_weight = w;
    }
  }
  return best;
}

}  // namespace fabricscope::exporters
