// Text helpers of the BPE tokenizers: UTF-8 stepping, GPT-2's byte alphabet, NFC (ICU), the pre-tokenizer regex
// (PCRE2, JIT) and the Unicode character classes Hugging Face's added-token rules use (Rust's char::is_whitespace
// and char::is_alphanumeric). Everything here is immutable after construction and safe to share across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sqrtdk::tok {

// The code point at s[i] (s is valid UTF-8); advances i past it.
inline char32_t next_code_point(std::string_view s, size_t& i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char b = p[i];
  if (b < 0x80) {
    ++i;
    return b;
  }
  if (b < 0xE0) {
    const char32_t c = (char32_t(b & 0x1F) << 6) | (p[i + 1] & 0x3F);
    i += 2;
    return c;
  }
  if (b < 0xF0) {
    const char32_t c = (char32_t(b & 0x0F) << 12) | (char32_t(p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
    i += 3;
    return c;
  }
  const char32_t c = (char32_t(b & 0x07) << 18) | (char32_t(p[i + 1] & 0x3F) << 12) |
                     (char32_t(p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F);
  i += 4;
  return c;
}

// Length in bytes of the UTF-8 character led by byte `b` of valid UTF-8.
inline size_t utf8_char_length(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

void append_utf8(std::string& out, char32_t c);
bool is_valid_utf8(std::string_view s);
bool is_ascii(std::string_view s);

// Rust's char::is_whitespace (Unicode White_Space) and char::is_alphanumeric (Alphabetic or Nd/Nl/No).
bool is_whitespace(char32_t c);
bool is_alphanumeric(char32_t c);

// GPT-2's bytes_to_unicode: byte -> the code point standing for it in byte-level vocabularies ('Ġ' for ' ').
char32_t byte_to_code_point(uint8_t b);
// The inverse: the byte a code point stands for, or -1 when it stands for none.
int code_point_to_byte(char32_t c);

// Unicode NFC of valid UTF-8 (ICU's unorm2). Throws sqrtdk::Error if ICU fails.
std::string nfc(std::string_view s);

// A compiled pre-tokenizer regex (PCRE2 with UTF and UCP, JIT-compiled when the platform has a JIT). split()
// calls fn(piece) for every match and for every stretch between matches (Hugging Face's Split with behavior
// "Isolated"), in order; the input must be valid UTF-8.
class SplitRegex {
 public:
  // Throws sqrtdk::Error "<where>: ..." naming the PCRE2 error and its offset.
  SplitRegex(const std::string& pattern, const std::string& where);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  template <class Fn>
  void split(std::string_view s, Fn&& fn) const {
    MatchData md(*this);
    size_t emitted = 0, search = 0, start = 0, end = 0;
    while (search < s.size() && find(md.data, s, search, start, end)) {
      if (end == start) {  // an empty match splits nothing: look again one character on
        search = start + utf8_char_length(static_cast<unsigned char>(s[start]));
        continue;
      }
      if (start > emitted) fn(s.substr(emitted, start - emitted));
      fn(s.substr(start, end - start));
      emitted = search = end;
    }
    if (emitted < s.size()) fn(s.substr(emitted));
  }

 private:
  struct MatchData {  // pcre2_match_data_8, one per split() call (the compiled code is shared, this is not)
    explicit MatchData(const SplitRegex& re);
    ~MatchData();
    void* data;
  };
  // The first match at or after `from`: [start, end). False when there is none.
  bool find(void* match_data, std::string_view s, size_t from, size_t& start, size_t& end) const;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

}  // namespace sqrtdk::tok
