// The JSON bodies forge serve answers with, in the shapes of OpenAI's API: completions and
// chat completions, whole or as server-sent-event chunks, with usage and log-probabilities.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "forge/tokenizer.h"
#include "serve/engine.h"
#include "serve/request.h"

namespace forge::serve {

/// What every response of one request shares.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::Completions;
  std::string id;       // cmpl-... / chatcmpl-...
  int64_t created = 0;  // Unix seconds
  std::string model;
};

/// OpenAI's finish_reason for a stop reason: eos and stop strings give "stop", the token
/// limit and the context's end "length".
std::string finish_reason(const std::string& stop_reason);

/// Log-probabilities of a choice's tokens, as the endpoint shows them (completions:
/// tokens/token_logprobs/top_logprobs/text_offset; chat: content[{token, logprob, bytes,
/// top_logprobs}]). `offset0` is the text offset of the first token.
nlohmann::json logprobs_json(Endpoint endpoint, const Tokenizer& tokenizer,
                             const std::vector<TokenEvent>& events, size_t offset0 = 0);

/// One choice of a whole (non-streamed) response.
nlohmann::json choice_json(Endpoint endpoint, int index, const std::string& text,
                           const std::string& stop_reason, const nlohmann::json& logprobs);

/// A whole response: choices plus usage.
nlohmann::json response_json(const ResponseHeader& h, nlohmann::json choices, int64_t prompt_tokens,
                             int64_t completion_tokens);

/// A streamed chunk of choice `index`: text (chat: the delta's content; `role` true adds
/// role "assistant" to the delta), finish_reason when `stop_reason` is non-empty.
nlohmann::json chunk_json(const ResponseHeader& h, int index, const std::string& text,
                          const std::string& stop_reason, const nlohmann::json& logprobs,
                          bool role = false);
/// The usage chunk of stream_options.include_usage: no choices.
nlohmann::json usage_chunk_json(const ResponseHeader& h, int64_t prompt_tokens,
                                int64_t completion_tokens);

/// JSON text that never throws on invalid UTF-8 (a token may hold half a character): such
/// bytes become U+FFFD.
std::string dump(const nlohmann::json& j);

}  // namespace forge::serve
