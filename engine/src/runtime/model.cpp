// Model::load: map and validate the file, then pack every linear layer once for the GEMM.
//
// Memory: each weight is packed straight from the read-only mapping (f32) or from a one-tensor f32 conversion
// buffer (f16/bf16), and its file pages are released afterwards (MADV_DONTNEED on a read-only file mapping only
// drops them from our resident set), so peak memory stays near the packed size, not twice the model.
#include <sqrtdk/error.h>
#include <sqrtdk/model.h>

#include "engine/src/format/format_internal.h"
#include "engine/src/runtime/model_impl.h"
#include "ops/base/threading.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <string>

namespace sqrtdk {

size_t ModelImpl::packed_bytes() const {
  size_t total = tok_emb_f32.size() * sizeof(float) + pos_emb.size() * sizeof(float) + lm_head.weights.bytes() +
                 (out_norm_weight.size() + out_norm_bias.size()) * sizeof(float);
  for (const auto& l : layers) {
    for (const Linear* lin : {&l.attn_qkv, &l.attn_out, &l.ffn_gate, &l.ffn_up, &l.ffn_down})
      total += lin->weights.bytes() + lin->bias.size() * sizeof(float);
    total += (l.attn_norm_weight.size() + l.attn_norm_bias.size() + l.ffn_norm_weight.size() +
              l.ffn_norm_bias.size()) * sizeof(float);
  }
  return total;
}

namespace {

class Loader {
 public:
  Loader(const WeightFile& file, Isa isa) : file_(file), isa_(isa) {}

  // A tensor of the given shape copied to f32.
  AlignedBuffer<float> copy(const std::string& name, const std::vector<uint64_t>& shape) {
    const TensorInfo& t = file_.require(name, shape);
    AlignedBuffer<float> out(t.n_elements());
    file_.read_f32(t, out.data());
    return out;
  }

  // Packs the row-concatenation of `names` (each [rows_i, K]) as one [sum rows_i, K] weight matrix.
  ops::PackedWeights pack(const std::vector<std::pair<std::string, uint64_t>>& names, uint64_t K) {
    std::vector<const TensorInfo*> infos;
    uint64_t N = 0;
    for (const auto& [name, rows] : names) {
      infos.push_back(&file_.require(name, {rows, K}));
      N += rows;
    }
    const float* src = nullptr;
    std::function<void(size_t, size_t)> rows_consumed;
    if (infos.size() == 1 && infos[0]->dtype == DType::f32) {
      src = static_cast<const float*>(file_.data(*infos[0]));
      // Packed straight from the mapping: drop each chunk's file pages once packed (the tied 32000 × 768
      // embedding alone would otherwise keep ~100 MB of the file resident beside its packed copy).
      rows_consumed = [src, K](size_t n0, size_t n1) {
        format_detail::drop_mapped_pages(src + n0 * K, (n1 - n0) * K * sizeof(float));
      };
    } else {
      try {
        scratch_.allocate(N * K);
      } catch (const Error& e) {
        throw Error(file_.path() + ": tensor '" + names[0].first + "': f32 staging buffer: " + e.what());
      }
      float* dst = scratch_.data();
      for (const TensorInfo* t : infos) {
        file_.read_f32(*t, dst);
        dst += t->n_elements();
      }
      src = scratch_.data();
    }
    ops::PackedWeights packed;
    try {
      packed = ops::PackedWeights::pack(src, N, K, K, isa_, ops::default_gemm_backend(), rows_consumed);
    } catch (const Error& e) {
      throw Error(file_.path() + ": tensor '" + names[0].first + "' [" + std::to_string(N) + ", " +
                  std::to_string(K) + "]: packing failed: " + e.what());
    }
    if (!rows_consumed)  // staged through f32 scratch: the file pages are done with now (else dropped while packing)
      for (const TensorInfo* t : infos) format_detail::drop_mapped_pages(file_.data(*t), t->size);
    return packed;
  }

  Linear linear(const std::vector<std::pair<std::string, uint64_t>>& names, uint64_t K,
                const std::vector<std::pair<std::string, uint64_t>>& biases = {}) {
    Linear lin;
    lin.weights = pack(names, K);
    if (!biases.empty()) {
      lin.bias.allocate(lin.weights.N());
      float* dst = lin.bias.data();
      for (const auto& [name, n] : biases) {
        file_.read_f32(file_.require(name, {n}), dst);
        dst += n;
      }
    }
    return lin;
  }

