// Same bits in every build: prints a fingerprint (FNV-1a of the output bits) of each op on fixed inputs, per kernel
// table entry. Rounding is pinned (explicit fma in the kernels, ops/base/vec_exp.h; -ffp-contract=off), so the
// release, sanitizer and -O1/-O2 builds, g++ or clang++, must print the same lines: diff the MESSAGE output of two
// builds (`sqrtdk-tests -tc="fingerprints*" -s | grep fingerprint`). The values are not pinned here: a deliberate
// kernel change may change them; a build flag must not.
#include <doctest/doctest.h>

#include "ops/activation/activation.h"
#include "ops/activation/activation_kernels.h"
#include "ops/attention/attention.h"
#include "ops/attention/attention_kernels.h"
#include "ops/norm/norm.h"
#include "ops/norm/norm_kernels.h"
#include "ops/rope/rope.h"
#include "ops/rope/rope_kernels.h"
#include "ops/softmax/softmax.h"
#include "ops/softmax/softmax_kernels.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::ops;

namespace {

std::string fingerprint(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  for (float f : v) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    h = (h ^ b) * 1099511628211ull;
  }
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h));
  return s;
}

std::vector<float> random_floats(size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace

TEST_CASE("fingerprints: softmax, exp, online softmax, norm, rope, activations, fused attention") {
  const std::vector<float> x = random_floats(4096 + 37, 1, 12.0f);
  for (const auto& k : runnable_kernels(softmax_kernels())) {
    std::vector<float> y(x.size());
    exp_rr2_p5(k.isa, x.data(), y.data(), x.size());
    MESSAGE("fingerprint " << std::string(k.name) << " exp " << fingerprint(y));
    softmax_rows(k.isa, 37, 111, x.data(), 111, y.data(), 111, 0.7f, {nullptr, 0, true, 5});
    MESSAGE("fingerprint " << std::string(k.name) << " softmax_rows " << fingerprint(y));
    std::vector<float> s = x;
    OnlineSoftmaxState st;
    for (size_t b = 0; b < s.size(); b += 300)
      online_softmax_update(k.isa, st, s.data() + b, std::min<size_t>(300, s.size() - b));
    s.push_back(st.max), s.push_back(st.sum);
    MESSAGE("fingerprint " << std::string(k.name) << " online_softmax " << fingerprint(s));
  }
  const size_t d = 200, rows = 20;
  const std::vector<float> w = random_floats(d, 2, 1.5f), b = random_floats(d, 3, 0.5f);
  for (const auto& k : runnable_kernels(norm_kernels())) {
    std::vector<float> y(rows * d);
    layer_norm(k.isa, x.data(), rows, d, d, w.data(), b.data(), 1e-5f, y.data(), d);
    MESSAGE("fingerprint " << std::string(k.name) << " layer_norm " << fingerprint(y));
    rms_norm(k.isa, x.data(), rows, d, d, w.data(), 1e-5f, y.data(), d);
    MESSAGE("fingerprint " << std::string(k.name) << " rms_norm " << fingerprint(y));
  }
  const RopeTable table(64, 48, 10000.0f);
  for (const auto& k : runnable_kernels(rope_kernels())) {
    for (RopeLayout layout : {RopeLayout::rotate_half, RopeLayout::interleaved}) {
      std::vector<float> y(x.begin(), x.begin() + 10 * 4 * 48);
      rope(k.isa, table, layout, y.data(), 10, 4 * 48, 4, 48, 7);
      MESSAGE("fingerprint " << std::string(k.name) << " rope layout " << static_cast<int>(layout) << " " << fingerprint(y));
    }
  }
  for (const auto& k : runnable_kernels(activation_kernels())) {
    std::vector<float> g(x.size()), s(x.size());
    gelu_tanh(k.isa, x.data(), g.data(), x.size());
    silu(k.isa, x.data(), s.data(), x.size());
    MESSAGE("fingerprint " << std::string(k.name) << " gelu_tanh " << fingerprint(g) << " silu " << fingerprint(s));
  }
  // Fused attention (no GEMM): prefill over several key tiles, and a multi-chunk decode.
  const size_t heads = 4, kv_heads = 1, hd = 40, n_keys = 600, stride = 640;
  const std::vector<float> q = random_floats(n_keys * heads * hd, 4, 2.0f);
  const std::vector<float> kc = random_floats(kv_heads * stride * hd, 5, 1.0f);
  const std::vector<float> vc = random_floats(kv_heads * stride * hd, 6, 1.0f);
  for (const auto& k : runnable_kernels(attention_kernels())) {
    if (k.isa == Isa::ref) continue;  // the reference entry computes in double: not a rounding question
    for (size_t nq : {size_t{150}, size_t{1}}) {
      AttentionParams p;
      p.n_heads = heads, p.n_kv_heads = kv_heads, p.head_dim = hd, p.n_queries = nq, p.pos0 = n_keys - nq;
      p.causal = true, p.scale = 0.15f;
      p.q = q.data(), p.ldq = heads * hd, p.k_cache = kc.data(), p.v_cache = vc.data(), p.cache_stride = stride;
      std::vector<float> out(nq * heads * hd);
      p.out = out.data(), p.ldo = heads * hd;
      AttentionWorkspace ws;
      attention(k.isa, p, ws, 1, AttentionPath::fused);
      MESSAGE("fingerprint " << std::string(k.name) << " attention fused n_queries " << nq << " " << fingerprint(out));
    }
  }
}
