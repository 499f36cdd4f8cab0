#include "collectors/gpu/job_identity.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

namespace fabricscope::collectors::gpu {
namespace {

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool AllDigits(std::string_view s) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

std::vector<std::string_view> Components(std::string_view path) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < path.size()) {
    const size_t j = path.find('/', i);
    const size_t end = j == std::string_view::npos ? path.size() : j;
    if (end > i) out.push_back(path.substr(i, end - i));
    i = end + 1;
  }
  return out;
}

// A SLUID as print_sluid writes it: 's' and 13 characters of Crockford's base-32 alphabet
// (src/common/sluid.c cb32map: 0-9 and A-Z without I, L, O, U).
bool IsSluid(std::string_view s) {
  if (s.size() != 14 || s[0] != 's') return false;
  for (char c : s.substr(1)) {
    const bool digit = c >= '0' && c <= '9';
    const bool letter = c >= 'A' && c <= 'Z' && c != 'I' && c != 'L' && c != 'O' && c != 'U';
    if (!digit && !letter) return false;
  }
  return true;
}

// A pod uid as the API server writes it (RFC 4122 text: 8-4-4-4-12 hex digits) from its cgroup
// spelling, where the systemd driver turned '-' into '_'. "" when it is not one.
std::string PodUid(std::string_view s) {
  if (s.size() != 36) return "";
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i) {
    const bool dash_at = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_at) {
      if (out[i] != '-' && out[i] != '_') return "";
      out[i] = '-';
    } else if (!((out[i] >= '0' && out[i] <= '9') || (out[i] >= 'a' && out[i] <= 'f'))) {
      return "";
    }
  }
  return out;
}

// The step directory name "step_<step>" after a job directory, when there is one.
std::string StepAfter(const std::vector<std::string_view>& parts, size_t job_at) {
  if (job_at + 1 < parts.size() && StartsWith(parts[job_at + 1], "step_")) {
    return std::string(parts[job_at + 1].substr(5));
  }
  return "";
}

// Where a layout may start: the first component that is not ".." (a reader in a cgroup
// namespace sees the paths of processes outside it through "..", cgroup_namespaces(7)).
size_t FirstReal(const std::vector<std::string_view>& parts) {
  size_t i = 0;
  while (i < parts.size() && parts[i] == "..") ++i;
  return i;
}

// Below a user's systemd manager (user.slice/user-<uid>.slice/user@<uid>.service/...) a user
// may create and enter cgroups of any name (systemd delegates that subtree to them): a layout
// there proves nothing.
bool UserDelegated(const std::vector<std::string_view>& parts, size_t before) {
  for (size_t i = 0; i < before && i < parts.size(); ++i) {
    if (parts[i] == "user.slice" || StartsWith(parts[i], "user@")) return true;
  }
  return false;
}

bool SlurmV1(const std::vector<std::string_view>& parts, CgroupJob* out) {
  // Anchored at the hierarchy's root (CgroupPrepend "/slurm", "/slurm_<node>"): only root
  // creates directories there.
  const size_t i = FirstReal(parts);
  if (i + 2 >= parts.size()) return false;
  if (parts[i] != "slurm" && !StartsWith(parts[i], "slurm_")) return false;
  if (!StartsWith(parts[i + 1], "uid_") || !AllDigits(parts[i + 1].substr(4))) return false;
  if (!StartsWith(parts[i + 2], "job_") || !AllDigits(parts[i + 2].substr(4))) return false;
  out->slurm_uid = std::strtoll(std::string(parts[i + 1].substr(4)).c_str(), nullptr, 10);
  out->slurm_job = std::string(parts[i + 2].substr(4));
  out->slurm_step = StepAfter(parts, i + 2);
  return true;
}

bool SlurmV2(const std::vector<std::string_view>& parts, CgroupJob* out) {
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!EndsWith(parts[i], "slurmstepd.scope") || UserDelegated(parts, i)) continue;
    const std::string_view job = parts[i + 1];
    if (StartsWith(job, "job_") && AllDigits(job.substr(4))) {
      out->slurm_job = std::string(job.substr(4));
    } else if (IsSluid(job)) {
      out->slurm_job = std::string(job);
      out->slurm_job_is_sluid = true;
    } else {
      continue;  // "system" (slurmstepd's own) or something else
    }
    out->slurm_step = StepAfter(parts, i + 1);
    return true;
  }
  return false;
}

bool Kubepods(const std::vector<std::string_view>& parts, CgroupJob* out) {
  if (UserDelegated(parts, parts.size())) return false;
  // A reader in a cgroup namespace below kubepods sees "../../<qos>/pod<uid>" (cgroupfs
  // driver): the pod directory is the evidence there.
  bool under_kubepods = FirstReal(parts) > 0;
  for (std::string_view p : parts) {
    if (p == "..") continue;
    if (StartsWith(p, "kubepods")) {
      under_kubepods = true;
      // systemd: kubepods-pod<uid>.slice, kubepods-<qos>-pod<uid>.slice
      const size_t at = p.rfind("-pod");
      if (at != std::string_view::npos && EndsWith(p, ".slice")) {
        std::string uid = PodUid(p.substr(at + 4, p.size() - at - 4 - 6));
        if (!uid.empty()) {
          out->pod_uid = std::move(uid);
          return true;
        }
      }
      continue;
    }
    // cgroupfs: kubepods[/<qos>]/pod<uid>
    if (under_kubepods && StartsWith(p, "pod")) {
      std::string uid = PodUid(p.substr(3));
      if (!uid.empty()) {
        out->pod_uid = std::move(uid);
        return true;
      }
    }
  }
  return false;
}

