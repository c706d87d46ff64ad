// libFuzzer target: the safetensors header parser and the Hugging Face config.json parser (sqrtdk convert).
// Contract under test: parse_safetensors / parse_hf_config return or throw sqrtdk::Error; never a crash, an
// ASan/UBSan report or another exception type. The first input byte picks the parser.
#include <sqrtdk/error.h>

#include <sqrtdk/convert.h>
#include "engine/src/import/safetensors.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  try {
    if (data[0] & 1)
      sqrtdk::parse_hf_config(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), "fuzz/config.json");
    else
      sqrtdk::parse_safetensors(data + 1, size - 1, "fuzz.safetensors");
  } catch (const sqrtdk::Error&) {
  } catch (...) {
    std::abort();  // any other exception type escaping is a bug
  }
  return 0;
}
