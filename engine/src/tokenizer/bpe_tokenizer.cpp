// Placeholder until the BPE tokenizers land (issue 16): the kinds exist in files, not yet in this build.
#include <sqrtdk/error.h>

#include "engine/src/tokenizer/tokenizer_impl.h"

namespace sqrtdk {

std::unique_ptr<TokenizerImpl> make_bpe_tokenizer(TokenizerSpec, const std::string& where) {
  throw Error(ErrorKind::unsupported, where + ": BPE tokenizers are not in this build yet");
}

}  // namespace sqrtdk
