// The absolute evidence (exporters/analysis/path_evidence.h) on seeded ring all-reduce
// schedules: clean runs (uniform, varying sizes, mixed line rates, links declared above what they
// carry) name nothing; a competing flow, a slow link and a lossy port present before the first
// instance are named from the first instance, at the right rank.
#include "exporters/analysis/path_evidence.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectors/common/collective_vocabulary.h"
#include "gtest/gtest.h"
#include "tests/common/units.h"

namespace fabricscope::exporters {
namespace {

constexpr uint64_t kPathLine = 25'000'000;  // 200 Mb/s, the cluster in a box's declared rate

// One job's ring all-reduce, instance by instance, the way the agents would report it: rank i
// sends to rank i + 1 (Collective.proxy_peers); a link carries `carry` of the lower line rate
// of its two ends (a link declared above what it carries: carry < 1); the ring runs at the pace
// of its slowest link (each rank sends its chunk per step, nccl-tests' 2(n-1)/n bus bytes); a
// rank whose link is not the slowest sends in bursts at its own rate and waits (its busy
// transmit rate is its link's), the slowest sends steadily. Faults: a slow link from rank
// slow_rank (its path carries `slow` of its rate), another flow on shared_rank's port (the
// port moves `shared` x its own bytes and the collective gets 1/shared of the link), a lossy
// port (lossy_rank's packets lost at loss_rate; the fabric's others at up to clean_rate).
struct RingSpec {
  int n = 4;
  uint64_t bytes = 1 << 20;
  std::vector<uint64_t> line;  // per rank; empty = kPathLine each
  double carry = 0.5;
  int slow_rank = -1;
  double slow = 1;
  int shared_rank = -1;
  double shared = 1;
  int lossy_rank = -1;
  double loss_rate = 0;
  double clean_rate = 5e-5;  // spurious retransmissions of a clean port, at most
  double clean_hits = 0.05;  // share of a clean port's collectives with one such event
};

// Names are equal only within one table: the jobs of a test share this one, as one aggregator's
// communicators do.
NameTable& Names() {
  static NameTable* const table = new NameTable(1024);
  return *table;
}

class PathJob {
 public:
  PathJob(RingSpec r, uint64_t comm, uint32_t seed) : r_(std::move(r)), comm_(comm), rng_(seed) {
    if (r_.line.empty()) r_.line.assign(static_cast<size_t>(r_.n), kPathLine);
    for (int i = 0; i < r_.n; ++i) {
      names_.push_back(*Names().Intern(absl::StrCat("n", i)));
      ports_.push_back(*Names().Intern(absl::StrCat("eth", i)));
    }
    func_ = *Names().Intern("AllReduce");
  }

  // The next instance; *paths holds its ranks (it points at them until the next call).
  InstancePath Next(std::vector<RankPath>* paths) {
    std::uniform_real_distribution<double> jitter(0.97, 1.03), unit(0, 1);
    const int n = r_.n;
    std::vector<double> rate(static_cast<size_t>(n));  // bytes/s each rank's link carries
    for (int i = 0; i < n; ++i) {
      const uint64_t path_line = std::min(r_.line[i], r_.line[(i + 1) % n]);
      rate[i] = r_.carry * static_cast<double>(path_line) * jitter(rng_);
      if (i == r_.slow_rank) rate[i] *= r_.slow;
      if (i == r_.shared_rank) rate[i] /= r_.shared;
    }
    const double pace = *std::min_element(rate.begin(), rate.end());
    const double bus = static_cast<double>(r_.bytes) * 2 * (n - 1) / n;
    const double seconds = bus / pace * jitter(rng_);
    paths->assign(static_cast<size_t>(n), RankPath{});
    for (int i = 0; i < n; ++i) {
      RankPath& p = (*paths)[static_cast<size_t>(i)];
      p.node = names_[i];
      p.port = ports_[i];
      p.rank = i;
      p.line_rate = r_.line[i];
      p.own_bytes = static_cast<uint64_t>(2 * bus);
      const double extra = i == r_.shared_rank ? r_.shared : 1.04 + 0.03 * unit(rng_);
      p.port_bytes = static_cast<uint64_t>(extra * 2 * bus);
      // What the port sends at: its link's rate (the other flow's bytes count on the port).
      const double sends = i == r_.shared_rank ? rate[i] * r_.shared : rate[i];
      p.tx_busy = static_cast<float>(sends / static_cast<double>(r_.line[i]) * jitter(rng_));
      p.samples = static_cast<uint32_t>(seconds * 1000);
      p.send_peers = {(i + 1) % n, -1};
      const double packets = 2 * bus / 1500;
      const bool lossy = i == r_.lossy_rank;
      const double port_rate = lossy ? r_.loss_rate : r_.clean_rate * unit(rng_);
      std::poisson_distribution<uint32_t> events(port_rate * packets);
      p.loss_events = lossy ? events(rng_) : (unit(rng_) < r_.clean_hits ? 1 : 0);
      // Its latest 1 s window: ~5 collectives' packets.
      p.window_events = static_cast<uint32_t>(std::llround(port_rate * packets * 5));
      p.window_rate = static_cast<float>(port_rate);
      p.fabric_ports = 15;
      p.fabric_median = static_cast<float>(r_.clean_rate / 2);
    }
    InstancePath in;
    in.comm = comm_;
    in.func = func_;
    in.size_class = common::CollectiveSizeClass(r_.bytes);
    in.nranks = n;
    in.bus_bytes = bus;
    in.transfer_ns = static_cast<int64_t>(seconds * 1e9);
    now_ns_ += in.transfer_ns + 50 * kMs;
    in.end_unix_ns = now_ns_;
    pointers_.clear();
    for (const RankPath& p : *paths) pointers_.push_back(&p);
    in.ranks = pointers_;
    return in;
  }
  RingSpec& ring() { return r_; }

