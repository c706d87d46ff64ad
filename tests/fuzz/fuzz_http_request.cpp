// libFuzzer target: sqrtdk-serve's request parsing and validation (POST /v1/completions bodies).
// Contract under test: parse_completion_request returns a request or throws RequestError with a 4xx status; never
// a crash, an ASan/UBSan report or another exception type.
#include <sqrtdk/format.h>

#include "tools/serve/request.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sqrtdk::ModelConfig config;
  config.arch = sqrtdk::Arch::llama;
  config.n_vocab = 258;
  config.max_seq = 64;
  config.tokenizer = sqrtdk::TokenizerKind::byte_level;
  config.bos_id = 256;
  config.eos_id = 257;
  sqrtdk::serve::RequestLimits limits;
  limits.max_context = 64;
  try {
    sqrtdk::serve::parse_completion_request(std::string_view(reinterpret_cast<const char*>(data), size), config, limits);
  } catch (const sqrtdk::serve::RequestError& e) {
    if (e.status() < 400 || e.status() >= 500) std::abort();
  } catch (...) {
    std::abort();
  }
  return 0;
}
