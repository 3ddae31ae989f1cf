// GPT-2's pre-tokenization regex, compiled once with PCRE2.
//
// The pattern is GPT-2's
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \s spelled out as the Unicode White_Space set. HF's tokenizers (Oniguruma) and the
// Python `regex` module both use White_Space for \s, whereas PCRE2's UCP \s is "\p{Zs} or \h
// or \v", which also holds U+180E MONGOLIAN VOWEL SEPARATOR (no longer a space since Unicode
// 6.3); the explicit class keeps U+180E a symbol, as HF does. Contractions are case-sensitive
// ("'S" is not one), exactly as in GPT-2.
//
// PCRE2_MATCH_INVALID_UTF lets the matcher run over text that is not valid UTF-8: invalid
// sequences match nothing, so they fall in the gaps between matches, and the caller turns
// each of their bytes into its byte token.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/tokenizer_impl.h"

namespace forge::text {
namespace {

#define FORGE_WS                                                               \
  "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}" \
  "\\x{202F}\\x{205F}\\x{3000}"
constexpr const char kPattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" FORGE_WS
                                  "\\p{L}\\p{N}]+"
                                  "|[" FORGE_WS "]+(?![^" FORGE_WS "])|[" FORGE_WS "]+";
#undef FORGE_WS

pcre2_code* code_of(void* p) { return static_cast<pcre2_code*>(p); }

std::string pcre2_message(int rc) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(rc, buf, sizeof buf) < 0) return "error " + std::to_string(rc);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

struct Pretokenizer::Matcher {
  pcre2_match_data* data = nullptr;
};

Pretokenizer::Pretokenizer() {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, nullptr);
  if (!code)
    fail("regex", "cannot compile the GPT-2 pattern at offset " + std::to_string(err_offset) +
                      ": " + pcre2_message(err));
  code_ = code;
  // JIT is several times faster; without it (a PCRE2 built without JIT, or W^X memory
  // policies) the interpreter gives the same matches.
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Pretokenizer::~Pretokenizer() { pcre2_code_free(code_of(code_)); }

Pretokenizer::Matcher* Pretokenizer::new_matcher() const {
  auto m = std::make_unique<Matcher>();
  m->data = pcre2_match_data_create_from_pattern(code_of(code_), nullptr);
  if (!m->data) throw Error(ErrorKind::Tokenizer, "tokenizer: encode: out of memory");
  return m.release();
}

void Pretokenizer::free_matcher(Matcher* m) {
  if (!m) return;
  pcre2_match_data_free(m->data);
  std::unique_ptr<Matcher> owned(m);
}

bool Pretokenizer::next_match(Matcher& m, std::string_view text, size_t offset, size_t& begin,
                              size_t& end) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const int rc =
      jit_ ? pcre2_jit_match(code_of(code_), subject, text.size(), offset, 0, m.data, nullptr)
           : pcre2_match(code_of(code_), subject, text.size(), offset, 0, m.data, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) throw Error(ErrorKind::Tokenizer, "tokenizer: encode: regex: " + pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.data);
  begin = ov[0];
  end = ov[1];
  // Every alternative consumes at least one character; guard anyway so a surprise can never
  // turn into an endless loop.
  if (end <= begin || begin < offset)
    throw Error(ErrorKind::Tokenizer, "tokenizer: encode: regex returned an empty match");
  return true;
}

}  // namespace forge::text
