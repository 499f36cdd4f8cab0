#pragma once

// An InfiniBand fabric as `ibnetdiscover` (infiniband-diags, rdma-core) prints it: every switch,
// CA and router the subnet manager's discovery reached, and the cable behind each of their
// ports. The aggregator reads such a file (--ib-fabric-file, exported by a site's fabric team
// or written by `ibnetdiscover > fabric.txt` on any host of the subnet) to learn which switch
// each HCA port is cabled to, which switches are leaves and which are spines, and each leaf's
// uplink capacity (exporters/README.md "Fabric model").
//
// The format, from rdma-core infiniband-diags/ibnetdiscover.c (out_ids, out_switch,
// out_switch_detail, out_ca, out_ca_detail, out_switch_port, out_ca_port, node_name,
// dump_linkwidth_compat, dump_linkspeedext_compat), one block per node, blocks split by blank
// lines, '#' starting a comment line:
//
//   vendid=0x2c9
//   devid=0xd2f2
//   sysimgguid=0x2c5eab0300b87b40
//   switchguid=0x2c5eab0300b87b40(2c5eab0300b87b40)
//   Switch  65 "S-2c5eab0300b87b40"  # "MF0;LEAF-04:MQM9701/U1" enhanced port 0 lid 73 lmc 0
//   [1]   "H-e09d7303007a4bd8"[1](e09d7303007a4bd8)   # "dgx-04 mlx5_5" lid 647 4xNDR
//   [35]  "S-2c5eab0300c26280"[32]                    # "MF0;SPINE-02:MQM9701/U1" lid 236 4xNDR
//
//   caguid=0xe09d7303007a4bd8
//   Ca  1 "H-e09d7303007a4bd8"  # "dgx-04 mlx5_5"
//   [1](e09d7303007a4bd8)  "S-2c5eab0300b87b40"[1]  # lid 647 lmc 0 "MF0;LEAF-04:..." lid 73 4xNDR
//
// A port line names its own port, the remote node ("S-", "H-" or "R-" and its node GUID) and
// port, the remote port's GUID where the remote is not a switch, and ends its comment with the
// link's active width and speed ("4xNDR"; "??"/"???" where the MAD said something unknown). The
// `-g` (grouped) output's chassis lines and "[ext N]" port mappings are read past.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "exporters/analysis/fabric_topology.h"

namespace fabricscope::exporters {

struct IbLink {
  uint32_t port = 0;         // this node's port number
  char remote_type = '?';    // 'S' switch, 'H' CA (a host's HCA), 'R' router
  uint64_t remote_guid = 0;  // the remote node's GUID
  uint32_t remote_port = 0;  // its port number
  std::string remote_desc;   // its node description, "" where the line gives none
  uint32_t lanes = 0;        // active width: 1, 2, 4, 8 or 12; 0 unknown ("??")
  std::string speed;         // "SDR" .. "XDR", "" unknown ("???")
  // lanes x the lane rate the kernel reports in sysfs `rate` for that speed (IbLaneGbps), as
  // bytes per second: what the agent reads as an HCA port's line rate. 0 when unknown.
  double bytes_per_second = 0;
};

struct IbNode {
  char type = '?';            // 'S' switch, 'H' CA, 'R' router
  uint64_t guid = 0;          // node GUID
  uint64_t sysimgguid = 0;    // system image GUID: one per chassis, 0 when not printed
  uint32_t ports = 0;         // the node's port count
  std::string desc;           // node description ("MF0;LEAF-04:MQM9701/U1", "dgx-04 mlx5_5")
  std::vector<IbLink> links;  // its cabled ports, in file order
};

struct IbFabric {
  std::vector<IbNode> switches;
  std::vector<IbNode> cas;  // CAs and routers
};

inline constexpr size_t kMaxIbNodes = 1 << 20;
inline constexpr size_t kMaxIbFabricBytes = size_t{512} << 20;

// The per-lane rate, Gb/s, the Linux kernel's sysfs `rate` attribute gives an InfiniBand speed
// (drivers/infiniband/core/sysfs.c rate_show: SDR 2.5, DDR 5, QDR 10, FDR10 10, FDR 14, EDR 25,
// HDR 50, NDR 100, XDR 200); 0 for a speed it does not know.
double IbLaneGbps(absl::string_view speed);

// Parses ibnetdiscover output. Errors (InvalidArgument, naming the line number and quoting it):
// a line that is none of the forms above; a port line before any node line; a GUID or port
// number that is not one; a port given twice or beyond its node's count; a node GUID given
// twice; more than kMaxIbNodes nodes or 255 ports on one node; a port cabled to a node the file
// does not describe (ibnetdiscover prints every node it reached: the file was cut short). An
// empty fabric (no node) is an error too: the discovery did not run.
absl::StatusOr<IbFabric> ParseIbnetdiscover(absl::string_view text);

// The file at `path` (at most kMaxIbFabricBytes); errors are prefixed with the path: NotFound
// ("no such file"), InvalidArgument for a directory, a larger file or ParseIbnetdiscover's,
// Unavailable for another open or read error (with strerror's text).
absl::StatusOr<IbFabric> LoadIbFabric(const std::string& path);

// The fabric's switches by role:
//  - a host CA is a CA whose system image GUID is no switch's (a SHARP aggregation node is a CA
//    inside its switch's chassis, with the switch's system image GUID, and is no host);
//  - a leaf is a switch with at least one host CA cabled to it; a spine is any other switch;
//  - a leaf's uplinks are its links to other switches, its capacity their rates summed (one
//    direction).
struct IbFabricSummary {
  size_t switches = 0, leaves = 0, spines = 0, host_ports = 0, aggregation_nodes = 0;
  size_t switch_links = 0;  // switch-to-switch cables, each counted once
};
IbFabricSummary SummarizeIbFabric(const IbFabric& f);

// A switch's name for people: the system name of a "MF0;<system name>:<model>/<unit>"
// description (how NVIDIA Quantum switches describe themselves, as in the cited output), else
// the description, else "S-<guid>".
std::string IbSwitchName(const IbNode& sw);

// Adds the fabric's leaves to `t`: each leaf's host ports go into t->leaf_of_hca_port as (HCA
// node GUID, port) and into t->leaf_of_node_desc by the HCA's node description, where rdma-ndd
// set it ("<host> <device>", its default format). A leaf the topology file already lists, by
// name or by one of its chassis ("0x" and the switch GUID, or the switch's name), is that leaf:
// it takes the file's name and, where the file states no capacity, the fabric's. Where both
// state one and they differ by more than 1%, the file's stands and a line goes into *notes;
// sources that disagree are reported, never merged silently: so are a switch whose GUID and name
// point at two different leaves of the file (the GUID's wins), and a leaf of the file matching
// two switches (the second becomes a leaf of its own, "<name> (0x<guid>)"). Other leaves are added
// with source "ibnetdiscover", spines to t->spines. Errors: more than kMaxLeaves leaves in all.
absl::Status MergeIbFabric(const IbFabric& f, FabricTopology* t, std::vector<std::string>* notes);

}  // namespace fabricscope::exporters
