// libFuzzer target: the GGUF reader and everything `sqrtdk convert model.gguf` checks before it writes (metadata ->
// ModelConfig, the tensor plan, the tokenizer spec), then the dequantization of each planned tensor that is small.
// Contract under test: these return or throw sqrtdk::Error; never a crash, an ASan/UBSan report or another exception.
#include <sqrtdk/error.h>

#include "engine/src/import/gguf.h"

#include <cstdint>
#include <cstdlib>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto file = sqrtdk::GgufFile::parse(data, size, "fuzz.gguf");
    const sqrtdk::ModelConfig config = sqrtdk::gguf_model_config(*file);
    const auto plan = sqrtdk::plan_gguf_tensors(*file, config);
    if (sqrtdk::gguf_has_tokenizer(*file)) sqrtdk::tokenizer_spec_from_gguf(*file, "fuzz.gguf");
    std::vector<unsigned char> raw;
    std::vector<float> values;
    for (const auto& p : plan) {
      const sqrtdk::GgufTensor& t = *p.source;
      if (t.n_elements > (1u << 16)) continue;
      raw.resize(t.size);
      file->read(t.offset, t.size, raw.data());
      values.resize(t.n_elements);
      sqrtdk::gguf_decode_f32(t.type, raw.data(), t.n_elements, values.data());
    }
  } catch (const sqrtdk::Error&) {
  } catch (...) {
    std::abort();  // any other exception type escaping is a bug
  }
  return 0;
}
