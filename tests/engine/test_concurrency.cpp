// The threading contract: one Model shared by many threads, each with its own Session, gives the same bits as
// running the prompts one after another; idle worker threads do not spin.
#include <doctest/doctest.h>

#include <sqrtdk/generate.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include "tests/common/toy_model.h"

#include <chrono>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

using namespace sqrtdk;

namespace {

std::vector<float> run_prompt(const std::shared_ptr<const Model>& model, const std::vector<uint32_t>& prompt,
                              int n_threads) {
  SessionOptions so;
  so.n_threads = n_threads;
  Session s(model, so);
  auto logits = s.prefill(prompt, true);
  std::vector<float> out(logits.begin(), logits.end());
  GenerateOptions g;
  g.sampling.seed = prompt.size();
  g.max_new_tokens = 6;
  for (uint32_t t : generate(s, std::vector<uint32_t>{prompt.back()}, g).tokens) out.push_back(static_cast<float>(t));
  return out;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace

TEST_CASE("concurrency: 8 threads x several prompts on one model equal the sequential results bit for bit") {
  test::TempDir dir;
  ModelConfig c = test::toy_llama_config();
  test::write_toy_model(dir.file("m.sqdk"), c, 21);
  auto model = Model::load(dir.file("m.sqdk"));
  std::vector<std::vector<uint32_t>> prompts;
  for (size_t p = 0; p < 16; ++p) {
    std::vector<uint32_t> prompt(3 + p % 7);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<uint32_t>((p * 13 + i * 5) % c.n_vocab);
    prompts.push_back(prompt);
  }
  std::vector<std::vector<float>> sequential;
  for (const auto& p : prompts) sequential.push_back(run_prompt(model, p, 1));

  std::vector<std::vector<float>> parallel(prompts.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (size_t p = t; p < prompts.size(); p += 8) parallel[p] = run_prompt(model, prompts[p], 1 + (t % 2));
    });
  for (auto& th : threads) th.join();
  for (size_t p = 0; p < prompts.size(); ++p) {
    CAPTURE(p);
    REQUIRE(parallel[p].size() == sequential[p].size());
    CHECK(std::memcmp(parallel[p].data(), sequential[p].data(), sequential[p].size() * sizeof(float)) == 0);
  }
}

TEST_CASE("concurrency: no thread burns CPU while idle after work") {
  test::TempDir dir;
  test::write_toy_model(dir.file("m.sqdk"), test::toy_llama_config(), 4);
  auto model = Model::load(dir.file("m.sqdk"));
  SessionOptions so;
  so.n_threads = 2;
  Session s(model, so);
  for (int i = 0; i < 5; ++i) s.prefill(std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8});
  // Let the pool's brief post-job spin run out (ops/base/thread_pool.cpp: 50 us), then measure a second of idling.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double cpu0 = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double idle_cpu = process_cpu_seconds() - cpu0;
  // A spinning worker would use ~1 s of CPU here; a sleeping pool uses microseconds. 0.05 s allows for noise
  // from the test harness and sanitizer runtimes.
  CHECK(idle_cpu < 0.05);
}
