// TokenizerSpec: validation, the SentencePiece merge list, and the .sqdk tokenizer section (engine/FORMAT.md
// "Tokenizer section"): a flat little-endian record read with a bounds-checked cursor, like the tensor directory.
#include <sqrtdk/error.h>
#include <sqrtdk/chat.h>
#include <sqrtdk/tokenizer.h>

#include "engine/src/tokenizer/text.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

namespace sqrtdk {

const char* chat_template_name(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::none: return "none";
    case ChatTemplateKind::chatml: return "chatml";
    case ChatTemplateKind::llama2: return "llama2";
    case ChatTemplateKind::llama3: return "llama3";
    case ChatTemplateKind::zephyr: return "zephyr";
  }
  return "unknown";
}

namespace {

// Limits far above real tokenizers (Qwen3: 151 669 pieces, 151 387 merges, pieces up to 256 bytes), small enough
// that no size computed from them overflows and a hostile file cannot ask for gigabytes.
constexpr uint64_t kMaxIds = 1u << 24;
constexpr uint64_t kMaxPieceBytes = 4096;
constexpr uint64_t kMaxRegexBytes = 4096;
constexpr uint64_t kMaxTemplateBytes = 65536;
constexpr uint32_t kLastChatTemplate = static_cast<uint32_t>(ChatTemplateKind::zephyr);

using tok::is_valid_utf8;

std::string show(std::string_view s) {  // a piece for an error message: printable ASCII, cut when long
  std::string out;
  for (unsigned char c : s.substr(0, 40)) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  if (s.size() > 40) out += "...";
  return "'" + out + "'";
}

}  // namespace

