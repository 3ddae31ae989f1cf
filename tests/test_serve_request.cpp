// forge serve's request parser (src/serve/request.h): the OpenAI fields it takes, and every
// malformed body an ApiError(400) naming the field, without a server or a model.
#include <gtest/gtest.h>

#include <string>

#include "serve/api_error.h"
#include "serve/chat_template.h"
#include "serve/request.h"

namespace forge::serve {
namespace {

CompletionRequest completions(const std::string& body) {
  return parse_completion_request(body, Endpoint::Completions);
}
CompletionRequest chat(const std::string& body) {
  return parse_completion_request(body, Endpoint::Chat);
}

// The body's error: status, param and a piece of the message.
void expect_bad(const std::string& body, Endpoint e, const std::string& param,
                const std::string& what, int status = 400) {
  try {
    (void)parse_completion_request(body, e);
    ADD_FAILURE() << "accepted: " << body;
  } catch (const ApiError& err) {
    EXPECT_EQ(err.status(), status) << body;
    EXPECT_EQ(err.param(), param) << body << ": " << err.what();
    EXPECT_NE(std::string(err.what()).find(what), std::string::npos) << body << ": " << err.what();
    const auto j = err.body();
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["code"], status);
  }
}

TEST(ServeRequest, CompletionFieldsAndDefaults) {
  const CompletionRequest d = completions(R"({"prompt": "hi"})");
  ASSERT_EQ(d.prompts.size(), 1u);
  EXPECT_FALSE(d.prompts[0].is_ids);
  EXPECT_EQ(d.prompts[0].text, "hi");
  EXPECT_EQ(d.max_tokens, -1);
  EXPECT_EQ(d.n, 1);
  EXPECT_FALSE(d.stream);
  EXPECT_EQ(d.logprobs, -1);
  EXPECT_FALSE(d.seed_given);
  EXPECT_EQ(d.options.sampling.temperature, 1.0f);
  EXPECT_TRUE(d.options.stop_at_eos);

  const CompletionRequest r = completions(R"({
    "model": "gpt2", "prompt": [15496, 11], "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "top_k": 40, "stop": ["\n", "END"], "seed": -3, "frequency_penalty": 0.5,
    "presence_penalty": -1, "repeat_penalty": 1.1, "n": 2, "stream": true,
    "stream_options": {"include_usage": true}, "logprobs": 3, "echo": true, "ignore_eos": true,
    "user": "someone", "logit_bias": {"1": 2}, "suffix": null})");
  EXPECT_EQ(r.model, "gpt2");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_ids);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<uint32_t>{15496, 11}));
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.options.sampling.temperature, 0.5f);
  EXPECT_EQ(r.options.sampling.top_p, 0.9f);
  EXPECT_EQ(r.options.sampling.top_k, 40);
  EXPECT_EQ(r.options.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.options.sampling.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(r.options.sampling.frequency_penalty, 0.5f);
  EXPECT_EQ(r.options.sampling.presence_penalty, -1.0f);
  EXPECT_EQ(r.options.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_TRUE(r.echo);
  EXPECT_FALSE(r.options.stop_at_eos);

  // Several prompts: strings and id arrays; null fields count as absent.
  const CompletionRequest m =
      completions(R"({"prompt": ["a", [1, 2]], "max_tokens": null, "stop": "x"})");
  ASSERT_EQ(m.prompts.size(), 2u);
  EXPECT_EQ(m.prompts[0].text, "a");
  EXPECT_EQ(m.prompts[1].ids, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(m.max_tokens, -1);
  EXPECT_EQ(m.options.stop, std::vector<std::string>{"x"});
}

TEST(ServeRequest, ChatFieldsAndTemplate) {
  const CompletionRequest r = chat(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}],
    "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 2})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_EQ(render_chat(r.messages), "System: Be brief.\nUser: Hi there\nAssistant: \nAssistant:");
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})").logprobs,
            0);
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false})").logprobs,
            -1);
}

