#include "exporters/analysis/ib_fabric.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fabricscope::exporters {

double IbLaneGbps(absl::string_view speed) {
  // drivers/infiniband/core/sysfs.c rate_show, in deci-Gb/s there: SDR 25, DDR 50, QDR 100,
  // FDR10 100, FDR 140, EDR 250, HDR 500, NDR 1000, XDR 2000.
  static constexpr std::pair<absl::string_view, double> kLanes[] = {
      {"SDR", 2.5}, {"DDR", 5},  {"QDR", 10},  {"FDR10", 10}, {"FDR", 14},
      {"EDR", 25},  {"HDR", 50}, {"NDR", 100}, {"XDR", 200}};
  for (const auto& [name, gbps] : kLanes) {
    if (speed == name) return gbps;
  }
  return 0;
}

namespace {

absl::Status LineError(size_t n, absl::string_view line, absl::string_view why) {
  // Quoted printable: a binary file (a compressed export) must not write its bytes to a log.
  std::string quoted(line.substr(0, 160));
  for (char& c : quoted) {
    if (!absl::ascii_isprint(static_cast<unsigned char>(c)) && c != '\t') c = '?';
  }
  return absl::InvalidArgumentError(absl::StrCat("line ", n, ": ", why, ": \"", quoted, "\""));
}

bool ParseHex64(absl::string_view s, uint64_t* out) {
  absl::ConsumePrefix(&s, "0x");
  return !s.empty() && s.size() <= 16 &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isxdigit(c); }) &&
         absl::SimpleHexAtoi(s, out);
}

// Consumes "[N]" (and a following "[ext N]" of the grouped output) from *s.
bool ConsumePort(absl::string_view* s, uint32_t* port) {
  if (!absl::ConsumePrefix(s, "[")) return false;
  const size_t close = s->find(']');
  if (close == absl::string_view::npos || !absl::SimpleAtoi(s->substr(0, close), port) ||
      *port > 255) {
    return false;
  }
  s->remove_prefix(close + 1);
  if (absl::StartsWith(*s, "[ext ")) {
    const size_t end = s->find(']');
    if (end == absl::string_view::npos) return false;
    s->remove_prefix(end + 1);
  }
  return true;
}

// Consumes an optional "(hex)", with the spaces around it.
bool ConsumeGuidInParens(absl::string_view* s) {
  *s = absl::StripLeadingAsciiWhitespace(*s);
  if (!absl::ConsumePrefix(s, "(")) return true;
  const size_t close = s->find(')');
  uint64_t guid = 0;
  if (close == absl::string_view::npos || !ParseHex64(s->substr(0, close), &guid)) return false;
  s->remove_prefix(close + 1);
  return true;
}

// Consumes `"X-<16 hex>"`, the form node_name() prints.
bool ConsumeNodeName(absl::string_view* s, char* type, uint64_t* guid) {
  *s = absl::StripLeadingAsciiWhitespace(*s);
  if (s->size() < 4 || (*s)[0] != '"' || (*s)[2] != '-') return false;
  *type = (*s)[1];
  const size_t close = s->find('"', 3);
  if (close == absl::string_view::npos || !ParseHex64(s->substr(3, close - 3), guid)) return false;
  s->remove_prefix(close + 1);
  return *type == 'S' || *type == 'H' || *type == 'R';
}

// The first quoted text of a comment.
std::string FirstQuoted(absl::string_view comment) {
  const size_t open = comment.find('"');
  if (open == absl::string_view::npos) return "";
  const size_t close = comment.find('"', open + 1);
  if (close == absl::string_view::npos) return "";
  return std::string(comment.substr(open + 1, close - open - 1));
}

