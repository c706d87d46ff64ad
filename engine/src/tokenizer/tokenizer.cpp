// sqrtdk::Tokenizer: the public face of every tokenizer kind, the byte tokenizer of the bundled model, UTF-8
// repair and streaming decode. The BPE kinds live in bpe_tokenizer.cpp.
#include <sqrtdk/error.h>
#include <sqrtdk/format.h>
#include <sqrtdk/tokenizer.h>

#include "engine/src/tokenizer/tokenizer_impl.h"

#include <algorithm>
#include <string>

namespace sqrtdk {

namespace {

// Ids 0..255 are the bytes themselves; the rest (BOS, EOS, padding rows) are special and stand for no bytes.
class ByteTokenizer final : public TokenizerImpl {
 public:
  ByteTokenizer(uint32_t n_vocab, uint32_t bos, uint32_t eos) : n_vocab_(n_vocab) {
    bos_id = bos;
    eos_id = eos;
    if (eos != kNoToken) stop_ids.push_back(eos);
  }
  std::vector<uint32_t> encode(std::string_view text, bool add_special) const override {
    std::vector<uint32_t> ids;
    ids.reserve(text.size() + 1);
    if (add_special && bos_id != kNoToken) ids.push_back(bos_id);
    for (unsigned char ch : text) ids.push_back(ch);
    return ids;
  }
  std::string token_bytes(uint32_t id, size_t) const override {
    return id < 256 ? std::string(1, static_cast<char>(id)) : std::string();
  }
  std::string_view piece(uint32_t id) const override {
    static const std::string kBytes = [] {
      std::string s(256, '\0');
      for (int i = 0; i < 256; ++i) s[i] = static_cast<char>(i);
      return s;
    }();
    return id < 256 ? std::string_view(kBytes).substr(id, 1) : std::string_view();
  }
  uint32_t vocab_size() const override { return n_vocab_; }
  bool is_special(uint32_t id) const override { return id >= 256; }
  const char* kind_name() const override { return "bytes"; }
  const TokenizerSpec* spec() const override { return nullptr; }

 private:
  uint32_t n_vocab_;
};

// Length of the UTF-8 sequence led by `b`, or 0 if `b` cannot start one.
int utf8_length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Whether `b` may follow `lead` as the first continuation byte (no overlong forms, surrogates or > U+10FFFF).
bool valid_second(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

}  // namespace

size_t append_utf8_lossy(std::string& out, std::string_view bytes, bool keep_partial_tail) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char lead = s[i];
    const int len = utf8_length(lead);
    if (len == 1) {
      out.push_back(static_cast<char>(lead));
      ++i;
      continue;
    }
    if (len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    // The longest valid prefix of the sequence: it is replaced as one unit when incomplete (maximal subpart).
    size_t have = 1;
    while (have < static_cast<size_t>(len) && i + have < n &&
           (have == 1 ? valid_second(lead, s[i + have]) : (s[i + have] & 0xC0) == 0x80))
      ++have;
    if (have == static_cast<size_t>(len)) {
      out.append(bytes.substr(i, have));
    } else if (i + have == n && keep_partial_tail) {
      return have;  // may still complete with the next bytes
    } else {
      out += kReplacement;
    }
    i += have;
  }
  return 0;
}

std::string TokenizerImpl::decode(std::span<const uint32_t> ids, bool skip_special) const {
  std::string bytes;
  size_t index = 0;
  for (uint32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_bytes(id, index++);
  }
  std::string out;
  out.reserve(bytes.size());
  append_utf8_lossy(out, bytes, false);
  return out;
}

void TokenizerImpl::stream_push(uint32_t id, std::string& pending, bool& first, std::string& out) const {
  pending += token_bytes(id, first ? 0 : 1);
  first = false;
  const size_t kept = append_utf8_lossy(out, pending, true);
  pending.erase(0, pending.size() - kept);
}

void TokenizerImpl::stream_finish(std::string& pending, bool&, std::string& out) const {
  append_utf8_lossy(out, pending, false);
  pending.clear();
}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::shared_ptr<const Tokenizer> Tokenizer::create(TokenizerSpec spec, const std::string& where) {
  spec.validate(where);
  return std::shared_ptr<const Tokenizer>(new Tokenizer(make_bpe_tokenizer(std::move(spec), where)));
}

std::shared_ptr<const Tokenizer> Tokenizer::of_file(const WeightFile& file) {
  if (const TokenizerSpec* spec = file.tokenizer()) {
    try {
      return create(*spec, file.path() + ": tokenizer section");
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::bad_input) throw;  // e.g. out_of_memory stays what it is
      throw Error(ErrorKind::bad_file, e.what());
    }
  }
  const ModelConfig& c = file.config();
  if (c.tokenizer == TokenizerKind::byte_level) return bytes(c.n_vocab, c.bos_id, c.eos_id);
  return nullptr;
}

std::shared_ptr<const Tokenizer> Tokenizer::bytes(uint32_t n_vocab, uint32_t bos_id, uint32_t eos_id) {
  if (n_vocab < 256)
    throw Error("byte tokenizer: n_vocab " + std::to_string(n_vocab) + " is below 256 (ids 0..255 are the bytes)");
  return std::shared_ptr<const Tokenizer>(new Tokenizer(std::make_unique<ByteTokenizer>(n_vocab, bos_id, eos_id)));
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  return impl_->encode(text, add_special);
}

namespace {
void check_id(const TokenizerImpl& t, uint32_t id) {
  if (id >= t.vocab_size())
    throw Error("token id " + std::to_string(id) + " is out of range (the tokenizer has " +
                std::to_string(t.vocab_size()) + " ids)");
}
}  // namespace

std::string Tokenizer::decode(std::span<const uint32_t> ids, bool skip_special) const {
  for (uint32_t id : ids) check_id(*impl_, id);
  return impl_->decode(ids, skip_special);
}

std::string Tokenizer::token_bytes(uint32_t id) const {
  check_id(*impl_, id);
  return impl_->token_bytes(id, 1);
}

std::string_view Tokenizer::piece(uint32_t id) const {
  check_id(*impl_, id);
  return impl_->piece(id);
}

uint32_t Tokenizer::vocab_size() const { return impl_->vocab_size(); }
uint32_t Tokenizer::bos_id() const { return impl_->bos_id; }
uint32_t Tokenizer::eos_id() const { return impl_->eos_id; }
bool Tokenizer::is_special(uint32_t id) const { return id < impl_->vocab_size() && impl_->is_special(id); }
const std::vector<uint32_t>& Tokenizer::stop_ids() const { return impl_->stop_ids; }
ChatTemplateKind Tokenizer::chat_template() const { return impl_->chat_template; }
const char* Tokenizer::kind_name() const { return impl_->kind_name(); }
const TokenizerSpec* Tokenizer::spec() const { return impl_->spec(); }

TokenStreamer::TokenStreamer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string TokenStreamer::push(uint32_t id) {
  const TokenizerImpl& t = tokenizer_->impl();
  check_id(t, id);
  if (skip_special_ && t.is_special(id)) return {};
  std::string out;
  t.stream_push(id, pending_, first_, out);
  return out;
}

std::string TokenStreamer::finish() {
  std::string out;
  tokenizer_->impl().stream_finish(pending_, first_, out);
  return out;
}

}  // namespace sqrtdk
