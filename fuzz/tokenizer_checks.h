// GPT-2's tokenizer for the text harnesses, and what the tokenizer-file harnesses do with a
// tokenizer that loaded: encode a fixed text that
// touches every pre-tokenizer class, decode it back (the bytes must come back exactly), and
// decode every id through the streaming decoder (its pieces must add up to decode()).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "forge/tokenizer.h"
#include "harness_util.h"

namespace forge::fuzz {

/// GPT-2's tokenizer: $FORGE_FUZZ_TOKENIZER, else data/gpt2-tokenizer of the source tree
/// (scripts/fetch_tokenizer.sh writes it). Aborts, naming the script, when neither loads.
inline const Tokenizer& gpt2_tokenizer() {
  static const Tokenizer tokenizer = [] {
    const char* env = std::getenv("FORGE_FUZZ_TOKENIZER");
    const std::string dir =
        env && *env ? std::string(env) : std::string(FORGE_SOURCE_DIR) + "/data/gpt2-tokenizer";
    try {
      return Tokenizer::load(dir);
    } catch (const std::exception& e) {
      fail(std::string("GPT-2's tokenizer (run scripts/fetch_tokenizer.sh): ") + e.what());
    }
  }();
  return tokenizer;
}

inline void check_loaded_tokenizer(const Tokenizer& tokenizer) {
  static const std::string text =
      "Hello, world! It's 2026 <|endoftext|> \xc3\xbcn\xc3\xaf"
      "c\xc3\xb6"
      "d\xc3\xa9 "
      "\xf0\x9f\x98\x80\n\n  x  ";
  expect_only_forge_errors([&] {
    const std::vector<uint32_t> ids = tokenizer.encode(text);
    if (tokenizer.decode(ids) != text) fail("decode(encode(text)) != text");
  });
  std::vector<uint32_t> all(std::min<uint32_t>(tokenizer.vocab_size(), 4096));
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::string whole = tokenizer.decode(all);
  StreamDecoder stream(tokenizer);
  std::string pieces;
  for (uint32_t id : all) pieces += stream.push(id);
  pieces += stream.flush();
  if (pieces != whole) fail("the streaming decoder's pieces != decode()");
}

}  // namespace forge::fuzz