const char* NonEmpty(const EnvLookup& getenv, const char* name) {
  const char* v = getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

int32_t RankOf(const EnvLookup& getenv) {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK"}) {
    const char* v = NonEmpty(getenv, name);
    if (v != nullptr && AllDigits(v) && std::strlen(v) <= 9) return std::atoi(v);
  }
  return -1;
}

}  // namespace

CgroupJob JobFromCgroupPath(std::string_view path) {
  CgroupJob out;
  const std::vector<std::string_view> parts = Components(path);
  if (SlurmV2(parts, &out) || SlurmV1(parts, &out)) return out;
  Kubepods(parts, &out);
  return out;
}

CgroupJob JobFromProcCgroup(std::string_view text) {
  std::vector<std::string_view> v1_paths;
  size_t i = 0;
  while (i < text.size()) {
    const size_t nl = text.find('\n', i);
    const std::string_view line =
        text.substr(i, (nl == std::string_view::npos ? text.size() : nl) - i);
    i = nl == std::string_view::npos ? text.size() : nl + 1;
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;  // malformed
    const std::string_view path = line.substr(c2 + 1);
    if (line.substr(0, c1) == "0" && c2 == c1 + 1) {
      CgroupJob job = JobFromCgroupPath(path);
      if (!job.empty()) return job;
    } else {
      v1_paths.push_back(path);
    }
  }
  for (std::string_view path : v1_paths) {
    CgroupJob job = JobFromCgroupPath(path);
    if (!job.empty()) return job;
  }
  return {};
}

JobRecord JobFromEnvironment(const EnvLookup& getenv, std::string_view self_cgroup) {
  JobRecord r{};
  r.version = kJobRecordVersion;
  r.rank = RankOf(getenv);
  auto set_id = [&r](JobScheduler s, const std::string& id) {
    if (r.scheduler != static_cast<uint8_t>(JobScheduler::kNone) || id.empty()) return;
    r.scheduler = static_cast<uint8_t>(s);
    CopyFixed(r.id, id.c_str());
  };
  auto fill = [](auto& field, const char* v) {
    if (field[0] == '\0' && v != nullptr) CopyFixed(field, v);
  };
  if (const char* id = NonEmpty(getenv, "FABRICSCOPE_JOB_ID")) set_id(JobScheduler::kOverride, id);
  fill(r.name, NonEmpty(getenv, "FABRICSCOPE_JOB_NAME"));
  if (const char* job = NonEmpty(getenv, "SLURM_JOB_ID")) {
    const char* array_job = NonEmpty(getenv, "SLURM_ARRAY_JOB_ID");
    const char* task = NonEmpty(getenv, "SLURM_ARRAY_TASK_ID");
    set_id(JobScheduler::kSlurm, array_job != nullptr && task != nullptr
                                     ? std::string(array_job) + "_" + task
                                     : std::string(job));
    fill(r.name, NonEmpty(getenv, "SLURM_JOB_NAME"));
    fill(r.user, NonEmpty(getenv, "SLURM_JOB_USER"));
    fill(r.step, NonEmpty(getenv, "SLURM_STEP_ID"));
    fill(r.slurm_job_id, job);
    fill(r.slurm_sluid, NonEmpty(getenv, "SLURM_JOB_SLUID"));
  }
  if (const char* run = NonEmpty(getenv, "TORCHELASTIC_RUN_ID");
      run != nullptr && std::string_view(run) != "none") {
    set_id(JobScheduler::kTorchrun, run);
  }
  fill(r.pod_uid, NonEmpty(getenv, "FABRICSCOPE_POD_UID"));
  fill(r.pod, NonEmpty(getenv, "FABRICSCOPE_POD_NAME"));
  fill(r.pod_namespace, NonEmpty(getenv, "FABRICSCOPE_POD_NAMESPACE"));
  if (r.pod_uid[0] == '\0') {
    const std::string uid = JobFromProcCgroup(self_cgroup).pod_uid;
    fill(r.pod_uid, uid.empty() ? nullptr : uid.c_str());
  }
  if (r.pod_uid[0] != '\0') set_id(JobScheduler::kKubernetes, r.pod_uid);
  if (const char* ns = NonEmpty(getenv, "PMIX_NAMESPACE")) set_id(JobScheduler::kMpi, ns);
  return r;
}

JobRecord JobOfThisProcess() {
  std::ifstream in("/proc/self/cgroup");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return JobFromEnvironment(
      [](const char* name) { return static_cast<const char*>(std::getenv(name)); }, text);
}

}  // namespace fabricscope::collectors::gpu
