// The byte-level BPE (GPT-2, Llama 3, Qwen) and SentencePiece-style BPE (Llama 1/2, TinyLlama, Mistral) tokenizers,
// step for step as Hugging Face `tokenizers` runs a tokenizer.json:
//
//   encode: added tokens in the raw text (added_tokens.h) -> for each stretch between them, the normalizer
//     (byte-level: NFC when the spec says so; sentencepiece: Prepend '▁' if add_prefix_space, then ' ' -> '▁') ->
//     added tokens marked `normalized`, in the normalized text -> the pre-tokenizer (byte-level: ' ' prepended if
//     add_prefix_space, then the split regex, "Isolated") -> the BPE model per pre-token (ignore_merges; symbols are
//     the byte alphabet's characters, or the characters with <0xNN> byte fallback and fused unk; merges by rank,
//     bpe.h) -> BOS/EOS per add_special (TemplateProcessing).
//   decode: byte-level: each token's characters mapped back to bytes through the alphabet (a token with a character
//     outside it, e.g. an added token with a space, gives its UTF-8 as is), joined, then from_utf8_lossy.
//     sentencepiece: '▁' -> ' ', then ByteFallback (a run of consecutive <0xNN> tokens is its bytes if they are
//     valid UTF-8, else one U+FFFD per token), Fuse, Strip (one ' ' off the start of the whole text).
//
// Input text that is not valid UTF-8 (Hugging Face takes Rust strings, which always are) is repaired first, each
// maximal invalid subsequence becoming U+FFFD. Nothing here is mutable after construction: encode and decode keep
// their state on the stack, so one tokenizer serves any number of threads.
#include <sqrtdk/error.h>

#include "engine/src/tokenizer/added_tokens.h"
#include "engine/src/tokenizer/bpe.h"
#include "engine/src/tokenizer/text.h"
#include "engine/src/tokenizer/tokenizer_impl.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <unordered_map>

namespace sqrtdk {

namespace {

using tok::AddedTokenMatcher;
using tok::MergeTable;
using tok::SplitRegex;

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 '▁'
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

std::vector<uint32_t> merged_ids(const TokenizerSpec& spec, const std::unordered_map<std::string_view, uint32_t>& index) {
  std::vector<uint32_t> merged(spec.merges.size());
  std::string piece;
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    piece = spec.vocab[spec.merges[r].first];
    piece += spec.vocab[spec.merges[r].second];
    merged[r] = index.at(piece);  // validate() checked it is there
  }
  return merged;
}

class BpeTokenizer final : public TokenizerImpl {
 public:
  BpeTokenizer(TokenizerSpec spec, const std::string& where)
      : spec_(std::move(spec)),
        index_(make_index(spec_)),
        merges_(spec_.merges, merged_ids(spec_, index_)),
        raw_added_(spec_.added, false),
        normalized_added_(spec_.added, true),
        byte_level_(spec_.style == TokenizerStyle::byte_level_bpe) {
    bos_id = spec_.bos_id;
    eos_id = spec_.eos_id;
    if (eos_id != kNoToken) stop_ids.push_back(eos_id);
    for (uint32_t id : spec_.end_of_turn_ids)
      if (std::find(stop_ids.begin(), stop_ids.end(), id) == stop_ids.end()) stop_ids.push_back(id);
    chat_template = spec_.chat_template;
    if (byte_level_ && !spec_.split_regex.empty()) regex_.emplace(spec_.split_regex, where);

    n_ids_ = static_cast<uint32_t>(spec_.vocab.size());
    for (const AddedToken& a : spec_.added) n_ids_ = std::max(n_ids_, a.id + 1);
    special_.assign(n_ids_, 0);
    added_content_.assign(n_ids_, nullptr);
    for (const AddedToken& a : spec_.added) {
      special_[a.id] = a.special;
      added_content_[a.id] = &a.content;
    }
    // What each id decodes to (before UTF-8 repair). Hugging Face decodes an id through the added vocabulary
    // first, then the model's vocabulary.
    bytes_.resize(n_ids_);
    byte_of_.assign(n_ids_, -1);
    for (uint32_t id = 0; id < n_ids_; ++id) {
      const std::string_view p = piece(id);
      bytes_[id] = byte_level_ ? byte_level_bytes(p) : sentencepiece_text(p);
      if (!byte_level_) byte_of_[id] = static_cast<int16_t>(fallback_byte(p));
    }
    // The initial symbols of a word.
    byte_ids_.fill(kNoToken);
    if (byte_level_) {
      std::string ch;
      for (int b = 0; b < 256; ++b) {
        ch.clear();
        tok::append_utf8(ch, tok::byte_to_code_point(static_cast<uint8_t>(b)));
        if (auto it = index_.find(ch); it != index_.end()) byte_ids_[b] = it->second;
      }
      // ignore_merges looks the pre-token up by its bytes: the alphabet maps bytes to characters one to one.
      if (spec_.ignore_merges)
        for (uint32_t id = 0; id < spec_.vocab.size(); ++id)
          if (!spec_.vocab[id].empty()) raw_index_.emplace(bytes_[id], id);
    } else {
      char name[8];
      for (int b = 0; b < 256; ++b) {
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        if (auto it = index_.find(name); it != index_.end()) byte_ids_[b] = it->second;
      }
      for (uint32_t id = 0; id < spec_.vocab.size(); ++id) {  // single-character pieces, by code point
        const std::string& p = spec_.vocab[id];
        if (p.empty()) continue;
        size_t i = 0;
        const char32_t c = tok::next_code_point(p, i);
        if (i == p.size()) char_ids_.emplace(c, id);
      }
      ascii_ids_.fill(kNoToken);
      for (const auto& [c, id] : char_ids_)
        if (c < 128) ascii_ids_[c] = id;
      // A whole segment is one BPE word, often thousands of symbols. When no piece has a '▁' right after another
      // character (true of SentencePiece vocabularies, whose pieces start at spaces) and '▁' is a piece, no merge
      // can ever make a symbol that spans the boundary before a '▁' that follows another character: the word splits
      // there into words that merge independently, with the same result.
      split_at_metaspace_ = char_ids_.count(U'\u2581') > 0;
      for (const std::string& p : spec_.vocab)
        for (size_t k = p.find(kMetaspace, 1); k != std::string::npos && split_at_metaspace_; k = p.find(kMetaspace, k + 1))
          if (k < 3 || p.compare(k - 3, 3, kMetaspace) != 0) split_at_metaspace_ = false;
    }
  }

