// sqrtdk::Model: a transformer loaded from a .sqdk file, its weights packed once for the GEMM.
//
// Immutable after load() returns, and safe to share: any number of Sessions on any number of threads may use one
// Model at once (hold it by std::shared_ptr<const Model>). Loading a model needs about its packed size in memory:
// each tensor is packed straight from the read-only file mapping, whose pages are then released.
#pragma once

#include <sqrtdk/format.h>
#include <sqrtdk/isa.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sqrtdk {

struct ModelOptions {
  LoadOptions load;             // checksum verification, finite check, size cap
  int isa = -1;                 // -1: default_isa() (SQRTDK_ISA or the best); else an Isa value
  int n_threads = 0;            // threads for the load-time scans (checksums, finite check) unless load.n_threads
                                // is set; 0: OpenMP default. Packing the weights is single-threaded.
};

class ModelImpl;  // engine-internal
class Tokenizer;  // <sqrtdk/tokenizer.h>

class Model {
 public:
  // Loads and validates `path`; throws sqrtdk::Error naming the file and tensor on any problem.
  static std::shared_ptr<const Model> load(const std::string& path, const ModelOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  const std::string& path() const;
  Isa isa() const;
  uint64_t n_params() const;
  size_t packed_bytes() const;  // memory held by the packed weights and other per-model tables
  // The packed linear layers' bytes (lm head included) by the type they run in: ("f32", n), ("bf16", n), ("q8", n),
  // types without any left out. A layer is bf16 or q8 when the file stores all its parts so, else f32.
  std::vector<std::pair<std::string, size_t>> packed_bytes_by_type() const;
  double load_seconds() const;
  // The model's tokenizer (the file's tokenizer section, or the byte tokenizer), or nullptr when the file has none
  // (callers then pass token ids). Lives as long as the Model. require_tokenizer() throws a clear error instead.
  const Tokenizer* tokenizer() const;
  const Tokenizer& require_tokenizer() const;

  const ModelImpl& impl() const { return *impl_; }

 private:
  explicit Model(std::unique_ptr<ModelImpl> impl);
  std::unique_ptr<ModelImpl> impl_;
};

}  // namespace sqrtdk
