// Added-token matching (added_tokens.h): a byte trie walked from each position whose byte starts some content.
// Real vocabularies have a few to a few hundred added tokens, mostly behind one rare first byte ('<'), so the scan
// is a table lookup per byte of text.
#include "engine/src/tokenizer/added_tokens.h"

#include "engine/src/tokenizer/text.h"

#include <algorithm>

namespace sqrtdk::tok {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& added, bool normalized) {
  nodes_.emplace_back();
  for (const AddedToken& a : added) {
    if (a.normalized != normalized || a.content.empty()) continue;
    uint32_t node = 0;
    for (unsigned char c : a.content) {
      auto& ch = nodes_[node].children;
      auto it = std::lower_bound(ch.begin(), ch.end(), c, [](const auto& p, unsigned char b) { return p.first < b; });
      if (it != ch.end() && it->first == c) {
        node = it->second;
      } else {
        const uint32_t child = static_cast<uint32_t>(nodes_.size());
        ch.insert(it, {c, child});
        nodes_.emplace_back();
        node = child;
      }
    }
    // Two added tokens with one content: the first (lowest id) wins, as Hugging Face's map keeps one.
    if (nodes_[node].token < 0) {
      nodes_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back({a.id, a.lstrip, a.rstrip, a.single_word});
    }
    first_byte_[static_cast<unsigned char>(a.content[0])] = true;
  }
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, Match& m) const {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = from; i < text.size(); ++i) {
    if (!first_byte_[p[i]]) continue;
    uint32_t node = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < text.size(); ++j) {
      const auto& ch = nodes_[node].children;
      auto it = std::lower_bound(ch.begin(), ch.end(), p[j],
                                 [](const auto& q, unsigned char b) { return q.first < b; });
      if (it == ch.end() || it->first != p[j]) break;
      node = it->second;
      if (nodes_[node].token >= 0) best = nodes_[node].token, best_end = j + 1;
    }
    if (best >= 0) {
      m.start = i;
      m.end = m.stop = best_end;
      m.token = static_cast<uint32_t>(best);
      m.id = tokens_[best].id;
      return true;
    }
  }
  return false;
}

namespace {

// The code point that ends at byte `end` of valid UTF-8 (end > 0), and where it starts.
char32_t code_point_before(std::string_view s, size_t end, size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  return next_code_point(s, i);
}

bool is_word_char(char32_t c) { return c == '_' || is_alphanumeric(c); }

}  // namespace

bool AddedTokenMatcher::accept(std::string_view text, size_t emitted, Match& m) const {
  const Token& t = tokens_[m.token];
  if (t.single_word) {
    size_t at = 0;
    const bool space_before = m.start == 0 || !is_word_char(code_point_before(text, m.start, at));
    size_t i = m.end;
    const bool space_after = m.end == text.size() || !is_word_char(next_code_point(text, i));
    if (!space_before || !space_after) return false;
  }
  if (t.lstrip) {
    size_t start = m.start;
    while (start > 0) {
      size_t at = 0;
      if (!is_whitespace(code_point_before(text, start, at))) break;
      start = at;
    }
    m.start = std::max(start, emitted);
  }
  if (t.rstrip) {
    size_t i = m.stop;
    while (i < text.size()) {
      size_t next = i;
      if (!is_whitespace(next_code_point(text, next))) break;
      i = next;
    }
    m.stop = i;
  }
  return true;
}

}  // namespace sqrtdk::tok
