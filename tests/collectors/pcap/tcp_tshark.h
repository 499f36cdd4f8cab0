#pragma once

// Helpers of the TCP analyzer tests: TCP frames built from ParsedPacket fields, tshark's
// tcp.analysis flags of a capture, our flags of the same capture, and a frame-by-frame diff.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "collectors/pcap/packet.h"
#include "collectors/pcap/tcp_analyzer.h"
#include "tests/common/pcap_writer.h"

namespace fabricscope::testing {

using collectors::pcap::ParsedPacket;
using collectors::pcap::TcpAnalyzer;

// The first executable `name` on PATH, /usr/sbin or /sbin; "" if none.
inline std::string FindProgram(const std::string& name) {
  const char* env = std::getenv("PATH");
  std::string path = env != nullptr ? env : "/usr/bin:/bin";
  path += ":/usr/sbin:/sbin";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    const std::string candidate = std::string(dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Runs a shell command; its stdout and stderr in *out; returns the exit status (-1 if it could
// not run).
inline int RunCommand(const std::string& cmd, std::string* out) {
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out->append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// "retransmission,fast_retransmission" for a TcpAnalyzer flag mask; "-" for none.
inline std::string FlagNames(uint32_t flags) {
  std::string s;
  for (int i = 0; i < TcpAnalyzer::kFlagCount; ++i) {
    if ((flags >> i) & 1) s += std::string(s.empty() ? "" : ",") + TcpAnalyzer::FlagName(i);
  }
  return s.empty() ? "-" : s;
}

// The Ethernet frame of a TCP segment with the addresses, ports, sequence and acknowledgement
// numbers, flags, window, window-scale option (on a SYN, when p.tcp_window_scale >= 0) and
// p.tcp_payload_len zero bytes of `p` (RFC 791 / RFC 8200, RFC 9293 3.1). Checksums are left 0:
// tshark does not verify them by default and the analyzers do not look at them.
inline Bytes TcpFrame(const ParsedPacket& p) {
  Bytes tcp;
  PutBe16(&tcp, p.sport);
  PutBe16(&tcp, p.dport);
  PutBe32(&tcp, p.tcp_seq);
  PutBe32(&tcp, p.tcp_ack);
  const bool ws = (p.tcp_flags & collectors::pcap::kTcpSyn) && p.tcp_window_scale >= 0;
  tcp.push_back(static_cast<uint8_t>((ws ? 6 : 5) << 4));
  tcp.push_back(p.tcp_flags);
  PutBe16(&tcp, p.tcp_window);
  PutBe16(&tcp, 0);  // checksum
  PutBe16(&tcp, 0);  // urgent pointer
  if (ws) {
    for (uint8_t b : {uint8_t{1}, uint8_t{3}, uint8_t{3}, static_cast<uint8_t>(p.tcp_window_scale)})
      tcp.push_back(b);
  }
  tcp.insert(tcp.end(), p.tcp_payload_len, 0);
  Bytes ip;
  if (p.src.is_v4()) {
    ip.push_back(0x45);
    ip.push_back(0);
    PutBe16(&ip, static_cast<uint16_t>(20 + tcp.size()));
    PutBe16(&ip, 0);
    PutBe16(&ip, 0x4000);  // DF
    ip.push_back(64);
    ip.push_back(6);
    PutBe16(&ip, 0);
    ip.insert(ip.end(), p.src.bytes.begin() + 12, p.src.bytes.end());
    ip.insert(ip.end(), p.dst.bytes.begin() + 12, p.dst.bytes.end());
    SetBe16(&ip, 10, ChecksumFold(ChecksumAdd(0, ip.data(), 20)));
  } else {
    ip.push_back(0x60);
    ip.push_back(0);
    PutBe16(&ip, 0);
    PutBe16(&ip, static_cast<uint16_t>(tcp.size()));
    ip.push_back(6);
    ip.push_back(64);
    ip.insert(ip.end(), p.src.bytes.begin(), p.src.bytes.end());
    ip.insert(ip.end(), p.dst.bytes.begin(), p.dst.bytes.end());
  }
  ip.insert(ip.end(), tcp.begin(), tcp.end());
  return EthernetFrame(ip, EtherTypeOf(ip));
}

// Writes the frames (times as in p.ts_ns, to the microsecond) to a pcap file.
inline bool WriteTcpCapture(const std::string& path, const std::vector<ParsedPacket>& frames) {
  PcapWriter w(path);
  if (!w.ok()) return false;
  for (const ParsedPacket& p : frames) w.Write(TcpFrame(p), p.ts_ns);
  return true;
}

// "TShark (Wireshark) 4.0.17 ..." for failure messages: the rules were checked against 4.0.
inline std::string TsharkVersion(const std::string& tshark) {
  std::string out;
  RunCommand(tshark + " --version", &out);
  const size_t nl = out.find('\n');
  return "tshark version: " + out.substr(0, nl) + " (the expectations are tshark 4.0's)";
}

// One frame as tshark analyzed it: the TcpAnalyzer flags whose tcp.analysis field it shows,
// and the frame's source address and TCP source port ("" / 0 when not TCP).
struct TsharkFrame {
  uint32_t flags = 0;
  std::string src;
  uint16_t sport = 0;
};

// Runs tshark on `file` with the default TCP preferences written out (sequence analysis on,
// relative sequence numbers, fast retransmission before out-of-order); one row per frame.
// False (with tshark's output in *error) if it failed.
inline bool RunTsharkTcp(const std::string& tshark, const std::string& file,
                         std::vector<TsharkFrame>* rows, std::string* error) {
  std::string cmd = tshark + " -n -r '" + file +
                    "' -o tcp.analyze_sequence_numbers:TRUE -o tcp.relative_sequence_numbers:TRUE"
                    " -o tcp.fastrt_supersedes_ooo:TRUE -T fields -e frame.number -e ip.src"
                    " -e ipv6.src -e tcp.srcport";
  for (int i = 0; i < TcpAnalyzer::kFlagCount; ++i) {
    cmd += std::string(" -e tcp.analysis.") + TcpAnalyzer::FlagName(i);
  }
  std::string out;
  FILE* pipe = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return false;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  if (pclose(pipe) != 0) {
    *error = "tshark failed: " + cmd;
    return false;
  }
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> cols = absl::StrSplit(line, '\t');
    if (cols.size() < 4 + static_cast<size_t>(TcpAnalyzer::kFlagCount)) {
      *error = "short tshark line: " + std::string(line);
      return false;
    }
    TsharkFrame f;
    f.src = !cols[1].empty() ? cols[1] : cols[2];
    uint32_t port = 0;
    if (absl::SimpleAtoi(cols[3], &port)) f.sport = static_cast<uint16_t>(port);
    for (int i = 0; i < TcpAnalyzer::kFlagCount; ++i) {
      if (!cols[4 + i].empty()) f.flags |= 1u << i;
    }
    rows->push_back(std::move(f));
  }
  return true;
}

// Reads `file` with libpcap, parses every record and gives it to `analyzer`; our flags per
// frame (0 for frames that do not parse). False if the file cannot be read.
inline bool AnalyzeCapture(const std::string& file, TcpAnalyzer* analyzer,
                           std::vector<uint32_t>* flags) {
  int linktype = 0;
  std::vector<PcapRecord> records;
  if (!ReadPcap(file, &linktype, &records)) return false;
  for (const PcapRecord& r : records) {
    ParsedPacket p;
    uint32_t f = 0;
    if (collectors::pcap::ParseFrame(linktype, r.data.data(), static_cast<uint32_t>(r.data.size()),
                                     r.wire_len, r.ts_ns,
                                     &p) == collectors::pcap::ParseResult::kOk) {
      f = analyzer->Add(p);
    }
    flags->push_back(f);
  }
  return true;
}

// Frame-by-frame comparison: the number of frames whose flags differ, with the first
// `max_listed` of them described in *report ("frame N (describe(N-1)): tshark X, ours Y").
inline size_t DiffFlags(const std::vector<uint32_t>& ours, const std::vector<TsharkFrame>& tshark,
                        std::string* report, const std::function<std::string(size_t)>& describe,
                        size_t max_listed = 20) {
  size_t differing = 0;
  if (ours.size() != tshark.size()) {
    *report += "frame counts differ: ours " + std::to_string(ours.size()) + ", tshark " +
               std::to_string(tshark.size()) + "\n";
  }
  for (size_t i = 0; i < ours.size() && i < tshark.size(); ++i) {
    if (ours[i] == tshark[i].flags) continue;
    if (++differing <= max_listed) {
      const std::string where = describe(i);
      *report += "frame " + std::to_string(i + 1) + (where.empty() ? "" : " (" + where + ")") +
                 ": tshark " + FlagNames(tshark[i].flags) + ", ours " + FlagNames(ours[i]) + "\n";
    }
  }
  return differing;
}
inline size_t DiffFlags(const std::vector<uint32_t>& ours, const std::vector<TsharkFrame>& tshark,
                        std::string* report, size_t max_listed = 20) {
  return DiffFlags(
      ours, tshark, report, [](size_t) { return std::string(); }, max_listed);
}

// Frames per analysis flag, "retransmission=3 duplicate_ack=10 ..." (flags seen only).
inline std::string FlagCounts(const std::vector<uint32_t>& flags) {
  std::string s;
  for (int i = 0; i < TcpAnalyzer::kFlagCount; ++i) {
    size_t n = 0;
    for (uint32_t f : flags) n += (f >> i) & 1;
    if (n > 0)
      s += std::string(s.empty() ? "" : " ") + TcpAnalyzer::FlagName(i) + "=" + std::to_string(n);
  }
  return s.empty() ? "none" : s;
}

}  // namespace fabricscope::testing
