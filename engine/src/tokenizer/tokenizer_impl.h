// TokenizerImpl: the interface every tokenizer kind implements behind sqrtdk::Tokenizer (engine/include/sqrtdk/
// tokenizer.h). The byte tokenizer is in tokenizer.cpp; the BPE kinds are built by make_bpe_tokenizer.
#pragma once

#include <sqrtdk/tokenizer.h>

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sqrtdk {

class TokenizerImpl {
 public:
  virtual ~TokenizerImpl() = default;
  virtual std::vector<uint32_t> encode(std::string_view text, bool add_special) const = 0;
  // The bytes of `id` as the decoder emits them when the token is at position `index` of the decoded sequence
  // (sentencepiece strips the space of a leading '▁' at index 0), special tokens included; no UTF-8 repair.
  virtual std::string token_bytes(uint32_t id, size_t index) const = 0;
  // Ids -> text (Tokenizer::decode's contract; ids already checked < vocab_size()). The default joins
  // token_bytes over the kept ids and repairs UTF-8 with append_utf8_lossy; a kind whose decoder differs overrides.
  virtual std::string decode(std::span<const uint32_t> ids, bool skip_special) const;
  // Streaming decode (TokenStreamer), one kept id at a time: appends to `out` the text that is final now that `id`
  // follows the ids before it. `pending` (bytes held back) and `first` (nothing emitted yet) are the streamer's
  // state, owned by the caller. stream_finish appends what is left. The default holds back an incomplete UTF-8 tail
  // and repairs the rest with append_utf8_lossy, which together equal the default decode; a kind that overrides
  // decode overrides these so that the pieces still concatenate to decode().
  virtual void stream_push(uint32_t id, std::string& pending, bool& first, std::string& out) const;
  virtual void stream_finish(std::string& pending, bool& first, std::string& out) const;
  virtual std::string_view piece(uint32_t id) const = 0;
  virtual uint32_t vocab_size() const = 0;
  virtual bool is_special(uint32_t id) const = 0;
  virtual const char* kind_name() const = 0;
  virtual const TokenizerSpec* spec() const = 0;
  uint32_t bos_id = kNoToken, eos_id = kNoToken;
  std::vector<uint32_t> stop_ids;
  ChatTemplateKind chat_template = ChatTemplateKind::none;
};

// The byte-level BPE and SentencePiece BPE tokenizers (engine/src/tokenizer/bpe_tokenizer.cpp). `spec` is valid.
std::unique_ptr<TokenizerImpl> make_bpe_tokenizer(TokenizerSpec spec, const std::string& where);

// Appends `bytes` to `out`, replacing each maximal invalid UTF-8 subsequence by U+FFFD as Rust's from_utf8_lossy
// does (the WHATWG "substitution of maximal subparts" rule). Returns the number of trailing bytes of `bytes` that
// are a valid but incomplete UTF-8 prefix when `keep_partial_tail` is set (they are not appended); else 0.
size_t append_utf8_lossy(std::string& out, std::string_view bytes, bool keep_partial_tail);

}  // namespace sqrtdk
