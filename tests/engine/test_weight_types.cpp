// bf16 and q8 weights end to end (issue #17): a model converted with convert_sqdk runs on every ISA path this
// machine has, the same bits for any thread count, and stays close to the f32 model it came from. The bounds are
// generous on purpose (several times what README's accuracy table measures): they catch a broken quantizer or
// kernel (a wrong scale, a lost block, a sign error moves these by orders of magnitude), not the last 0.1%.
#include <doctest/doctest.h>

#include <sqrtdk/convert.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>
#include <sqrtdk/tokenizer.h>

#include "tests/common/sanitizer.h"
#include "tests/common/temp_dir.h"
#include "tests/common/toy_model.h"
#include "tools/common/logit_compare.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace sqrtdk;

namespace {

std::string bundled_model() { return std::string(SQRTDK_SOURCE_DIR) + "/models/tiny-llama-bytes.sqdk"; }

std::shared_ptr<const Model> load_at(const std::string& path, Isa isa) {
  ModelOptions options;
  options.isa = static_cast<int>(isa);
  return Model::load(path, options);
}

// All logits of `tokens` run in windows of `window` positions (a fresh context each).
std::vector<float> all_logits(const std::shared_ptr<const Model>& model, const std::vector<uint32_t>& tokens,
                              size_t window, int threads) {
  SessionOptions so;
  so.n_threads = threads;
  Session s(model, so);
  std::vector<float> out;
  for (size_t w0 = 0; w0 < tokens.size(); w0 += window) {
    s.reset();
    const size_t len = std::min(window, tokens.size() - w0);
    const auto logits = s.prefill(std::span<const uint32_t>(tokens.data() + w0, len), true);
    out.insert(out.end(), logits.begin(), logits.end());
  }
  return out;
}

tools::LogitComparison compare(const std::vector<float>& ref, const std::vector<float>& other,
                               const std::vector<uint32_t>& tokens, size_t window, size_t vocab) {
  tools::LogitComparison c;
  for (size_t p = 0; p < tokens.size(); ++p) {
    const bool has_next = (p + 1) % window != 0 && p + 1 < tokens.size();
    c.add(std::span<const float>(ref.data() + p * vocab, vocab), std::span<const float>(other.data() + p * vocab, vocab),
          has_next ? static_cast<int64_t>(tokens[p + 1]) : -1);
  }
  return c;
}

// The ISA levels whose bf16/q8 kernels differ: each level's own entry in the tables (ref, avx2, avx512 widening
// bf16, avx512_vnni q8, avx512_bf16 bf16), as far as this CPU runs them.
std::vector<Isa> typed_isas() { return supported_isas(); }

}  // namespace

