// Attention (ops/attention): both paths on every ISA the machine has against attention_ref (double precision),
// over the shape lists; decode step by step equals the full sequence; bit-identical for any thread count;
// argument checks; the observer hook.
#include <doctest/doctest.h>

#include "tests/common/close.h"

#include "ops/attention/attention.h"
#include "ops/attention/attention_internal.h"
#include "ops/attention/attention_kernels.h"
#include "ops/attention/attention_paths.h"

#include <sqrtdk/error.h>
#include <sqrtdk/isa.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace sqrtdk;
using namespace sqrtdk::ops;

namespace {

// A KV cache and a query block with random contents. q is scaled by 3 so softmax rows are peaked (the running
// max of the online softmax changes from tile to tile), k and v are uniform in [-1, 1].
struct Problem {
  size_t n_heads, n_kv_heads, head_dim, n_queries, pos0, stride;
  std::vector<float> q, k, v, out;
  Problem(size_t h, size_t kvh, size_t d, size_t nq, size_t p0, unsigned seed = 1)
      : n_heads(h), n_kv_heads(kvh), head_dim(d), n_queries(nq), pos0(p0), stride(p0 + nq + 3) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    q.resize(nq * (h * d + 5));  // ldq = h*d + 5: a stride wider than the row
    for (float& x : q) x = 3.0f * u(rng);
    k.resize(kvh * stride * d);
    v.resize(kvh * stride * d);
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    out.assign(nq * (h * d + 2), -7.0f);  // ldo = h*d + 2
  }
  AttentionParams params(bool causal) {
    AttentionParams p;
    p.n_heads = n_heads, p.n_kv_heads = n_kv_heads, p.head_dim = head_dim, p.n_queries = n_queries, p.pos0 = pos0;
    p.causal = causal, p.scale = 1.0f / std::sqrt(float(head_dim));
    p.q = q.data(), p.ldq = n_heads * head_dim + 5;
    p.k_cache = k.data(), p.v_cache = v.data(), p.cache_stride = stride;
    p.out = out.data(), p.ldo = n_heads * head_dim + 2;
    return p;
  }
};

// Error budget against the double reference, relative to max |v| = 1: scores are float dot products of head_dim
// terms (|q·k·scale| up to ~3 sqrt(d) / sqrt(d) · ..., rounding ~ 1e-6), exp_rr2_p5 is 2 ulp, and the output and
// softmax sum are float sums over up to n_keys terms whose rounding grows like sqrt(n_keys) · 2^-24 (random signs).
double tolerance(size_t n_keys) { return 2e-5 + 1e-6 * std::sqrt(double(n_keys)); }

// with_ref_isa: also run Isa::ref (double-precision GEMMs: slow, so only on the small shapes).
void check_against_ref(Problem& pr, bool causal, const char* what, bool with_ref_isa = true, int threads = 1) {
  AttentionParams p = pr.params(causal);
  std::vector<float> ref_out(pr.out.size(), -7.0f);
  AttentionParams pref = p;
  pref.out = ref_out.data();
  attention_ref(pref);
  AttentionWorkspace ws;
  for (const auto& kernel : runnable_kernels(attention_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    if (isa == Isa::ref && !with_ref_isa) continue;
    for (AttentionPath path : {AttentionPath::fused, AttentionPath::unfused}) {
      std::fill(pr.out.begin(), pr.out.end(), -7.0f);
      attention(isa, p, ws, threads, path);
      double worst = 0.0;
      bool padding_ok = true, finite = true;
      for (size_t i = 0; i < pr.n_queries; ++i) {
        for (size_t c = 0; c < p.ldo; ++c) {
          const float y = pr.out[i * p.ldo + c], r = ref_out[i * p.ldo + c];
          if (c >= pr.n_heads * pr.head_dim) {
            padding_ok &= y == -7.0f;
            continue;
          }
          finite &= std::isfinite(y);
          worst = std::max(worst, std::fabs(double(y) - double(r)));
        }
      }
      CAPTURE(what);
      CAPTURE(std::string(attention_path_name(path)));
      CAPTURE(pr.n_heads);
      CAPTURE(pr.n_kv_heads);
      CAPTURE(pr.head_dim);
      CAPTURE(pr.n_queries);
      CAPTURE(pr.pos0 + pr.n_queries);
      CAPTURE(causal);
      CHECK(finite);
      CHECK(padding_ok);
      CHECK(worst <= tolerance(pr.pos0 + pr.n_queries));
    }
  }
}

struct Heads {
  size_t n_heads, n_kv_heads;
};
const Heads kHeadConfigs[] = {{12, 12}, {32, 8}, {8, 1}};

}  // namespace