  std::vector<uint32_t> encode(std::string_view text, bool add_special) const override {
    std::string repaired;
    if (!tok::is_valid_utf8(text)) {
      append_utf8_lossy(repaired, text, false);
      text = repaired;
    }
    std::vector<uint32_t> ids;
    ids.reserve(text.size() / 3 + 2);
    if (add_special && spec_.add_bos) ids.push_back(spec_.bos_id);
    Scratch scratch;
    raw_added_.split(text, [&](std::string_view part, uint32_t added) {
      if (added != kNoToken) {
        ids.push_back(added);
      } else {
        encode_segment(part, ids, scratch);
      }
    });
    if (add_special && spec_.add_eos) ids.push_back(spec_.eos_id);
    return ids;
  }

  std::string token_bytes(uint32_t id, size_t index) const override {
    const std::string& b = bytes_[id];
    if (byte_level_) return b;
    if (byte_of_[id] >= 0) return std::string(1, static_cast<char>(byte_of_[id]));
    if (index == 0 && !b.empty() && b[0] == ' ') return b.substr(1);
    return b;
  }

  std::string decode(std::span<const uint32_t> ids, bool skip_special) const override {
    if (byte_level_) return TokenizerImpl::decode(ids, skip_special);
    std::string out, pending;
    bool first = true;
    for (uint32_t id : ids)
      if (!(skip_special && special_[id])) stream_push(id, pending, first, out);
    stream_finish(pending, first, out);
    return out;
  }

  // Sentencepiece streaming: `pending` holds the bytes of the current run of <0xNN> tokens (its fate, the bytes or
  // one U+FFFD each, is known only when the run ends); `first`: nothing emitted yet (Strip takes one ' ' then).
  void stream_push(uint32_t id, std::string& pending, bool& first, std::string& out) const override {
    if (byte_level_) return TokenizerImpl::stream_push(id, pending, first, out);
    if (byte_of_[id] >= 0) {
      pending.push_back(static_cast<char>(byte_of_[id]));
      return;
    }
    const size_t at = out.size();
    flush_byte_run(pending, out);
    out += bytes_[id];
    strip_first(first, out, at);
  }

  void stream_finish(std::string& pending, bool& first, std::string& out) const override {
    if (byte_level_) return TokenizerImpl::stream_finish(pending, first, out);
    const size_t at = out.size();
    flush_byte_run(pending, out);
    strip_first(first, out, at);
  }

  std::string_view piece(uint32_t id) const override {
    if (added_content_[id]) return *added_content_[id];
    // Ids between the vocabulary and the added tokens that are neither (a gap) stand for nothing, as in HF.
    return id < spec_.vocab.size() ? std::string_view(spec_.vocab[id]) : std::string_view();
  }
  uint32_t vocab_size() const override { return n_ids_; }
  bool is_special(uint32_t id) const override { return special_[id]; }
  const char* kind_name() const override { return byte_level_ ? "byte_level_bpe" : "sentencepiece_bpe"; }
  const TokenizerSpec* spec() const override { return &spec_; }

