#pragma once

// Certificates made by openssl in a test (P-256 keys: quick to make), in a directory removed
// with the object: CAs, and leaves with a DNS subject alternative name, one CA signing each.
#include <cstdlib>
#include <string>

#include "tests/common/fake_tree.h"

namespace fabricscope::testing {

class TestPki {
 public:
  std::string Pem(const std::string& name) const { return dir_.Path(name + ".pem"); }
  std::string Key(const std::string& name) const { return dir_.Path(name + ".key"); }
  const FakeTree& dir() const { return dir_; }

  // A self-signed CA: <name>.pem and <name>.key.
  bool Ca(const std::string& n) const {
    return Run(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + n +
        ".key -out " + n + ".pem -days 2 -subj /CN=fabricscope-test-" + n);
  }
  // A leaf `n` for DNS name `dns`, signed by CA `ca`; days < 0 makes one whose notAfter is
  // already past (openssl x509 -days -1).
  bool Leaf(const std::string& n, const std::string& ca, const std::string& dns,
            int days = 2) const {
    dir_.Write(n + ".ext", "subjectAltName=DNS:" + dns + "\n");
    return Run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + n +
               ".key -out " + n + ".csr -subj /CN=" + dns) &&
           Run("openssl x509 -req -in " + n + ".csr -CA " + ca + ".pem -CAkey " + ca +
               ".key -CAcreateserial -days " + std::to_string(days) + " -out " + n +
               ".pem -extfile " + n + ".ext");
  }

 private:
  bool Run(const std::string& cmd) const {
    return std::system(("cd " + dir_.root() + " && " + cmd + " >/dev/null 2>&1").c_str()) == 0;
  }
  FakeTree dir_;
};

}  // namespace fabricscope::testing