TEST_CASE("attention: both paths match attention_ref, small shapes, every head config and head_dim") {
  // (n_queries, n_keys): n_keys = pos0 + n_queries.
  const std::pair<size_t, size_t> shapes[] = {{1, 1}, {1, 17}, {7, 17}, {7, 64}, {64, 64}, {1, 511}};
  for (Heads hc : kHeadConfigs)
    for (size_t d : {32, 64, 80, 128})
      for (auto [nq, nk] : shapes)
        for (bool causal : {true, false}) {
          Problem pr(hc.n_heads, hc.n_kv_heads, d, nq, nk - nq, unsigned(nq * 131 + nk + d));
          check_against_ref(pr, causal, "small");
        }
}

TEST_CASE("attention: both paths match attention_ref, long shapes (one head config each)") {
  struct Case {
    Heads hc;
    size_t d, nq, nk;
  };
  const Case cases[] = {
      {{12, 12}, 64, 129, 511},  {{32, 8}, 128, 129, 129}, {{8, 1}, 80, 64, 511},   {{12, 12}, 64, 1, 2048},
      {{32, 8}, 128, 1, 4096},   {{8, 1}, 64, 7, 4096},    {{12, 12}, 32, 64, 2048}, {{8, 1}, 32, 1000, 1000},
  };
  for (const Case& c : cases)
    for (bool causal : {true, false}) {
      if (c.nq == 1000 && !causal) continue;  // the reference alone would take seconds
      Problem pr(c.hc.n_heads, c.hc.n_kv_heads, c.d, c.nq, c.nk - c.nq, unsigned(c.nq + c.nk));
      check_against_ref(pr, causal, "long", false, c.nq == 129 ? 2 : 1);
    }
}

TEST_CASE("attention: other head_dims and tails are correct too") {
  for (size_t d : {1, 7, 17, 33, 96})
    for (auto [nq, nk] : {std::pair<size_t, size_t>{1, 300}, {9, 70}, {65, 65}}) {
      Problem pr(4, 2, d, nq, nk - nq, unsigned(d));
      check_against_ref(pr, true, "odd head_dim");
      check_against_ref(pr, false, "odd head_dim");
    }
}

TEST_CASE("attention: decode step by step with the cache equals the full-sequence result") {
  for (Heads hc : kHeadConfigs) {
    const size_t d = 64, n = 150;
    Problem full(hc.n_heads, hc.n_kv_heads, d, n, 0, 5);
    AttentionParams pf = full.params(true);
    for (const auto& kernel : runnable_kernels(attention_kernels())) {
      const Isa isa = kernel.isa;
      CAPTURE(std::string(kernel.name));
      if (isa == Isa::ref) continue;  // the ref ISA's fused path is attention_ref itself; its unfused path is slow
      for (AttentionPath path : {AttentionPath::fused, AttentionPath::unfused}) {
        AttentionWorkspace ws;
        attention(isa, pf, ws, 2, path);
        std::vector<float> step_out(pf.ldo);
        double worst = 0.0;
        for (size_t t = 0; t < n; ++t) {  // token t: one query at pos0 = t against the same cache
          AttentionParams ps = pf;
          ps.n_queries = 1, ps.pos0 = t, ps.q = full.q.data() + t * pf.ldq, ps.out = step_out.data();
          attention(isa, ps, ws, 1, path);
          for (size_t c = 0; c < hc.n_heads * d; ++c)
            worst = std::max(worst, std::fabs(double(step_out[c]) - full.out[t * pf.ldo + c]));
        }
        // Prefill in two chunks (pos0 = 0 then 67) equals the one-shot prefill too.
        std::vector<float> chunked(full.out.size());
        for (auto [b, e] : {std::pair<size_t, size_t>{0, 67}, {67, n}}) {
          AttentionParams pc = pf;
          pc.n_queries = e - b, pc.pos0 = b, pc.q = full.q.data() + b * pf.ldq, pc.out = chunked.data() + b * pf.ldo;
          attention(isa, pc, ws, 2, path);
        }
        for (size_t t = 0; t < n; ++t)
          for (size_t c = 0; c < hc.n_heads * d; ++c)
            worst = std::max(worst, std::fabs(double(chunked[t * pf.ldo + c]) - full.out[t * pf.ldo + c]));
        CAPTURE(std::string(attention_path_name(path)));
        CAPTURE(hc.n_heads);
        CHECK(worst <= 2 * tolerance(n));  // two float computations, each within tolerance of the exact value
      }
    }
  }
}

