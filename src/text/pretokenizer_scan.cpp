// The pattern's alternatives, in the order the regex tries them at a position p:
//   1. 's 't 're 've 'm 'll 'd
//   2-4. an optional U+0020 then a run of letters, of numbers, or of other characters (the
//        space is taken only when the run after it is non-empty);
//   5. [WS]+(?![^WS]): a space run, given back by one character when a non-space follows;
//   6. [WS]+: the whole run (a single space before a non-space).
// Every valid character starts some alternative, so a match begins at the first valid
// character at or after the offset.
#include "text/pretokenizer_scan.h"

#include <algorithm>
#include <iterator>

#include "text/tokenizer_impl.h"

namespace forge::text {
namespace {

struct CodeRange {
  uint32_t first, last;
};
#include "text/unicode_classes.inc"

template <size_t N>
bool in_ranges(const CodeRange (&ranges)[N], uint32_t cp) {
  const auto it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                                   [](uint32_t c, const CodeRange& r) { return c < r.first; });
  return it != std::begin(ranges) && cp <= std::prev(it)->last;
}

bool is_space(uint32_t cp) {  // Unicode White_Space, as pretokenizer.cpp spells it
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

struct Char {
  size_t len = 0;  // 0: an invalid byte
  CharClass cls = CharClass::Other;
};

Char char_at(std::string_view text, size_t i) {
  const size_t len = utf8_char_length(text.substr(i));
  if (len == 0) return {};
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(text[i + k])); };
  uint32_t cp = 0;
  switch (len) {
    case 1: cp = b(0); break;
    case 2: cp = (b(0) & 0x1F) << 6 | (b(1) & 0x3F); break;
    case 3: cp = (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F); break;
    default: cp = (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
  }
  return {len, char_class(cp)};
}

// The end of the run of characters of class `cls` that starts at i (i itself included).
size_t run_end(std::string_view text, size_t i, CharClass cls) {
  while (i < text.size()) {
    const Char c = char_at(text, i);
    if (c.len == 0 || c.cls != cls) break;
    i += c.len;
  }
  return i;
}

size_t contraction_length(std::string_view rest) {  // rest starts with '
  for (std::string_view c : {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"})
    if (rest.substr(0, c.size()) == c) return c.size();
  return 0;
}

// The match starting at p, if one does (p is a valid character), as its end.
bool match_at(std::string_view text, size_t p, size_t& end) {
  if (text[p] == '\'') {
    if (const size_t n = contraction_length(text.substr(p))) {
      end = p + n;
      return true;
    }
  }
  const Char c = char_at(text, p);
  if (c.len == 0) return false;
  if (c.cls != CharClass::Space) {
    end = run_end(text, p, c.cls);
    return true;
  }
  if (text[p] == ' ' && p + 1 < text.size()) {
    const Char next = char_at(text, p + 1);
    if (next.len != 0 && next.cls != CharClass::Space) {
      end = run_end(text, p + 1, next.cls);
      return true;
    }
  }
  // A run of spaces; what follows it is the end of the text, an invalid byte (which the
  // lookahead's [^WS] cannot match either) or a non-space character.
  size_t q = p, last = p;
  while (q < text.size()) {
    const Char s = char_at(text, q);
    if (s.len == 0 || s.cls != CharClass::Space) break;
    last = q;
    q += s.len;
  }
  const bool non_space_follows = q < text.size() && char_at(text, q).len != 0;
  end = non_space_follows && last > p ? last : q;
  return true;
}

}  // namespace

CharClass char_class(uint32_t cp) {
  if (is_space(cp)) return CharClass::Space;
  if (in_ranges(kLetterRanges, cp)) return CharClass::Letter;
  if (in_ranges(kNumberRanges, cp)) return CharClass::Number;
  return CharClass::Other;
}

bool scan_gpt2_piece(std::string_view text, size_t offset, size_t& begin, size_t& end) {
  for (size_t p = offset; p < text.size(); ++p) {
    if (match_at(text, p, end)) {
      begin = p;
      return true;
    }
  }
  return false;
}

}  // namespace forge::text
