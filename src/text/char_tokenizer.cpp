// The character-level tokenizer: a vocabulary of the distinct characters of a text (code
// points of valid UTF-8, lone bytes of invalid UTF-8), sorted by their bytes.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "text/char_json.h"
#include "text/tokenizer_impl.h"

namespace forge {
namespace text {

size_t utf8_char_length(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const auto cont = [&](size_t i, uint8_t lo = 0x80, uint8_t hi = 0xBF) {
    return i < s.size() && b(i) >= lo && b(i) <= hi;
  };
  const uint8_t lead = b(0);
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return cont(1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    // E0 needs A0.. (no overlong forms); ED stops at 9F (no UTF-16 surrogates).
    const uint8_t lo = lead == 0xE0 ? 0xA0 : 0x80, hi = lead == 0xED ? 0x9F : 0xBF;
    return cont(1, lo, hi) && cont(2) ? 3 : 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    // F0 needs 90.. (no overlong forms); F4 stops at 8F (nothing above U+10FFFF).
    const uint8_t lo = lead == 0xF0 ? 0x90 : 0x80, hi = lead == 0xF4 ? 0x8F : 0xBF;
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;  // a continuation byte, C0/C1, or F5..FF
}

}  // namespace text

namespace {

// A multi-byte character's bytes packed into one key (at most 4 bytes, so it fits).
uint32_t pack(std::string_view sym) {
  uint32_t key = 0;
  std::memcpy(&key, sym.data(), sym.size());
  return key;
}

// "'é' (U+00E9)" or "byte 0xFF", for error messages.
std::string describe(std::string_view sym) {
  char buf[32];
  if (text::utf8_char_length(sym) == 0) {
    std::snprintf(buf, sizeof buf, "byte 0x%02X", static_cast<uint8_t>(sym[0]));
    return buf;
  }
  // Decode the code point for the U+ label.
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(sym[i])); };
  uint32_t cp = 0;
  switch (sym.size()) {
    case 1: cp = b(0); break;
    case 2: cp = (b(0) & 0x1F) << 6 | (b(1) & 0x3F); break;
    case 3: cp = (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F); break;
    default: cp = (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
  }
  std::snprintf(buf, sizeof buf, " (U+%04X)", cp);
  const bool printable = cp >= 0x20 && cp != 0x7F && !(cp >= 0x80 && cp < 0xA0);
  return (printable ? "'" + std::string(sym) + "'" : std::string("character")) + buf;
}

}  // namespace

std::shared_ptr<const Tokenizer::Impl> Tokenizer::Impl::build_char(std::vector<std::string> symbols,
                                                                   const std::string& where) {
  if (symbols.empty()) text::fail(where, "the character vocabulary is empty");
  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->kind = Tokenizer::Kind::Char;
  impl->char_byte_ids.fill(-1);
  for (size_t id = 0; id < symbols.size(); ++id) {
    const std::string& sym = symbols[id];
    const std::string what = "symbol " + std::to_string(id);
    if (sym.empty()) text::fail(where, what + " is empty");
    if (text::char_symbol_at(sym).size() != sym.size())
      text::fail(where, what + " is not one character (" + std::to_string(sym.size()) +
                            " bytes that are not a single UTF-8 character)");
    const auto id32 = static_cast<uint32_t>(id);
    bool fresh;
    if (sym.size() == 1) {
      int32_t& slot = impl->char_byte_ids[static_cast<uint8_t>(sym[0])];
      fresh = slot < 0;
      slot = static_cast<int32_t>(id32);
    } else {
      fresh = impl->char_ids.emplace(pack(sym), id32).second;
    }
    if (!fresh) text::fail(where, what + " (" + describe(sym) + ") appears twice");
  }
  impl->token_bytes = std::move(symbols);
  return impl;
}

void Tokenizer::Impl::char_encode(std::string_view text, std::vector<uint32_t>& out) const {
  for (size_t pos = 0; pos < text.size();) {
    const auto byte = static_cast<uint8_t>(text[pos]);
    int64_t id = -1;
    size_t len = 1;
    if (byte < 0x80) {
      id = char_byte_ids[byte];
    } else {
      len = std::max<size_t>(1, text::utf8_char_length(text.substr(pos)));
      if (len == 1) {
        id = char_byte_ids[byte];
      } else if (auto it = char_ids.find(pack(text.substr(pos, len))); it != char_ids.end()) {
        id = it->second;
      }
    }
    if (id < 0)
      throw Error(ErrorKind::Tokenizer, "tokenizer: encode: " + describe(text.substr(pos, len)) +
                                            " at byte " + std::to_string(pos) +
                                            " is not in the character-level vocabulary");
    out.push_back(static_cast<uint32_t>(id));
    pos += len;
  }
}

Tokenizer Tokenizer::build_char(std::string_view text) {
  if (text.empty()) text::fail("build_char", "the text is empty (no characters to build from)");
  // Single bytes in a table, multi-byte characters in a set: the set stays tiny (the
  // distinct characters), so the scan is one pass at a few hundred MB/s.
  std::array<bool, 256> seen{};
  std::unordered_set<std::string_view> multi;
  for (size_t pos = 0; pos < text.size();) {
    const std::string_view sym = text::char_symbol_at(text.substr(pos));
    if (sym.size() == 1)
      seen[static_cast<uint8_t>(sym[0])] = true;
    else
      multi.insert(sym);
    pos += sym.size();
  }
  std::vector<std::string> symbols;
  for (int b = 0; b < 256; ++b)
    if (seen[static_cast<size_t>(b)]) symbols.emplace_back(1, static_cast<char>(b));
  for (std::string_view s : multi) symbols.emplace_back(s);
  // Sorted by bytes (std::string compares as unsigned char).
  std::sort(symbols.begin(), symbols.end());
  return Tokenizer(Impl::build_char(std::move(symbols), "build_char"));
}

Tokenizer Tokenizer::from_char_symbols(const std::vector<std::string>& symbols) {
  return Tokenizer(Impl::build_char(symbols, "from_char_symbols"));
}

Tokenizer::Kind Tokenizer::kind() const { return impl().kind; }

namespace text {

nlohmann::json char_symbols_to_json(const Tokenizer& tokenizer) {
  nlohmann::json out = nlohmann::json::array();
  for (uint32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string sym = tokenizer.token_bytes(id);
    // A lone invalid byte cannot be a JSON string (JSON text is UTF-8), so it is its value.
    if (utf8_char_length(sym) == 0)
      out.push_back(static_cast<uint8_t>(sym[0]));
    else
      out.push_back(sym);
  }
  return out;
}

std::vector<std::string> char_symbols_from_json(const nlohmann::json& symbols,
                                                const std::string& where) {
  if (!symbols.is_array()) fail(where, "\"symbols\" must be a list");
  std::vector<std::string> out;
  out.reserve(symbols.size());
  for (const nlohmann::json& s : symbols) {
    const std::string what = "symbols[" + std::to_string(out.size()) + "]";
    if (s.is_string()) {
      std::string sym = s.get<std::string>();
      if (sym.empty() || utf8_char_length(sym) != sym.size())
        fail(where, what + " must be one UTF-8 character, got " + s.dump().substr(0, 40));
      out.push_back(std::move(sym));
    } else if (s.is_number_integer() && s.get<int64_t>() >= 0x80 && s.get<int64_t>() <= 0xFF) {
      // A lone byte >= 0x80 is never a valid character, so this cannot alias a string symbol.
      out.emplace_back(1, static_cast<char>(s.get<int64_t>()));
    } else {
      fail(where, what + " must be a one-character string or a byte 128..255, got " +
                      s.dump().substr(0, 40));
    }
  }
  return out;
}

}  // namespace text

}  // namespace forge