TEST_CASE("attention: bit-identical for any thread count") {
  for (auto [nq, nk] : {std::pair<size_t, size_t>{1, 3000}, {200, 700}, {33, 33}}) {
    Problem pr(8, 2, 64, nq, nk - nq, 9);
    for (bool causal : {true, false}) {
      AttentionParams p = pr.params(causal);
      for (const auto& kernel : runnable_kernels(attention_kernels())) {
        const Isa isa = kernel.isa;
        CAPTURE(std::string(kernel.name));
        if (isa == Isa::ref) continue;  // the reference is single-threaded
        for (AttentionPath path : {AttentionPath::fused, AttentionPath::unfused}) {
          AttentionWorkspace ws;
          attention(isa, p, ws, 1, path);
          const std::vector<float> one = pr.out;
          for (int threads : {2, 3, 4}) {
            attention(isa, p, ws, threads, path);
            CAPTURE(std::string(attention_path_name(path)));
            CAPTURE(threads);
            CHECK(std::memcmp(one.data(), pr.out.data(), one.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("attention: the observer gets the probabilities") {
  Problem pr(4, 2, 32, 9, 20, 3);
  AttentionParams p = pr.params(true);
  AttentionProbs probs, ref_probs;
  std::vector<float> ref_out(pr.out.size());
  AttentionParams pref = p;
  pref.out = ref_out.data(), pref.observe = &ref_probs;
  attention_ref(pref);
  p.observe = &probs;
  AttentionWorkspace ws;
  for (const auto& kernel : runnable_kernels(attention_kernels())) {
    const Isa isa = kernel.isa;
    CAPTURE(std::string(kernel.name));
    attention(isa, p, ws, 2, AttentionPath::fused);  // the hook forces the unfused path
    REQUIRE(probs.probs.size() == 4 * 9 * 29);
    CHECK(probs.n_heads == 4);
    CHECK(probs.n_queries == 9);
    CHECK(probs.n_keys == 29);
    // Probabilities: float dot products of 32 terms (scores up to ~10: rounding ~1e-6 absolute in the exponent,
    // so ~1e-6 relative in the probability), exp 2 ulp, a sum of <= 29 terms: 1e-5 relative.
    for (size_t i = 0; i < probs.probs.size(); ++i)
      SQRTDK_CHECK_REL(probs.probs[i], ref_probs.probs[i], 1e-5, "float scores, exp, short sum");
    // Causal: query 0 (position 20) sees keys 0..20, key 21.. are exactly 0.
    for (size_t j = 21; j < 29; ++j) CHECK(probs.probs[j] == 0.0f);
  }
}

TEST_CASE("attention: invalid parameters throw sqrtdk::Error naming the field") {
  Problem pr(4, 2, 32, 3, 5, 3);
  AttentionWorkspace ws;
  auto expect = [&](auto mutate, const char* field) {
    AttentionParams p = pr.params(true);
    mutate(p);
    CHECK_THROWS_WITH_AS(attention(Isa::ref, p, ws, 1), doctest::Contains(field), Error);
  };
  expect([](AttentionParams& p) { p.n_heads = 0; }, "n_heads");
  expect([](AttentionParams& p) { p.n_kv_heads = 3; }, "n_kv_heads");
  expect([](AttentionParams& p) { p.head_dim = 0; }, "head_dim");
  expect([](AttentionParams& p) { p.scale = 0; }, "scale");
  expect([](AttentionParams& p) { p.q = nullptr; }, "q is null");
  expect([](AttentionParams& p) { p.k_cache = nullptr; }, "k_cache");
  expect([](AttentionParams& p) { p.v_cache = nullptr; }, "v_cache");
  expect([](AttentionParams& p) { p.out = nullptr; }, "out is null");
  expect([](AttentionParams& p) { p.ldq = 10; }, "ldq");
  expect([](AttentionParams& p) { p.ldo = 10; }, "ldo");
  expect([](AttentionParams& p) { p.cache_stride = 7; }, "cache_stride");
  // More keys than the fused causal mask compares exactly (float positions, 2^24): refused on every path.
  expect([](AttentionParams& p) { p.pos0 = kMaxAttentionKeys, p.cache_stride = kMaxAttentionKeys + 8; }, "2^24");
  const bool env_set = std::getenv("SQRTDK_ATTENTION") != nullptr;
  if (!env_set) CHECK(default_attention_path() == AttentionPath::automatic);
}

TEST_CASE("attention: with no table, the automatic path follows the built-in rule (attention.cpp)") {
  auto shape = [](size_t heads, size_t kv_heads, size_t d, size_t n, size_t m, bool causal) {
    AttentionParams p;
    p.n_heads = heads, p.n_kv_heads = kv_heads, p.head_dim = d, p.n_queries = n, p.pos0 = m - n, p.causal = causal;
    return choose_attention_path(p, nullptr);
  };
  // Decode: GQA fused at any length; MHA fused up to 4096 keys, unfused past it.
  CHECK(shape(32, 8, 128, 1, 8192, true) == AttentionPath::fused);
  CHECK(shape(12, 12, 64, 1, 512, true) == AttentionPath::fused);
  CHECK(shape(12, 12, 64, 1, 4096, true) == AttentionPath::fused);
  CHECK(shape(12, 12, 64, 1, 4097, true) == AttentionPath::unfused);
  // Causal prefill: fused, except short MHA with head_dim 128.
  CHECK(shape(12, 12, 64, 128, 128, true) == AttentionPath::fused);
  CHECK(shape(32, 32, 128, 128, 128, true) == AttentionPath::unfused);
  CHECK(shape(32, 32, 128, 512, 512, true) == AttentionPath::fused);
  CHECK(shape(32, 8, 128, 128, 128, true) == AttentionPath::fused);
  // Non-causal: unfused while one head's scores fit the cap (4 Mi floats), fused beyond.
  CHECK(shape(12, 12, 64, 2048, 2048, false) == AttentionPath::unfused);
  CHECK(shape(12, 12, 64, 4096, 4096, false) == AttentionPath::fused);
  // The probabilities hook always takes the unfused path.
  AttentionProbs probs;
  AttentionParams p;
  p.n_heads = 8, p.n_kv_heads = 1, p.head_dim = 64, p.n_queries = 1, p.pos0 = 99, p.observe = &probs;
  CHECK(choose_attention_path(p, nullptr) == AttentionPath::unfused);
}

// NaN is never hidden (softmax.h): a NaN score must reach every output it feeds. x86 max drops a NaN operand, so
// where the NaN sits decides whether a max-based kernel sees it: the tests put one NaN at every key position, so
// it lands in every lane of every vector of every decode chunk and every key tile (issue 13: a NaN in lane 0 of
// the last vector of a decode chunk became the chunk max, the max comparison dropped it, the chunk's scores were
// zeroed and the merge discarded the chunk).
namespace {

const std::pair<const char*, AttentionPath> kPaths[] = {{"fused", AttentionPath::fused},
                                                        {"unfused", AttentionPath::unfused}};

}  // namespace

TEST_CASE("attention: a NaN key at every position of a multi-chunk decode makes the output NaN") {
  // MQA (1 kv head): 256-key decode chunks, so 549 keys are 3 chunks (256, 256, 37: a tail of the last vector).
  const size_t n_keys = 2 * kDecodeChunkShort + 37, d = 16;
  Problem pr(2, 1, d, 1, n_keys - 1, 21);
  REQUIRE(decode_chunk_keys(1) == kDecodeChunkShort);
  AttentionParams p = pr.params(true);
  AttentionWorkspace ws;
  for (const auto& kernel : runnable_kernels(attention_kernels())) {
    CAPTURE(std::string(kernel.name));
    for (const auto& named : kPaths) {  // (clang 14: no structured bindings in CAPTURE's lambda)
      const AttentionPath path = named.second;
      CAPTURE(std::string(named.first));
      size_t hidden = 0, first_hidden = n_keys;
      for (size_t j = 0; j < n_keys; ++j) {
        const float saved = pr.k[j * d + j % d];
        pr.k[j * d + j % d] = std::nanf("");
        attention(kernel.isa, p, ws, 1, path);
        pr.k[j * d + j % d] = saved;
        bool all_nan = true;
        for (size_t c = 0; c < 2 * d; ++c) all_nan &= std::isnan(pr.out[c]);
        if (!all_nan && hidden++ == 0) first_hidden = j;
      }
      CAPTURE(first_hidden);
      CHECK(hidden == 0);
    }
  }
}

TEST_CASE("attention: a NaN key at every position of a causal prefill reaches exactly the queries that see it") {
  // 2 query heads per kv head, 130 queries from position 0: several query blocks and 3 key tiles of kBc = 64 (the
  // last partial); query i sees keys 0..i, so a NaN in key j makes rows i >= j NaN and leaves rows i < j unchanged.
  const size_t nq = 2 * kBc + 2, d = 16, heads = 2;
  Problem pr(heads, 1, d, nq, 0, 22);
  AttentionParams p = pr.params(true);
  AttentionWorkspace ws;
  for (const auto& kernel : runnable_kernels(attention_kernels())) {
    CAPTURE(std::string(kernel.name));
    for (const auto& named : kPaths) {  // (clang 14: no structured bindings in CAPTURE's lambda)
      const AttentionPath path = named.second;
      CAPTURE(std::string(named.first));
      attention(kernel.isa, p, ws, 1, path);
      const std::vector<float> clean = pr.out;
      size_t hidden = 0, leaked = 0, first_hidden = nq, first_leaked = nq;
      for (size_t j = 0; j < nq; ++j) {
        const float saved = pr.k[j * d + j % d];
        pr.k[j * d + j % d] = std::nanf("");
        attention(kernel.isa, p, ws, 1, path);
        pr.k[j * d + j % d] = saved;
        for (size_t i = 0; i < nq; ++i) {
          const float* row = pr.out.data() + i * p.ldo;
          const float* clean_row = clean.data() + i * p.ldo;
          for (size_t c = 0; c < heads * d; ++c) {
            if (i >= j && !std::isnan(row[c]) && hidden++ == 0) first_hidden = j;
            if (i < j && std::memcmp(&row[c], &clean_row[c], sizeof(float)) != 0 && leaked++ == 0) first_leaked = j;
          }
        }
      }
      CAPTURE(first_hidden);
      CAPTURE(first_leaked);
      CHECK(hidden == 0);
      CHECK(leaked == 0);
    }
  }
}

TEST_CASE("attention: a non-finite value row reaches exactly the queries that see its key") {
  // The value-side twin of the test above. A masked key's probability is exactly 0 and 0 · NaN = NaN, so a NaN or
  // Inf in value row j used to reach rows i < j too (issue 13: 408 elements on the unfused path, 24 on the fused
  // path in this shape). Rows i >= j must be non-finite; rows i < j must keep the bits of the clean run.
  const size_t nq = 2 * kBc + 2, d = 16, heads = 2;
  Problem pr(heads, 1, d, nq, 0, 23);
  AttentionParams p = pr.params(true);
  AttentionWorkspace ws;
  const float poisons[] = {std::nanf(""), std::numeric_limits<float>::infinity()};
  for (const auto& kernel : runnable_kernels(attention_kernels())) {
    CAPTURE(std::string(kernel.name));
    for (const auto& named : kPaths) {
      const AttentionPath path = named.second;
      CAPTURE(std::string(named.first));
      for (const float poison : poisons) {
        CAPTURE(poison);
        attention(kernel.isa, p, ws, 1, path);
        const std::vector<float> clean = pr.out;
        size_t hidden = 0, leaked = 0, first_hidden = nq, first_leaked = nq;
        for (size_t j = 0; j < nq; ++j) {
          const float saved = pr.v[j * d + j % d];
          pr.v[j * d + j % d] = poison;
          attention(kernel.isa, p, ws, 1, path);
          pr.v[j * d + j % d] = saved;
          for (size_t i = 0; i < nq; ++i) {
            for (size_t hh = 0; hh < heads; ++hh) {
              // Column j % d of each head is the one multiplied by the poisoned element.
              const float got = pr.out[i * p.ldo + hh * d + j % d];
              if (i >= j && std::isfinite(got) && hidden++ == 0) first_hidden = j;
            }
            const float* row = pr.out.data() + i * p.ldo;
            const float* clean_row = clean.data() + i * p.ldo;
            if (i < j && std::memcmp(row, clean_row, heads * d * sizeof(float)) != 0 && leaked++ == 0)
              first_leaked = j;
          }
        }
        CAPTURE(first_hidden);
        CAPTURE(first_leaked);
        CHECK(hidden == 0);
        CHECK(leaked == 0);
      }
    }
  }
}

TEST_CASE("attention: a NaN query element makes exactly its own row and head NaN, on both paths") {
  const size_t nq = 70, d = 16, heads = 4;
  for (size_t pos0 : {size_t{0}, size_t{300}}) {  // prefill from 0, and a block after a 300-key cache
    Problem pr(heads, 2, d, nq, pos0, 23);
    for (size_t n : {nq, size_t{1}}) {  // prefill, then decode (one query)
      AttentionParams p = pr.params(true);
      p.n_queries = n;
      AttentionWorkspace ws;
      for (const auto& kernel : runnable_kernels(attention_kernels())) {
        CAPTURE(std::string(kernel.name));
        for (const auto& named : kPaths) {  // (clang 14: no structured bindings in CAPTURE's lambda)
          const AttentionPath path = named.second;
          CAPTURE(std::string(named.first));
          CAPTURE(pos0);
          CAPTURE(n);
          size_t wrong = 0;
          for (size_t i = 0; i < n; i += 3) {
            const size_t h = i % heads, c0 = (i * 5) % d;
            float& qe = pr.q[i * p.ldq + h * d + c0];
            const float saved = qe;
            qe = std::nanf("");
            attention(kernel.isa, p, ws, 1, path);
            qe = saved;
            for (size_t r = 0; r < n; ++r)
              for (size_t c = 0; c < heads * d; ++c)
                wrong += std::isnan(pr.out[r * p.ldo + c]) != (r == i && c / d == h);
          }
          CHECK(wrong == 0);
        }
      }
    }
  }
}

// The unfused path blocks its queries once one head's scores pass kUnfusedMaxScoreFloats (attention_internal.h); a
// causal block computes only the keys its rows see. Both against the spec, with the block edge inside the call.
TEST_CASE("attention: the unfused path's query blocks (past 16 MiB of scores) match attention_ref") {
  const std::pair<size_t, size_t> shapes[] = {{2100, 0}, {1500, 1500}};  // (n_queries, pos0)
  for (auto [nq, pos0] : shapes) {
    const size_t rows = unfused_rows_per_block(nq, pos0 + nq);
    CAPTURE(rows);
    REQUIRE(rows < nq);  // at least two blocks, the last one partial
    REQUIRE(nq % rows != 0);
    for (bool causal : {true, false}) {
      Problem pr(1, 1, 8, nq, pos0, unsigned(nq + pos0));
      check_against_ref(pr, causal, "blocked unfused", /*with_ref_isa=*/false);
    }
  }
  // The observer's probabilities with blocks: each row a distribution over the keys it sees, masked keys exactly 0.
  Problem pr(1, 1, 8, 2100, 0, 5);
  AttentionProbs probs;
  AttentionParams p = pr.params(true);
  p.observe = &probs;
  AttentionWorkspace ws;
  attention(supported_isas().back(), p, ws, 1);
  REQUIRE(probs.probs.size() == 2100u * 2100u);
  bool ok = true;
  for (size_t i = 0; i < 2100; i += 97) {
    double sum = 0;
    for (size_t j = 0; j < 2100; ++j) {
      const float x = probs.probs[i * 2100 + j];
      if (j > i) ok &= x == 0.0f;
      sum += x;
    }
    ok &= std::fabs(sum - 1.0) < 1e-4;
  }
  CHECK(ok);
}
