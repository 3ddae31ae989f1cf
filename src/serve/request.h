// The request bodies forge serve takes, parsed and checked before any model work: a
// function of the body alone (no server, no model), so tests and the fuzz harness call it
// directly. Every fault is an ApiError(400) that names the field; unknown fields are
// ignored, as OpenAI's API and llama.cpp's server do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "forge/generate.h"

namespace forge::serve {

enum class Endpoint { Completions, Chat };

/// One prompt of /v1/completions: text, or token ids.
struct Prompt {
  bool is_ids = false;
  std::string text;
  std::vector<uint32_t> ids;
};

struct ChatMessage {
  std::string role;  // system, developer, user, assistant or tool
  std::string content;
};

/// Bounds the parser enforces (the server's settings).
struct RequestLimits {
  int max_choices = 16;  // n x prompts per request
  int max_stop = 16;     // stop strings per request
  int max_top_logprobs = 20;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;            // as sent; "" when absent (the server answers with its own id)
  std::vector<Prompt> prompts;  // completions: one or more
  std::vector<ChatMessage> messages;  // chat: one or more
  /// max_tokens (chat: max_completion_tokens too); -1 when absent: the server's default
  /// (completions 16, as OpenAI's; chat: until EOS, a stop string or the context's end).
  int64_t max_tokens = -1;
  gpt2::GenerateOptions options;  // sampling (seed_given says if "seed" came), stop, EOS
  bool seed_given = false;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  /// Log-probabilities: -1 none; else how many top alternatives to return per token
  /// (completions: logprobs = k; chat: logprobs = true with top_logprobs = k).
  int logprobs = -1;
  bool echo = false;  // completions: the prompt's text before the completion
};

/// Parses a POST body of /v1/completions or /v1/chat/completions. ApiError(400) for
/// malformed JSON, a body that is not an object, a missing prompt/messages, a known field
/// of the wrong type, or a value out of range (the message names the field, which is also
/// the error's param).
CompletionRequest parse_completion_request(std::string_view body, Endpoint endpoint,
                                           const RequestLimits& limits = {});

/// POST /tokenize: {"content": "text", "add_special": bool (ignored: GPT-2 adds none)}.
std::string parse_tokenize_request(std::string_view body);
/// POST /detokenize: {"tokens": [ids]}; ids are checked against the vocabulary later.
std::vector<uint32_t> parse_detokenize_request(std::string_view body);

}  // namespace forge::serve
