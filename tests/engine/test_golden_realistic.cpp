// The realistic-size golden fixture (tests/data/golden/llama_realistic/, tools/make_golden.py --only realistic):
// a random-weight Llama with d_model 768, 12 query heads over 2 kv heads of 64, d_ff 832, n_vocab 120, 2 layers,
// 640 tokens, against PyTorch's float64 forward. The tiny fixtures never leave the small-shape paths; this one
// reaches fused prefill over many key tiles and query blocks, prefill in two chunks (max_batch 512), multi-chunk
// split-KV decode, attention split over 2 threads and GEMM K slicing, on every ISA the machine runs, at 1 and 2
// threads (bit-identical). The weights are not stored: they are generated here exactly as the script generates
// them, and fixture.json's per-tensor CRC-32s prove it before any logit is compared.
#include <doctest/doctest.h>

#include "tests/common/isas.h"

#include <sqrtdk/format.h>
#include <sqrtdk/model.h>
#include <sqrtdk/session.h>

#include "models/family.h"
#include "ops/attention/attention.h"
#include "ops/attention/attention_kernels.h"
#include "ops/gemm/gemm.h"
#include "tests/common/counter_weights.h"
#include "tests/common/golden.h"
#include "tests/common/npy.h"
#include "tests/common/sanitizer.h"
#include "tests/common/temp_dir.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

using namespace sqrtdk;
using sqrtdk::test::counter_uniform;
using sqrtdk::test::NpyF32;
using sqrtdk::test::TempDir;
using sqrtdk::test::read_npy_f32;