void TokenizerSpec::validate(const std::string& where, ErrorKind kind) const {
  auto fail = [&](const std::string& what) { throw Error(kind, where + ": " + what); };
  if (style != TokenizerStyle::byte_level_bpe && style != TokenizerStyle::sentencepiece_bpe)
    fail("unknown style " + std::to_string(static_cast<uint32_t>(style)) +
         " (expected 1 = byte_level_bpe or 2 = sentencepiece_bpe)");
  if (vocab.empty() || vocab.size() > kMaxIds)
    fail("vocabulary of " + std::to_string(vocab.size()) + " pieces (expected 1.." + std::to_string(kMaxIds) + ")");
  if (added.size() > kMaxIds) fail("too many added tokens (" + std::to_string(added.size()) + ")");
  uint64_t n_ids = vocab.size();
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& a = added[i];
    const std::string at = "added token #" + std::to_string(i) + " (id " + std::to_string(a.id) + ")";
    if (a.id >= kMaxIds) fail(at + ": id out of range (expected < " + std::to_string(kMaxIds) + ")");
    if (i > 0 && a.id <= added[i - 1].id) fail(at + ": ids must be strictly increasing");
    if (a.content.empty() || a.content.size() > kMaxPieceBytes)
      fail(at + ": content of " + std::to_string(a.content.size()) + " bytes (expected 1.." +
           std::to_string(kMaxPieceBytes) + ")");
    if (!is_valid_utf8(a.content)) fail(at + ": content " + show(a.content) + " is not valid UTF-8");
    n_ids = std::max<uint64_t>(n_ids, uint64_t{a.id} + 1);
  }
  auto is_added = [&](uint32_t id) {
    return std::binary_search(added.begin(), added.end(), id,
                              [](const auto& x, const auto& y) {
                                if constexpr (std::is_same_v<std::decay_t<decltype(x)>, AddedToken>) return x.id < y;
                                else return x < y.id;
                              });
  };
  std::unordered_map<std::string_view, uint32_t> index;
  index.reserve(vocab.size());
  for (uint32_t id = 0; id < vocab.size(); ++id) {
    const std::string& p = vocab[id];
    if (p.empty()) {
      if (!is_added(id)) fail("piece " + std::to_string(id) + " is empty and is not an added token");
      continue;
    }
    if (p.size() > kMaxPieceBytes)
      fail("piece " + std::to_string(id) + " has " + std::to_string(p.size()) + " bytes (expected at most " +
           std::to_string(kMaxPieceBytes) + ")");
    if (!is_valid_utf8(p)) fail("piece " + std::to_string(id) + " " + show(p) + " is not valid UTF-8");
    if (!index.emplace(p, id).second)
      fail("piece " + std::to_string(id) + " " + show(p) + " repeats piece " + std::to_string(index[p]));
  }
  if (merges.size() > kMaxIds) fail("too many merges (" + std::to_string(merges.size()) + ")");
  std::string merged;
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto [l, rr] = merges[r];
    const std::string at = "merge #" + std::to_string(r);
    if (l >= vocab.size() || rr >= vocab.size() || vocab[l].empty() || vocab[rr].empty())
      fail(at + ": piece ids " + std::to_string(l) + ", " + std::to_string(rr) + " (expected non-empty pieces < " +
           std::to_string(vocab.size()) + ")");
    merged = vocab[l];
    merged += vocab[rr];
    if (!index.count(merged)) fail(at + ": the merged piece " + show(merged) + " is not in the vocabulary");
  }
  if (split_regex.size() > kMaxRegexBytes)
    fail("split regex of " + std::to_string(split_regex.size()) + " bytes (expected at most " +
         std::to_string(kMaxRegexBytes) + ")");
  if (!is_valid_utf8(split_regex)) fail("split regex is not valid UTF-8");
  if (style == TokenizerStyle::sentencepiece_bpe && !split_regex.empty())
    fail("a split regex with the sentencepiece style (it splits on nothing)");
  if (style == TokenizerStyle::byte_level_bpe && byte_fallback)
    fail("byte_fallback with the byte-level style (every byte is in its alphabet)");
  auto check_id = [&](uint32_t id, const char* what) {
    if (id != kNoToken && id >= n_ids)
      fail(std::string(what) + " id " + std::to_string(id) + " is out of range (expected < " +
           std::to_string(n_ids) + " or none)");
  };
  check_id(unk_id, "unk");
  check_id(bos_id, "bos");
  check_id(eos_id, "eos");
  check_id(pad_id, "pad");
  if (add_bos && bos_id == kNoToken) fail("add_bos is set but there is no bos id");
  if (add_eos && eos_id == kNoToken) fail("add_eos is set but there is no eos id");
  if (static_cast<uint32_t>(chat_template) > kLastChatTemplate)
    fail("unknown chat template kind " + std::to_string(static_cast<uint32_t>(chat_template)));
  if (chat_template_jinja.size() > kMaxTemplateBytes)
    fail("chat template of " + std::to_string(chat_template_jinja.size()) + " bytes (expected at most " +
         std::to_string(kMaxTemplateBytes) + ")");
  if (!chat_template_jinja.empty()) {
    if (!is_valid_utf8(chat_template_jinja)) fail("the chat template is not valid UTF-8");
    const ChatTemplateKind detected = detect_chat_template(chat_template_jinja);
    if (detected != chat_template)
      fail(std::string("chat template kind ") + chat_template_name(chat_template) + " but its Jinja text is " +
           chat_template_name(detected));
  }
  if (end_of_turn_ids.size() > 64) fail("more than 64 end-of-turn ids");
  for (uint32_t id : end_of_turn_ids)
    if (id >= n_ids) fail("end-of-turn id " + std::to_string(id) + " is out of range");
}

std::string TokenizerSpec::summary() const {
  return std::string(style == TokenizerStyle::byte_level_bpe ? "byte-level BPE" : "SentencePiece-style BPE") + ", " +
         std::to_string(vocab.size()) + " pieces, " + std::to_string(merges.size()) + " merges, " +
         std::to_string(added.size()) + (added.size() == 1 ? " added token" : " added tokens") + ", chat template " +
         chat_template_name(chat_template);
}

