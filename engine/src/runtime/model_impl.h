// ModelImpl: what a loaded Model holds: the file mapping and the weights its family's plan packed from it.
// Built once by Model::load; const afterwards and shared by every Session.
#pragma once

#include <sqrtdk/format.h>
#include <sqrtdk/tokenizer.h>

#include "models/family.h"
#include "models/runtime/model_weights.h"

#include <memory>
#include <string>

namespace sqrtdk {

class ModelImpl {
 public:
  std::string path;
  const ModelFamily* family = nullptr;
  uint64_t n_params = 0;
  double load_seconds = 0;
  std::string attention_paths_source;  // where weights.attention_paths came from (attention_paths_cache.h)

  std::shared_ptr<const WeightFile> file;  // kept mapped: embedding rows are read from it when stored as f32
  ModelWeights weights;                    // config, ISA and the packed tensors
  std::shared_ptr<const Tokenizer> tokenizer;  // from the file's tokenizer section or the byte tokenizer; may be null
};

}  // namespace sqrtdk