 private:
  std::vector<const RankPath*> pointers_;
  RingSpec r_;
  uint64_t comm_;
  std::mt19937 rng_;
  std::vector<Name> names_, ports_;
  Name func_;
  int64_t now_ns_ = 1'700'000'000 * kSec;
};

// Runs `instances` of the job through e (a clean one, by the rules, teaches the kind's best as
// the aggregator does for a normal instance) and returns each instance's verdict.
std::vector<PathVerdict> RunPathJob(PathEvidence& e, PathJob& job, int instances) {
  std::vector<PathVerdict> out;
  std::vector<RankPath> paths;
  for (int k = 0; k < instances; ++k) {
    const InstancePath in = job.Next(&paths);
    PathVerdict v = e.Evaluate(in);
    if (v.rule == EvidenceRule::kNone) e.Learn(in, v);
    out.push_back(std::move(v));
  }
  return out;
}

int NamedCount(const std::vector<PathVerdict>& v) {
  return static_cast<int>(std::count_if(
      v.begin(), v.end(), [](const PathVerdict& p) { return p.rule != EvidenceRule::kNone; }));
}

// 30 seeds each: a clean ring of 2 to 16 ranks, sizes that vary from step to step, ranks on links
// of different line rates (one at half, or a fast half and a slow half), links that carry a
// tenth of their declared rate: nothing is named, with and without a best of the kind known.
TEST(PathEvidenceTest, CleanRunsNameNothing) {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    PathEvidence e;
    for (int n : {2, 4, 8, 16}) {
      RingSpec r;
      r.n = n;
      PathJob uniform(r, 1, seed);
      EXPECT_EQ(NamedCount(RunPathJob(e, uniform, 60)), 0) << "uniform n=" << n << " seed " << seed;
      // Mixed line rates, also first on the fabric (no best: the line-rate share decides what
      // is low) and without spurious loss: no port stands out at all.
      r.line.assign(static_cast<size_t>(n), kPathLine);
      r.line[static_cast<size_t>(seed % n)] = kPathLine / 2;
      r.clean_hits = 0;
      PathJob mixed(r, 2, seed);
      PathEvidence first_on_fabric;
      for (PathEvidence* pe : {&e, &first_on_fabric}) {
        const std::vector<PathVerdict> v = RunPathJob(*pe, mixed, 60);
        EXPECT_EQ(NamedCount(v), 0) << "one at half n=" << n << " seed " << seed;
        for (const PathVerdict& p : v) EXPECT_TRUE(p.evidence_free) << "n=" << n;
      }
      for (int i = 0; i < n; ++i)
        r.line[static_cast<size_t>(i)] = i < n / 2 ? 4 * kPathLine : kPathLine;
      PathJob halves(r, 3, seed);
      for (const PathVerdict& p : RunPathJob(e, halves, 60)) {
        EXPECT_EQ(p.rule, EvidenceRule::kNone) << "fast and slow halves n=" << n;
        EXPECT_TRUE(p.evidence_free) << "fast and slow halves n=" << n;
      }
      r.line.clear();
      r.clean_hits = 0.05;
      r.carry = 0.1;
      PathJob above(r, 4, seed);
      EXPECT_EQ(NamedCount(RunPathJob(e, above, 60)), 0)
          << "declared 10x n=" << n << " seed " << seed;
    }
    RingSpec r;
    PathJob varied(r, 5, seed);
    for (int k = 0; k < 100; ++k) {
      varied.ring().bytes = uint64_t{256} << (10 + k % 4);  // 256 KiB .. 2 MiB
      std::vector<RankPath> paths;
      const InstancePath in = varied.Next(&paths);
      const PathVerdict v = e.Evaluate(in);
      EXPECT_EQ(v.rule, EvidenceRule::kNone) << "varied seed " << seed << ": " << v.evidence;
      e.Learn(in, v);
    }
  }
}

// The efficiency is over the slowest line rate on the path, and the best share over the best
// clean communicator of the kind: a job on links twice as fast reaches the same share.
TEST(PathEvidenceTest, SharesAreOverTheSlowestLineRateAndTheKindsBest) {
  PathEvidence e;
  PathJob clean(RingSpec{}, 1, 7);
  RunPathJob(e, clean, 20);
  RingSpec fast;
  fast.line.assign(4, 2 * kPathLine);
  fast.line[2] = kPathLine;  // the slowest sets the expectation
  PathJob mixed(fast, 2, 8);
  std::vector<RankPath> paths;
  const PathVerdict v = e.Evaluate(mixed.Next(&paths));
  EXPECT_NEAR(v.line_share, 0.5, 0.05);  // the ring at the slow port's carried half
  EXPECT_NEAR(v.best_share, 1.0, 0.08);
  EXPECT_EQ(v.slowest_line_rate, kPathLine);
  EXPECT_FALSE(v.low);
  EXPECT_TRUE(v.evidence_free);
}

struct PathFaultCase {
  const char* name;
  double magnitude;
};

// A fault present before the first instance of the job, with or without a clean communicator of
// the kind elsewhere on the fabric (the kind's best), on rings of 4 and 8 ranks, 10 seeds each:
// named from the first instance, at the faulty rank, in every instance; the rule and evidence
// say which.
TEST(PathEvidenceTest, FaultsFromTheStartAreNamedFromTheFirstInstance) {
  for (const PathFaultCase f :
       {PathFaultCase{"shared", 1.5}, PathFaultCase{"shared", 2}, PathFaultCase{"shared", 3},
        PathFaultCase{"slow", 0.5}, PathFaultCase{"slow", 0.25}, PathFaultCase{"slow", 0.1}}) {
    for (bool best_known : {false, true}) {
      for (int n : {4, 8}) {
        for (uint32_t seed = 1; seed <= 10; ++seed) {
          PathEvidence e;
          RingSpec r;
          r.n = n;
          if (best_known) {
            PathJob elsewhere(r, 1, seed + 100);
            RunPathJob(e, elsewhere, 20);
          }
          const int faulty = static_cast<int>(seed) % n;
          const bool shared = std::string(f.name) == "shared";
          (shared ? r.shared_rank : r.slow_rank) = faulty;
          (shared ? r.shared : r.slow) = f.magnitude;
          PathJob job(r, 2, seed);
          const std::vector<PathVerdict> v = RunPathJob(e, job, 30);
          const std::string what = absl::StrCat(f.name, " ", f.magnitude, " n=", n, " seed ", seed,
                                                best_known ? " best known" : "");
          for (size_t k = 0; k < v.size(); ++k) {
            ASSERT_EQ(v[k].rule, shared ? EvidenceRule::kSharedFlow : EvidenceRule::kSlowLink)
                << what << " instance " << k;
            EXPECT_EQ(v[k].bottleneck, faulty) << what;
            EXPECT_TRUE(v[k].low) << what;
            EXPECT_GT(v[k].weight, 0) << what;
            EXPECT_FALSE(v[k].evidence_free) << what;
          }
          if (best_known) {
            EXPECT_NEAR(v[0].best_share, shared ? 1 / f.magnitude : f.magnitude, 0.1) << what;
          }
        }
      }
    }
  }
}

// Mild: a link at 0.85 of its rate, another flow of a tenth of the bytes: below the rules'
// thresholds, nothing is named (and, with evidence on the port, nothing is learned either).
TEST(PathEvidenceTest, FaultsBelowTheThresholdsNameNothing) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    PathEvidence e;
    RingSpec r;
    r.slow_rank = 1;
    r.slow = 0.85;
    PathJob slow(r, 1, seed);
    EXPECT_EQ(NamedCount(RunPathJob(e, slow, 40)), 0) << seed;
    RingSpec s;
    s.shared_rank = 2;
    s.shared = 1.1;
    PathJob shared(s, 2, seed);
    EXPECT_EQ(NamedCount(RunPathJob(e, shared, 40)), 0) << seed;
  }
}

