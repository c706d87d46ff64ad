// Model::load: map and validate the file, then run the family's weight plan (models/family.h), which packs every
// linear layer once for the GEMM through the Loader below.
//
// Weight types: a linear whose parts are all bf16 or all q8 is packed in that type (ops::PackedWeights::pack_bf16 /
// pack_q8; the GEMM runs it natively); any other mix is widened to f32. Norms, biases and embeddings are f32 at run
// time (widened or dequantized); the tied lm head is tok_emb packed in tok_emb's stored type.
// Memory: each weight is packed straight from the read-only mapping (f32, or a single bf16/q8 part) or from a
// one-tensor conversion or concatenation buffer, and its file pages are released afterwards (MADV_DONTNEED on a read-only file mapping only
// drops them from our resident set), so peak memory stays near the packed size, not twice the model.
#include <sqrtdk/error.h>
#include <sqrtdk/model.h>

#include "engine/src/format/format_internal.h"
#include "engine/src/runtime/attention_paths_cache.h"
#include "engine/src/runtime/model_impl.h"
#include "ops/base/threading.h"
#include "ops/gemm/gemm.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>

namespace sqrtdk {

namespace {

// The family weight plan's view of the file (models/runtime/weight_loader.h).
class Loader final : public WeightLoader {
 public:
  Loader(const WeightFile& file, Isa isa) : file_(file), isa_(isa) {}

  AlignedBuffer<float> copy(const std::string& name, const std::vector<uint64_t>& shape) override {
    const TensorInfo& t = file_.require(name, shape);
    AlignedBuffer<float> out(t.n_elements());
    file_.read_f32(t, out.data());
    return out;
  }

  const float* embedding(const std::string& name, uint64_t rows, uint64_t width,
                         AlignedBuffer<float>& storage) override {
    const TensorInfo& t = file_.require(name, {rows, width});
    if (t.dtype == DType::f32) return static_cast<const float*>(file_.data(t));
    storage.allocate(t.n_elements());
    file_.read_f32(t, storage.data());
    return storage.data();
  }

  Linear linear(const Parts& names, uint64_t K, const Parts& biases) override {
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
  // Packs the row-concatenation of `names` (each [rows_i, K]) as one [sum rows_i, K] weight matrix, in the parts'
  // stored type when they share bf16 or q8 (the GEMM runs those natively), else widened to f32.
  ops::PackedWeights pack(const Parts& names, uint64_t K) {
    std::vector<const TensorInfo*> infos;
    uint64_t N = 0;
    for (const auto& [name, rows] : names) {
      infos.push_back(&file_.require(name, {rows, K}));
      N += rows;
    }
    const DType dtype = infos[0]->dtype;
    const bool same = std::all_of(infos.begin(), infos.end(), [&](const TensorInfo* t) { return t->dtype == dtype; });
    const auto where = [&] {
      return file_.path() + ": tensor '" + names[0].first + "' [" + std::to_string(N) + ", " + std::to_string(K) + "]";
    };
    ops::PackedWeights packed;
    try {
      if (same && dtype == DType::bf16)
        packed = pack_native<uint16_t>(infos, N, K, K, [&](const uint16_t* w, auto&& consumed) {
          return ops::PackedWeights::pack_bf16(w, N, K, K, ops::bf16_weights_isa(isa_), consumed);
        });
      else if (same && dtype == DType::q8)
        packed = pack_native<ops::Q8Block>(infos, N, K, K / ops::kQ8BlockSize, [&](const ops::Q8Block* w, auto&& consumed) {
          return ops::PackedWeights::pack_q8(w, N, K, K / ops::kQ8BlockSize, isa_, consumed);
        });
      else
        packed = pack_f32(infos, N, K, names[0].first);
    } catch (const Error& e) {
      throw Error(e.kind(), where() + ": packing failed: " + e.what());
    }
    return packed;
  }

  // bf16 or q8 parts, all of one type: one part is packed straight from the mapping (its file pages dropped chunk by
  // chunk as packing goes); several are first concatenated in a scratch of the stored type (N × row_units elements
  // of T: no wider than the file's bytes).
  template <class T, class PackFn>
  ops::PackedWeights pack_native(const std::vector<const TensorInfo*>& infos, uint64_t N, uint64_t K,
                                 uint64_t row_units, const PackFn& pack_fn) {
    static_assert(alignof(T) <= 64);  // tensor data is 64-aligned in the file
    (void)K;
    if (infos.size() == 1) {
      const T* src = static_cast<const T*>(file_.data(*infos[0]));
      return pack_fn(src, [src, row_units](size_t n0, size_t n1) {
        format_detail::drop_mapped_pages(src + n0 * row_units, (n1 - n0) * row_units * sizeof(T));
      });
    }
    native_scratch_.allocate(N * row_units * sizeof(T));
    unsigned char* dst = native_scratch_.data();
    for (const TensorInfo* t : infos) {
      std::memcpy(dst, file_.data(*t), t->size);
      dst += t->size;
      format_detail::drop_mapped_pages(file_.data(*t), t->size);
    }
    return pack_fn(reinterpret_cast<const T*>(native_scratch_.data()), std::function<void(size_t, size_t)>{});
  }

  ops::PackedWeights pack_f32(const std::vector<const TensorInfo*>& infos, uint64_t N, uint64_t K,
                              const std::string& first_name) {
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
        throw Error(e.kind(), file_.path() + ": tensor '" + first_name + "': f32 staging buffer: " + e.what());
      }
      float* dst = scratch_.data();
      for (const TensorInfo* t : infos) {
        file_.read_f32(*t, dst);  // widens f16/bf16, dequantizes q8 (a layer mixing types)
        dst += t->n_elements();
      }
      src = scratch_.data();
    }
    ops::PackedWeights packed = ops::PackedWeights::pack(src, N, K, K, isa_, rows_consumed);
    if (!rows_consumed)  // staged through f32 scratch: the file pages are done with now (else dropped while packing)
      for (const TensorInfo* t : infos) format_detail::drop_mapped_pages(file_.data(*t), t->size);
    return packed;
  }