std::vector<std::pair<uint32_t, uint32_t>> sentencepiece_merges(const std::vector<std::string>& pieces,
                                                                const std::vector<float>& scores) {
  if (scores.size() != pieces.size())
    throw Error("sentencepiece merges: " + std::to_string(pieces.size()) + " pieces but " +
                std::to_string(scores.size()) + " scores");
  std::unordered_map<std::string_view, uint32_t> index;
  index.reserve(pieces.size());
  for (uint32_t id = 0; id < pieces.size(); ++id)
    if (!pieces[id].empty()) index.emplace(pieces[id], id);
  // As Hugging Face's SentencePieceExtractor: for each piece in id order, every split at a character boundary whose
  // halves are both pieces, sorted by (left id, right id); then all of them stably by the merged piece's score,
  // highest first.
  struct Merge {
    uint32_t left, right;
    float score;
  };
  std::vector<Merge> all, local;
  for (uint32_t id = 0; id < pieces.size(); ++id) {
    const std::string_view p = pieces[id];
    local.clear();
    for (size_t cut = 1; cut < p.size(); ++cut) {
      if ((static_cast<unsigned char>(p[cut]) & 0xC0) == 0x80) continue;  // inside a UTF-8 character
      const auto l = index.find(p.substr(0, cut)), r = index.find(p.substr(cut));
      if (l != index.end() && r != index.end()) local.push_back({l->second, r->second, scores[id]});
    }
    std::sort(local.begin(), local.end(),
              [](const Merge& a, const Merge& b) { return a.left != b.left ? a.left < b.left : a.right < b.right; });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  std::vector<std::pair<uint32_t, uint32_t>> out;
  out.reserve(all.size());
  for (const Merge& m : all) out.emplace_back(m.left, m.right);
  return out;
}

// ---- the section ----
namespace {

constexpr unsigned char kSectionMagic[4] = {'S', 'Q', 'T', 'K'};
constexpr uint32_t kSectionVersion = 1;
// Section flags and added-token flags (FORMAT.md "Tokenizer section").
constexpr uint32_t kNfc = 1u << 0, kAddPrefixSpace = 1u << 1, kIgnoreMerges = 1u << 2, kByteFallback = 1u << 3,
                   kAddBos = 1u << 4, kAddEos = 1u << 5, kKnownFlags = (1u << 6) - 1;
constexpr uint8_t kSpecial = 1u << 0, kLstrip = 1u << 1, kRstrip = 1u << 2, kNormalized = 1u << 3,
                  kSingleWord = 1u << 4, kKnownTokenFlags = (1u << 5) - 1;

struct Out {
  std::vector<unsigned char> b;
  void u8(uint8_t v) { b.push_back(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<unsigned char>(v >> (8 * i)));
  }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  }
};

class In {
 public:
  In(const unsigned char* p, size_t n, const std::string& where) : p_(p), n_(n), where_(where) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::bad_file, where_ + ": " + what + " (at byte " + std::to_string(at_) + " of " +
                                         std::to_string(n_) + ")");
  }
  void need(uint64_t bytes, const std::string& field) const {
    if (bytes > n_ - at_) fail(field + " runs past the end of the section");
  }
  uint8_t u8(const std::string& field) {
    need(1, field);
    return p_[at_++];
  }
  uint32_t u32(const std::string& field) {
    need(4, field);
    uint32_t v;
    std::memcpy(&v, p_ + at_, 4);
    at_ += 4;
    return v;
  }
  std::string str(const std::string& field, uint64_t max) {
    const uint32_t len = u32(field + " length");
    if (len > max) fail(field + " length " + std::to_string(len) + " (expected at most " + std::to_string(max) + ")");
    need(len, field);
    std::string s(reinterpret_cast<const char*>(p_ + at_), len);
    at_ += len;
    return s;
  }
  // Bounds a count by the bytes left before anything is allocated: each element takes at least `min_bytes`.
  uint32_t count(const std::string& field, uint64_t max, uint64_t min_bytes) {
    const uint32_t v = u32(field);
    if (v > max || uint64_t{v} * min_bytes > n_ - at_)
      fail(field + " " + std::to_string(v) + " is more than the section can hold");
    return v;
  }
  size_t left() const { return n_ - at_; }

 private:
  const unsigned char* p_;
  size_t n_;
  size_t at_ = 0;
  const std::string& where_;
};

}  // namespace

