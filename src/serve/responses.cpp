// forge serve's response bodies (responses.h).
#include "serve/responses.h"

namespace forge::serve {
namespace {

using nlohmann::json;

json usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json header(const ResponseHeader& h, bool chunk) {
  const bool chat = h.endpoint == Endpoint::Chat;
  return {
      {"id", h.id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", h.created},
      {"model", h.model}};
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(c);
  return b;
}

}  // namespace

std::string finish_reason(const std::string& stop_reason) {
  if (stop_reason == "eos" || stop_reason == "stop") return "stop";
  if (stop_reason == "length" || stop_reason == "context") return "length";
  return stop_reason;
}

json logprobs_json(Endpoint endpoint, const Tokenizer& tok, const std::vector<TokenEvent>& events,
                   size_t offset0) {
  if (endpoint == Endpoint::Chat) {
    json content = json::array();
    for (const TokenEvent& e : events) {
      if (!e.token || !e.logprobs) continue;
      const std::string t = tok.token_bytes(e.id);
      json top = json::array();
      for (const auto& [id, lp] : e.logprobs->top) {
        const std::string s = tok.token_bytes(id);
        top.push_back({{"token", s}, {"logprob", lp}, {"bytes", bytes_of(s)}});
      }
      content.push_back({{"token", t},
                         {"logprob", e.logprobs->logprob},
                         {"bytes", bytes_of(t)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = offset0;
  for (const TokenEvent& e : events) {
    if (!e.token || !e.logprobs) continue;
    const std::string t = tok.token_bytes(e.id);
    tokens.push_back(t);
    lps.push_back(e.logprobs->logprob);
    json top = json::object();
    for (const auto& [id, lp] : e.logprobs->top) top[tok.token_bytes(id)] = lp;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += t.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

json choice_json(Endpoint endpoint, int index, const std::string& text,
                 const std::string& stop_reason, const json& logprobs) {
  json c = {
      {"index", index}, {"logprobs", logprobs}, {"finish_reason", finish_reason(stop_reason)}};
  if (endpoint == Endpoint::Chat)
    c["message"] = {{"role", "assistant"}, {"content", text}};
  else
    c["text"] = text;
  return c;
}

json response_json(const ResponseHeader& h, json choices, int64_t prompt_tokens,
                   int64_t completion_tokens) {
  json r = header(h, false);
  r["choices"] = std::move(choices);
  r["usage"] = usage(prompt_tokens, completion_tokens);
  return r;
}

json chunk_json(const ResponseHeader& h, int index, const std::string& text,
                const std::string& stop_reason, const json& logprobs, bool role) {
  json c = {{"index", index}, {"logprobs", logprobs}};
  c["finish_reason"] = stop_reason.empty() ? json(nullptr) : json(finish_reason(stop_reason));
  if (h.endpoint == Endpoint::Chat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (!text.empty() || role) delta["content"] = text;
    c["delta"] = delta;
  } else {
    c["text"] = text;
  }
  json r = header(h, true);
  r["choices"] = json::array({c});
  return r;
}

json usage_chunk_json(const ResponseHeader& h, int64_t prompt_tokens, int64_t completion_tokens) {
  json r = header(h, true);
  r["choices"] = json::array();
  r["usage"] = usage(prompt_tokens, completion_tokens);
  return r;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace forge::serve
