// forge serve over HTTP (src/serve/http_server.h), in this process, through curl and raw
// sockets: the routes, OpenAI-shaped errors for every bad request, API keys, the bounded
// queue, clients that leave mid-stream, and clients too slow to send their request.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "serve/chat_template.h"
#include "serve_test_util.h"

namespace forge::test::serve_tests {
namespace {

void expect_error(const Reply& r, int status, const std::string& type, const std::string& needle,
                  const std::string& param = "") {
  EXPECT_EQ(r.status, status) << r.body;
  const json j = r.j();
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_EQ(j["error"]["type"], type) << r.body;
  EXPECT_EQ(j["error"]["code"], status) << r.body;
  EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
  if (!param.empty()) {
    EXPECT_EQ(j["error"]["param"], param) << r.body;
  }
  EXPECT_NE(r.headers.find("application/json"), std::string::npos) << r.headers;
}

// A streamed completion that runs for 1000 tokens unless stopped, as raw HTTP.
std::string long_stream_request() {
  return raw_post("/v1/completions",
                  R"({"prompt": "x", "max_tokens": 1000, "ignore_eos": true, "stream": true})");
}

TEST(ServeHttp, HealthModelsTokenizeAndDetokenize) {
  Served s;
  const Reply h = curl("GET", s.url("/health"));
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.j()["status"], "ok");
  const Reply m = curl("GET", s.url("/v1/models"));
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.j()["object"], "list");
  EXPECT_EQ(m.j()["data"][0]["id"], model_dir().filename().string());
  EXPECT_EQ(m.j()["data"][0]["meta"]["n_ctx"], 1024);
  // GPT-2's known ids (REFERENCE.md), and back.
  const Reply t = curl("POST", s.url("/tokenize"), R"({"content": "Hello, my dog is cute"})");
  ASSERT_EQ(t.status, 200);
  EXPECT_EQ(t.j()["tokens"], json({15496, 11, 616, 3290, 318, 13779}));
  const Reply d = curl("POST", s.url("/detokenize"), R"({"tokens": [31373, 995]})");
  ASSERT_EQ(d.status, 200);
  EXPECT_EQ(d.j()["content"], "hello world");
}

