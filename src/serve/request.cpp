// Parsing and checking forge serve's request bodies (request.h).
#include "serve/request.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "serve/api_error.h"

namespace forge::serve {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& what) {
  throw ApiError(400, "'" + param + "' " + what, param);
}

json parse_object(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

// The field, or nullopt when absent or null (OpenAI treats an explicit null as absent).
std::optional<json> field(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return *it;
}

double number(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) bad(name, "must be a number");
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    bad(name, "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + v.dump());
  return x;
}

int64_t integer(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) bad(name, "must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    bad(name,
        "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(name,
        "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
  return x;
}

bool boolean(const json& v, const std::string& name) {
  if (!v.is_boolean()) bad(name, "must be a boolean");
  return v.get<bool>();
}

std::string string(const json& v, const std::string& name) {
  if (!v.is_string()) bad(name, "must be a string");
  return v.get<std::string>();
}

std::vector<uint32_t> token_ids(const json& v, const std::string& name) {
  std::vector<uint32_t> ids;
  ids.reserve(v.size());
  for (const json& t : v) {
    if (!t.is_number_integer()) bad(name, "must hold only integer token ids");
    if (t.is_number_unsigned() ? t.get<uint64_t>() > std::numeric_limits<uint32_t>::max()
                               : t.get<int64_t>() < 0)
      bad(name, "holds the token id " + t.dump() + ", outside [0, 2^32)");
    ids.push_back(t.get<uint32_t>());
  }
  return ids;
}

// A completions prompt: a string, an array of strings, an array of ids, or an array of
// arrays of ids.
std::vector<Prompt> prompts(const json& v) {
  const std::string name = "prompt";
  if (v.is_string()) return {Prompt{false, v.get<std::string>(), {}}};
  if (!v.is_array() || v.empty())
    bad(name, "must be a string, an array of strings, or token ids (one array or several)");
  if (v[0].is_number()) {
    Prompt p;
    p.is_ids = true;
    p.ids = token_ids(v, name);
    return {p};
  }
  std::vector<Prompt> out;
  for (const json& e : v) {
    if (e.is_string())
      out.push_back(Prompt{false, e.get<std::string>(), {}});
    else if (e.is_array())
      out.push_back(Prompt{true, {}, token_ids(e, name)});
    else
      bad(name, "must be a string, an array of strings, or token ids (one array or several)");
  }
  return out;
}

// Chat content: a string, or an array of parts of which the text ones are joined.
std::string content(const json& v, const std::string& name) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad(name, "must be a string or an array of content parts");
  std::string text;
  for (const json& part : v) {
    if (!part.is_object()) bad(name, "parts must be objects");
    const auto type = field(part, "type");
    if (!type || !type->is_string()) bad(name, "parts need a string 'type'");
    if (type->get<std::string>() != "text")
      bad(name, "part of type " + type->dump() + " is not supported (only text)");
    const auto t = field(part, "text");
    if (!t) bad(name, "text parts need 'text'");
    text += string(*t, name + ".text");
  }
  return text;
}

