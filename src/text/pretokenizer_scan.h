// GPT-2's pre-tokenization regex as a hand-written scanner, for builds without PCRE2 (the
// wasm build: Debian packages no wasm PCRE2). It gives exactly the native regex's pieces
// (src/text/pretokenizer.cpp states the pattern), which tests/test_pretokenizer_scan.cpp
// checks against PCRE2 on every code point and on random text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace forge::text {

/// GPT-2's character classes: \p{L}, \p{N} (as PCRE2 classifies them:
/// src/text/unicode_classes.inc), the Unicode White_Space set the pattern spells out, and
/// everything else.
enum class CharClass { Letter, Number, Space, Other };
CharClass char_class(uint32_t code_point);

/// The first regex match at or after `offset`: [begin, end), false when none remains. Like
/// PCRE2 with PCRE2_MATCH_INVALID_UTF, matches hold only valid UTF-8: invalid bytes lie
/// between them.
bool scan_gpt2_piece(std::string_view text, size_t offset, size_t& begin, size_t& end);

}  // namespace forge::text
