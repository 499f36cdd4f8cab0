#pragma once
// The node_exporter peer test's mapping table (tests/integration/node_exporter_test.cc): which
// node_exporter series each fabricscope series is compared with, and which it does not export.

#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace fabricscope::testing {

enum class Scope {
  kRdmaPort,  // per <sysfs>/class/infiniband/<dev>/ports/<n>; source = file under the port dir
  kNetdev,    // per <sysfs>/class/net/<if> with statistics/; source = file under the if dir
  kTcp,       // node-wide; source = "<table>:<column>" of <procfs>/net/snmp or netstat
};

struct FsSeries {
  std::string metric;
  std::string label;  // extra label name ("kind", "counter", "reason"), or "" for none
  std::string value;
};

struct Pair {
  Scope scope;
  // What the row is about: it applies to a port (or node) where this file / column exists, and
  // then both sides must have it. "a+b": files whose sum the row compares (irdma's IPv4 + IPv6).
  std::string source;
  // node_exporter's series; "" for a file node_exporter does not read: compared with the file.
  std::string node_exporter;
  // The fabricscope series; several are summed (/proc/net/dev folds some counters together).
  std::vector<FsSeries> fabricscope;
  // hw_counters: node_exporter reads them only in newer versions (not 1.5). When node_exporter
  // exports no hw_counters metric at all, the row is compared with the file's value instead.
  bool hw = false;
  // node_exporter's value is in PortXmitWait ticks, fabricscope's in seconds: times one symbol
  // time, lanes / rate bytes per second, both read here from the port's `rate` file (relative
  // tolerance 1e-12: the product is rounded once on each side, in another order).
  bool per_tick = false;
  // A file of the port whose presence means the agent reads this counter from there instead
  // (counters_ext/<name>_64 over the 32-bit counters/<name>): the row is then not compared,
  // and node_exporter's series counts as accounted for.
  std::string unless = "";
};

// Every row: a file (or TCP column) both read, node_exporter's series and fabricscope's.
std::vector<Pair> MappingTable();

// node_exporter series in the compared families that fabricscope does not export, and why.
// Anything node_exporter exports in these families that is neither mapped nor listed here fails
// the test, so a new node_exporter (or a new fixture) cannot silently shrink the comparison.
const std::vector<std::pair<std::regex, std::string>>& NotExported();

// Files of a port directory (paths relative to it) that no row compares, and who reads them:
// together with MappingTable() this lists every file of the trees the test runs on, so a file
// that neither side reads, or that only one side reads, is named here with its reason, and a
// new file in a fixture fails the test until it is.
const std::vector<std::pair<std::regex, std::string>>& FilesNotCompared();

// The node_exporter families the peer test compares.
bool InComparedFamilies(const std::string& name);

}  // namespace fabricscope::testing
