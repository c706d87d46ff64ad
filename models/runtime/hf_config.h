// What a family says about Hugging Face checkpoints (sqrtdk convert): which `architectures` names are its, how
// config.json maps onto ModelConfig, and how its .sqdk tensor names map onto the checkpoint's.
//
// The engine's importer (engine/src/import/hf_import.cpp) owns the file reading and JSON; it hands the family
// typed access to config.json fields (HfConfigFields), whose errors name the field.
#pragma once

#include <sqrtdk/config.h>

#include <cstdint>
#include <functional>
#include <string>

namespace sqrtdk {

// Typed access to config.json fields; a field set to null counts as absent. Every accessor throws sqrtdk::Error
// naming the file and the field on a wrong type or value.
class HfConfigFields {
 public:
  virtual ~HfConfigFields() = default;
  virtual bool has(const char* key) const = 0;
  virtual uint32_t dim(const char* key) const = 0;  // a positive integer below 2^32; missing is an error
  virtual uint32_t dim_or(const char* key, uint32_t fallback) const = 0;
  virtual float real_or(const char* key, float fallback) const = 0;  // finite
  virtual bool flag_or(const char* key, bool fallback) const = 0;
  virtual std::string text_or(const char* key, const std::string& fallback) const = 0;
  // bos_token_id / eos_token_id: an id inside the vocabulary, or the first of a list; else kNoToken.
  virtual uint32_t token_or_none(const char* key, uint32_t n_vocab) const = 0;
  virtual std::string brief(const char* key) const = 0;  // the field's value, shortened, for messages
  virtual std::string quote(const std::string& text) const = 0;  // text made printable for messages
  // Throws "<where>: <what> is not supported by sqrtdk's <architecture> converter".
  [[noreturn]] virtual void unsupported(const std::string& what) const = 0;
  // Throws "<where>: <what>".
  [[noreturn]] virtual void fail(const std::string& what) const = 0;
};

struct HfImport {
  const char* const* architectures;  // config.json `architectures[0]` values this family converts; nullptr-ended
  const char* model_type;            // config.json `model_type` when `architectures` is absent
  // config.json -> ModelConfig (arch set; validated by the caller).
  ModelConfig (*config)(const HfConfigFields& fields);
  // The checkpoint's name for a .sqdk tensor; `has` tells which names the checkpoint holds (for optional
  // prefixes). Sets transpose when the checkpoint stores the weight [in, out] (GPT-2's Conv1D).
  std::string (*tensor_name)(const std::string& sqdk_name, const std::function<bool(const std::string&)>& has,
                             bool& transpose);
  // ECMAScript regex of tensors a checkpoint may hold that the family does not use (buffers older versions saved).
  const char* ignored_tensors;
};

}  // namespace sqrtdk
