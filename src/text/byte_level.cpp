// GPT-2's byte ↔ unicode mapping. Vocab strings are not raw bytes: each byte is written as a
// printable code point so that the vocab files are valid UTF-8 text without spaces or
// control characters ('Ġ' = U+0120 stands for the space byte 0x20, for instance).
#include <array>

#include "text/tokenizer_impl.h"

namespace forge::text {
namespace {

// Bytes that are printable Latin-1 stand for themselves: '!'..'~', '¡'..'¬', '®'..'ÿ'.
constexpr bool printable(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 0x144> to_byte{};  // code points 0..0x143 → byte, or -1
  Tables() {
    to_byte.fill(-1);
    // The other 68 bytes take U+0100, U+0101, ... in byte order.
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

void append_utf8(std::string& out, uint32_t cp) {
  // Only code points < 0x800 occur here (at most U+0143).
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return tables().to_cp[b]; }

std::optional<std::string> byte_level_decode(std::string_view token) {
  const Tables& t = tables();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const auto c0 = static_cast<uint8_t>(token[i]);
    uint32_t cp;
    if (c0 < 0x80) {
      cp = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < token.size() &&
               (static_cast<uint8_t>(token[i + 1]) & 0xC0) == 0x80) {
      cp = (uint32_t{c0 & 0x1Fu} << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3Fu);
      if (cp < 0x80) return std::nullopt;  // overlong encoding
      i += 2;
    } else {
      return std::nullopt;  // 3- and 4-byte characters stand for no byte
    }
    if (cp >= t.to_byte.size() || t.to_byte[cp] < 0) return std::nullopt;
    out += static_cast<char>(t.to_byte[cp]);
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, byte_to_codepoint(static_cast<uint8_t>(c)));
  return out;
}

}  // namespace forge::text
