// sqrtdk::Tokenizer: text <-> token ids, as Hugging Face `tokenizers` does it, for every model sqrtdk runs.
//
// Three kinds (TokenizerSpec::style):
//   - byte-level BPE (GPT-2, Llama 3, Qwen2/2.5/3): optional NFC, the pre-tokenizer regex (PCRE2, Unicode
//     classes), bytes mapped to GPT-2's printable alphabet, BPE by merge rank;
//   - SentencePiece-style BPE (Llama 1/2, TinyLlama, Mistral): spaces as U+2581 '▁', BPE by merge rank, characters
//     outside the vocabulary as <0xNN> byte pieces (byte_fallback);
//   - the built-in byte tokenizer of the bundled model (ids 0..255 are bytes).
// Added tokens (BOS/EOS, chat markers) are matched in the raw text before anything else, as Hugging Face does.
//
// A TokenizerSpec is the plain data (what the .sqdk tokenizer section stores, engine/FORMAT.md); a Tokenizer is
// built from it once and is immutable and thread-safe afterwards (Model::tokenizer() shares one).
#pragma once

#include <sqrtdk/config.h>
#include <sqrtdk/error.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sqrtdk {

enum class TokenizerStyle : uint32_t { byte_level_bpe = 1, sentencepiece_bpe = 2 };

// The chat template families rendered natively (engine/include/sqrtdk/chat.h); detected at convert time from the
// Jinja text in tokenizer_config.json (a real Jinja engine is not available in C++ on Debian).
enum class ChatTemplateKind : uint32_t { none = 0, chatml = 1, llama2 = 2, llama3 = 3, zephyr = 4 };
const char* chat_template_name(ChatTemplateKind kind);  // "none", "chatml", "llama2", "llama3", "zephyr"

struct AddedToken {
  uint32_t id = 0;
  std::string content;       // matched verbatim in the input text (before normalization unless `normalized`)
  bool special = true;       // skipped by decode(skip_special = true)
  bool lstrip = false;       // also swallows whitespace on its left / right when matched
  bool rstrip = false;
  bool normalized = false;   // matched against the normalized text (Hugging Face `normalized`)
  bool single_word = false;  // only matched when not inside a word
};

struct TokenizerSpec {
  TokenizerStyle style = TokenizerStyle::byte_level_bpe;
  // id -> piece exactly as in tokenizer.json's model.vocab (byte-level: GPT-2's byte alphabet, e.g. "Ġthe";
  // sentencepiece: "▁the", "<0x0A>"). Pieces are unique; every id < vocab.size() has one, except ids that only
  // exist as added tokens (their piece is empty).
  std::vector<std::string> vocab;
  // Merge rules by rank (index 0 merges first): the ids of the left and right pieces; the merged piece is
  // vocab[left] + vocab[right] and must be in the vocabulary.
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  std::vector<AddedToken> added;  // sorted by id
  std::string split_regex;        // byte_level_bpe: the pre-tokenizer regex (PCRE2 syntax, UTF + UCP); may be empty
  bool nfc = false;               // normalize the text to Unicode NFC first (Qwen)
  bool add_prefix_space = false;  // byte-level: prepend ' ' when the text does not start with one;
                                  // sentencepiece: prepend '▁' (Metaspace prepend_scheme "first"/"always", legacy)
  bool ignore_merges = false;     // a pre-token that is itself in the vocabulary is one token (Llama 3)
  bool byte_fallback = false;     // sentencepiece: a character not in the vocabulary becomes its <0xNN> bytes
  uint32_t unk_id = kNoToken;     // sentencepiece without byte_fallback: unknown characters
  uint32_t bos_id = kNoToken, eos_id = kNoToken, pad_id = kNoToken;
  bool add_bos = false;           // encode(add_special = true) starts with BOS
  bool add_eos = false;           // ... and ends with EOS
  ChatTemplateKind chat_template = ChatTemplateKind::none;
  // The Jinja source of the chat template (tokenizer_config.json's chat_template), kept because the kind alone does
  // not say everything rendering needs (Qwen2's default system message, Qwen3's <think> handling: <sqrtdk/chat.h>
  // analyze_chat_template). When set, chat_template must be what it detects as. At most 64 KiB.
  std::string chat_template_jinja;
  std::vector<uint32_t> end_of_turn_ids;  // besides eos: tokens that end a reply (<|im_end|>, <|eot_id|>, ...)

  // Throws sqrtdk::Error "<where>: ..." when the spec is inconsistent: ids out of range, duplicate pieces, a
  // merge whose result is not in the vocabulary, and so on. (The regex is compiled by Tokenizer::create, which
  // names a bad one.) The error's kind is `kind`: bad_input for a spec the caller built; the readers below pass
  // bad_file, since there the spec is a file's contents.
  void validate(const std::string& where, ErrorKind kind = ErrorKind::bad_input) const;
  // One line for people: "byte-level BPE, 50257 pieces, 50000 merges, 1 added token, chat template none".
  std::string summary() const;
};

