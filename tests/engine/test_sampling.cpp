// Sampling with non-finite logits (the rules in engine/include/sqrtdk/generate.h): NaN anywhere is an error naming
// the id, +Inf entries share the mass equally, -Inf entries are never picked, all -Inf is an error. Every sampler:
// greedy, temperature (all tokens), top-k, top-p, and the C API's sqrtdk_sample.
#include <doctest/doctest.h>

#include <sqrtdk/error.h>
#include <sqrtdk/generate.h>
#include <sqrtdk/sqrtdk.h>

#include "tests/common/close.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

using namespace sqrtdk;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Named {
  const char* name;
  SamplingOptions options;  // {temperature, top_k, top_p, seed}
};

const std::vector<Named>& samplers() {
  static const std::vector<Named> all = {
      {"greedy", {0.0f, 0, 1.0f, 1}},
      {"temperature", {1.0f, 0, 1.0f, 2}},
      {"hot temperature", {50.0f, 0, 1.0f, 3}},
      {"top-k 2", {1.0f, 2, 1.0f, 4}},
      {"top-k 3", {0.7f, 3, 1.0f, 5}},
      {"top-p 0.9", {1.0f, 0, 0.9f, 6}},
      {"top-p 0.5", {1.0f, 0, 0.5f, 7}},
      {"top-k 3 + top-p 0.99", {1.3f, 3, 0.99f, 8}},
  };
  return all;
}

// How often each id is drawn in n draws.
std::map<uint32_t, int> histogram(Sampler& s, const std::vector<float>& logits, int n) {
  std::map<uint32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(logits)];
  return h;
}

}  // namespace

TEST_CASE("sampler: NaN logits are an error naming the id, in every sampler") {
  for (const Named& s : samplers()) {
    CAPTURE(s.name);
    for (size_t at : {size_t{0}, size_t{2}, size_t{4}}) {
      std::vector<float> logits = {0.5f, 3.0f, -1.0f, kInf, 2.0f};
      logits[at] = kNaN;
      Sampler sampler(s.options);
      const std::string expected = "logits contain NaN at id " + std::to_string(at);
      CHECK_THROWS_WITH_AS(sampler.sample(logits), doctest::Contains(expected.c_str()), Error);
    }
    std::vector<float> all_nan(7, kNaN);
    Sampler sampler(s.options);
    CHECK_THROWS_WITH_AS(sampler.sample(all_nan), doctest::Contains("NaN at id 0"), Error);
  }
}

TEST_CASE("sampler: +Inf entries share the probability, -Inf and finite entries are never picked") {
  // The case: {+Inf, -Inf, +Inf, 0} used to pick the -Inf id with status OK.
  const std::vector<float> logits = {kInf, -kInf, kInf, 0.0f};
  for (const Named& s : samplers()) {
    CAPTURE(s.name);
    Sampler sampler(s.options);
    const auto h = histogram(sampler, logits, 400);
    CHECK(h.count(1) == 0);
    CHECK(h.count(3) == 0);
    if (s.options.temperature == 0.0f) {
      CHECK(h.at(0) == 400);  // greedy: the first +Inf
    } else if (s.options.top_p <= 0.5f) {
      CHECK(h.at(0) == 400);  // the nucleus of p 0.5 is the first +Inf alone
    } else {
      // Both +Inf ids drawn, about equally (400 draws of a fair coin: 200 ± 60 is > 6 sigma).
      REQUIRE(h.count(0) == 1);
      REQUIRE(h.count(2) == 1);
      CHECK(h.at(0) > 140);
      CHECK(h.at(2) > 140);
    }
  }
  // One +Inf among finite logits always wins.
  for (const Named& s : samplers()) {
    CAPTURE(s.name);
    Sampler sampler(s.options);
    for (int i = 0; i < 50; ++i) CHECK(sampler.sample(std::vector<float>{9.0f, 8.0f, kInf, 7.0f}) == 2);
  }
}

