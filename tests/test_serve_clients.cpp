// forge serve with real clients: greedy completions are the tokens of `forge generate
// --greedy`; OpenAI's official npm client (completions and chat, streamed and not); a
// bounded load test of 16 streaming clients against 4 slots; SIGTERM that lets in-flight
// requests finish. The npm client comes from scripts/setup_npm.sh tests/serve.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "ci.h"
#include "forge/generate.h"
#include "serve/chat_template.h"
#include "serve_test_util.h"

namespace forge::test::serve_tests {
namespace {

const std::string kClients = FORGE_SOURCE_DIR "/tests/serve";

// Skips (fails under CI) when the npm client is not installed.
#define REQUIRE_NPM_CLIENT()                                                                   \
  do {                                                                                         \
    if (!fs::exists(kClients + "/node_modules/openai/package.json")) {                         \
      if (under_ci())                                                                          \
        FAIL() << "tests/serve/node_modules missing: scripts/setup_npm.sh tests/serve";        \
      GTEST_SKIP()                                                                             \
          << "the openai npm client is not installed (bash scripts/setup_npm.sh tests/serve)"; \
    }                                                                                          \
  } while (0)

// `forge generate --greedy --json` of a prompt: its ids and text.
json cli_greedy(const std::string& prompt, int n) {
  const CliResult r = run_forge("generate -m " + model_dir().string() + " -p '" + prompt + "' -n " +
                                std::to_string(n) + " --greedy --json");
  EXPECT_EQ(r.code, 0) << r.err;
  return parse_json(r);
}

TEST(ServeClients, GreedyCompletionsAreTheTokensOfForgeGenerate) {
  Served s;
  const Tokenizer tok = Tokenizer::load(kGpt2TokenizerDir);
  for (const std::string prompt :
       {"Hello, my dog is cute", "The State of the Union is strong", "We"}) {
    const json want = cli_greedy(prompt, 24);
    const Reply r = curl(
        "POST", s.url("/v1/completions"),
        json({{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}, {"logprobs", 0}}).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json c = r.j()["choices"][0];
    EXPECT_EQ(c["text"], want["text"]) << prompt;
    // Token for token: the logprobs name each generated token.
    std::vector<std::string> tokens;
    for (uint32_t id : want["ids"].get<std::vector<uint32_t>>())
      tokens.push_back(tok.token_bytes(id));
    EXPECT_EQ(c["logprobs"]["tokens"].get<std::vector<std::string>>(), tokens) << prompt;
    EXPECT_EQ(r.j()["usage"]["completion_tokens"], want["ids"].size());
    EXPECT_EQ(r.j()["usage"]["prompt_tokens"], want["prompt_tokens"]);
  }
}

TEST(ServeClients, OpenAIsNpmClientCompletionsAndChat) {
  REQUIRE_NPM_CLIENT();
  Served s;
  const std::string prompt = "Hello, my dog is cute";
  const CliResult r = run_shell("node " + kClients + "/openai_clients.mjs " + s.url("/v1") + " '" +
                                prompt + "' 16");
  ASSERT_EQ(r.code, 0) << r.err;
  const json got = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(got.is_discarded()) << r.out;
  const json want = cli_greedy(prompt, 16);
  EXPECT_EQ(got["completion"]["text"], want["text"]);
  EXPECT_EQ(got["completion"]["object"], "text_completion");
  EXPECT_EQ(got["completion"]["usage"]["completion_tokens"], want["ids"].size());
  EXPECT_EQ(got["completion_stream"]["text"], want["text"]);
  EXPECT_EQ(got["completion_stream"]["finish_reason"], got["completion"]["finish_reason"]);
  // Chat: the template's prompt, greedy, with its turn-ending stop strings.
  gpt2::GenerateOptions o;
  o.max_new_tokens = 16;
  o.sampling.greedy = true;
  o.stop = serve::chat_stop_strings();
  const Tokenizer tok = Tokenizer::load(kGpt2TokenizerDir);
  const gpt2::Model m = gpt2::Model::load(model_dir().string());
  const gpt2::GenerateResult chat =
      gpt2::generate(m, tok.encode(serve::render_chat({{"user", prompt}})), o, &tok);
  EXPECT_EQ(got["chat"]["text"], chat.text);
  EXPECT_EQ(got["chat"]["role"], "assistant");
  EXPECT_EQ(got["chat"]["object"], "chat.completion");
  EXPECT_EQ(got["chat_stream"]["text"], chat.text);
  EXPECT_EQ(got["chat_stream"]["usage"]["completion_tokens"], chat.ids.size());
  EXPECT_EQ(got["error"]["status"], 400);
  EXPECT_EQ(got["error"]["param"], "temperature");
  EXPECT_EQ(got["models"], json({model_dir().filename().string()}));
}

// 16 concurrent streaming clients for 30 s against 4 slots: no failed request, every text
// right, and /metrics shows decode steps that ran several sequences together.
TEST(ServeClients, LoadOf16StreamingClientsOn4Slots) {
  REQUIRE_NPM_CLIENT();
  serve::ServerOptions o;
  o.parallel = 4;
  Served s(o);
  json expected = json::array();
  const std::vector<std::string> prompts = {"The nation",    "Our economy", "Congress shall",
                                            "We the people", "In the year", "Freedom"};
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int n = 8 + 4 * static_cast<int>(i);
    expected.push_back(
        {{"prompt", prompts[i]}, {"max_tokens", n}, {"text", cli_greedy(prompts[i], n)["text"]}});
  }
  const fs::path file =
      fs::path(::testing::TempDir()) / ("serve_load_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << expected.dump();
  const CliResult r =
      run_shell("node " + kClients + "/load.mjs " + s.url("/v1") + " 16 30 " + file.string());
  fs::remove(file);
  ASSERT_EQ(r.code, 0) << r.err;
  const json got = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(got.is_discarded()) << r.out;
  EXPECT_GT(got["requests"].get<int>(), 16) << r.out;
  EXPECT_EQ(got["failures"], 0) << r.out;
  EXPECT_EQ(got["mismatches"], 0) << r.out;
  const std::string m = curl("GET", s.url("/metrics")).body;
  double batched = 0;
  for (int k = 2; k <= 4; ++k)
    batched += metric(m, "forge_decode_steps_total{batch_size=\"" + std::to_string(k) + "\"}");
  EXPECT_GT(batched, 0) << m;
  EXPECT_EQ(metric(m, "forge_requests_rejected_total"), 0) << m;
  EXPECT_EQ(metric(m, "forge_slots_busy"), 0) << m;
}

// The binary: SIGTERM lets a stream in flight run to its [DONE], then exits 0.
TEST(ServeClients, SigtermFinishesInFlightRequestsThenExits) {
  const fs::path err = fs::path(::testing::TempDir()) / ("serve_err_" + std::to_string(::getpid()));
  const pid_t pid = spawn_forge({"serve", "-m", model_dir().string(), "--port", "0"}, err);
  int port = 0;
  for (int i = 0; i < 3000 && port == 0; ++i) {
    const std::string e = slurp(err);
    const size_t at = e.find("http://127.0.0.1:");
    if (at != std::string::npos && e.find(' ', at) != std::string::npos)
      port = std::stoi(e.substr(at + 17));
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(port, 0) << slurp(err);
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  for (int i = 0; i < 3000 && curl("GET", base + "/health").status != 200; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const int fd = connect_to(port, 60);
  ASSERT_GE(fd, 0);
  send_all(fd,
           raw_post("/v1/completions",
                    R"({"prompt": "x", "max_tokens": 400, "ignore_eos": true, "stream": true})"));
  std::string got;
  char buf[8192];
  ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ASSERT_GT(n, 0);
  got.append(buf, static_cast<size_t>(n));
  ::kill(pid, SIGTERM);
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos)
      << got.substr(got.size() > 500 ? got.size() - 500 : 0);
  EXPECT_NE(got.find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_EQ(wait_for(pid, 30), 0) << slurp(err);
  EXPECT_NE(slurp(err).find("forge serve: stopped"), std::string::npos) << slurp(err);
  fs::remove(err);
}

TEST(ServeClients, AModelThatDoesNotLoadEndsTheServerWithAnError) {
  const CliResult r = run_forge("serve -m /nonexistent/model --port 0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("error: serve: model '/nonexistent/model' is neither"), std::string::npos)
      << r.err;
  const CliResult p = run_forge("serve -m " + model_dir().string() + " --parallel 0");
  EXPECT_EQ(p.code, 1);
  EXPECT_NE(p.err.find("--parallel"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace forge::test::serve_tests
