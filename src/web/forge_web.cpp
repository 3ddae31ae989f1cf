// The C API of forge's browser module (build-wasm/forge_web.js, web/worker.js calls it):
// load a model from the module's file system, generate with streaming, tokenize. One model
// at a time; every call runs on the worker's thread.
//
//   forge_web_load(path, device)         0, or 1 with forge_web_error() saying why
//   forge_web_load_preset(name, seed, device)  a random model of a preset's shapes (benchmarks)
//   forge_web_info()                     JSON: device, adapter, dtype, sizes of the model, and
//                                        the CPU threads (1 unless it is the threads build)
//   forge_web_generate(prompt, options)  0 or 1 (options.prompt_ids, when given, is the prompt
//                                        instead of the text); streams ids and text through
//                                        Module.onForgeToken / onForgeText; forge_web_result()
//                                        is the JSON of the last run
//   forge_web_tokenize(text)             JSON array of ids, or null (forge_web_error())
//
// generate is asynchronous (ASYNCIFY): the worker calls it with ccall(..., {async: true}).
// Between tokens it gives the worker's event loop a turn (a GPU step does when it waits for
// its read; the CPU sleeps 0 ms), so a Stop message reaches Module.forgeStopRequested.
#include <emscripten.h>

#include <chrono>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "forge/device_queue.h"
#include "forge/devices.h"
#include "forge/error.h"
#include "forge/generate.h"
#include "forge/gpt2.h"
#include "forge/threads.h"
#include "forge/tokenizer.h"

namespace {

using nlohmann::json;

struct Session {
  std::optional<forge::gpt2::Model> model;
  std::optional<forge::Tokenizer> tokenizer;
  std::string device_name;
  std::string error;
  std::string out;  // the last JSON answer (kept alive for the caller to read)
};
Session& session() {
  static Session s;
  return s;
}

// Text goes out as UTF-8 bytes: a model can emit invalid sequences, which the worker's
// streaming TextDecoder replaces with U+FFFD exactly as decoding the whole output would.
EM_JS(void, forge_web_emit, (const char* p, int n), {
  if (Module['onForgeText']) Module['onForgeText'](HEAPU8.slice(p, p + n));
});
EM_JS(void, forge_web_token, (uint32_t id), {
  if (Module['onForgeToken']) Module['onForgeToken'](id >>> 0);
});
EM_JS(int, forge_web_stop_requested, (), { return Module['forgeStopRequested'] ? 1 : 0; });

// Runs f, turning an exception into session().error; returns whether f succeeded.
template <class F>
bool guarded(F&& f) {
  session().error.clear();
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    session().error = e.what();
  } catch (...) {
    session().error = "unknown error";
  }
  return false;
}

forge::gpt2::GenerateOptions parse_options(const json& j) {
  forge::gpt2::GenerateOptions o;
  o.max_new_tokens = j.value("max_tokens", int64_t{64});
  o.sampling.greedy = j.value("greedy", false);
  o.sampling.temperature = j.value("temperature", 0.8f);
  o.sampling.top_k = j.value("top_k", int64_t{40});
  o.sampling.top_p = j.value("top_p", 0.95f);
  o.sampling.repeat_penalty = j.value("repeat_penalty", 1.0f);
  o.sampling.seed = j.value("seed", uint64_t{0});
  o.stop_at_eos = !j.value("ignore_eos", false);
  o.truncate = true;  // a page keeps the end of a long prompt, and says so in the result
  if (o.max_new_tokens < 0 || o.max_new_tokens > (int64_t{1} << 20))
    throw forge::Error(forge::ErrorKind::Range, "max_tokens must be in [0, 1048576]");
  o.sampling.validate();
  return o;
}

}  // namespace

