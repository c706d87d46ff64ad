// sqrtdk make-toy -o FILE --arch gpt2|llama [sizes...] --seed S [--dtype f32|f16|bf16]: writes a model with
// random weights, bit-identical for the same arguments on any machine.
//
// Initialization follows GPT-2/llama practice so activations stay in a sane range: linear weights and embeddings
// N(0, 0.02); the projections into the residual stream (attn_out, ffn_down) N(0, 0.02 / sqrt(2 n_layers)); pos_emb
// N(0, 0.01); norm weights 1 + N(0, 0.02); biases N(0, 0.01). Normals are Irwin-Hall (sum of 12 uniforms - 6):
// integer arithmetic plus exact float operations, so no libm function can change the bits between machines.
// Each tensor has its own stream seeded from (seed, name), so adding a tensor never changes the others.
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

#include <sqrtdk/error.h>
#include <sqrtdk/format.h>

#include "models/family.h"

#include <cmath>
#include <cstdio>
#include <memory>

#include <unistd.h>

namespace sqrtdk::cli {
namespace {

struct MakeToyOptions {
  std::string out, arch, dtype = "f32", tokenizer;
  uint32_t d_model = 64, n_layers = 2, n_heads = 4, n_kv_heads = 0, head_dim = 0, d_ff = 0, n_vocab = 258;
  uint32_t max_seq = 256;
  int64_t bos = -2, eos = -2;  // -2 = default, -1 = none
  float norm_eps = 1e-5f, rope_theta = -1.0f;
  bool tied = false;
  uint64_t seed = 0;
};

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman & Vigna): fast, well-distributed, fully specified.
struct Rng {
  uint64_t s[4];
  Rng(uint64_t seed, const std::string& name) {
    uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a of the name
    for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
    uint64_t state = seed ^ h;
    for (auto& v : s) v = splitmix64(state);
  }
  uint64_t next() {
    const uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
  }
  // Standard normal (approximately): sum of 12 uniforms in [0, 1) minus 6; each uniform has 24 bits, so the sum is
  // exact in float.
  float normal() {
    uint32_t sum = 0;
    for (int i = 0; i < 12; ++i) sum += static_cast<uint32_t>(next() >> 40);
    return static_cast<float>(sum) * (1.0f / 16777216.0f) - 6.0f;
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
};

void run_make_toy(const MakeToyOptions& o) {
  ModelConfig c;
  c.arch = parse_arch(o.arch);
  const ModelFamily& family = family_of(c);
  c.d_model = o.d_model;
  c.n_layers = o.n_layers;
  c.n_heads = o.n_heads;
  c.n_kv_heads = o.n_kv_heads ? o.n_kv_heads : o.n_heads;
  c.head_dim = o.head_dim ? o.head_dim : (o.n_heads ? o.d_model / o.n_heads : 0);
  c.d_ff = o.d_ff ? o.d_ff : family.default_d_ff(o.d_model);
  c.n_vocab = o.n_vocab;
  c.max_seq = o.max_seq;
  c.norm_eps = o.norm_eps;
  c.rope_theta = o.rope_theta >= 0 ? o.rope_theta : family.default_rope_theta;
  c.tied_embeddings = o.tied;
  if (o.tokenizer.empty())
    c.tokenizer = o.n_vocab >= 256 ? TokenizerKind::byte_level : TokenizerKind::none;
  else if (o.tokenizer == "byte_level")
    c.tokenizer = TokenizerKind::byte_level;
  else if (o.tokenizer == "none")
    c.tokenizer = TokenizerKind::none;
  else
    throw Error("unknown tokenizer '" + o.tokenizer + "' (expected none or byte_level)");
  const bool specials = c.tokenizer == TokenizerKind::byte_level && c.n_vocab >= 258;
  auto token = [&](int64_t v, uint32_t dflt) -> uint32_t {
    if (v == -2) return specials ? dflt : kNoToken;
    if (v < 0) return kNoToken;
    return static_cast<uint32_t>(v);
  };
  c.bos_id = token(o.bos, 256);
  c.eos_id = token(o.eos, 257);
  c.validate(o.out);
  const DType dtype = parse_dtype(o.dtype);
  // Every tensor is held in memory until the file is written: refuse, naming the size, what cannot fit rather than
  // die in an allocation (a bare std::bad_alloc) or swap for minutes.
  const double held_bytes = static_cast<double>(c.n_params()) * (dtype == DType::f32 ? 4.0 : 2.0);
  const double ram_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (ram_bytes > 0 && held_bytes > ram_bytes)
    throw Error(ErrorKind::out_of_memory,
                o.out + ": " + std::to_string(c.n_params()) + " parameters are " +
                    std::to_string(static_cast<long long>(held_bytes / 1e9)) + " GB of " + dtype_name(dtype) +
                    " weights, held in memory while writing: more than this machine's " +
                    std::to_string(static_cast<long long>(ram_bytes / 1e9)) + " GB");

  const std::vector<TensorSpec> specs = family_tensors(c);
  const float resid_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layers));
  std::vector<std::vector<float>> f32(specs.size());
  std::vector<std::vector<uint16_t>> half(specs.size());
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    uint64_t n = 1;
    for (uint64_t d : s.shape) n *= d;
    const auto ends_with = [&](const char* suffix) {
      const std::string_view name(s.name), suf(suffix);
      return name.size() >= suf.size() && name.substr(name.size() - suf.size()) == suf;
    };
    float mean = 0.0f, std_dev = 0.02f;
    if (ends_with("norm.weight")) mean = 1.0f;
    else if (ends_with(".bias")) std_dev = 0.01f;
    else if (s.name == "pos_emb") std_dev = 0.01f;
    else if (ends_with("attn_out.weight") || ends_with("ffn_down.weight")) std_dev = resid_std;
    Rng rng(o.seed, s.name);
    std::vector<float>& v = f32[i];
    v.resize(n);
    for (auto& x : v) x = mean + std_dev * rng.normal();
    TensorToWrite t{s.name, dtype, s.shape, v.data()};
    if (dtype != DType::f32) {
      half[i].resize(n);
      for (uint64_t k = 0; k < n; ++k) half[i][k] = dtype == DType::f16 ? f32_to_f16(v[k]) : f32_to_bf16(v[k]);
      t.data = half[i].data();
      std::vector<float>().swap(v);
    }
    tensors.push_back(std::move(t));
  }
  write_weight_file(o.out, c, tensors);
  std::printf("wrote %s: %s, %llu parameters, %s, seed %llu\n", o.out.c_str(), arch_name(c.arch),
              static_cast<unsigned long long>(c.n_params()), dtype_name(dtype), static_cast<unsigned long long>(o.seed));
}

}  // namespace

