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

// How attention chooses between its two paths (fused, unfused) for each shape: the faster one as measured on this
// machine for the model's head configuration, or the built-in rule (crossovers measured on one Zen 5 VM).
// The measured table lives in ($XDG_CACHE_HOME or ~/.cache)/sqrtdk/attention_paths.json, one entry per CPU, ISA and
// head configuration; `sqrtdk calibrate MODEL` fills it. The choice never depends on a Session's thread count.
enum class AttentionPaths {
  cached,       // the cached table if this machine has one for these heads, else the built-in rule (reads a file)
  calibrate,    // the cached table, or measured now (a few seconds, once per machine and head shape) and cached
  recalibrate,  // measured now and cached, replacing the entry
  builtin,      // the built-in rule; no cache is read
};

struct ModelOptions {
  LoadOptions load;             // checksum verification, finite check, size cap
  int isa = -1;                 // -1: default_isa() (SQRTDK_ISA or the best); else an Isa value
  int n_threads = 0;            // threads for the load-time scans (checksums, finite check) unless load.n_threads
                                // is set; 0: OpenMP default. Packing the weights is single-threaded.
  AttentionPaths attention_paths = AttentionPaths::cached;
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
  // Where the attention path choice comes from ("cache <file> (measured <when>)", "built-in rule (...)", "measured
  // now (...)"), and the measured table as text, one line per mode (decode, causal_prefill, full_prefill): each key
  // count measured, its fused ÷ unfused time and the path chosen; empty for the built-in rule.
  const std::string& attention_paths_source() const;
  std::string attention_paths_table() const;
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
