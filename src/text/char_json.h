// The JSON form of a character-level vocabulary, shared by tokenizer_char.json (save/load)
// and the token cache's metadata (src/data/), which must restore the vocab it was made with.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "forge/tokenizer.h"

namespace forge::text {

/// The symbols of a char-level tokenizer in id order: a JSON string for a valid UTF-8
/// character, an integer 128..255 for a lone byte that is not valid UTF-8.
nlohmann::json char_symbols_to_json(const Tokenizer& tokenizer);
/// The inverse. Error(Tokenizer) "tokenizer: <where>: ..." for anything else.
std::vector<std::string> char_symbols_from_json(const nlohmann::json& symbols,
                                                const std::string& where);

}  // namespace forge::text
