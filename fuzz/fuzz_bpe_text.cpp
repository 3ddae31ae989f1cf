// Any bytes through GPT-2's byte-level BPE encoder, as `forge tokenize` and training data
// take text: encode and encode_ordinary must give ids that decode to exactly the input, the
// streaming decoder's pieces must add up to it, and the pre-tokenizer's two implementations
// (PCRE2, and the scanner the wasm build uses) must cut it into the same pieces.
#include "forge/tokenizer.h"
#include "harness_util.h"
#include "text/pretokenizer_scan.h"
#include "text/tokenizer_impl.h"
#include "tokenizer_checks.h"

using namespace forge;

namespace {

void check_round_trip(const Tokenizer& tokenizer, std::string_view text,
                      const std::vector<uint32_t>& ids, const char* how) {
  if (tokenizer.decode(ids) != text) fuzz::fail(std::string("decode(") + how + "(text)) != text");
  StreamDecoder stream(tokenizer);
  std::string pieces;
  for (uint32_t id : ids) pieces += stream.push(id);
  pieces += stream.flush();
  if (pieces != text) fuzz::fail(std::string("streamed decode of ") + how + "(text) != text");
}

void check_pretokenizers_agree(std::string_view text) {
  static const text::Pretokenizer pcre2;
  size_t offset = 0;
  pcre2.split(text, [&](std::string_view piece, bool valid) {
    if (!valid) return;  // bytes that are not UTF-8: the scanner skips them too
    const size_t at = static_cast<size_t>(piece.data() - text.data());
    size_t begin = 0, end = 0;
    if (!text::scan_gpt2_piece(text, offset, begin, end) || begin != at || end != at + piece.size())
      fuzz::fail("the scanner's piece differs from PCRE2's at byte " + std::to_string(at));
    offset = end;
  });
  size_t begin = 0, end = 0;
  if (text::scan_gpt2_piece(text, offset, begin, end))
    fuzz::fail("the scanner found a piece past PCRE2's last, at byte " + std::to_string(begin));
}

}  // namespace

// Fixtures are made before the first input, outside its time limit.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::gpt2_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tokenizer = fuzz::gpt2_tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_only_forge_errors([&] {
    check_round_trip(tokenizer, text, tokenizer.encode(text), "encode");
    check_round_trip(tokenizer, text, tokenizer.encode_ordinary(text), "encode_ordinary");
  });
  check_pretokenizers_agree(text);
  return 0;
}