TEST_CASE("sampler: -Inf entries are never picked; all -Inf is an error") {
  // Mostly -Inf with two finite ids: only those are drawn, even with a huge temperature and top-k over everything.
  std::vector<float> logits(64, -kInf);
  logits[10] = -50.0f;
  logits[40] = -51.0f;
  for (const Named& s : samplers()) {
    CAPTURE(s.name);
    Sampler sampler(s.options);
    for (const auto& entry : histogram(sampler, logits, 300)) {  // no structured binding: clang 14 cannot CAPTURE it
      const auto id = entry.first;
      CAPTURE(id);
      CHECK((id == 10 || id == 40));
    }
    Sampler again(s.options);
    CHECK_THROWS_WITH_AS(again.sample(std::vector<float>(5, -kInf)), doctest::Contains("every one of the 5 logits is -Inf"),
                         Error);
  }
  // A single finite id among -Inf: always that one.
  for (const Named& s : samplers()) {
    Sampler sampler(s.options);
    CHECK(sampler.sample(std::vector<float>{-kInf, -kInf, 3.0f}) == 2);
  }
}

TEST_CASE("sampler: token_probabilities follows the same rules") {
  const auto p = token_probabilities(std::vector<float>{kInf, -kInf, kInf, 0.0f});
  CHECK(p == std::vector<double>{0.5, 0.0, 0.5, 0.0});
  const auto q = token_probabilities(std::vector<float>{0.0f, -kInf, std::log(3.0f)});
  // log(3) rounded to float carries ~3e-8 relative error into exp: the probabilities are 1/4 and 3/4 to ~1e-7.
  SQRTDK_CHECK_REL(q[0], 0.25, 1e-6, "log(3.0f) is rounded to float");
  CHECK(q[1] == 0.0);
  SQRTDK_CHECK_REL(q[2], 0.75, 1e-6, "log(3.0f) is rounded to float");
  CHECK_THROWS_WITH_AS(token_probabilities(std::vector<float>{1.0f, kNaN}), doctest::Contains("NaN at id 1"), Error);
  CHECK_THROWS_AS(token_probabilities(std::vector<float>{-kInf}), Error);
}

TEST_CASE("sampler: the C API's sqrtdk_sample follows the same rules") {
  const float inf_logits[4] = {kInf, -kInf, kInf, 0.0f};
  const float nan_logits[3] = {1.0f, kNaN, 2.0f};
  for (const Named& s : samplers()) {
    CAPTURE(s.name);
    sqrtdk_sampling c{s.options.temperature, static_cast<uint32_t>(s.options.top_k), s.options.top_p,
                      s.options.seed};
    for (int i = 0; i < 30; ++i) {
      uint32_t out = 99;
      REQUIRE(sqrtdk_sample(inf_logits, 4, &c, &out) == SQRTDK_OK);
      CHECK((out == 0 || out == 2));
    }
    uint32_t out = 99;
    CHECK(sqrtdk_sample(nan_logits, 3, &c, &out) == SQRTDK_ERR_INVALID_ARGUMENT);
  }
}

TEST_CASE("sampler: extreme finite logits and temperatures stay finite (no NaN from inf - inf)") {
  // The largest finite logits, both signs, and temperatures from denormal to huge: always a valid finite pick.
  const float big = std::numeric_limits<float>::max();
  const std::vector<float> logits = {-big, big, 0.0f, big, -1.0f};
  for (float t : {std::numeric_limits<float>::denorm_min(), 1e-30f, 1.0f, 1e30f, big}) {
    CAPTURE(t);
    Sampler s({t, 0, 1.0f, 11});
    for (int i = 0; i < 50; ++i) {
      const uint32_t id = s.sample(logits);
      if (t <= 1.0f) CHECK((id == 1 || id == 3));  // the two maxima share the mass
      CHECK(id < logits.size());
    }
  }
  const auto p = token_probabilities(logits);
  CHECK(p[1] == 0.5);  // two equal maxima: exp(0) each, normalized exactly
  CHECK(p[3] == 0.5);
  CHECK(p[0] == 0.0);
}