namespace {

const std::string kFixture = "llama_realistic";

nlohmann::json read_fixture() {
  std::ifstream in(test::golden_dir(kFixture) + "/fixture.json");
  REQUIRE_MESSAGE(in, "cannot open the fixture " << test::golden_dir(kFixture) << "/fixture.json");
  return nlohmann::json::parse(in);
}

ModelConfig config_of(const nlohmann::json& fixture) {
  const nlohmann::json& c = fixture["config"];
  ModelConfig config;
  config.arch = parse_arch(c["arch"].get<std::string>());
  config.d_model = c["d_model"];
  config.n_layers = c["n_layers"];
  config.n_heads = c["n_heads"];
  config.n_kv_heads = c["n_kv_heads"];
  config.head_dim = c["head_dim"];
  config.d_ff = c["d_ff"];
  config.n_vocab = c["n_vocab"];
  config.max_seq = c["max_seq"];
  config.norm_eps = static_cast<float>(c["norm_eps"].get<double>());
  config.rope_theta = static_cast<float>(c["rope_theta"].get<double>());
  config.tied_embeddings = c["tied_embeddings"];
  config.rope_interleaved = c["rope_interleaved"];
  return config;
}

// Generates the weights by fixture.json's recipe and writes them with the C++ writer; returns the file's path.
std::string write_generated_model(const nlohmann::json& fixture, const TempDir& dir) {
  const ModelConfig config = config_of(fixture);
  const nlohmann::json& recipe = fixture["weights"]["tensors"];
  const uint64_t seed = fixture["weights"]["seed"];
  std::vector<std::vector<float>> storage;
  std::vector<TensorToWrite> tensors;
  const std::vector<TensorSpec> specs = family_tensors(config);
  storage.reserve(specs.size());
  for (const TensorSpec& spec : specs) {
    CAPTURE(spec.name);
    REQUIRE_MESSAGE(recipe.contains(spec.name), "fixture.json has no recipe for tensor " << spec.name);
    const nlohmann::json& r = recipe[spec.name];
    REQUIRE(r["shape"].get<std::vector<uint64_t>>() == spec.shape);
    uint64_t n = 1;
    for (uint64_t d : spec.shape) n *= d;
    storage.push_back(counter_uniform(spec.name, seed, n, r["offset"].get<double>(), r["amp"].get<double>()));
    tensors.push_back({spec.name, DType::f32, spec.shape, storage.back().data()});
  }
  const std::string path = dir.file("llama_realistic.sqdk");
  write_weight_file(path, config, tensors);
  return path;
}

// Logits of positions 0 .. n_positions - 1: prefill the first `prefix` tokens (all rows), then decode the rest one
// at a time. prefix == n_positions is a plain prefill.
std::vector<float> run_schedule(const std::shared_ptr<const Model>& model, int n_threads,
                                const std::vector<uint32_t>& tokens, size_t n_positions, size_t prefix,
                                const OpObserver& observer) {
  SessionOptions options;
  options.n_threads = n_threads;
  Session session(model, options);
  if (observer) session.set_op_observer(observer);
  std::vector<float> out;
  const auto first = session.prefill(std::span(tokens.data(), prefix), true);
  out.assign(first.begin(), first.end());
  for (size_t t = prefix; t < n_positions; ++t) {
    const auto row = session.decode(tokens[t]);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

struct LogitError {
  double max_abs = 0;
  size_t position = 0;  // where it occurred
};

LogitError max_abs_error(const std::vector<float>& got, const NpyF32& want, size_t n_positions) {
  const size_t V = want.shape.at(1);
  REQUIRE(got.size() == n_positions * V);
  LogitError e;
  for (size_t t = 0; t < n_positions; ++t)
    for (size_t v = 0; v < V; ++v) {
      const double d = std::fabs(double{got[t * V + v]} - double{want.at(t, v)});
      if (d > e.max_abs) e = {d, t};
    }
  return e;
}

struct AttentionCall {
  size_t n_queries, n_keys;
};

// The engine's own plan functions applied to the shapes the engine reported running (op events): the arithmetic
// that proves which paths ran, checked rather than assumed. n_queries = n_tokens of the event, pos0 = n_keys - n.
void check_large_shape_paths(Isa isa, const ModelConfig& c, const std::vector<AttentionCall>& calls,
                             const std::vector<size_t>& ffn_down_rows) {
  // attention() runs a call on one thread below this many multiply-adds (n_heads · n_queries · n_keys · head_dim);
  // the partition never depends on threads, so only reaching it matters.
  constexpr size_t kOneThreadBelow = ops::kAttentionOneThreadBelowMacs;
  const size_t width = ops::select_kernel(ops::attention_kernels(), isa).kernels.vector_width;
  size_t multi_tile_prefills = 0, multi_chunk_decodes = 0, split_decodes = 0, second_chunk_prefills = 0;
  for (const AttentionCall& call : calls) {
    ops::AttentionParams p;
    p.n_heads = c.n_heads;
    p.n_kv_heads = c.n_kv_heads;
    p.head_dim = c.head_dim;
    p.n_queries = call.n_queries;
    p.pos0 = call.n_keys - call.n_queries;
    const bool threaded = c.n_heads * call.n_queries * call.n_keys * c.head_dim >= kOneThreadBelow;
    CHECK(ops::choose_attention_path(p, nullptr) == ops::AttentionPath::fused);  // GQA: fused for every shape here
    if (call.n_queries == 1) {
      const ops::DecodePlan plan = ops::make_decode_plan(p, width);
      // 2 kv heads: chunks of kDecodeChunkShort (256) keys, so 257+ keys are 2 chunks and 513+ are 3.
      CHECK(plan.chunk_keys == ops::kDecodeChunkShort);
      if (plan.n_chunks >= 2) ++multi_chunk_decodes;
      if (plan.n_chunks >= 2 && threaded) ++split_decodes;
    } else {
      const ops::FusedPlan plan = ops::make_fused_plan(p, width);
      // Several query blocks per kv head (items to share between threads) and several kBc-key tiles per block.
      if (plan.n_blocks >= 2 && call.n_keys > 2 * ops::kBc && threaded) ++multi_tile_prefills;
      if (p.pos0 > 0) ++second_chunk_prefills;
    }
  }
  CHECK(multi_tile_prefills > 0);
  CHECK(second_chunk_prefills > 0);  // the 640-token prompt is prefilled as 512 + 128 (max_batch 512)
  CHECK(multi_chunk_decodes > 0);
  CHECK(split_decodes > 0);
  // K slicing: the blocked GEMM splits K into kc slices when M > mr (ops/gemm/gemm_kernels.h, k_slice). kc comes
  // from the machine's caches (768 on Zen 5, 1600 on a 2 MiB L2); tests/CMakeLists.txt runs this test again with
  // SQRTDK_GEMM_BLOCKING=kc=256,..., where the slicing must happen.
  const ops::GemmBlocking bs = ops::gemm_blocking(isa);
  if (std::getenv("SQRTDK_GEMM_BLOCKING") != nullptr) CHECK(c.d_ff > bs.kc);
  CHECK(std::any_of(ffn_down_rows.begin(), ffn_down_rows.end(), [&](size_t m) { return m > bs.mr; }));
  MESSAGE(std::string(isa_name(isa)) << ": prefill calls on fused multi-tile 2-thread shapes " << multi_tile_prefills
                                     << ", decode calls with >= 2 chunks " << multi_chunk_decodes << " ("
                                     << split_decodes << " above the one-thread cap), ffn_down K " << c.d_ff
                                     << " > kc " << bs.kc);
}

}  // namespace

TEST_CASE("golden realistic: the generated weights are the fixture's (per-tensor CRC-32), the config loads") {
  const nlohmann::json fixture = read_fixture();
  REQUIRE(fixture["kind"] == "generated_weights");
  TempDir dir;
  const std::string path = write_generated_model(fixture, dir);
  LoadOptions options;
  options.check_finite = true;
  const auto file = WeightFile::open(path, options);
  REQUIRE(file->tensors().size() == fixture["weights"]["tensors"].size());
  for (const TensorInfo& t : file->tensors()) {
    CAPTURE(t.name);
    // A mismatch means this file's generator and tools/make_golden.py's disagree (not an engine error).
    CHECK_MESSAGE(t.crc32 == fixture["weights"]["tensors"].at(t.name)["crc32"].get<uint32_t>(),
                  "generated weights of " << t.name << " differ from the ones PyTorch used");
  }
  const ModelConfig& c = file->config();
  CHECK(c.d_model == 768);
  CHECK(c.n_heads == 12);
  CHECK(c.n_kv_heads == 2);
  CHECK(c.head_dim == 64);
  const NpyF32 logits = read_npy_f32(test::golden_dir(kFixture) + "/" + fixture["files"]["logits"].get<std::string>());
  const auto tokens = fixture["tokens"].get<std::vector<uint32_t>>();
  CHECK(tokens.size() >= 600);
  CHECK(logits.shape == std::vector<size_t>{tokens.size(), c.n_vocab});
  CHECK(tokens.size() <= c.max_seq);
}

TEST_CASE("golden realistic: prefill and stepwise decode match PyTorch float64 on every ISA, 1 and 2 threads "
          "bit-identical") {
  const nlohmann::json fixture = read_fixture();
  const ModelConfig config = config_of(fixture);
  const auto tokens = fixture["tokens"].get<std::vector<uint32_t>>();
  const NpyF32 want = read_npy_f32(test::golden_dir(kFixture) + "/" + fixture["files"]["logits"].get<std::string>());
  // fixture.json "tolerance.why": 2e-5 x max |logit| = 1.8e-4, 4x the largest legitimate float32 difference
  // measured (Hugging Face's float32 RoPE tables, 4.4e-5; sqrtdk itself 1.1e-5 .. 1.3e-5), 2000x below the effect
  // of one key that every query ignores.
  const double bound = fixture["tolerance"]["logits_max_abs"].get<double>();
  TempDir dir;
  const std::string path = write_generated_model(fixture, dir);

  std::string covered;
  for (Isa isa : test::f32_isas()) {
    const std::string isa_str = isa_name(isa);
    CAPTURE(isa_str);
    covered += isa_str + " ";
    ModelOptions mo;
    mo.isa = static_cast<int>(isa);
    mo.attention_paths = AttentionPaths::builtin;  // the path checks below follow the built-in rule, not a cache
    const auto model = Model::load(path, mo);
    // The scalar reference (double sums, plain loops) has no tiles, chunks or slices to reach and costs ~10 ms per
    // position here (many times that under the sanitizers), so it checks the math on the first 32 positions only.
    const bool ref = isa == Isa::ref;
    const size_t n_positions = ref ? 32 : tokens.size();
    // Schedules: prefill `prefix` tokens, then decode one token at a time up to n_positions (1 thread) or
    // `end_2_threads` (2 threads; those rows must equal the 1-thread run's bit for bit):
    //   640: prefill only, in chunks 512 + 128 (max_batch 512);
    //   8 + 632 decode steps: decode over 9 .. 640 keys, so 1, 2 and 3 chunks of 256;
    //   500 + 140: a 500-query prefill (one chunk, 8 key tiles), then decode from the cache it filled over 501 .. 640
    //   keys, 2 then 3 chunks, all above the one-thread cap.
    // At 2 threads the decode runs stop early (8 + 4 and 500 + 20 steps, still 2 and 3 chunks split over threads):
    // each step is a dozen parallel regions, and on a shared 2-core machine (ctest -j2, other jobs) a region waits
    // for a time slice, ~0.1 s a step measured; the 1-thread runs cover every position. Under a sanitizer (CI runs
    // this under ASan and TSan) the 1-thread runs stop there too: the same paths (2 and 3 decode chunks, both
    // prefill chunks) and the same checks, over fewer positions (the release build compares all 640).
    struct Schedule {
      size_t prefix, end_2_threads;
    };
    const std::vector<Schedule> schedules = ref ? std::vector<Schedule>{{32, 32}, {8, 12}, {20, 24}}
                                                : std::vector<Schedule>{{640, 640}, {8, 12}, {500, 520}};
    REQUIRE(n_positions <= tokens.size());

    std::vector<AttentionCall> calls;
    std::vector<size_t> ffn_down_rows;
    const OpObserver observer = [&](const OpEvent& e) {
      if (std::strcmp(e.op, "attention") == 0) calls.push_back({e.n_tokens, e.n_keys});
      if (std::strcmp(e.op, "ffn_down") == 0) ffn_down_rows.push_back(e.n_tokens);
    };
    for (const Schedule& schedule : schedules) {
      const size_t prefix = schedule.prefix;
      CAPTURE(prefix);
      std::vector<float> runs[2];
      for (int threads : {1, 2}) {
        CAPTURE(threads);
        const size_t end = threads == 1 && !test::kUnderSanitizer ? n_positions : schedule.end_2_threads;
        REQUIRE(end <= n_positions);
        runs[threads - 1] =
            run_schedule(model, threads, tokens, end, prefix, threads == 2 && !ref ? observer : OpObserver{});
        const LogitError e = max_abs_error(runs[threads - 1], want, end);
        MESSAGE(isa_str << ", " << threads << " thread(s), prefill " << prefix << " + decode " << end - prefix
                        << ": max |logit error| " << e.max_abs << " at position " << e.position << " (bound "
                        << bound << ")");
        CHECK(e.max_abs <= bound);
      }
      // Determinism: the work partition depends on the shape only, so the thread count cannot change a bit.
      REQUIRE(runs[1].size() <= runs[0].size());
      CHECK(std::memcmp(runs[1].data(), runs[0].data(), runs[1].size() * sizeof(float)) == 0);
    }
    // The path checks assume the automatic choice; SQRTDK_ATTENTION=fused|unfused overrides it (the logits must
    // still match, which the checks above did).
    if (!ref && ops::default_attention_path() == ops::AttentionPath::automatic)
      check_large_shape_paths(isa, config, calls, ffn_down_rows);
    else if (!ref)
      MESSAGE("SQRTDK_ATTENTION forces the " << std::string(ops::attention_path_name(ops::default_attention_path()))
                                             << " path: the automatic path choice is not checked");
  }
  MESSAGE("golden realistic: ISAs covered: " << covered);
}
