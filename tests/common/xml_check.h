// A small well-formedness check for the SVG the engine writes: every tag closed in order, attributes quoted.
// Not a full XML parser; enough to catch unbalanced or truncated output.
#pragma once

#include <string>
#include <vector>

namespace sqrtdk::test {

inline bool xml_well_formed(const std::string& s, std::string* why = nullptr) {
  std::vector<std::string> stack;
  size_t i = 0;
  auto fail = [&](const std::string& w) {
    if (why) *why = w + " at byte " + std::to_string(i);
    return false;
  };
  while ((i = s.find('<', i)) != std::string::npos) {
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return fail("unterminated tag");
    std::string tag = s.substr(i + 1, end - i - 1);
    size_t quotes = 0;
    for (char ch : tag) quotes += ch == '"';
    if (quotes % 2) return fail("unbalanced quotes");
    if (tag.empty()) return fail("empty tag");
    if (tag[0] == '?' || tag[0] == '!') {
    } else if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) return fail("mismatched </" + tag.substr(1) + ">");
      stack.pop_back();
    } else if (tag.back() != '/') {
      stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
    }
    i = end + 1;
  }
  if (!stack.empty()) return fail("unclosed <" + stack.back() + ">");
  return true;
}

}  // namespace sqrtdk::test
