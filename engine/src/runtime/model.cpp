// Model::load: map and validate the file, then run the family's weight plan (models/family.h), which packs every
// linear layer once for the GEMM through the Loader below.
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
  // Packs the row-concatenation of `names` (each [rows_i, K]) as one [sum rows_i, K] weight matrix.
  ops::PackedWeights pack(const Parts& names, uint64_t K) {
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
        throw Error(e.kind(), file_.path() + ": tensor '" + names[0].first + "': f32 staging buffer: " + e.what());
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
      packed = ops::PackedWeights::pack(src, N, K, K, isa_, rows_consumed);
    } catch (const Error& e) {
      throw Error(e.kind(), file_.path() + ": tensor '" + names[0].first + "' [" + std::to_string(N) + ", " +
                  std::to_string(K) + "]: packing failed: " + e.what());
    }
    if (!rows_consumed)  // staged through f32 scratch: the file pages are done with now (else dropped while packing)
      for (const TensorInfo* t : infos) format_detail::drop_mapped_pages(file_.data(*t), t->size);
    return packed;
  }

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
  if (const TokenizerSpec* spec = m.file->tokenizer())
    m.tokenizer = Tokenizer::create(*spec, path + ": tokenizer section");
  else if (c.tokenizer == TokenizerKind::byte_level)
    m.tokenizer = Tokenizer::bytes(c.n_vocab, c.bos_id, c.eos_id);
  Loader loader(*m.file, m.weights.isa);
  m.family->load_weights(loader, m.weights);

  m.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (verbose())
    std::fprintf(stderr, "sqrtdk: loaded %s (%s, %u layers, %.1f M params, ISA %s) in %.3f s, scans on up to %d "
                 "thread(s)\n", path.c_str(), m.family->name, c.n_layers, m.n_params / 1e6, isa_name(m.weights.isa),
                 m.load_seconds, resolve_threads(load.n_threads));
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
const Tokenizer* Model::tokenizer() const { return impl_->tokenizer.get(); }
const Tokenizer& Model::require_tokenizer() const {
  if (!impl_->tokenizer)
    throw Error(impl_->path + ": this model has no tokenizer: pass token ids (convert it from a folder with "
                              "tokenizer.json, or from a GGUF file, to store one)");
  return *impl_->tokenizer;
}

}  // namespace sqrtdk