TEST(ServeRequest, MalformedBodiesAreErrorsThatNameTheField) {
  const Endpoint C = Endpoint::Completions, H = Endpoint::Chat;
  expect_bad("{bad", C, "", "not valid JSON");
  expect_bad("", C, "", "not valid JSON");
  expect_bad("[1, 2]", C, "", "must be a JSON object");
  expect_bad("{}", C, "prompt", "is missing");
  expect_bad(R"({"prompt": 5})", C, "prompt", "must be a string");
  expect_bad(R"({"prompt": []})", C, "prompt", "must be a string");
  expect_bad(R"({"prompt": [1, "a"]})", C, "prompt", "integer token ids");
  expect_bad(R"({"prompt": [-1]})", C, "prompt", "outside [0, 2^32)");
  expect_bad(R"({"prompt": [4294967296]})", C, "prompt", "outside [0, 2^32)");
  expect_bad(R"({"prompt": "x", "max_tokens": "8"})", C, "max_tokens", "must be an integer");
  expect_bad(R"({"prompt": "x", "max_tokens": 1.5})", C, "max_tokens", "must be an integer");
  expect_bad(R"({"prompt": "x", "max_tokens": -1})", C, "max_tokens", "must be in");
  expect_bad(R"({"prompt": "x", "temperature": 2.5})", C, "temperature", "must be in [0");
  expect_bad(R"({"prompt": "x", "temperature": "hot"})", C, "temperature", "must be a number");
  expect_bad(R"({"prompt": "x", "top_p": 0})", C, "top_p", "must be > 0");
  expect_bad(R"({"prompt": "x", "top_p": 1.01})", C, "top_p", "must be in");
  expect_bad(R"({"prompt": "x", "top_k": -2})", C, "top_k", "must be in");
  expect_bad(R"({"prompt": "x", "frequency_penalty": 3})", C, "frequency_penalty", "must be in");
  expect_bad(R"({"prompt": "x", "presence_penalty": -2.5})", C, "presence_penalty", "must be in");
  expect_bad(R"({"prompt": "x", "repeat_penalty": 0})", C, "repeat_penalty", "must be > 0");
  expect_bad(R"({"prompt": "x", "seed": "1"})", C, "seed", "must be an integer");
  expect_bad(R"({"prompt": "x", "stop": 3})", C, "stop", "string or an array");
  expect_bad(R"({"prompt": "x", "stop": [""]})", C, "stop", "empty string");
  expect_bad(R"({"prompt": "x", "stop": ["a", 1]})", C, "stop", "must be a string");
  expect_bad(
      R"({"prompt": "x", "stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]})",
      C, "stop", "more than 16");
  expect_bad(R"({"prompt": "x", "n": 0})", C, "n", "must be in [1, 16]");
  expect_bad(R"({"prompt": ["a", "b", "c"], "n": 6})", C, "prompt", "more than 16");
  expect_bad(R"({"prompt": "x", "stream": "yes"})", C, "stream", "must be a boolean");
  expect_bad(R"({"prompt": "x", "stream_options": 1})", C, "stream_options", "must be an object");
  expect_bad(R"({"prompt": "x", "logprobs": 6})", C, "logprobs", "must be in [0, 5]");
  expect_bad(R"({"prompt": "x", "echo": 1})", C, "echo", "must be a boolean");
  expect_bad(R"({"prompt": "x", "model": 7})", C, "model", "must be a string");
  expect_bad("{}", H, "messages", "is missing");
  expect_bad(R"({"messages": []})", H, "messages", "non-empty array");
  expect_bad(R"({"messages": [1]})", H, "messages[0]", "must be an object");
  expect_bad(R"({"messages": [{"content": "x"}]})", H, "messages[0].role", "is missing");
  expect_bad(R"({"messages": [{"role": "robot", "content": "x"}]})", H, "messages[0].role",
             "must be system");
  expect_bad(R"({"messages": [{"role": "user", "content": 5}]})", H, "messages[0].content",
             "string or an array");
  expect_bad(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", H,
             "messages[0].content", "only text");
  expect_bad(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", H,
             "top_logprobs", "needs 'logprobs': true");
  expect_bad(
      R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})",
      H, "top_logprobs", "must be in [0, 20]");
}

TEST(ServeRequest, TokenizeAndDetokenizeBodies) {
  EXPECT_EQ(parse_tokenize_request(R"({"content": "a b"})"), "a b");
  EXPECT_EQ(parse_detokenize_request(R"({"tokens": [1, 2]})"), (std::vector<uint32_t>{1, 2}));
  EXPECT_THROW(parse_tokenize_request(R"({"content": 1})"), ApiError);
  EXPECT_THROW(parse_tokenize_request("{}"), ApiError);
  EXPECT_THROW(parse_detokenize_request(R"({"tokens": "1"})"), ApiError);
  EXPECT_THROW(parse_detokenize_request(R"({"tokens": [1.5]})"), ApiError);
  EXPECT_THROW(parse_detokenize_request("nope"), ApiError);
}

}  // namespace
}  // namespace forge::serve