// The "4xNDR" token of a port line's comment (dump_linkwidth_compat + the speed), after the
// remote's quoted description (which may hold any text), before the `-f` output's " s=.. w=..".
void ReadWidthSpeed(absl::string_view comment, IbLink* l) {
  if (const size_t q = comment.rfind('"'); q != absl::string_view::npos) {
    comment.remove_prefix(q + 1);
  }
  for (absl::string_view tok : absl::StrSplit(comment, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
    const size_t x = tok.find('x');
    uint32_t lanes = 0;
    if (x == absl::string_view::npos || x == 0 || !absl::SimpleAtoi(tok.substr(0, x), &lanes)) {
      continue;
    }
    const absl::string_view speed = tok.substr(x + 1);
    if (lanes != 1 && lanes != 2 && lanes != 4 && lanes != 8 && lanes != 12) continue;
    const double gbps = IbLaneGbps(speed);
    if (gbps == 0) continue;
    l->lanes = lanes;
    l->speed = std::string(speed);
    l->bytes_per_second = lanes * gbps * 1e9 / 8;
    return;
  }
}

absl::Status ParsePortLine(size_t n, absl::string_view line, IbNode* node) {
  absl::string_view s = line;
  IbLink l;
  if (!ConsumePort(&s, &l.port) || !ConsumeGuidInParens(&s) ||
      !ConsumeNodeName(&s, &l.remote_type, &l.remote_guid) || !ConsumePort(&s, &l.remote_port) ||
      !ConsumeGuidInParens(&s)) {
    return LineError(n, line, "not a port line ([port] \"X-guid\"[port])");
  }
  const size_t hash = s.find('#');
  if (hash != absl::string_view::npos) {
    const absl::string_view comment = s.substr(hash + 1);
    l.remote_desc = FirstQuoted(comment);
    ReadWidthSpeed(comment, &l);
  }
  if (node->links.size() >= 255) return LineError(n, line, "more than 255 cabled ports");
  if (node->ports > 0 && l.port > node->ports) {
    return LineError(n, line, absl::StrCat("port ", l.port, " beyond the node's ", node->ports));
  }
  for (const IbLink& other : node->links) {
    if (other.port == l.port) return LineError(n, line, "a port given twice");
  }
  node->links.push_back(std::move(l));
  return absl::OkStatus();
}

absl::Status ParseNodeLine(size_t n, absl::string_view line, IbNode* node) {
  absl::string_view s = line;
  const size_t sp = s.find_first_of(" \t");
  const absl::string_view kind = s.substr(0, sp);
  if (sp == absl::string_view::npos || (kind != "Switch" && kind != "Ca" && kind != "Rt")) {
    return LineError(n, line, "not ibnetdiscover output (no node, port or id line)");
  }
  node->type = kind == "Switch" ? 'S' : kind == "Ca" ? 'H' : 'R';
  s.remove_prefix(sp);
  s = absl::StripLeadingAsciiWhitespace(s);
  const size_t sp2 = s.find_first_of(" \t");
  char type = 0;
  if (sp2 == absl::string_view::npos || !absl::SimpleAtoi(s.substr(0, sp2), &node->ports) ||
      node->ports > 255) {
    return LineError(n, line, "no port count after the node type");
  }
  s.remove_prefix(sp2);
  if (!ConsumeNodeName(&s, &type, &node->guid) || type != node->type) {
    return LineError(n, line, "no \"X-guid\" name matching the node type");
  }
  if (const size_t hash = s.find('#'); hash != absl::string_view::npos) {
    node->desc = FirstQuoted(s.substr(hash + 1));
  }
  return absl::OkStatus();
}

bool Skipped(absl::string_view line) {
  // Comments, the ids out_ids() prints, and the grouped output's chassis lines.
  for (absl::string_view p : {"#", "vendid=", "devid=", "switchguid=", "caguid=", "rtguid=",
                              "Chassis", "Non-Chassis Nodes", "Hostname:"}) {
    if (absl::StartsWith(line, p)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<IbFabric> ParseIbnetdiscover(absl::string_view text) {
  IbFabric f;
  IbNode* current = nullptr;
  uint64_t sysimg = 0;  // the block's sysimgguid= line, for the node line that follows it
  std::set<uint64_t> guids;
  size_t n = 0;  // the line number
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++n;
    const absl::string_view line = absl::StripTrailingAsciiWhitespace(raw);
    if (line.empty()) {
      sysimg = 0;
      continue;
    }
    if (absl::StartsWith(line, "sysimgguid=")) {
      absl::string_view v = line.substr(11);
      v = v.substr(0, v.find_first_of(" \t"));
      if (!ParseHex64(v, &sysimg)) return LineError(n, line, "not a GUID");
      continue;
    }
    if (Skipped(line)) continue;
    if (line[0] == '[') {
      if (current == nullptr) return LineError(n, line, "a port line before any node line");
      if (absl::Status st = ParsePortLine(n, line, current); !st.ok()) return st;
      continue;
    }
    if (!absl::StartsWith(line, "Switch") && !absl::StartsWith(line, "Ca") &&
        !absl::StartsWith(line, "Rt")) {
      return LineError(n, line, "not ibnetdiscover output (no node, port or id line)");
    }
    IbNode node;
    if (absl::Status st = ParseNodeLine(n, line, &node); !st.ok()) return st;
    node.sysimgguid = sysimg;
    if (!guids.insert(node.guid).second) return LineError(n, line, "node GUID given twice");
    if (guids.size() > kMaxIbNodes) {
      return LineError(n, line, absl::StrCat("more than ", kMaxIbNodes, " nodes"));
    }
    std::vector<IbNode>& list = node.type == 'S' ? f.switches : f.cas;
    list.push_back(std::move(node));
    current = &list.back();
  }
  if (f.switches.empty() && f.cas.empty()) {
    return absl::InvalidArgumentError("no node in the file: not ibnetdiscover output");
  }
  // ibnetdiscover prints every node it reached: a port cabled to a node the file never
  // describes means the file was cut short (written while being read, a partial copy) or the
  // discovery was (--hops).
  size_t missing = 0;
  std::string first;
  for (const std::vector<IbNode>* list : {&f.switches, &f.cas}) {
    for (const IbNode& node : *list) {
      for (const IbLink& l : node.links) {
        if (guids.contains(l.remote_guid)) continue;
        if (missing++ == 0) first = absl::StrFormat("%c-%016x", l.remote_type, l.remote_guid);
      }
    }
  }
  if (missing > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        missing, " ports are cabled to nodes the file does not describe (the first: ", first,
        "): the file is cut short, or the discovery was (--hops); write it again with "
        "ibnetdiscover and read it once complete"));
  }
  return f;
}

absl::StatusOr<IbFabric> LoadIbFabric(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a directory, not a file of ibnetdiscover output"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    return err == ENOENT
               ? absl::NotFoundError(absl::StrCat(path, ": no such file"))
               : absl::UnavailableError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  std::string text;
  char chunk[65536];
  while (in.read(chunk, sizeof(chunk)) || in.gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxIbFabricBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": larger than ", kMaxIbFabricBytes >> 20, " MiB"));
    }
  }
  if (in.bad()) return absl::UnavailableError(absl::StrCat(path, ": read failed"));
  absl::StatusOr<IbFabric> f = ParseIbnetdiscover(text);
  if (!f.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", f.status().message()));
  return f;
}

