// What the model families refuse at load and convert time (models/<family>/<family>_family.cpp, engine/FORMAT.md),
// and that no allocation scales with a header field the engine does not need (a RoPE table for max_seq 2^24).
#include <doctest/doctest.h>

#include <sqrtdk/error.h>
#include <sqrtdk/format.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include "tests/common/address_space.h"
#include "tests/common/toy_model.h"

#include <cstdio>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

using namespace sqrtdk;

TEST_CASE("family rules: llama refuses an odd head_dim and rope_theta <= 1, naming the field") {
  // These used to pass validation and fail only at run time, in the RoPE table, with a message naming no file.
  ModelConfig odd = test::toy_llama_config();
  odd.head_dim = 15;
  CHECK_THROWS_WITH_AS(odd.validate("m.sqdk"), doctest::Contains("m.sqdk: config: head_dim 15 is odd"), Error);
  for (const float theta : {1.0f, 0.5f, 1e-30f}) {
    ModelConfig c = test::toy_llama_config();
    c.rope_theta = theta;
    CAPTURE(theta);
    CHECK_THROWS_WITH_AS(c.validate("m.sqdk"), doctest::Contains("m.sqdk: config: rope_theta"), Error);
  }
  ModelConfig fine = test::toy_llama_config();
  fine.rope_theta = 1.0001f;
  CHECK_NOTHROW(fine.validate("m.sqdk"));
  // gpt2 has no RoPE: an odd head_dim is fine there.
  ModelConfig gpt2 = test::toy_gpt2_config();
  gpt2.d_model = 45;
  gpt2.head_dim = 15;
  CHECK_NOTHROW(gpt2.validate("m.sqdk"));
}

TEST_CASE("family rules: the writer and the loader refuse an odd llama head_dim") {
  test::TempDir dir;
  ModelConfig c = test::toy_llama_config();
  c.head_dim = 15;
  CHECK_THROWS_WITH_AS(test::write_toy_model(dir.file("odd.sqdk"), c, 1), doctest::Contains("head_dim 15 is odd"),
                       Error);
}

TEST_CASE("family rules: a llama file with max_seq 2^24 loads and runs in bounded memory" *
          doctest::skip(test::kUnderSanitizer)) {
  // A 2^24-position RoPE table is 3 x 2^24 x head_dim floats (3 GiB at head_dim 16): it used to be built at load,
  // for the model's max_seq. Now each session builds it for its own context. Under an address-space cap of what is
  // mapped plus 512 MiB, loading the model and running a 64-token session must work. (Child process: the cap must
  // not touch the rest of the suite; not under sanitizers, whose shadow memory does not fit under the cap.)
  test::TempDir dir;
  const std::string path = dir.file("long.sqdk");
  ModelConfig c = test::toy_llama_config();
  c.max_seq = 1u << 24;
  test::write_toy_model(path, c, 5);

  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!test::cap_address_space(size_t{512} << 20)) _exit(10);
    try {
      ModelOptions mo;
      mo.n_threads = 1;
      auto model = Model::load(path, mo);
      SessionOptions so;
      so.max_context = 64;
      so.n_threads = 1;  // no OpenMP team in a forked child (libgomp's pool does not survive fork)
      Session session(model, so);
      const std::vector<uint32_t> prompt = {1, 2, 3};
      if (session.prefill(prompt).size() != c.n_vocab) _exit(11);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bounded-memory child: %s\n", e.what());
      _exit(12);
    }
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 12: the load or the session ran out of memory (see stderr)
}