// A port losing 1e-3 of its packets where the fabric's other ports lose ~2.5e-5: named in every
// instance in which it lost a packet, from the first, never another rank; the same rate on
// every port of the fabric (its median 1e-3) is the fabric's, not the port's; a lone event in
// the window is not a rate.
TEST(PathEvidenceTest, APortLossierThanTheFabricIsNamedWhateverItsPast) {
  int with_loss = 0, named = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    PathEvidence e;
    RingSpec r;
    r.lossy_rank = 3;
    r.loss_rate = 1e-3;
    PathJob job(r, 1, seed);
    std::vector<RankPath> paths;
    for (int k = 0; k < 30; ++k) {
      const InstancePath in = job.Next(&paths);
      const PathVerdict v = e.Evaluate(in);
      const bool lost = paths[3].loss_events > 0;
      with_loss += lost;
      if (v.rule == EvidenceRule::kFabricLoss) {
        ++named;
        EXPECT_EQ(v.bottleneck, 3);
        EXPECT_NE(v.evidence.find("lost or retransmitted 0.001 of its packets"), std::string::npos)
            << v.evidence;
      } else {
        EXPECT_FALSE(lost) << "seed " << seed << " instance " << k;
      }
      // Clean ports with a spurious event are never named.
      EXPECT_TRUE(v.rule == EvidenceRule::kNone || v.bottleneck == 3);
    }
  }
  EXPECT_EQ(named, with_loss);
  EXPECT_GT(with_loss, 300);  // ~2.1 events per collective at 1e-3: most lose a packet

  RingSpec uniform;
  uniform.lossy_rank = 0;
  uniform.loss_rate = 1e-3;
  PathJob job(uniform, 2, 3);
  std::vector<RankPath> paths;
  for (int k = 0; k < 30; ++k) {
    InstancePath in = job.Next(&paths);
    for (RankPath& p : paths) p.fabric_median = 1e-3f;  // every port of the fabric as lossy
    EXPECT_EQ(PathEvidence().Evaluate(in).rule, EvidenceRule::kNone);
    for (RankPath& p : paths) {
      p.fabric_median = 0;
      p.window_events = 1;  // one event in the window
    }
    EXPECT_EQ(PathEvidence().Evaluate(in).rule, EvidenceRule::kNone);
    // A job's first window: 2 events (connection set-up) in 2,000 packets against a fabric
    // at 0 (a false alarm of the cluster in a box before the binomial test): p 0.02 at 1e-4.
    for (RankPath& p : paths) {
      p.loss_events = 2;
      p.window_events = 2;
      p.window_rate = 1e-3f;
    }
    EXPECT_EQ(PathEvidence().Evaluate(in).rule, EvidenceRule::kNone);
    // 0.1% over a whole window of 7,000 packets: 7 events, p 1e-5.
    paths[0].window_events = 7;
    const PathVerdict v = PathEvidence().Evaluate(in);
    EXPECT_EQ(v.rule, EvidenceRule::kFabricLoss);
    EXPECT_EQ(v.bottleneck, 0);
  }
}