std::vector<ChatMessage> messages(const json& v) {
  if (!v.is_array() || v.empty()) bad("messages", "must be a non-empty array");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!v[i].is_object()) bad(name, "must be an object");
    const auto role = field(v[i], "role");
    if (!role) bad(name + ".role", "is missing");
    ChatMessage m;
    m.role = string(*role, name + ".role");
    if (m.role != "system" && m.role != "developer" && m.role != "user" && m.role != "assistant" &&
        m.role != "tool")
      bad(name + ".role",
          "must be system, developer, user, assistant or tool, got " + role->dump());
    if (const auto c = field(v[i], "content")) m.content = content(*c, name + ".content");
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<std::string> stops(const json& v, int max_stop) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const json& s : v) out.push_back(string(s, "stop"));
  } else {
    bad("stop", "must be a string or an array of strings");
  }
  if (static_cast<int>(out.size()) > max_stop)
    bad("stop",
        "holds " + std::to_string(out.size()) + " strings, more than " + std::to_string(max_stop));
  for (const std::string& s : out)
    if (s.empty()) bad("stop", "holds an empty string");
  return out;
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view body, Endpoint endpoint,
                                           const RequestLimits& limits) {
  const json j = parse_object(body);
  CompletionRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::Chat;
  if (const auto v = field(j, "model")) r.model = string(*v, "model");
  if (chat) {
    const auto v = field(j, "messages");
    if (!v) bad("messages", "is missing");
    r.messages = messages(*v);
  } else {
    const auto v = field(j, "prompt");
    if (!v) bad("prompt", "is missing");
    r.prompts = prompts(*v);
  }
  constexpr int64_t kMaxTokens = int64_t{1} << 31;
  if (const auto v = field(j, "max_tokens"))
    r.max_tokens = integer(*v, "max_tokens", 0, kMaxTokens);
  if (chat)
    if (const auto v = field(j, "max_completion_tokens"))
      r.max_tokens = integer(*v, "max_completion_tokens", 0, kMaxTokens);
  SamplingParams& s = r.options.sampling;
  if (const auto v = field(j, "temperature"))
    s.temperature = static_cast<float>(number(*v, "temperature", 0.0, 2.0));
  if (const auto v = field(j, "top_p")) {
    s.top_p = static_cast<float>(number(*v, "top_p", 0.0, 1.0));
    if (s.top_p == 0.0f) bad("top_p", "must be > 0");
  }
  if (const auto v = field(j, "top_k")) s.top_k = integer(*v, "top_k", 0, int64_t{1} << 31);
  if (const auto v = field(j, "frequency_penalty"))
    s.frequency_penalty = static_cast<float>(number(*v, "frequency_penalty", -2.0, 2.0));
  if (const auto v = field(j, "presence_penalty"))
    s.presence_penalty = static_cast<float>(number(*v, "presence_penalty", -2.0, 2.0));
  if (const auto v = field(j, "repeat_penalty")) {
    s.repeat_penalty = static_cast<float>(number(*v, "repeat_penalty", 0.0, 100.0));
    if (s.repeat_penalty == 0.0f) bad("repeat_penalty", "must be > 0");
  }
  if (const auto v = field(j, "seed")) {
    if (!v->is_number_integer()) bad("seed", "must be an integer");
    // OpenAI's seeds are signed 64-bit: a negative one keeps its two's-complement bits.
    s.seed =
        v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
    r.seed_given = true;
  }
  if (const auto v = field(j, "stop")) r.options.stop = stops(*v, limits.max_stop);
  if (const auto v = field(j, "ignore_eos")) r.options.stop_at_eos = !boolean(*v, "ignore_eos");
  if (const auto v = field(j, "n")) r.n = static_cast<int>(integer(*v, "n", 1, limits.max_choices));
  const int64_t choices = static_cast<int64_t>(chat ? 1 : r.prompts.size()) * r.n;
  if (choices > limits.max_choices)
    bad(chat ? "n" : "prompt", "asks for " + std::to_string(choices) +
                                   " choices (prompts x n), more than " +
                                   std::to_string(limits.max_choices));
  if (const auto v = field(j, "stream")) r.stream = boolean(*v, "stream");
  if (const auto v = field(j, "stream_options")) {
    if (!v->is_object()) bad("stream_options", "must be an object");
    if (const auto u = field(*v, "include_usage"))
      r.include_usage = boolean(*u, "stream_options.include_usage");
  }
  if (chat) {
    const auto lp = field(j, "logprobs");
    const bool want = lp && boolean(*lp, "logprobs");
    if (const auto v = field(j, "top_logprobs")) {
      const int k = static_cast<int>(integer(*v, "top_logprobs", 0, limits.max_top_logprobs));
      if (!want) bad("top_logprobs", "needs 'logprobs': true");
      r.logprobs = k;
    } else if (want) {
      r.logprobs = 0;
    }
  } else {
    if (const auto v = field(j, "logprobs"))
      r.logprobs =
          static_cast<int>(integer(*v, "logprobs", 0, std::min(5, limits.max_top_logprobs)));
    if (const auto v = field(j, "echo")) r.echo = boolean(*v, "echo");
  }
  return r;
}

std::string parse_tokenize_request(std::string_view body) {
  const json j = parse_object(body);
  const auto v = field(j, "content");
  if (!v) bad("content", "is missing");
  if (const auto a = field(j, "add_special")) (void)boolean(*a, "add_special");
  return string(*v, "content");
}

std::vector<uint32_t> parse_detokenize_request(std::string_view body) {
  const json j = parse_object(body);
  const auto v = field(j, "tokens");
  if (!v) bad("tokens", "is missing");
  if (!v->is_array()) bad("tokens", "must be an array of token ids");
  return token_ids(*v, "tokens");
}

}  // namespace forge::serve
