// Streaming decode: emit text as tokens arrive without ever cutting a UTF-8 character in two.
#include "text/tokenizer_impl.h"

namespace forge {
namespace {

// Length of the incomplete character at the end of `s` that more bytes could still complete
// (0 if `s` ends on a character boundary or in bytes no continuation can make valid UTF-8).
size_t incomplete_tail(std::string_view s) {
  // A character is at most 4 bytes, so only the last 3 bytes can be an unfinished one.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto lead = static_cast<uint8_t>(s[n - back]);
    if ((lead & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t need;                          // the character's full length
    if (lead >= 0xC2 && lead <= 0xDF) {
      need = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      need = 3;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      need = 4;
    } else {
      return 0;  // ASCII or a byte that never starts a character
    }
    if (back >= need) return 0;  // complete (or over-long garbage): nothing to wait for
    if (back >= 2) {
      // The second byte's range depends on the lead (no overlongs, surrogates or > U+10FFFF).
      const auto second = static_cast<uint8_t>(s[n - back + 1]);
      const uint8_t lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
      const uint8_t hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
      if (second < lo || second > hi) return 0;
    }
    return back;
  }
  return 0;
}

}  // namespace

std::string StreamDecoder::push(uint32_t id) {
  pending_ += tokenizer_.token_bytes(id);  // throws for a bad id before changing anything
  const size_t keep = incomplete_tail(pending_);
  std::string ready = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return ready;
}

std::string StreamDecoder::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace forge