TEST_CASE("weight types: the bundled model in bf16 and q8 keeps its bits per byte on held-out text") {
  test::TempDir dir;
  const std::string f32 = bundled_model(), bf16 = dir.file("bf16.sqdk"), q8 = dir.file("q8.sqdk");
  ConvertOptions o;
  o.dtype = DType::bf16;
  convert_sqdk(f32, bf16, o);
  o.dtype = DType::q8;
  convert_sqdk(f32, q8, o);

  // The end of the New Testament, held out from training (tools/train_tiny.py), 16 KB; 4 096 bytes of it per path.
  std::ifstream in(std::string(SQRTDK_SOURCE_DIR) + "/tests/data/tiny/kjv_valid_excerpt.txt", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  auto ref_model = Model::load(f32);
  const std::vector<uint32_t> text = ref_model->require_tokenizer().encode(ss.str(), false);
  REQUIRE(text.size() > 4096);
  const size_t window = 256, vocab = ref_model->config().n_vocab;

  // The f32 logits per f32 kernel level (the avx512_vnni/avx512_bf16 levels run f32 at avx512): computed once each.
  // typed_isas() is in order, so only the last level's logits are ever needed again.
  Isa f32_logits_isa = Isa::ref;
  std::vector<float> f32_logits;
  for (Isa isa : typed_isas()) {
    CAPTURE(isa_name(isa));
    // The reference ISA is the scalar spec: 1 000 positions are plenty to check it and keep the test quick. Under
    // a sanitizer (CI runs this under ASan and TSan, 5-10x slower) a quarter of each: the same checks, with the
    // bits per byte averaged over fewer positions (the bound is 2%, the measured differences 0.01-0.03%).
    const size_t positions = (isa == Isa::ref ? 1000 : 4096) / (test::kUnderSanitizer ? 4 : 1);
    const std::vector<uint32_t> tokens(text.begin(), text.begin() + positions);
    const Isa f32_isa = isa <= Isa::avx512 ? isa : Isa::avx512;
    if (f32_logits.empty() || f32_logits_isa != f32_isa) {
      f32_logits = all_logits(load_at(f32, f32_isa), tokens, window, 2);
      f32_logits_isa = f32_isa;
    }
    const std::vector<float>& ref = f32_logits;
    for (const std::pair<std::string, std::string>& typed : {std::pair<std::string, std::string>{"bf16", bf16},
                                                              std::pair<std::string, std::string>{"q8", q8}}) {
      const std::string& name = typed.first;  // not a structured binding: clang 14 cannot capture those
      const std::string& path = typed.second;
      CAPTURE(name);
      const auto model = load_at(path, isa);
      const auto logits = all_logits(model, tokens, window, 2);
      const tools::LogitComparison c = compare(ref, logits, tokens, window, vocab);
      const double bpb_ref = c.bits_ref / c.scored, bpb = c.bits_other / c.scored;  // byte tokens: per byte
      MESSAGE(std::string(isa_name(isa)) << " " << name << ": bits/byte " << bpb << " vs f32 " << bpb_ref << " ("
                            << 100.0 * (bpb - bpb_ref) / bpb_ref << "%), top-1 " << 100.0 * c.top1_rate()
                            << "%, KL mean " << c.kl_mean() << ", max |dlogp| " << c.dlogp_max);
      // Measured on the Xeon (2026-12-01): bf16 -0.01%, q8 +0.03% (README). 2% catches a broken quantizer: one
      // wrong block scale per row costs several percent; a sign error makes the model useless (> 4 bits/byte).
      CHECK(std::fabs(bpb - bpb_ref) <= 0.02 * bpb_ref);
      CHECK(c.top1_rate() >= 0.95);
      CHECK(c.kl_mean() <= 0.01);
    }
  }
}

TEST_CASE("weight types: random-weight llama in bf16 and q8 against f32, every path, any thread count") {
  test::TempDir dir;
  ModelConfig c = test::toy_llama_config();
  c.d_model = 128;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 32;
  c.d_ff = 352;  // K of ffn_down: 11 blocks of 32, not a power of two
  c.n_vocab = 320;
  c.max_seq = 160;
  const std::string f32 = dir.file("f32.sqdk"), bf16 = dir.file("bf16.sqdk"), q8 = dir.file("q8.sqdk");
  test::write_toy_model(f32, c, 17);
  ConvertOptions o;
  o.dtype = DType::bf16;
  convert_sqdk(f32, bf16, o);
  o.dtype = DType::q8;
  convert_sqdk(f32, q8, o);

  std::mt19937_64 rng(5);
  std::vector<uint32_t> tokens(512);
  for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng() % c.n_vocab);
  const size_t window = 128;
  const auto ref = all_logits(load_at(f32, Isa::ref), tokens, window, 1);
  for (Isa isa : typed_isas()) {
    CAPTURE(isa_name(isa));
    for (const std::pair<std::string, std::string>& typed : {std::pair<std::string, std::string>{"bf16", bf16},
                                                              std::pair<std::string, std::string>{"q8", q8}}) {
      const std::string& name = typed.first;  // not a structured binding: clang 14 cannot capture those
      const std::string& path = typed.second;
      CAPTURE(name);
      const auto model = load_at(path, isa);
      const auto one = all_logits(model, tokens, window, 1);
      const auto two = all_logits(model, tokens, window, 2);
      CHECK(one == two);  // bit for bit, any thread count
      const tools::LogitComparison cmp = compare(ref, one, tokens, window, c.n_vocab);
      MESSAGE(std::string(isa_name(isa)) << " " << name << " vs f32 over " << cmp.positions << " positions: top-1 "
                            << 100.0 * cmp.top1_rate() << "%, KL mean " << cmp.kl_mean() << " max " << cmp.kl_max
                            << ", max |dlogp| " << cmp.dlogp_max);
      // Generous: ~15x what was measured on the Xeon (KL mean bf16 1.6e-5 to 2.3e-5, q8 3.3e-4; top-1 98.8-99.2%
      // and 94.9-95.1%; max |dlogp| 0.036 and 0.135). A broken scale or block gives KL of order 1.
      CHECK(cmp.kl_mean() <= (name == "bf16" ? 1e-3 : 5e-3));
      CHECK(cmp.dlogp_max <= 0.5);
      CHECK(cmp.top1_rate() >= 0.9);
    }
  }
}