 private:
  const WeightFile& file_;
  Isa isa_;
  AlignedBuffer<float> scratch_;  // one tensor's f32 conversion / concatenation, reused
};

}  // namespace

std::shared_ptr<const Model> Model::load(const std::string& path, const ModelOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto impl = std::make_unique<ModelImpl>();
  ModelImpl& m = *impl;
  m.path = path;
  m.file = WeightFile::open(path, options.load);
  m.config = m.file->config();
  if (options.isa > static_cast<int>(Isa::avx512))
    throw Error("Model::load: bad ISA value " + std::to_string(options.isa));
  m.isa = options.isa < 0 ? default_isa() : static_cast<Isa>(options.isa);
  if (!cpu_supports(m.isa))
    throw Error(std::string("Model::load: this CPU does not support ISA ") + isa_name(m.isa));
  const ModelConfig& c = m.config;
  m.n_params = c.n_params();
  const uint64_t d = c.d_model, hd = c.head_dim, q_rows = uint64_t{c.n_heads} * hd,
                 kv_rows = uint64_t{c.n_kv_heads} * hd;
  const WeightFile& f = *m.file;
  Loader load(f, m.isa);
  const bool gpt2 = c.arch == Arch::gpt2;

  const TensorInfo& tok = f.require("tok_emb", {c.n_vocab, d});
  if (tok.dtype == DType::f32) {
    m.tok_emb = static_cast<const float*>(f.data(tok));
  } else {
    m.tok_emb_f32.allocate(tok.n_elements());
    f.read_f32(tok, m.tok_emb_f32.data());
    m.tok_emb = m.tok_emb_f32.data();
  }
  if (gpt2) m.pos_emb = load.copy("pos_emb", {c.max_seq, d});

  m.layers.resize(c.n_layers);
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    LayerWeights& l = m.layers[i];
    l.attn_norm_weight = load.copy(b + "attn_norm.weight", {d});
    l.ffn_norm_weight = load.copy(b + "ffn_norm.weight", {d});
    if (gpt2) {
      l.attn_norm_bias = load.copy(b + "attn_norm.bias", {d});
      l.ffn_norm_bias = load.copy(b + "ffn_norm.bias", {d});
      l.attn_qkv = load.linear({{b + "attn_qkv.weight", 3 * d}}, d, {{b + "attn_qkv.bias", 3 * d}});
      l.attn_out = load.linear({{b + "attn_out.weight", d}}, q_rows, {{b + "attn_out.bias", d}});
      l.ffn_up = load.linear({{b + "ffn_up.weight", c.d_ff}}, d, {{b + "ffn_up.bias", c.d_ff}});
      l.ffn_down = load.linear({{b + "ffn_down.weight", d}}, c.d_ff, {{b + "ffn_down.bias", d}});
    } else {
      l.attn_qkv = load.linear({{b + "attn_q.weight", q_rows}, {b + "attn_k.weight", kv_rows},
                                {b + "attn_v.weight", kv_rows}}, d);
      l.attn_out = load.linear({{b + "attn_out.weight", d}}, q_rows);
      l.ffn_gate = load.linear({{b + "ffn_gate.weight", c.d_ff}}, d);
      l.ffn_up = load.linear({{b + "ffn_up.weight", c.d_ff}}, d);
      l.ffn_down = load.linear({{b + "ffn_down.weight", d}}, c.d_ff);
    }
  }
  m.out_norm_weight = load.copy("out_norm.weight", {d});
  if (gpt2) m.out_norm_bias = load.copy("out_norm.bias", {d});
  m.lm_head = load.linear({{c.tied_embeddings ? "tok_emb" : "lm_head.weight", c.n_vocab}}, d);
  if (!gpt2) m.rope.emplace(c.max_seq, c.head_dim, c.rope_theta);

  m.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (verbose())
    std::fprintf(stderr, "sqrtdk: loaded %s (%s, %u layers, %.1f M params, ISA %s) in %.3f s\n", path.c_str(),
                 arch_name(c.arch), c.n_layers, m.n_params / 1e6, isa_name(m.isa), m.load_seconds);
  return std::shared_ptr<const Model>(new Model(std::move(impl)));
}

Model::Model(std::unique_ptr<ModelImpl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;
const ModelConfig& Model::config() const { return impl_->config; }
const std::string& Model::path() const { return impl_->path; }
Isa Model::isa() const { return impl_->isa; }
uint64_t Model::n_params() const { return impl_->n_params; }
size_t Model::packed_bytes() const { return impl_->packed_bytes(); }
double Model::load_seconds() const { return impl_->load_seconds; }

}  // namespace sqrtdk
