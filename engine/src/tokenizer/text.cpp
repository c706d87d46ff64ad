// Text helpers of the BPE tokenizers (text.h): UTF-8, GPT-2's byte alphabet, NFC through ICU's C API, and the
// pre-tokenizer regex through PCRE2 (8-bit code units, UTF + UCP, JIT when available).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/src/tokenizer/text.h"

#include <sqrtdk/error.h>

#include <pcre2.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <array>
#include <string>
#include <vector>

namespace sqrtdk::tok {

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool is_ascii(std::string_view s) {
  unsigned char any = 0;
  for (unsigned char c : s) any |= c;
  return any < 0x80;
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    const int len = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    for (int k = 1; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return false;
    if ((b == 0xE0 && p[i + 1] < 0xA0) || (b == 0xED && p[i + 1] > 0x9F) || (b == 0xF0 && p[i + 1] < 0x90) ||
        (b == 0xF4 && p[i + 1] > 0x8F))
      return false;
    i += len;
  }
  return true;
}

bool is_whitespace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

bool is_alphanumeric(char32_t c) {
  const UChar32 u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC)) return true;
  const int8_t type = u_charType(u);
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

namespace {

// GPT-2's bytes_to_unicode: the printable bytes '!'..'~', '¡'..'¬', '®'..'ÿ' stand for themselves; the other 68
// bytes, in order, for U+0100, U+0101, ...
struct ByteAlphabet {
  std::array<char32_t, 256> to_cp{};
  std::array<int16_t, 324> to_byte{};  // code points < 324 (0x100 + 68)
  ByteAlphabet() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? char32_t(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

}  // namespace

char32_t byte_to_code_point(uint8_t b) { return byte_alphabet().to_cp[b]; }

int code_point_to_byte(char32_t c) { return c < 324 ? byte_alphabet().to_byte[c] : -1; }

std::string nfc(std::string_view s) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* norm = unorm2_getNFCInstance(&status);
  auto check = [&](const char* what) {
    if (U_FAILURE(status))
      throw Error(ErrorKind::internal, std::string("tokenizer: NFC normalization (ICU ") + what +
                                           "): " + u_errorName(status));
  };
  check("unorm2_getNFCInstance");
  // UTF-8 -> UTF-16 (at most one unit per byte), normalize (NFC may grow the text: retry with the size ICU asks),
  // UTF-16 -> UTF-8 (at most three bytes per unit).
  std::u16string src(s.size(), u'\0');
  int32_t n_src = 0;
  u_strFromUTF8(reinterpret_cast<UChar*>(src.data()), static_cast<int32_t>(src.size()), &n_src, s.data(),
                static_cast<int32_t>(s.size()), &status);
  check("u_strFromUTF8");
  std::u16string dst(static_cast<size_t>(n_src) + 16, u'\0');
  int32_t n_dst = unorm2_normalize(norm, reinterpret_cast<const UChar*>(src.data()), n_src,
                                   reinterpret_cast<UChar*>(dst.data()), static_cast<int32_t>(dst.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    status = U_ZERO_ERROR;
    dst.assign(static_cast<size_t>(n_dst), u'\0');
    n_dst = unorm2_normalize(norm, reinterpret_cast<const UChar*>(src.data()), n_src,
                             reinterpret_cast<UChar*>(dst.data()), static_cast<int32_t>(dst.size()), &status);
  }
  check("unorm2_normalize");
  std::string out(static_cast<size_t>(n_dst) * 3, '\0');
  int32_t n_out = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &n_out, reinterpret_cast<const UChar*>(dst.data()),
              n_dst, &status);
  check("u_strToUTF8");
  out.resize(static_cast<size_t>(n_out));
  return out;
}

// ---- SplitRegex ----

SplitRegex::SplitRegex(const std::string& pattern, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw Error(ErrorKind::bad_input, where + ": the pre-tokenizer regex does not compile (PCRE2: " +
                                          reinterpret_cast<const char*>(message) + " at offset " +
                                          std::to_string(offset) + ")");
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

SplitRegex::~SplitRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

SplitRegex::MatchData::MatchData(const SplitRegex& re)
    : data(pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(re.code_), nullptr)) {
  if (!data) throw Error(ErrorKind::out_of_memory, "tokenizer: PCRE2 match data");
}

SplitRegex::MatchData::~MatchData() { pcre2_match_data_free(static_cast<pcre2_match_data*>(data)); }

bool SplitRegex::find(void* match_data, std::string_view s, size_t from, size_t& start, size_t& end) const {
  auto* code = static_cast<pcre2_code*>(code_);
  auto* md = static_cast<pcre2_match_data*>(match_data);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  int rc = jit_ ? pcre2_jit_match(code, subject, s.size(), from, PCRE2_NO_UTF_CHECK, md, nullptr)
                : pcre2_match(code, subject, s.size(), from, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the JIT's 32 KiB stack: the interpreter keeps its frames on the heap
    rc = pcre2_match(code, subject, s.size(), from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof message);
    throw Error(ErrorKind::internal,
                std::string("tokenizer: the pre-tokenizer regex failed (PCRE2: ") +
                    reinterpret_cast<const char*>(message) + ")");
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  start = ov[0];
  end = ov[1];
  return true;
}

}  // namespace sqrtdk::tok