namespace {

// The fabric's roles: which CAs are hosts, which switches leaves.
struct Roles {
  absl::flat_hash_map<uint64_t, const IbNode*> host_cas;  // by node GUID
  std::set<uint64_t> aggregation_cas;
  std::vector<const IbNode*> leaves, spines;
};

Roles FindRoles(const IbFabric& f) {
  Roles r;
  std::set<uint64_t> switch_images;
  for (const IbNode& sw : f.switches) {
    if (sw.sysimgguid != 0) switch_images.insert(sw.sysimgguid);
  }
  for (const IbNode& ca : f.cas) {
    if (ca.type != 'H') continue;
    if (ca.sysimgguid != 0 && switch_images.contains(ca.sysimgguid)) {
      r.aggregation_cas.insert(ca.guid);
    } else {
      r.host_cas.emplace(ca.guid, &ca);
    }
  }
  for (const IbNode& sw : f.switches) {
    // A CA the file has no block for is taken as a host: ibnetdiscover prints every node it
    // reached, so it is an edited file; its ports are still cabled to this switch.
    const bool leaf = std::any_of(sw.links.begin(), sw.links.end(), [&](const IbLink& l) {
      return l.remote_type == 'H' && !r.aggregation_cas.contains(l.remote_guid);
    });
    (leaf ? r.leaves : r.spines).push_back(&sw);
  }
  return r;
}

}  // namespace

IbFabricSummary SummarizeIbFabric(const IbFabric& f) {
  const Roles r = FindRoles(f);
  IbFabricSummary s;
  s.switches = f.switches.size();
  s.leaves = r.leaves.size();
  s.spines = r.spines.size();
  s.aggregation_nodes = r.aggregation_cas.size();
  size_t switch_port_ends = 0;
  for (const IbNode& sw : f.switches) {
    for (const IbLink& l : sw.links) {
      if (l.remote_type == 'S') ++switch_port_ends;
      if (l.remote_type == 'H' && !r.aggregation_cas.contains(l.remote_guid)) ++s.host_ports;
    }
  }
  s.switch_links = switch_port_ends / 2;
  return s;
}

std::string IbSwitchName(const IbNode& sw) {
  absl::string_view d = sw.desc;
  if (absl::ConsumePrefix(&d, "MF0;")) {
    const size_t colon = d.find(':');
    if (colon != absl::string_view::npos && colon > 0) return std::string(d.substr(0, colon));
  }
  if (!sw.desc.empty()) return sw.desc;
  return absl::StrFormat("S-%016x", sw.guid);
}

