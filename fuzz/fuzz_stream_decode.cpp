// Any id sequence through GPT-2's streaming decoder, as `forge generate` prints tokens: ids
// are the input's little-endian u16 pairs, so some lie past the vocabulary (50257) and must
// be refused without changing the decoder's state. After every push, the text out so far
// must be a prefix of decode() of the accepted ids that ends on a character boundary, and
// what is held back must be the start of one valid UTF-8 character (at most 3 bytes); at the
// end, the pieces and the flush must add up to decode().
#include "forge/tokenizer.h"
#include "harness_util.h"
#include "tokenizer_checks.h"

using namespace forge;

namespace {

/// Length of the valid UTF-8 character (RFC 3629: no overlong forms, no surrogates, at most
/// U+10FFFF) that starts at s[at]; `complete` false when s ends inside one that more bytes
/// could complete. 0 for a byte that starts none.
size_t char_length(std::string_view s, size_t at, bool& complete) {
  const auto lead = static_cast<uint8_t>(s[at]);
  complete = true;
  if (lead < 0x80) return 1;
  const size_t length = lead >= 0xC2 && lead <= 0xDF   ? 2
                        : lead >= 0xE0 && lead <= 0xEF ? 3
                        : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                       : 0;
  for (size_t k = 1; k < length; ++k) {
    if (at + k == s.size()) {
      complete = false;
      return length;
    }
    const auto b = static_cast<uint8_t>(s[at + k]);
    const uint8_t lo = k > 1 ? 0x80 : lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
    const uint8_t hi = k > 1 ? 0xBF : lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
    if (b < lo || b > hi) return 0;
  }
  return length;
}

/// `full` is decode() of the accepted ids, `out` the streamed text so far, and `from` the
/// end of what the last check passed (a character boundary): walks only the new part.
void check_split(std::string_view full, std::string_view out, size_t from) {
  if (full.substr(0, out.size()) != out) fuzz::fail("the streamed text is not decode()'s prefix");
  size_t at = from;  // walk the characters (an invalid byte counts as one) up to the cut
  while (at < out.size()) {
    bool complete = true;
    const size_t length = char_length(full, at, complete);
    at += length == 0 || !complete ? 1 : length;
  }
  if (at != out.size()) fuzz::fail("the streamed text ends inside a character");
  const std::string_view held = full.substr(out.size());
  if (held.empty()) return;
  bool complete = true;
  char_length(held, 0, complete);
  if (complete) fuzz::fail("the decoder holds back bytes that are not an incomplete character");
}

}  // namespace

// Fixtures are made before the first input, outside its time limit.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::gpt2_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tokenizer = fuzz::gpt2_tokenizer();
  StreamDecoder stream(tokenizer);
  std::vector<uint32_t> accepted;
  std::string pieces, full;  // full: the accepted ids' bytes, as decode() gives them
  for (size_t i = 0; i + 1 < size; i += 2) {
    const uint32_t id = data[i] | (uint32_t{data[i + 1]} << 8);
    const size_t checked = pieces.size();
    try {
      pieces += stream.push(id);
      accepted.push_back(id);
      full += tokenizer.token_bytes(id);
    } catch (const Error& e) {
      if (id < tokenizer.vocab_size())
        fuzz::fail(std::string("an id in range was refused: ") + e.what());
    }
    check_split(full, pieces, checked);
  }
  if (full != tokenizer.decode(accepted)) fuzz::fail("decode() != the tokens' bytes joined");
  pieces += stream.flush();
  if (pieces != tokenizer.decode(accepted)) fuzz::fail("the streamed pieces != decode()");
  return 0;
}
