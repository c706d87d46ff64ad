// libFuzzer target: prompt handling. The byte tokenizer round trip, then a sequence of prefill / decode / reset
// calls on a tiny byte-level llama (n_vocab 258, max_seq 16) driven by the input: valid byte ids, ids out of range,
// empty prompts and prompts past the context. Contract under test: invalid calls throw sqrtdk::Error and leave the
// session as it was (n_past unchanged, the next valid call works); valid calls give finite logits.
#include <sqrtdk/error.h>
#include <sqrtdk/generate.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include "tests/common/toy_model.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

#define FUZZ_CHECK(cond)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "fuzz_prompt: check failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

sqrtdk::ModelConfig tiny_config() {
  sqrtdk::ModelConfig c;
  c.arch = sqrtdk::Arch::llama;
  c.d_model = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 8;
  c.d_ff = 24;
  c.n_vocab = 258;
  c.max_seq = 16;
  c.tokenizer = sqrtdk::TokenizerKind::byte_level;
  c.bos_id = 256;
  c.eos_id = 257;
  return c;
}

// Written once to a temp folder, loaded once, shared by every input (a fresh Session per input keeps runs
// reproducible).
const std::shared_ptr<const sqrtdk::Model>& model() {
  static const std::shared_ptr<const sqrtdk::Model> m = [] {
    sqrtdk::test::TempDir dir;  // the mapping outlives the unlinked file
    sqrtdk::test::write_toy_model(dir.file("tiny.sqdk"), tiny_config(), 7);
    sqrtdk::ModelOptions mo;
    mo.n_threads = 1;
    return sqrtdk::Model::load(dir.file("tiny.sqdk"), mo);
  }();
  return m;
}

void check_finite(std::span<const float> logits) {
  FUZZ_CHECK(logits.size() == 258);
  for (float v : logits) FUZZ_CHECK(std::isfinite(v));
}

// Runs prefill(tokens) and checks the contract: success adds tokens.size() to n_past, failure changes nothing.
void prefill_checked(sqrtdk::Session& s, const std::vector<uint32_t>& tokens) {
  const size_t before = s.n_past();
  const bool valid = !tokens.empty() && before + tokens.size() <= s.max_context() &&
                     [&] {
                       for (uint32_t t : tokens)
                         if (t >= 258) return false;
                       return true;
                     }();
  try {
    check_finite(s.prefill(tokens));
    FUZZ_CHECK(valid);
    FUZZ_CHECK(s.n_past() == before + tokens.size());
  } catch (const sqrtdk::Error&) {
    FUZZ_CHECK(!valid);
    FUZZ_CHECK(s.n_past() == before);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  // Tokenizer: any bytes (invalid UTF-8 included) map to one id each and come back unchanged.
  const auto ids = sqrtdk::byte_encode(text);
  FUZZ_CHECK(ids.size() == size);
  FUZZ_CHECK(sqrtdk::byte_decode(ids) == text);
  const auto with_bos = sqrtdk::byte_encode(text, 256);
  FUZZ_CHECK(with_bos.size() == size + 1 && with_bos[0] == 256);
  FUZZ_CHECK(sqrtdk::byte_decode(with_bos) == text);  // special ids decode to nothing

  sqrtdk::SessionOptions so;
  so.n_threads = 1;
  so.max_batch = 1 + (size ? data[0] % 8 : 0);  // chunked prefill paths
  sqrtdk::Session s(model(), so);

  // The rest drives a call sequence: op byte, then its operands.
  size_t i = 1;
  for (int n_ops = 0; i < size && n_ops < 32; ++n_ops) {
    const uint8_t op = data[i++];
    switch (op % 5) {
      case 0: {  // prefill of the next (op / 5) % 24 bytes as byte ids: may be empty or past the context
        const size_t n = (op / 5) % 24;
        std::vector<uint32_t> t;
        for (; t.size() < n && i < size; ++i) t.push_back(data[i]);
        prefill_checked(s, t);
        break;
      }
      case 1: {  // one 16-bit id: often out of range
        if (i + 2 > size) return 0;
        const uint32_t id = data[i] | (data[i + 1] << 8);
        i += 2;
        prefill_checked(s, {id});
        break;
      }
      case 2: {  // a huge id, the kNoToken value, or BOS/EOS
        const uint32_t choices[] = {0xFFFFFFFFu, 0x80000000u, 258u, 256u, 257u};
        prefill_checked(s, {choices[(op / 5) % 5]});
        break;
      }
      case 3:  // decode the byte after: valid unless the context is full
        if (i < size) {
          const size_t before = s.n_past();
          try {
            check_finite(s.decode(data[i]));
            FUZZ_CHECK(before < s.max_context() && s.n_past() == before + 1);
          } catch (const sqrtdk::Error&) {
            FUZZ_CHECK(before == s.max_context() && s.n_past() == before);
          }
          ++i;
        }
        break;
      default:
        s.reset();
        FUZZ_CHECK(s.n_past() == 0);
    }
  }
  // Still usable: a fresh context takes a valid prompt.
  s.reset();
  check_finite(s.prefill(std::vector<uint32_t>{256, 'o', 'k'}));
  return 0;
}
