// forge serve's request bodies (src/serve/request.h), as the server parses them before any
// model work: /v1/completions, /v1/chat/completions, /tokenize and /detokenize. Malformed
// bodies must end as ApiError (an HTTP 400 with a JSON body), never as another exception;
// a chat request that parses must render through the chat template.
#include <string>

#include "harness_util.h"
#include "serve/api_error.h"
#include "serve/chat_template.h"
#include "serve/request.h"

using namespace forge;

namespace {

template <class Fn>
void expect_only_api_errors(Fn&& fn) {
  try {
    fn();
  } catch (const serve::ApiError& e) {
    if (e.status() != 400) fuzz::fail("a request body gave HTTP " + std::to_string(e.status()));
    (void)e.body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const std::exception& e) {
    fuzz::fail(std::string("a non-ApiError exception escaped: ") + e.what());
  } catch (...) {
    fuzz::fail("an exception of unknown type escaped");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  expect_only_api_errors([&] {
    const serve::CompletionRequest r =
        serve::parse_completion_request(body, serve::Endpoint::Completions);
    if (r.prompts.empty() || r.n < 1)
      fuzz::fail("a completion request without a prompt or choices");
  });
  expect_only_api_errors([&] {
    const serve::CompletionRequest r = serve::parse_completion_request(body, serve::Endpoint::Chat);
    if (r.messages.empty()) fuzz::fail("a chat request without messages");
    (void)serve::render_chat(r.messages);
  });
  expect_only_api_errors([&] { (void)serve::parse_tokenize_request(body); });
  expect_only_api_errors([&] { (void)serve::parse_detokenize_request(body); });
  return 0;
}