 private:
  struct Scratch {
    std::string text;               // the normalized stretch
    std::string prefixed;           // with the prefix space
    std::vector<uint32_t> symbols;  // one word's symbols
    // Words already encoded in this call -> (offset, count) in `cached`. The keys point into the text being encoded
    // (the input or `text`/`prefixed` above, which change between stretches): the cache is cleared per stretch.
    std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;
    std::vector<uint32_t> cached;
  };

  static std::unordered_map<std::string_view, uint32_t> make_index(const TokenizerSpec& spec) {
    std::unordered_map<std::string_view, uint32_t> index;
    index.reserve(spec.vocab.size());
    for (uint32_t id = 0; id < spec.vocab.size(); ++id)
      if (!spec.vocab[id].empty()) index.emplace(spec.vocab[id], id);
    return index;
  }

  // Hugging Face's ByteLevel decoder, per token: every character through the alphabet, or the UTF-8 as is when
  // some character is outside it.
  static std::string byte_level_bytes(std::string_view p) {
    std::string out;
    size_t i = 0;
    while (i < p.size()) {
      const int b = tok::code_point_to_byte(tok::next_code_point(p, i));
      if (b < 0) return std::string(p);
      out.push_back(static_cast<char>(b));
    }
    return out;
  }
  static std::string sentencepiece_text(std::string_view p) {
    std::string out;
    for (size_t i = 0; i < p.size();) {
      if (p.substr(i, 3) == kMetaspace) {
        out.push_back(' ');
        i += 3;
      } else {
        out.push_back(p[i++]);
      }
    }
    return out;
  }
  // ByteFallback's test: six bytes "<0x" h h ">" where hh parses as a u8 in base 16 (Rust's from_str_radix: two
  // hex digits of either case, or '+' and one). -1 when the piece is not a byte token.
  static int fallback_byte(std::string_view p) {
    if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
    auto hex = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    if (p[3] == '+') return hex(p[4]);
    const int hi = hex(p[3]), lo = hex(p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }

  static void flush_byte_run(std::string& pending, std::string& out) {
    if (pending.empty()) return;
    if (tok::is_valid_utf8(pending)) {
      out += pending;
    } else {
      for (size_t i = 0; i < pending.size(); ++i) out += kReplacement;
    }
    pending.clear();
  }
  static void strip_first(bool& first, std::string& out, size_t at) {
    if (!first || out.size() == at) return;
    if (out[at] == ' ') out.erase(at, 1);
    first = false;
  }

  void encode_segment(std::string_view part, std::vector<uint32_t>& ids, Scratch& s) const {
    std::string_view text = part;
    if (byte_level_) {
      if (spec_.nfc && !tok::is_ascii(part)) {
        s.text = tok::nfc(part);
        text = s.text;
      }
    } else {
      s.cache.clear();  // its keys point into s.text
      s.cached.clear();
      s.text.clear();
      if (spec_.add_prefix_space && !part.empty()) s.text += kMetaspace;
      for (char c : part) {
        if (c == ' ') {
          s.text += kMetaspace;
        } else {
          s.text.push_back(c);
        }
      }
      text = s.text;
    }
    normalized_added_.split(text, [&](std::string_view piece, uint32_t added) {
      if (added != kNoToken) {
        ids.push_back(added);
      } else if (byte_level_) {
        pre_tokenize(piece, ids, s);
      } else if (split_at_metaspace_) {
        size_t start = 0;
        for (size_t k = piece.find(kMetaspace, 1); k != std::string::npos; k = piece.find(kMetaspace, k + 3)) {
          if (piece.compare(k - 3, 3, kMetaspace) == 0) continue;  // inside a run of '▁'
          encode_cached(piece.substr(start, k - start), ids, s);
          start = k;
        }
        encode_cached(piece.substr(start), ids, s);
      } else {
        encode_word(piece, ids, s);
      }
    });
  }

  void pre_tokenize(std::string_view text, std::vector<uint32_t>& ids, Scratch& s) const {
    s.cache.clear();
    s.cached.clear();
    if (spec_.add_prefix_space && text[0] != ' ') {
      s.prefixed.assign(1, ' ');
      s.prefixed += text;
      text = s.prefixed;
    }
    if (regex_) {
      regex_->split(text, [&](std::string_view word) { encode_cached(word, ids, s); });
    } else {
      encode_word(text, ids, s);
    }
  }

  // encode_word through a cache of this call's short words (prose repeats its words; the merge table is larger
  // than the L2, so a word's merges cost cache misses). The cache lives in the call's Scratch: nothing is shared.
  // Its keys point into the text of the current stretch: the callers clear it when that text changes.
  void encode_cached(std::string_view word, std::vector<uint32_t>& ids, Scratch& s) const {
    if (word.size() > 32) return encode_word(word, ids, s);
    if (auto it = s.cache.find(word); it != s.cache.end()) {
      ids.insert(ids.end(), s.cached.begin() + it->second.first,
                 s.cached.begin() + it->second.first + it->second.second);
      return;
    }
    const size_t before = ids.size();
    encode_word(word, ids, s);
    if (s.cache.size() >= 1u << 16) return;
    s.cache.emplace(word, std::make_pair(static_cast<uint32_t>(s.cached.size()), static_cast<uint32_t>(ids.size() - before)));
    s.cached.insert(s.cached.end(), ids.begin() + before, ids.end());
  }

  // The BPE model on one pre-token (Hugging Face's BPE::tokenize and merge_word).
  void encode_word(std::string_view word, std::vector<uint32_t>& ids, Scratch& s) const {
    if (word.empty()) return;
    if (spec_.ignore_merges) {
      const auto& index = byte_level_ ? raw_index_ : index_;
      if (auto it = index.find(word); it != index.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    std::vector<uint32_t>& sym = s.symbols;
    sym.clear();
    if (byte_level_) {
      bool unk = false;  // consecutive unknown characters fuse into one unk
      for (unsigned char b : word) {
        if (byte_ids_[b] != kNoToken) {
          sym.push_back(byte_ids_[b]);
          unk = false;
        } else if (spec_.unk_id != kNoToken && !unk) {
          sym.push_back(spec_.unk_id);
          unk = true;
        }
      }
    } else {
      bool unk = false;
      for (size_t i = 0; i < word.size();) {
        const size_t at = i;
        const char32_t c = tok::next_code_point(word, i);
        if (c < 128 && ascii_ids_[c] != kNoToken) {
          sym.push_back(ascii_ids_[c]);
          unk = false;
          continue;
        }
        if (auto it = char_ids_.find(c); it != char_ids_.end()) {
          sym.push_back(it->second);
          unk = false;
          continue;
        }
        if (spec_.byte_fallback) {
          bool all = true;
          for (size_t k = at; k < i; ++k) all = all && byte_ids_[static_cast<unsigned char>(word[k])] != kNoToken;
          if (all) {
            // Hugging Face leaves a pending unk where it is and goes on (`continue`): the unk lands after these.
            for (size_t k = at; k < i; ++k) pending_unk_push(sym, unk, byte_ids_[static_cast<unsigned char>(word[k])]);
            continue;
          }
        }
        if (spec_.unk_id != kNoToken && !unk) {
          sym.push_back(spec_.unk_id);
          unk = true;
        }
      }
    }
    merges_.merge(sym);
    ids.insert(ids.end(), sym.begin(), sym.end());
  }

  // A byte-fallback symbol while an unk is pending: Hugging Face appends the unk only when the next known character
  // (or the word's end) comes, so the bytes go before it. Our unk is already in `sym`: move it behind the bytes.
  static void pending_unk_push(std::vector<uint32_t>& sym, bool unk, uint32_t id) {
    if (unk) {
      sym.insert(sym.end() - 1, id);
    } else {
      sym.push_back(id);
    }
  }

  TokenizerSpec spec_;
  std::unordered_map<std::string_view, uint32_t> index_;      // piece -> id (points into spec_.vocab)
  std::unordered_map<std::string_view, uint32_t> raw_index_;  // byte-level, ignore_merges: token bytes -> id
  MergeTable merges_;
  AddedTokenMatcher raw_added_, normalized_added_;
  std::optional<SplitRegex> regex_;
  bool byte_level_;
  uint32_t n_ids_ = 0;
  std::vector<uint8_t> special_;
  std::vector<const std::string*> added_content_;  // per id: the added token's content, or nullptr
  std::vector<std::string> bytes_;                 // per id: byte-level: its bytes; sentencepiece: '▁' -> ' '
  std::vector<int16_t> byte_of_;                   // sentencepiece: the byte of a <0xNN> token, else -1
  std::array<uint32_t, 256> byte_ids_;             // byte-level: the alphabet character's id; sentencepiece: <0xNN>
  std::unordered_map<char32_t, uint32_t> char_ids_;  // sentencepiece: single-character pieces
  std::array<uint32_t, 128> ascii_ids_;              // sentencepiece: the same for ASCII
  bool split_at_metaspace_ = false;                  // sentencepiece: words may be split before a '▁' (see above)
};

}  // namespace

std::unique_ptr<TokenizerImpl> make_bpe_tokenizer(TokenizerSpec spec, const std::string& where) {
  return std::make_unique<BpeTokenizer>(std::move(spec), where);
}

}  // namespace sqrtdk