// The kind's best is the highest median of a communicator's clean instances: a faulty
// communicator teaches nothing, one fast outlier does not move it, it ages out, and the kinds
// and communicators held are bounded.
TEST(PathEvidenceTest, TheKindsBestLearnsOnlyFromCleanInstances) {
  PathEvidenceOptions o;
  o.comms_per_kind = 2;
  o.max_kinds = 2;
  o.best_max_age_ns = 3600 * kSec;
  PathEvidence e(o);
  RingSpec shared;
  shared.shared_rank = 1;
  shared.shared = 2;
  PathJob faulty(shared, 1, 1);
  std::vector<RankPath> paths;
  for (int k = 0; k < 30; ++k) {
    const InstancePath in = faulty.Next(&paths);
    const PathVerdict v = e.Evaluate(in);
    EXPECT_EQ(v.best_share, -1);  // none known: its own faulty instances never become one
    e.Learn(in, v);
  }
  PathJob clean(RingSpec{}, 2, 2);
  const std::vector<PathVerdict> v = RunPathJob(e, clean, 20);
  EXPECT_EQ(v[4].best_share, -1);  // 5 clean instances before a best counts
  EXPECT_NEAR(v[19].best_share, 1, 0.08);
  // One instance twice as fast (its efficiency): the median does not follow it.
  InstancePath in = clean.Next(&paths);
  in.transfer_ns /= 2;
  e.Learn(in, e.Evaluate(in));
  EXPECT_NEAR(e.Evaluate(clean.Next(&paths)).best_share, 1, 0.08);
  // An hour later the best has aged out.
  PathJob later(RingSpec{}, 3, 3);
  InstancePath old = later.Next(&paths);
  old.end_unix_ns += 2 * 3600 * kSec;
  EXPECT_EQ(e.Evaluate(old).best_share, -1);
  // Bounds: two kinds (1 MiB and 2 MiB), the third not held.
  RingSpec big;
  big.bytes = 2 << 20;
  PathJob b(big, 4, 4);
  RunPathJob(e, b, 6);
  RingSpec bigger;
  bigger.bytes = 4 << 20;
  PathJob c(bigger, 5, 5);
  RunPathJob(e, c, 6);
  EXPECT_EQ(e.kinds(), 2u);
  EXPECT_GT(e.memory_bytes(), 0u);
}