absl::Status MergeIbFabric(const IbFabric& f, FabricTopology* t, std::vector<std::string>* notes) {
  const Roles r = FindRoles(f);
  // The file's chassis entries that are GUIDs, in any case and padding ("0x2c5eab0300b87b40",
  // "0x2C5EAB...", or "0x2c9..." as ibnetdiscover's own switchguid= line prints it, unpadded).
  std::map<uint64_t, size_t> leaf_of_guid;
  for (const auto& [chassis, index] : t->leaf_of_chassis) {
    uint64_t guid = 0;
    if ((absl::StartsWith(chassis, "0x") || absl::StartsWith(chassis, "0X")) &&
        ParseHex64(absl::AsciiStrToLower(chassis), &guid)) {
      leaf_of_guid.emplace(guid, index);
    }
  }
  std::set<size_t> taken;  // leaves an IB switch of this file matched
  for (const IbNode* sw : r.leaves) {
    std::string name = IbSwitchName(*sw);
    const std::string guid = absl::StrFormat("0x%016x", sw->guid);
    double capacity = 0;
    uint32_t uplinks = 0;
    for (const IbLink& l : sw->links) {
      if (l.remote_type != 'S') continue;
      ++uplinks;
      capacity += l.bytes_per_second;
    }
    // The file's leaf for this switch: by its GUID, else by its name.
    int by_guid = -1, by_name = -1;
    if (auto it = leaf_of_guid.find(sw->guid); it != leaf_of_guid.end()) {
      by_guid = static_cast<int>(it->second);
    }
    if (auto c = t->leaf_of_chassis.find(name); c != t->leaf_of_chassis.end()) {
      by_name = static_cast<int>(c->second);
    }
    if (by_guid >= 0 && by_name >= 0 && by_guid != by_name) {
      notes->push_back(absl::StrCat("switch ", name, " (", guid, ") is leaf ",
                                    t->leaves[by_guid].name, "'s by its GUID and leaf ",
                                    t->leaves[by_name].name, "'s by its name; leaf ",
                                    t->leaves[by_guid].name, " takes it"));
    }
    int index = by_guid >= 0 ? by_guid : by_name;
    if (index >= 0 && taken.contains(static_cast<size_t>(index))) {
      // A leaf the file matched to an earlier switch (two GUIDs under one leaf, or two switches
      // with one name): this one is a leaf of its own, named with its GUID.
      const std::string& claimed = t->leaves[index].name;
      name = absl::StrCat(name, " (", guid, ")");
      notes->push_back(absl::StrCat("leaf ", claimed,
                                    " matches two switches; the second is a "
                                    "leaf of its own: ",
                                    name));
      index = -1;
    }
    if (index < 0) {
      if (t->leaves.size() >= kMaxLeaves) {
        return absl::InvalidArgumentError(
            absl::StrCat("more than ", kMaxLeaves, " leaves with the IB fabric's"));
      }
      FabricLeaf leaf;
      leaf.name = name;
      leaf.chassis = {name, guid};
      leaf.source = "ibnetdiscover";
      leaf.uplinks = uplinks;
      leaf.uplink_bytes_per_second = capacity;
      index = static_cast<int>(t->leaves.size());
      t->leaves.push_back(std::move(leaf));
      for (const std::string& c : t->leaves.back().chassis) t->leaf_of_chassis.emplace(c, index);
    } else {
      FabricLeaf& leaf = t->leaves[index];
      leaf.source = "file+ibnetdiscover";
      if (leaf.uplink_bytes_per_second == 0) {
        leaf.uplinks = uplinks;
        leaf.uplink_bytes_per_second = capacity;
      } else if (std::abs(leaf.uplink_bytes_per_second - capacity) >
                 0.01 * leaf.uplink_bytes_per_second) {
        notes->push_back(absl::StrFormat(
            "leaf %s: the topology file states %.0f Gb/s of uplinks, the IB fabric file has %u "
            "switch links of %.0f Gb/s in all; the topology file's figure stands",
            leaf.name, leaf.uplink_bytes_per_second * 8 / 1e9, uplinks, capacity * 8 / 1e9));
      }
    }
    taken.insert(static_cast<size_t>(index));
    for (const IbLink& l : sw->links) {
      if (l.remote_type != 'H' || r.aggregation_cas.contains(l.remote_guid)) continue;
      t->leaf_of_hca_port.emplace(std::make_pair(l.remote_guid, l.remote_port), index);
      auto ca = r.host_cas.find(l.remote_guid);
      const std::string& desc = ca != r.host_cas.end() ? ca->second->desc : l.remote_desc;
      if (!desc.empty()) t->leaf_of_node_desc.emplace(desc, index);
    }
  }
  std::set<std::string> spines(t->spines.begin(), t->spines.end());
  for (const IbNode* sw : r.spines) {
    std::string name = IbSwitchName(*sw);
    if (spines.insert(name).second) t->spines.push_back(std::move(name));
  }
  return absl::OkStatus();
}

}  // namespace fabricscope::exporters
