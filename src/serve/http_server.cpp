// forge serve's HTTP side (http_server.h): routes, authentication, streaming, metrics.
#include "serve/http_server.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "forge/devices.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/tokenizer.h"
#include "serve/api_error.h"
#include "serve/chat_template.h"
#include "serve/engine.h"
#include "serve/metrics.h"
#include "serve/request.h"
#include "serve/responses.h"

namespace forge::serve {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Set on the thread that answers connections past the pool's queue: they get 503.
thread_local bool t_shed = false;

/// The connection pool: `threads` workers and at most `max_pending` connections waiting for
/// one. Past that, connections go to one more thread that answers 503 at once, so overload
/// is refused rather than queued without bound.
class BoundedPool : public httplib::TaskQueue {
 public:
  BoundedPool(size_t threads, size_t max_pending) : max_pending_(max_pending) {
    for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(pending_, false); });
    workers_.emplace_back([this] { work(shed_, true); });
  }
  ~BoundedPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard lk(mu_);
    (pending_.size() < max_pending_ ? pending_ : shed_).push_back(std::move(fn));
    cv_.notify_all();
  }
  void shutdown() override {
    {
      std::lock_guard lk(mu_);
      if (down_) return;
      down_ = true;
      cv_.notify_all();
    }
    for (std::thread& t : workers_) t.join();
  }

 private:
  void work(std::deque<std::function<void()>>& q, bool shed) {
    t_shed = shed;
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return down_ || !q.empty(); });
        if (q.empty()) return;  // down, and nothing left
        fn = std::move(q.front());
        q.pop_front();
      }
      fn();
    }
  }

  size_t max_pending_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> pending_, shed_;
  bool down_ = false;
  std::vector<std::thread> workers_;
};

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status() == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status(), e.body());
}

std::string random_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lk(mu);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

uint64_t random_seed() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lk(mu);
  return rng();
}

// The /metrics route label of a path (a fixed set: labels must not grow with the input).
std::string route_of(const std::string& path) {
  for (const char* r : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health",
                        "/metrics", "/tokenize", "/detokenize"})
    if (path == r) return r;
  return "other";
}

}  // namespace

struct Server::Impl {
  ServerOptions o;
  httplib::Server http;
  std::thread listener, loader;
  int port = 0;
  std::atomic<bool> ready{false};
  std::atomic<bool> stopped{false};
  mutable std::mutex mu;  // load_error
  std::string load_error;
  std::unique_ptr<gpt2::Model> model;
  std::optional<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
  std::string model_id;
  int64_t created = std::time(nullptr);
  Metrics metrics;
  RequestLimits limits;
  // Graceful stop: while draining, new requests get 503; stop() waits for the completions in
  // flight (held by InFlight tokens until their responses are written) before it stops
  // httplib, which would cut a stream still being written.
  std::atomic<bool> draining{false};
  std::atomic<int> in_flight{0};
  struct InFlight {
    std::atomic<int>& n;
    explicit InFlight(std::atomic<int>& count) : n(count) { ++n; }
    ~InFlight() { --n; }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
  };

  void load();
  void routes();
  std::vector<uint32_t> tokenize_prompt(const Prompt& p, const std::string& param) const;
  void completions(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  void need_ready() const {
    if (!ready) throw ApiError(503, "Loading model");
  }
  const Tokenizer& need_tokenizer(const std::string& what) const {
    if (!tokenizer)
      throw ApiError(400,
                     "the model has no tokenizer files: " + what + " needs one (--tokenizer DIR)");
    return *tokenizer;
  }
};

void Server::Impl::load() {
  try {
    std::error_code ec;
    const bool gguf = fs::is_regular_file(o.model, ec) && fs::path(o.model).extension() == ".gguf";
    if (!gguf && !fs::is_directory(o.model, ec))
      throw Error(ErrorKind::Io,
                  "serve: model '" + o.model +
                      "' is neither a model folder nor a .gguf file (or does not exist)");
    if (!o.tokenizer.empty())
      tokenizer = Tokenizer::load(o.tokenizer);
    else if (Tokenizer::available(o.model))
      tokenizer = Tokenizer::load(o.model);
    model = std::make_unique<gpt2::Model>(gpt2::Model::load(o.model, parse_device(o.device)));
    engine = std::make_unique<Engine>(*model, tokenizer ? &*tokenizer : nullptr,
                                      EngineOptions{o.parallel, o.max_queue});
    ready = true;
  } catch (const std::exception& e) {
    std::lock_guard lk(mu);
    load_error = e.what();
  }
}

std::vector<uint32_t> Server::Impl::tokenize_prompt(const Prompt& p,
                                                    const std::string& param) const {
  std::vector<uint32_t> ids = p.is_ids ? p.ids : need_tokenizer("a text prompt").encode(p.text);
  const gpt2::Config& c = model->config();
  if (ids.empty()) {
    // An empty prompt starts from the beginning-of-text token, as HF's generate does.
    if (c.bos_id < 0)
      throw ApiError(400, "the prompt is empty and the model has no BOS token", param);
    ids.push_back(static_cast<uint32_t>(c.bos_id));
  }
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= static_cast<uint64_t>(c.vocab_size))
      throw ApiError(400,
                     "token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                         " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")",
                     param);
  if (static_cast<int64_t>(ids.size()) > c.n_ctx)
    throw ApiError(400,
                   "the prompt has " + std::to_string(ids.size()) +
                       " tokens, more than the model's context of " + std::to_string(c.n_ctx),
                   param);
  return ids;
}

