#include "agent/p2_quantile.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace fabricscope::agent {

void P2Quantile::Add(double x) {
  if (count_ < 5) {
    q_[count_++] = x;
    if (count_ == 5) {
      std::sort(q_, q_ + 5);
      for (int i = 0; i < 5; ++i) n_[i] = i + 1;
      np_[0] = 1;
      np_[1] = 1 + 2 * p_;
      np_[2] = 1 + 4 * p_;
      np_[3] = 3 + 2 * p_;
      np_[4] = 5;
    }
    return;
  }
  ++count_;
  int k;
  if (x < q_[0]) {
    q_[0] = x;
    k = 0;
  } else if (x >= q_[4]) {
    q_[4] = std::max(q_[4], x);
    k = 3;
  } else {
    k = 0;
    while (k < 3 && x >= q_[k + 1]) ++k;
  }
  for (int i = k + 1; i < 5; ++i) n_[i] += 1;
  const double dn[5] = {0, p_ / 2, p_, (1 + p_) / 2, 1};
  for (int i = 0; i < 5; ++i) np_[i] += dn[i];
  for (int i = 1; i <= 3; ++i) {
    const double d = np_[i] - n_[i];
    if ((d >= 1 && n_[i + 1] - n_[i] > 1) || (d <= -1 && n_[i - 1] - n_[i] < -1)) {
      const double s = d >= 0 ? 1.0 : -1.0;
      // Piecewise-parabolic prediction; linear when it leaves the neighbours' bracket.
      const double qp =
          q_[i] + s / (n_[i + 1] - n_[i - 1]) *
                      ((n_[i] - n_[i - 1] + s) * (q_[i + 1] - q_[i]) / (n_[i + 1] - n_[i]) +
                       (n_[i + 1] - n_[i] - s) * (q_[i] - q_[i - 1]) / (n_[i] - n_[i - 1]));
      if (q_[i - 1] < qp && qp < q_[i + 1]) {
        q_[i] = qp;
      } else {
        const int j = i + static_cast<int>(s);
        q_[i] += s * (q_[j] - q_[i]) / (n_[j] - n_[i]);
      }
      n_[i] += s;
    }
  }
}

double P2Quantile::Value() const {
  if (count_ == 0) return 0;
  if (count_ < 5) {
    double v[5];
    std::copy(q_, q_ + count_, v);
    std::sort(v, v + count_);
    const size_t rank = static_cast<size_t>(std::ceil(p_ * static_cast<double>(count_)));
    return v[std::min<size_t>(count_ - 1, rank > 0 ? rank - 1 : 0)];
  }
  return q_[2];
}

}  // namespace fabricscope::agent