// SentencePiece BPE encodes by merging the adjacent pair whose merged piece has the highest score. This builds the
// equivalent merge list (rank = score order, as Hugging Face's LlamaConverter does) from pieces and their scores.
std::vector<std::pair<uint32_t, uint32_t>> sentencepiece_merges(const std::vector<std::string>& pieces,
                                                                const std::vector<float>& scores);

// The .sqdk tokenizer section (engine/FORMAT.md "Tokenizer section"): bytes <-> spec. deserialize checks every
// count, length and id against the bytes it has, then validate(); errors start with `where`.
std::vector<unsigned char> serialize_tokenizer(const TokenizerSpec& spec);
TokenizerSpec deserialize_tokenizer(const unsigned char* data, size_t size, const std::string& where);

// Reading Hugging Face files (engine/src/tokenizer/hf_tokenizer_files.cpp). Each throws sqrtdk::Error naming the
// file and the field on anything it cannot represent exactly (an unsupported normalizer or pre-tokenizer is an
// error, never silently ignored).
//   tokenizer.json (+ tokenizer_config.json beside it, if present, for add_bos/add_eos, chat template, eos);
//   GPT-2's vocab.json + merges.txt (or encoder.json + vocab.bpe);
//   SentencePiece's tokenizer.model through libsentencepiece.
// tokenizer_spec_from_dir picks whichever the folder has, in that order; returns false when it has none.
TokenizerSpec tokenizer_spec_from_json(const std::string& tokenizer_json_path, const std::string& config_json_path);
TokenizerSpec tokenizer_spec_from_gpt2_files(const std::string& vocab_json_path, const std::string& merges_path);
TokenizerSpec tokenizer_spec_from_sentencepiece(const std::string& model_path, const std::string& config_json_path);
bool tokenizer_spec_from_dir(const std::string& dir, TokenizerSpec& out);

class TokenizerImpl;  // engine-internal
class WeightFile;     // <sqrtdk/format.h>

class Tokenizer {
 public:
  // Builds from a spec (validated first). Throws sqrtdk::Error "<where>: ..." on a bad spec (kind bad_input).
  static std::shared_ptr<const Tokenizer> create(TokenizerSpec spec, const std::string& where = "tokenizer");
  // The tokenizer a .sqdk file carries: its tokenizer section's, else the byte tokenizer its config names; nullptr
  // when it has neither. A section that does not build (e.g. a regex PCRE2 refuses) is the file's fault: bad_file.
  static std::shared_ptr<const Tokenizer> of_file(const WeightFile& file);
  // The bundled model's byte tokenizer: ids 0..255 are bytes, bos/eos as given (kNoToken: none), add_bos = true.
  static std::shared_ptr<const Tokenizer> bytes(uint32_t n_vocab, uint32_t bos_id, uint32_t eos_id);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text -> ids. add_special: BOS/EOS per the spec's add_bos/add_eos (Hugging Face add_special_tokens).
  // Added tokens in the text are always matched (as Hugging Face does).
  std::vector<uint32_t> encode(std::string_view text, bool add_special = true) const;
  // Ids -> text: bytes joined, then invalid UTF-8 replaced by U+FFFD per maximal invalid subsequence (as Rust's
  // from_utf8_lossy, which Hugging Face uses). Throws sqrtdk::Error for an id >= vocab_size().
  std::string decode(std::span<const uint32_t> ids, bool skip_special = false) const;
  // The raw bytes one token stands for (after the byte alphabet / ▁ mapping), with no UTF-8 repair: what a
  // streaming decoder concatenates. Sentencepiece: a leading-▁ piece at the start of the text keeps its space;
  // TokenStreamer handles Hugging Face's strip of that first space.
  std::string token_bytes(uint32_t id) const;
  std::string_view piece(uint32_t id) const;  // the vocabulary string ("Ġthe", "▁the", "<0x0A>", "<s>")

  uint32_t vocab_size() const;
  uint32_t bos_id() const;
  uint32_t eos_id() const;
  bool is_special(uint32_t id) const;
  // eos plus end_of_turn_ids: where generation stops by default.
  const std::vector<uint32_t>& stop_ids() const;
  ChatTemplateKind chat_template() const;
  // "bytes", "byte_level_bpe" or "sentencepiece_bpe".
  const char* kind_name() const;
  // nullptr for the byte tokenizer.
  const TokenizerSpec* spec() const;

  const TokenizerImpl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
};

// Streaming decode for generation: push ids one at a time; each call returns the text that is now final: only whole
// UTF-8 characters (a partial sequence waits for the next token; one that can no longer complete becomes U+FFFD),
// with the same spacing as decode() of the whole sequence. finish() returns what is left. The concatenation of all
// returned pieces equals decode(all ids, skip_special).
class TokenStreamer {
 public:
  explicit TokenStreamer(const Tokenizer& tokenizer, bool skip_special = true);
  std::string push(uint32_t id);
  std::string finish();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  bool first_ = true;
  std::string pending_;  // bytes of an incomplete UTF-8 character
};

}  // namespace sqrtdk