void Server::Impl::completions(const httplib::Request& req, httplib::Response& res,
                               Endpoint endpoint) {
  auto token = std::make_shared<InFlight>(in_flight);  // until the response is written
  need_ready();
  CompletionRequest r = parse_completion_request(req.body, endpoint, limits);
  const bool chat = endpoint == Endpoint::Chat;
  const std::string param = chat ? "messages" : "prompt";
  if (chat) {
    need_tokenizer("chat");
    r.prompts = {Prompt{false, render_chat(r.messages), {}}};
    for (std::string& s : chat_stop_strings()) r.options.stop.push_back(std::move(s));
  }
  if (!r.options.stop.empty()) need_tokenizer("'stop'");
  if (r.logprobs >= 0) need_tokenizer("'logprobs'");
  const gpt2::Config& c = model->config();

  struct Choice {
    std::shared_ptr<Job> job;
    std::string prefix;  // echo
    int64_t prompt_tokens = 0;
  };
  std::vector<Choice> choices;
  int64_t prompt_tokens = 0;
  const uint64_t seed = r.seed_given ? r.options.sampling.seed : random_seed();
  auto cancel_all = [&choices] {
    for (Choice& ch : choices)
      if (ch.job) ch.job->cancel();
  };
  try {
    for (const Prompt& p : r.prompts) {
      const std::vector<uint32_t> ids = tokenize_prompt(p, param);
      const int64_t P = static_cast<int64_t>(ids.size());
      prompt_tokens += P;
      gpt2::GenerateOptions go = r.options;
      const int64_t room = c.n_ctx - P + 1;  // tokens that fit: P + N - 1 <= n_ctx
      go.max_new_tokens = std::min(r.max_tokens >= 0 ? r.max_tokens : (chat ? room : 16), room);
      for (int i = 0; i < r.n; ++i) {
        go.sampling.seed = seed + static_cast<uint64_t>(i);
        std::shared_ptr<Job> job = engine->submit(ids, go, r.logprobs);
        if (!job) {
          cancel_all();
          metrics.count_rejected();
          throw ApiError(503, "the server is busy: every slot is taken and the queue is full");
        }
        Choice ch{std::move(job), "", P};
        if (r.echo) ch.prefix = p.is_ids ? (tokenizer ? tokenizer->decode(ids) : "") : p.text;
        choices.push_back(std::move(ch));
      }
    }
  } catch (const Error& e) {  // what generate() refuses: settings out of range
    cancel_all();
    throw ApiError(400, e.what());
  }

  ResponseHeader h{endpoint, random_id(chat ? "chatcmpl-" : "cmpl-"), std::time(nullptr),
                   r.model.empty() ? model_id : r.model};
  if (!r.stream) {
    json out = json::array();
    int64_t completion_tokens = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
      const std::vector<TokenEvent> events = choices[i].job->wait_all();
      const std::string err = choices[i].job->error();
      if (!err.empty()) {
        cancel_all();
        throw ApiError(500, "generation failed: " + err);
      }
      const gpt2::GenerateResult g = choices[i].job->result();
      completion_tokens += static_cast<int64_t>(g.ids.size());
      const json lp = r.logprobs >= 0
                          ? logprobs_json(endpoint, *tokenizer, events, choices[i].prefix.size())
                          : json(nullptr);
      out.push_back(choice_json(endpoint, static_cast<int>(i), choices[i].prefix + g.text,
                                g.stop_reason, lp));
    }
    // Each prompt counts once, however many choices it has (as OpenAI's usage does).
    send_json(res, 200, response_json(h, std::move(out), prompt_tokens, completion_tokens));
    return;
  }

  // Streaming: server-sent events, one chunk per token that completes text, then each
  // choice's finish_reason, the usage chunk if asked for, and [DONE].
  struct Stream {
    std::vector<Choice> choices;
    ResponseHeader h;
    int logprobs;
    bool include_usage;
    int64_t prompt_tokens;
    const Tokenizer* tok;
    std::shared_ptr<InFlight> token;
  };
  auto st =
      std::make_shared<Stream>(Stream{std::move(choices), h, r.logprobs, r.include_usage,
                                      prompt_tokens, tokenizer ? &*tokenizer : nullptr, token});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        auto event = [&](const json& j) { return send("data: " + dump(j) + "\n\n"); };
        const Endpoint ep = st->h.endpoint;
        const size_t k = st->choices.size();
        for (size_t i = 0; i < k; ++i) {
          const bool chat = ep == Endpoint::Chat;
          const std::string& prefix = st->choices[i].prefix;
          if ((chat || !prefix.empty()) &&
              !event(chunk_json(st->h, static_cast<int>(i), prefix, "", nullptr, chat)))
            return false;
        }
        std::vector<bool> finished(k, false);
        size_t remaining = k;
        int64_t completion_tokens = 0;
        auto last_write = std::chrono::steady_clock::now();
        const auto wait = std::chrono::milliseconds(k == 1 ? 200 : 20);
        while (remaining > 0) {
          for (size_t i = 0; i < k; ++i) {
            if (finished[i]) continue;
            Job& job = *st->choices[i].job;
            std::vector<TokenEvent> events;
            const bool fin = job.wait(events, wait);
            for (const TokenEvent& e : events) {
              if (e.token) ++completion_tokens;
              if (e.text.empty() && !(e.token && st->logprobs >= 0)) continue;
              const json lp = st->logprobs >= 0 && e.token
                                  ? logprobs_json(ep, *st->tok, std::vector<TokenEvent>{e})
                                  : json(nullptr);
              if (!event(chunk_json(st->h, static_cast<int>(i), e.text, "", lp))) return false;
              last_write = std::chrono::steady_clock::now();
            }
            if (!fin) continue;
            finished[i] = true;
            --remaining;
            if (const std::string err = job.error(); !err.empty()) {
              (void)event(ApiError::error_body(500, "generation failed: " + err));
              return false;
            }
            if (!event(
                    chunk_json(st->h, static_cast<int>(i), "", job.result().stop_reason, nullptr)))
              return false;
            last_write = std::chrono::steady_clock::now();
          }
          // A comment now and then while nothing comes (a queued job): a client that has gone
          // away is noticed here rather than when its first token is ready.
          if (std::chrono::steady_clock::now() - last_write > std::chrono::seconds(1)) {
            if (!send(": waiting\n\n")) return false;
            last_write = std::chrono::steady_clock::now();
          }
        }
        if (st->include_usage &&
            !event(usage_chunk_json(st->h, st->prompt_tokens, completion_tokens)))
          return false;
        if (!send("data: [DONE]\n\n")) return false;
        sink.done();
        return true;
      },
      [st](bool success) {  // the response ended: a client that left cancels its jobs
        if (!success)
          for (Choice& ch : st->choices) ch.job->cancel();
      });
}

