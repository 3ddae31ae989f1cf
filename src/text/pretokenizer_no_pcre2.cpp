// The pre-tokenizer of builds without PCRE2 (the wasm build): the same pieces as
// pretokenizer.cpp's regex, from the hand-written scanner of pretokenizer_scan.cpp.
#include <memory>

#include "text/pretokenizer_scan.h"
#include "text/tokenizer_impl.h"

namespace forge::text {

struct Pretokenizer::Matcher {};

Pretokenizer::Pretokenizer() = default;
Pretokenizer::~Pretokenizer() = default;

Pretokenizer::Matcher* Pretokenizer::new_matcher() const {
  return std::make_unique<Matcher>().release();
}

void Pretokenizer::free_matcher(Matcher* m) { std::unique_ptr<Matcher> owned(m); }

bool Pretokenizer::next_match(Matcher&, std::string_view text, size_t offset, size_t& begin,
                              size_t& end) const {
  return scan_gpt2_piece(text, offset, begin, end);
}

}  // namespace forge::text