extern "C" {

EMSCRIPTEN_KEEPALIVE const char* forge_web_error() { return session().error.c_str(); }

EMSCRIPTEN_KEEPALIVE int forge_web_load(const char* path, const char* device) {
  Session& s = session();
  s.model.reset();
  s.tokenizer.reset();
  return guarded([&] {
    const forge::Device d = forge::parse_device(device);
    s.model = forge::gpt2::Model::load(path, d);
    if (forge::Tokenizer::available(path)) s.tokenizer = forge::Tokenizer::load(path);
    s.device_name = forge::device_info(d).name;
  }) ? 0 : 1;
}

EMSCRIPTEN_KEEPALIVE int forge_web_load_preset(const char* name, double seed, const char* device) {
  Session& s = session();
  s.model.reset();
  s.tokenizer.reset();
  return guarded([&] {
    const forge::Device d = forge::parse_device(device);
    s.model = forge::gpt2::Model::random(forge::gpt2::Config::preset(name),
                                         static_cast<uint64_t>(seed), d);
    s.device_name = forge::device_info(d).name;
  }) ? 0 : 1;
}

EMSCRIPTEN_KEEPALIVE const char* forge_web_info() {
  Session& s = session();
  json j = nullptr;
  if (s.model) {
    const auto& c = s.model->config();
    int64_t params = 0;
    for (const auto& [name, t] : s.model->named_weights()) params += t.numel();
    j = {{"device", s.model->device().str()},
         {"device_name", s.device_name},
         {"dtype", forge::dtype_name(s.model->weight_dtype())},
         {"weight_bytes", s.model->weight_bytes()},
         {"parameters", params},
         {"n_layer", c.n_layer},
         {"n_embd", c.n_embd},
         {"n_ctx", c.n_ctx},
         {"vocab_size", c.vocab_size},
         {"tokenizer", s.tokenizer.has_value()},
         {"threads", forge::num_threads()}};
  }
  s.out = j.dump();
  return s.out.c_str();
}

EMSCRIPTEN_KEEPALIVE const char* forge_web_tokenize(const char* text) {
  Session& s = session();
  s.out = "null";
  guarded([&] {
    if (!s.tokenizer) throw forge::Error(forge::ErrorKind::Tokenizer, "no tokenizer is loaded");
    s.out = json(s.tokenizer->encode(text)).dump();
  });
  return s.out.c_str();
}

EMSCRIPTEN_KEEPALIVE int forge_web_generate(const char* prompt, const char* options) {
  Session& s = session();
  s.out = "null";
  return guarded([&] {
    if (!s.model) throw forge::Error(forge::ErrorKind::Format, "no model is loaded");
    const json j = json::parse(options);
    const forge::gpt2::GenerateOptions o = parse_options(j);
    std::vector<uint32_t> ids;
    if (j.contains("prompt_ids")) {
      ids = j["prompt_ids"].get<std::vector<uint32_t>>();
    } else if (!s.tokenizer) {
      throw forge::Error(forge::ErrorKind::Tokenizer,
                         "the model has no tokenizer files (tokenizer.json, vocab.json + "
                         "merges.txt, or encoder.json + vocab.bpe)");
    } else {
      ids = s.tokenizer->encode(prompt);
    }
    if (ids.empty()) throw forge::Error(forge::ErrorKind::Format, "the prompt is empty");
    const forge::Device d = s.model->device();
    const bool cpu = d == forge::Device::cpu();
    const forge::DeviceStats before = forge::device_stats(d);
    auto on_token = [cpu](uint32_t id) {
      forge_web_token(id);
      if (cpu) emscripten_sleep(0);  // the worker's event loop: a Stop message gets in
      return forge_web_stop_requested() == 0;
    };
    auto on_text = [](std::string_view t) { forge_web_emit(t.data(), static_cast<int>(t.size())); };
    const forge::gpt2::GenerateResult r =
        forge::gpt2::generate(*s.model, ids, o, s.tokenizer ? &*s.tokenizer : nullptr, on_token, on_text);
    const forge::DeviceStats after = forge::device_stats(d);
    json out = {{"ids", r.ids},
                {"prompt_tokens", r.prompt_tokens},
                {"truncated_tokens", r.truncated_tokens},
                {"stop_reason", r.stop_reason},
                {"prefill_seconds", r.prefill_seconds},
                {"decode_seconds", r.decode_seconds},
                {"decode_steps", r.decode_steps}};
    if (after.counted)
      out["device"] = {{"submits", after.submits - before.submits},
                       {"dispatches", after.dispatches - before.dispatches},
                       {"reads", after.reads - before.reads}};
    s.out = out.dump(-1, ' ', false, json::error_handler_t::replace);
  }) ? 0 : 1;
}

EMSCRIPTEN_KEEPALIVE const char* forge_web_result() { return session().out.c_str(); }

}  // extern "C"
