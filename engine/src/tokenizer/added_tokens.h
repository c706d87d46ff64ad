// Added tokens (BOS/EOS, chat markers, <think>) found in text as Hugging Face's AddedVocabulary finds them: the
// leftmost, then longest, match of any token's content (its Aho-Corasick is built with MatchKind::LeftmostLongest),
// non-overlapping, scanning on from each match's end; then per token single_word (skip a match inside a word),
// lstrip (swallow the whitespace on its left, not past the previous split) and rstrip (on its right). Immutable
// after construction.
#pragma once

#include <sqrtdk/tokenizer.h>

#include <cstdint>
#include <string_view>
#include <vector>

namespace sqrtdk::tok {

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // The tokens of `added` whose `normalized` flag equals `normalized` (Hugging Face matches the others in the raw
  // text, these in the normalized text).
  AddedTokenMatcher(const std::vector<AddedToken>& added, bool normalized);

  bool empty() const { return tokens_.empty(); }

  // Calls fn(piece, id) for each stretch of `text` in order: id is the added token's id, or kNoToken for text
  // between tokens (never empty).
  template <class Fn>
  void split(std::string_view text, Fn&& fn) const {
    if (tokens_.empty()) {
      if (!text.empty()) fn(text, kNoToken);
      return;
    }
    size_t emitted = 0, search = 0;
    Match m;
    while (find(text, search, m)) {
      search = m.end;  // the automaton goes on from the match, whatever the strips below do
      if (!accept(text, emitted, m) || m.stop <= emitted) continue;
      if (m.start > emitted) fn(text.substr(emitted, m.start - emitted), kNoToken);
      fn(text.substr(m.start, m.stop - m.start), m.id);
      emitted = m.stop;
    }
    if (emitted < text.size()) fn(text.substr(emitted), kNoToken);
  }

 private:
  struct Token {
    uint32_t id;
    bool lstrip, rstrip, single_word;
  };
  struct Match {
    size_t start, end;  // the content's bytes
    size_t stop;        // end after rstrip
    uint32_t token;     // index into tokens_
    uint32_t id;
  };
  struct Node {
    std::vector<std::pair<unsigned char, uint32_t>> children;  // sorted by byte
    int32_t token = -1;                                        // index into tokens_ when a content ends here
  };
  // The leftmost-longest match starting at or after `from`.
  bool find(std::string_view text, size_t from, Match& m) const;
  // single_word, lstrip, rstrip: false when the match is skipped; else adjusts m.start and m.stop.
  bool accept(std::string_view text, size_t emitted, Match& m) const;

  std::vector<Token> tokens_;
  std::vector<Node> nodes_;  // a trie over the contents' bytes; nodes_[0] is the root
  bool first_byte_[256] = {};
};

}  // namespace sqrtdk::tok