void add_make_toy_command(CLI::App& app) {
  auto o = std::make_shared<MakeToyOptions>();
  CLI::App* sub = app.add_subcommand("make-toy", "Write a random-weight model (deterministic for a seed)");
  sub->footer("Examples:\n  sqrtdk make-toy -o toy.sqdk --arch llama --seed 1\n"
              "  sqrtdk make-toy -o llama110m.sqdk --arch llama --d-model 768 --n-layers 12 --n-heads 12 --d-ff 2048 \\\n"
              "      --n-vocab 32000 --max-seq 1024 --tied --seed 1      # shaped like stories110M (sqrtdk bench)");
  sub->add_option("-o,--output", o->out, "Output .sqdk file")->required()->check(non_empty("give the file to write"));
  std::vector<std::string> archs;  // every family in the registry (models/families.cpp)
  for (const ModelFamily* f : model_families()) archs.push_back(f->name);
  sub->add_option("--arch", o->arch, family_names())->required()->check(CLI::IsMember(archs));
  sub->add_option("--seed", o->seed, "Random seed")->required();
  sub->add_option("--dtype", o->dtype, "f32, f16 or bf16")->capture_default_str()->check(
      CLI::IsMember({"f32", "f16", "bf16"}));
  sub->add_option("--d-model", o->d_model, "Model width")->capture_default_str();
  sub->add_option("--n-layers", o->n_layers, "Transformer blocks")->capture_default_str();
  sub->add_option("--n-heads", o->n_heads, "Query heads")->capture_default_str();
  sub->add_option("--n-kv-heads", o->n_kv_heads, "Key/value heads (default: n_heads)");
  sub->add_option("--head-dim", o->head_dim, "Per-head width (default: d_model / n_heads)");
  sub->add_option("--d-ff", o->d_ff, "Feed-forward width (default: 4 d_model for gpt2, ~8/3 d_model for llama)");
  sub->add_option("--n-vocab", o->n_vocab, "Vocabulary size")->capture_default_str();
  sub->add_option("--max-seq", o->max_seq, "Longest context")->capture_default_str();
  sub->add_option("--norm-eps", o->norm_eps, "Norm epsilon")->capture_default_str();
  sub->add_option("--rope-theta", o->rope_theta, "RoPE base (default: 10000 for llama, 0 for gpt2)")
      ->check(number_in(0, 1e30, /*integer=*/false));
  sub->add_flag("--tied", o->tied, "Tie the output head to tok_emb");
  sub->add_option("--tokenizer", o->tokenizer, "none or byte_level (default: byte_level if n_vocab >= 256)");
  // -2, the "not given" value, is not the user's to pass: ids are -1 (none) or an id.
  sub->add_option("--bos", o->bos, "BOS id, -1 for none (default: 256 for byte_level with n_vocab >= 258)")
      ->check(number_in(-1, 0xFFFFFFFE));
  sub->add_option("--eos", o->eos, "EOS id, -1 for none (default: 257 for byte_level with n_vocab >= 258)")
      ->check(number_in(-1, 0xFFFFFFFE));
  sub->callback([o] { run_make_toy(*o); });
}

}  // namespace sqrtdk::cli