void Server::Impl::routes() {
  auto guard = [](auto fn) {
    return [fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const Error& e) {
        send_error(res, ApiError(400, e.what()));
      }
    };
  };
  http.Post("/v1/completions", guard([this](const httplib::Request& q, httplib::Response& s) {
              completions(q, s, Endpoint::Completions);
            }));
  http.Post("/v1/chat/completions", guard([this](const httplib::Request& q, httplib::Response& s) {
              completions(q, s, Endpoint::Chat);
            }));
  http.Get("/v1/models", guard([this](const httplib::Request&, httplib::Response& s) {
             need_ready();
             const gpt2::Config& c = model->config();
             send_json(s, 200,
                       {{"object", "list"},
                        {"data", json::array({{{"id", model_id},
                                               {"object", "model"},
                                               {"created", created},
                                               {"owned_by", "forge"},
                                               {"meta",
                                                {{"n_ctx", c.n_ctx},
                                                 {"n_vocab", c.vocab_size},
                                                 {"n_params", model->num_params()},
                                                 {"device", o.device},
                                                 {"parallel", o.parallel}}}}})}});
           }));
  http.Get("/health", [this](const httplib::Request&, httplib::Response& s) {
    if (ready)
      send_json(s, 200, {{"status", "ok"}});
    else
      send_error(s, ApiError(503, "Loading model"));
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& s) {
    s.set_content(metrics.render(engine && ready ? std::optional(engine->stats()) : std::nullopt),
                  "text/plain; version=0.0.4");
  });
  http.Post("/tokenize", guard([this](const httplib::Request& q, httplib::Response& s) {
              const std::string text = parse_tokenize_request(q.body);
              need_ready();
              send_json(s, 200, {{"tokens", need_tokenizer("/tokenize").encode(text)}});
            }));
  http.Post("/detokenize", guard([this](const httplib::Request& q, httplib::Response& s) {
              const std::vector<uint32_t> ids = parse_detokenize_request(q.body);
              need_ready();
              const Tokenizer& t = need_tokenizer("/detokenize");
              for (size_t i = 0; i < ids.size(); ++i)
                if (ids[i] >= static_cast<uint64_t>(t.vocab_size()))
                  throw ApiError(400,
                                 "token id " + std::to_string(ids[i]) + " at index " +
                                     std::to_string(i) + " is outside the vocabulary [0, " +
                                     std::to_string(t.vocab_size()) + ")",
                                 "tokens");
              send_json(s, 200, {{"content", t.decode(ids)}});
            }));

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (t_shed) {
      metrics.count_rejected();
      send_error(res, ApiError(503, "the server is busy: too many connections"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (draining) {
      res.set_header("Connection", "close");
      send_error(res, ApiError(503, "the server is shutting down"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!o.api_key.empty() && req.path != "/health") {
      const std::string want = "Bearer " + o.api_key;
      const std::string got = req.get_header_value("Authorization");
      unsigned diff = got.size() != want.size();
      for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) diff |= got[i] ^ want[i];
      if (diff) {
        send_error(res, ApiError(401, got.empty() ? "no API key: send 'Authorization: Bearer KEY'"
                                                  : "invalid API key"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Statuses httplib sets itself (no route, a body over the limit, a request it cannot
  // parse) get an OpenAI-shaped body too; a body a handler already wrote stays.
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                     httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = "HTTP " + std::to_string(res.status);
    if (res.status == 404) msg = "no route for " + req.method + " " + req.path;
    if (res.status == 413)
      msg = "the request body is over the limit of " + std::to_string(o.max_body_bytes) + " bytes";
    if (res.status == 400) msg = "malformed HTTP request";
    send_json(res, res.status, ApiError::error_body(res.status, msg));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string msg = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          msg += std::string(": ") + e.what();
        } catch (...) {
        }
        send_json(res, 500, ApiError::error_body(500, msg));
      });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.count_request(route_of(req.path), res.status);
  });
}

Server::Server(const ServerOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.o = options;
  if (options.parallel < 1 || options.parallel > 256)
    throw Error(ErrorKind::Range,
                "serve: --parallel must be in [1, 256], got " + std::to_string(options.parallel));
  if (options.max_queue < 0 || options.max_queue > 4096)
    throw Error(ErrorKind::Range,
                "serve: --queue must be in [0, 4096], got " + std::to_string(options.max_queue));
  s.model_id = fs::path(options.model).filename().string();
  if (s.model_id.empty()) s.model_id = fs::path(options.model).parent_path().filename().string();
  const size_t threads = static_cast<size_t>(options.parallel + options.max_queue + 8);
  s.http.new_task_queue = [threads] { return new BoundedPool(threads, 2 * threads); };
  s.http.set_payload_max_length(options.max_body_bytes);
  s.http.set_read_timeout(options.timeout_seconds, 0);
  s.http.set_write_timeout(options.timeout_seconds, 0);
  s.http.set_keep_alive_timeout(std::min(5, options.timeout_seconds));  // idle connections
  s.http.set_keep_alive_max_count(1000);
  s.routes();
}

Server::~Server() { stop(); }

void Server::start() {
  Impl& s = *impl_;
  if (s.o.port == 0) {
    s.port = s.http.bind_to_any_port(s.o.host);
    if (s.port <= 0) throw Error(ErrorKind::Io, "serve: cannot bind " + s.o.host + " to any port");
  } else {
    if (!s.http.bind_to_port(s.o.host, s.o.port))
      throw Error(ErrorKind::Io, "serve: cannot listen on " + s.o.host + ":" +
                                     std::to_string(s.o.port) +
                                     " (in use, or not an address of this machine)");
    s.port = s.o.port;
  }
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
  s.loader = std::thread([&s] { s.load(); });
}

int Server::port() const { return impl_->port; }
bool Server::ready() const { return impl_->ready; }
std::string Server::load_error() const {
  std::lock_guard lk(impl_->mu);
  return impl_->load_error;
}

void Server::stop() {
  Impl& s = *impl_;
  if (s.stopped.exchange(true)) return;
  if (s.loader.joinable()) s.loader.join();
  s.draining = true;  // new requests get 503; those in flight run to their end
  while (s.in_flight > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.http.stop();  // no new connections
  if (s.listener.joinable()) s.listener.join();
  if (s.engine) s.engine->drain();
}

}  // namespace forge::serve
