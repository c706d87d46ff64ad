// attention_ref: the specification of attention(). Naive loops in double precision, one head and one query at a
// time: scores, softmax (max-shifted), weighted sum of values. Also fills the observer's probabilities if set.
#include "ops/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sqrtdk::ops {

void attention_ref(const AttentionParams& p) {
  const size_t d = p.head_dim, group = p.n_heads / p.n_kv_heads, n_keys = p.n_keys();
  if (p.observe) {
    p.observe->probs.assign(p.n_heads * p.n_queries * n_keys, 0.0f);
    p.observe->n_heads = p.n_heads, p.observe->n_queries = p.n_queries, p.observe->n_keys = n_keys;
  }
  std::vector<double> prob(n_keys), acc(d);
  for (size_t h = 0; h < p.n_heads; ++h) {
    const size_t g = h / group;
    const float* k = p.k_cache + g * p.cache_stride * d;  // [n_keys][d]
    const float* v = p.v_cache + g * p.cache_stride * d;  // [n_keys][d]
    for (size_t i = 0; i < p.n_queries; ++i) {
      const float* q = p.q + i * p.ldq + h * d;  // [d]
      const size_t visible = p.causal ? p.pos0 + i + 1 : n_keys;
      double mx = -INFINITY;
      for (size_t j = 0; j < visible; ++j) {
        // Eight partial sums (still double) only so the compiler can vectorize: the tests call this a lot.
        double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        size_t c = 0;
        for (; c + 8 <= d; c += 8)
          for (size_t u = 0; u < 8; ++u) s[u] += double(q[c + u]) * double(k[j * d + c + u]);
        for (; c < d; ++c) s[0] += double(q[c]) * double(k[j * d + c]);
        prob[j] = (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) * double(p.scale);
        mx = std::max(mx, prob[j]);
      }
      double sum = 0.0;
      for (size_t j = 0; j < visible; ++j) sum += (prob[j] = std::exp(prob[j] - mx));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t j = 0; j < visible; ++j) {
        const double pj = prob[j] / sum;
        if (p.observe) p.observe->probs[(h * p.n_queries + i) * n_keys + j] = static_cast<float>(pj);
        for (size_t c = 0; c < d; ++c) acc[c] += pj * double(v[j * d + c]);
      }
      float* out = p.out + i * p.ldo + h * d;
      for (size_t c = 0; c < d; ++c) out[c] = static_cast<float>(acc[c]);
    }
  }
}

}  // namespace sqrtdk::ops