TEST(ServeHttp, CompletionAndChatResponsesHaveOpenAIsShape) {
  Served s;
  const Reply r = curl("POST", s.url("/v1/completions"),
                       R"({"prompt": ["The nation", [464, 3277]], "max_tokens": 5, "temperature": 0,
                           "n": 2, "logprobs": 2, "echo": true, "unknown_field": {"ignored": true}})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.j();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  ASSERT_EQ(j["choices"].size(), 4u);  // 2 prompts x n = 2
  for (int i = 0; i < 4; ++i) {
    const json& c = j["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["finish_reason"], "length");
    EXPECT_EQ(c["text"].get<std::string>().rfind(i < 2 ? "The nation" : "The nation", 0), 0u) << c;
    ASSERT_EQ(c["logprobs"]["tokens"].size(), 5u);
    ASSERT_EQ(c["logprobs"]["top_logprobs"][0].size(), 2u);
    for (const json& lp : c["logprobs"]["token_logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);
  }
  // Greedy: every choice of a prompt is the same text; ids [464, 3277] are "The nation".
  EXPECT_EQ(j["choices"][0]["text"], j["choices"][1]["text"]);
  EXPECT_EQ(j["choices"][0]["text"], j["choices"][2]["text"]);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(j["usage"]["completion_tokens"], 20);
  EXPECT_EQ(j["usage"]["total_tokens"], 24);

  const Reply c = curl("POST", s.url("/v1/chat/completions"),
                       R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                           "temperature": 0, "logprobs": true, "top_logprobs": 1})");
  ASSERT_EQ(c.status, 200) << c.body;
  const json k = c.j();
  EXPECT_EQ(k["object"], "chat.completion");
  EXPECT_EQ(k["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(k["choices"][0]["logprobs"]["content"].size(), 3u);
  const std::string prompt = serve::render_chat({{"user", "Hi"}});
  EXPECT_EQ(prompt, "User: Hi\nAssistant:");
  EXPECT_EQ(k["usage"]["prompt_tokens"], Tokenizer::load(kGpt2TokenizerDir).encode(prompt).size());
}

TEST(ServeHttp, StreamsAreTheWholeResponseAsEvents) {
  Served s;
  const std::string body =
      R"({"prompt": "The nation", "max_tokens": 12, "temperature": 0, "ignore_eos": true)";
  const Reply whole = curl("POST", s.url("/v1/completions"), body + "}");
  ASSERT_EQ(whole.status, 200) << whole.body;
  const Reply streamed =
      curl("POST", s.url("/v1/completions"),
           body + R"(, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(streamed.status, 200);
  EXPECT_NE(streamed.headers.find("text/event-stream"), std::string::npos);
  const std::vector<std::string> events = sse_data(streamed.body);
  ASSERT_GE(events.size(), 3u) << streamed.body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  json finish, usage;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    EXPECT_EQ(e["object"], "text_completion");
    if (e.contains("usage")) {
      usage = e["usage"];
      EXPECT_TRUE(e["choices"].empty());
      continue;
    }
    text += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, whole.j()["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(usage, whole.j()["usage"]);

  const Reply chat =
      curl("POST", s.url("/v1/chat/completions"),
           R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": true})");
  const std::vector<std::string> ce = sse_data(chat.body);
  ASSERT_GE(ce.size(), 3u) << chat.body;
  const json first = json::parse(ce[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(json::parse(ce[ce.size() - 2])["choices"][0]["finish_reason"].is_null(), false);
  EXPECT_EQ(ce.back(), "[DONE]");
}

// A GGUF file (its tokenizer in its metadata) serves as the folder does: f32 weights, the
// same greedy text.
TEST(ServeHttp, AGgufFileServesTheSameTokensAsItsFolder) {
  const fs::path gguf =
      fs::path(::testing::TempDir()) / ("serve_model_" + std::to_string(::getpid()) + ".gguf");
  gpt2::Model::load(model_dir().string())
      .save_gguf(gguf.string(), Tokenizer::load(kGpt2TokenizerDir));
  const std::string body = R"({"prompt": "The nation", "max_tokens": 12, "temperature": 0})";
  Served folder;
  const Reply want = curl("POST", folder.url("/v1/completions"), body);
  serve::ServerOptions o;
  o.model = gguf.string();
  Served file(o);
  const Reply got = curl("POST", file.url("/v1/completions"), body);
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.j()["choices"][0]["text"], want.j()["choices"][0]["text"]);
  EXPECT_EQ(curl("GET", file.url("/v1/models")).j()["data"][0]["id"], gguf.filename().string());
  fs::remove(gguf);
}

TEST(ServeHttp, BadRequestsGetOpenAIShapedErrors) {
  serve::ServerOptions o;
  o.max_body_bytes = 4096;
  Served s(o);
  const std::string C = s.url("/v1/completions");
  const std::string bad = "invalid_request_error";
  expect_error(curl("POST", C, "{not json"), 400, bad, "not valid JSON");
  expect_error(curl("POST", C, R"({"prompt": "x", "max_tokens": "8"})"), 400, bad,
               "must be an integer", "max_tokens");
  expect_error(curl("POST", C, R"({"prompt": "x", "temperature": 3})"), 400, bad, "must be in",
               "temperature");
  expect_error(curl("POST", C, R"({"prompt": [50257]})"), 400, bad, "outside the vocabulary",
               "prompt");
  std::string longer = "[";
  for (int i = 0; i < 1025; ++i) longer += (i ? ",1" : "1");
  expect_error(curl("POST", C, R"({"prompt": )" + longer + "]}"), 400, bad,
               "more than the model's context of 1024", "prompt");
  expect_error(curl("POST", C, std::string(5000, ' ') + "{}"), 413, bad,
               "over the limit of 4096 bytes");
  expect_error(curl("GET", s.url("/v2/nothing")), 404, "not_found_error",
               "no route for GET /v2/nothing");
  expect_error(curl("POST", s.url("/detokenize"), R"({"tokens": [50257]})"), 400, bad,
               "outside the vocabulary", "tokens");
  expect_error(curl("POST", s.url("/v1/chat/completions"), R"({"messages": "hi"})"), 400, bad,
               "non-empty array", "messages");
  // Unknown fields are ignored.
  EXPECT_EQ(curl("POST", C, R"({"prompt": "x", "max_tokens": 1, "best_of_all": 3})").status, 200);
  // The server still answers after all that.
  EXPECT_EQ(curl("GET", s.url("/health")).status, 200);
}

TEST(ServeHttp, AnApiKeyGuardsEverythingButHealth) {
  serve::ServerOptions o;
  o.api_key = "sekret";
  Served s(o);
  const std::string body = R"({"prompt": "x", "max_tokens": 1})";
  expect_error(curl("POST", s.url("/v1/completions"), body), 401, "authentication_error",
               "no API key");
  expect_error(curl("POST", s.url("/v1/completions"), body, "-H 'Authorization: Bearer wrong'"),
               401, "authentication_error", "invalid API key");
  expect_error(curl("GET", s.url("/metrics"), "", "-H 'Authorization: Bearer sekre'"), 401,
               "authentication_error", "invalid API key");
  EXPECT_EQ(
      curl("POST", s.url("/v1/completions"), body, "-H 'Authorization: Bearer sekret'").status,
      200);
  EXPECT_EQ(curl("GET", s.url("/health")).status, 200);
}

// One slot, no queue: while a long stream holds the slot, the next request gets 503 with
// Retry-After; once it ends, requests are served again.
TEST(ServeHttp, AFullServerAnswers503WithRetryAfter) {
  serve::ServerOptions o;
  o.parallel = 1;
  o.max_queue = 0;
  Served s(o);
  const int fd = connect_to(s.port());
  ASSERT_GE(fd, 0);
  send_all(fd, long_stream_request());
  char buf[4096];
  ASSERT_GT(::recv(fd, buf, sizeof buf, 0), 0);  // the stream has started: the slot is taken
  const Reply busy = curl("POST", s.url("/v1/completions"), R"({"prompt": "y", "max_tokens": 1})");
  expect_error(busy, 503, "unavailable_error", "busy");
  EXPECT_NE(busy.headers.find("Retry-After: 1"), std::string::npos) << busy.headers;
  ::close(fd);  // leaving frees the slot at the next step
  Reply again;
  for (int i = 0; i < 500; ++i) {
    again = curl("POST", s.url("/v1/completions"), R"({"prompt": "y", "max_tokens": 1})");
    if (again.status != 503) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_GE(metric(curl("GET", s.url("/metrics")).body, "forge_requests_rejected_total"), 1);
}

// A client that disconnects mid-stream frees its slot at the next step: its sequence stops
// long before its 1000 tokens.
TEST(ServeHttp, AClientThatLeavesMidStreamFreesItsSlot) {
  serve::ServerOptions o;
  o.parallel = 1;
  Served s(o);
  const int fd = connect_to(s.port());
  ASSERT_GE(fd, 0);
  send_all(fd, long_stream_request());
  std::string got;
  char buf[4096];
  while (got.find("\"text\"") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  double busy = 1;
  std::string m;
  for (int i = 0; i < 500 && busy != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = curl("GET", s.url("/metrics")).body;
    busy = metric(m, "forge_slots_busy");
  }
  EXPECT_EQ(busy, 0) << m;
  EXPECT_LT(metric(m, "forge_generated_tokens_total"), 900) << m;
  EXPECT_EQ(curl("POST", s.url("/v1/completions"), R"({"prompt": "y", "max_tokens": 2})").status,
            200);
}

// A client that starts a request and then sends nothing is dropped after the timeout; the
// server answers others meanwhile.
TEST(ServeHttp, SlowClientsTimeOut) {
  serve::ServerOptions o;
  o.timeout_seconds = 1;
  Served s(o);
  const int fd = connect_to(s.port(), 10);
  ASSERT_GE(fd, 0);
  send_all(fd,
           "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"pro");
  EXPECT_EQ(curl("GET", s.url("/health")).status, 200);
  const auto t0 = std::chrono::steady_clock::now();
  std::string got;
  char buf[1024];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    got.append(buf, static_cast<size_t>(n));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 4.0) << "the server kept a silent client for " << waited << " s";
  EXPECT_EQ(got.find("200 OK"), std::string::npos) << got;
  ::close(fd);
}

}  // namespace
}  // namespace forge::test::serve_tests