// Two communicators per kind held (comms_per_kind): a third replaces the least recently seen,
// and with it its best.
TEST(PathEvidenceTest, TheLeastRecentlySeenCommunicatorMakesRoom) {
  PathEvidenceOptions o;
  o.comms_per_kind = 2;
  PathEvidence e(o);
  PathJob fast(RingSpec{}, 1, 1);
  RunPathJob(e, fast, 10);
  RingSpec slower;
  slower.carry = 0.25;  // half the efficiency of the first
  PathJob b(slower, 2, 2), c(slower, 3, 3);
  RunPathJob(e, b, 10);
  std::vector<RankPath> paths;
  EXPECT_NEAR(e.Evaluate(b.Next(&paths)).best_share, 0.5, 0.05);  // the first's best holds
  RunPathJob(e, c, 10);  // a third communicator: the first, seen least recently, leaves
  EXPECT_NEAR(e.Evaluate(b.Next(&paths)).best_share, 1, 0.08);
}

// The evidence line carries the numbers a user checks: the shares, the port, the ratio.
TEST(PathEvidenceTest, EvidenceSaysWhichFiguresNamedIt) {
  PathEvidence e;
  PathJob clean(RingSpec{}, 1, 1);
  RunPathJob(e, clean, 20);
  RingSpec r;
  r.shared_rank = 2;
  r.shared = 2;
  PathJob job(r, 2, 2);
  std::vector<RankPath> paths;
  const PathVerdict v = e.Evaluate(job.Next(&paths));
  EXPECT_NE(v.evidence.find("achieved 0."), std::string::npos) << v.evidence;
  EXPECT_NE(v.evidence.find("of the path's line rate"), std::string::npos) << v.evidence;
  EXPECT_NE(v.evidence.find("of the best AllReduce of its size on 4 ranks reaches"),
            std::string::npos)
      << v.evidence;
  EXPECT_NE(v.evidence.find("n2 eth2 carried 2.00x the collective's own bytes"), std::string::npos)
      << v.evidence;
  EXPECT_EQ(std::string(EvidenceRuleName(v.rule)), "shared_flow");
  EXPECT_EQ(FormatBitRate(25'000'000), "200 Mb/s");
  EXPECT_EQ(FormatBitRate(50e9), "400 Gb/s");
}

}  // namespace
}  // namespace fabricscope::exporters