  const WeightFile& file_;
  Isa isa_;
  AlignedBuffer<float> scratch_;  // one tensor's f32 conversion / concatenation, reused
  AlignedBuffer<unsigned char> native_scratch_;  // bf16/q8 parts concatenated (fused q/k/v), reused
};

}  // namespace

std::shared_ptr<const Model> Model::load(const std::string& path, const ModelOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto impl = std::make_unique<ModelImpl>();
  ModelImpl& m = *impl;
  m.path = path;
  // ModelOptions::n_threads bounds the load's threaded scans (CRC-32, finite check) unless LoadOptions sets its own.
  LoadOptions load = options.load;
  if (load.n_threads == 0) load.n_threads = options.n_threads;
  m.file = WeightFile::open(path, load);
  m.weights.config = m.file->config();
  if (options.isa > static_cast<int>(kHighestIsa))
    throw Error("Model::load: bad ISA value " + std::to_string(options.isa));
  m.weights.isa = options.isa < 0 ? default_isa() : static_cast<Isa>(options.isa);
  if (!cpu_supports(m.weights.isa))
    throw Error(ErrorKind::unsupported,
                std::string("Model::load: this CPU does not support ISA ") + isa_name(m.weights.isa));
  const ModelConfig& c = m.weights.config;
  m.family = &family_of(c);
  m.n_params = c.n_params();
  m.tokenizer = Tokenizer::of_file(*m.file);
  // The GEMM's block sizes (from the caches, or SQRTDK_GEMM_BLOCKING) before any tensor is packed: a bad
  // SQRTDK_GEMM_BLOCKING is the environment's error, not the first tensor's.
  (void)ops::gemm_blocking(m.weights.isa);
  Loader loader(*m.file, m.weights.isa);
  m.family->load_weights(loader, m.weights);
  ResolvedAttentionPaths paths =
      resolve_attention_paths(m.weights.isa, c.n_heads, c.n_kv_heads, c.head_dim, c.max_seq, options.attention_paths);
  m.weights.attention_paths = std::move(paths.table);
  m.attention_paths_source = std::move(paths.source);

  m.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (verbose()) {
    std::fprintf(stderr, "sqrtdk: loaded %s (%s, %u layers, %.1f M params, ISA %s) in %.3f s, scans on up to %d "
                 "thread(s)\n", path.c_str(), m.family->name, c.n_layers, m.n_params / 1e6, isa_name(m.weights.isa),
                 m.load_seconds, resolve_threads(load.n_threads));
    const std::string table = m.weights.attention_paths.measured_points()
                                  ? ops::describe_attention_paths(m.weights.attention_paths)
                                  : std::string();
    std::fprintf(stderr, "sqrtdk: attention paths: %s\n%s", m.attention_paths_source.c_str(), table.c_str());
  }
  return std::shared_ptr<const Model>(new Model(std::move(impl)));
}

Model::Model(std::unique_ptr<ModelImpl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;
const ModelConfig& Model::config() const { return impl_->weights.config; }
const std::string& Model::path() const { return impl_->path; }
Isa Model::isa() const { return impl_->weights.isa; }
uint64_t Model::n_params() const { return impl_->n_params; }
size_t Model::packed_bytes() const { return impl_->weights.packed_bytes(); }
double Model::load_seconds() const { return impl_->load_seconds; }
const std::string& Model::attention_paths_source() const { return impl_->attention_paths_source; }
std::string Model::attention_paths_table() const {
  const ops::AttentionPathTable& t = impl_->weights.attention_paths;
  return t.measured_points() ? ops::describe_attention_paths(t) : std::string();
}
std::vector<std::pair<std::string, size_t>> Model::packed_bytes_by_type() const {
  const std::array<size_t, 3> by_type = impl_->weights.linear_bytes_by_type();
  std::vector<std::pair<std::string, size_t>> out;
  for (ops::WeightType type : {ops::WeightType::f32, ops::WeightType::bf16, ops::WeightType::q8})
    if (by_type[static_cast<size_t>(type)] != 0)
      out.emplace_back(ops::weight_type_name(type), by_type[static_cast<size_t>(type)]);
  return out;
}
const Tokenizer* Model::tokenizer() const { return impl_->tokenizer.get(); }
const Tokenizer& Model::require_tokenizer() const {
  if (!impl_->tokenizer)
    throw Error(impl_->path + ": this model has no tokenizer: pass token ids (convert it from a folder with "
                              "tokenizer.json, or from a GGUF file, to store one)");
  return *impl_->tokenizer;
}

}  // namespace sqrtdk