std::vector<unsigned char> serialize_tokenizer(const TokenizerSpec& s) {
  Out o;
  o.b.insert(o.b.end(), kSectionMagic, kSectionMagic + 4);
  o.u32(kSectionVersion);
  o.u32(static_cast<uint32_t>(s.style));
  o.u32((s.nfc ? kNfc : 0) | (s.add_prefix_space ? kAddPrefixSpace : 0) | (s.ignore_merges ? kIgnoreMerges : 0) |
        (s.byte_fallback ? kByteFallback : 0) | (s.add_bos ? kAddBos : 0) | (s.add_eos ? kAddEos : 0));
  o.u32(s.unk_id);
  o.u32(s.bos_id);
  o.u32(s.eos_id);
  o.u32(s.pad_id);
  o.u32(static_cast<uint32_t>(s.chat_template));
  o.str(s.split_regex);
  o.u32(static_cast<uint32_t>(s.vocab.size()));
  for (const std::string& p : s.vocab) o.str(p);
  o.u32(static_cast<uint32_t>(s.merges.size()));
  for (const auto& [l, r] : s.merges) {
    o.u32(l);
    o.u32(r);
  }
  o.u32(static_cast<uint32_t>(s.added.size()));
  for (const AddedToken& a : s.added) {
    o.u32(a.id);
    o.u8((a.special ? kSpecial : 0) | (a.lstrip ? kLstrip : 0) | (a.rstrip ? kRstrip : 0) |
         (a.normalized ? kNormalized : 0) | (a.single_word ? kSingleWord : 0));
    o.str(a.content);
  }
  o.u32(static_cast<uint32_t>(s.end_of_turn_ids.size()));
  for (uint32_t id : s.end_of_turn_ids) o.u32(id);
  o.str(s.chat_template_jinja);
  return std::move(o.b);
}

TokenizerSpec deserialize_tokenizer(const unsigned char* data, size_t size, const std::string& where) {
  In in(data, size, where);
  in.need(4, "magic");
  if (std::memcmp(data, kSectionMagic, 4) != 0) in.fail("bad magic (expected 'SQTK')");
  in.u8("magic"), in.u8("magic"), in.u8("magic"), in.u8("magic");
  const uint32_t version = in.u32("version");
  if (version != kSectionVersion)
    in.fail("unsupported tokenizer section version " + std::to_string(version) + " (this build reads " +
            std::to_string(kSectionVersion) + ")");
  TokenizerSpec s;
  s.style = static_cast<TokenizerStyle>(in.u32("style"));
  const uint32_t flags = in.u32("flags");
  if (flags & ~kKnownFlags) in.fail("unknown flag bits " + std::to_string(flags & ~kKnownFlags));
  s.nfc = flags & kNfc;
  s.add_prefix_space = flags & kAddPrefixSpace;
  s.ignore_merges = flags & kIgnoreMerges;
  s.byte_fallback = flags & kByteFallback;
  s.add_bos = flags & kAddBos;
  s.add_eos = flags & kAddEos;
  s.unk_id = in.u32("unk_id");
  s.bos_id = in.u32("bos_id");
  s.eos_id = in.u32("eos_id");
  s.pad_id = in.u32("pad_id");
  s.chat_template = static_cast<ChatTemplateKind>(in.u32("chat_template"));
  s.split_regex = in.str("split regex", kMaxRegexBytes);
  const uint32_t n_vocab = in.count("n_vocab", kMaxIds, 4);
  s.vocab.resize(n_vocab);
  for (uint32_t i = 0; i < n_vocab; ++i) s.vocab[i] = in.str("piece " + std::to_string(i), kMaxPieceBytes);
  const uint32_t n_merges = in.count("n_merges", kMaxIds, 8);
  s.merges.resize(n_merges);
  for (uint32_t i = 0; i < n_merges; ++i) {
    s.merges[i].first = in.u32("merge");
    s.merges[i].second = in.u32("merge");
  }
  const uint32_t n_added = in.count("n_added", kMaxIds, 9);
  s.added.resize(n_added);
  for (uint32_t i = 0; i < n_added; ++i) {
    AddedToken& a = s.added[i];
    a.id = in.u32("added token id");
    const uint8_t f = in.u8("added token flags");
    if (f & ~kKnownTokenFlags) in.fail("added token #" + std::to_string(i) + ": unknown flag bits");
    a.special = f & kSpecial;
    a.lstrip = f & kLstrip;
    a.rstrip = f & kRstrip;
    a.normalized = f & kNormalized;
    a.single_word = f & kSingleWord;
    a.content = in.str("added token #" + std::to_string(i), kMaxPieceBytes);
  }
  const uint32_t n_eot = in.count("n_end_of_turn", 64, 4);
  s.end_of_turn_ids.resize(n_eot);
  for (uint32_t i = 0; i < n_eot; ++i) s.end_of_turn_ids[i] = in.u32("end-of-turn id");
  s.chat_template_jinja = in.str("chat template", kMaxTemplateBytes);
  if (in.left() != 0) in.fail(std::to_string(in.left()) + " bytes after the last field");
  s.validate(where, ErrorKind::bad_file);
  return s;
}

}  // namespace sqrtdk
