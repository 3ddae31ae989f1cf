// forge serve: an OpenAI-compatible HTTP server (src/serve/http_server.h).
//
//   forge serve -m MODEL [--host 127.0.0.1] [--port 8080] [--parallel N] [--queue Q]
//       [--api-key KEY] [--device D] [--tokenizer DIR] [--max-body BYTES] [--timeout S]
//
// It answers at once (GET /health: 503 while the model loads, 200 when ready). SIGTERM or
// SIGINT stops it gracefully: no new connections, requests in flight run to their end,
// then exit 0. A model that fails to load ends it with "error: ..." and exit 1.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "forge/error.h"

#ifdef FORGE_HAVE_SERVE
#include <pthread.h>

#include "serve/http_server.h"
#endif

namespace forge::cli {
namespace {

#ifdef FORGE_HAVE_SERVE
int run_serve(serve::ServerOptions o) {
  if (o.api_key.empty())
    if (const char* k = std::getenv("FORGE_API_KEY")) o.api_key = k;
  // SIGTERM and SIGINT are taken by sigtimedwait below: block them in every thread (the
  // server's threads inherit this mask).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  serve::Server server(o);
  server.start();
  std::fprintf(stderr, "forge serve: listening on http://%s:%d (loading %s)\n", o.host.c_str(),
               server.port(), o.model.c_str());
  bool announced = false;
  const timespec tick{0, 100 * 1000 * 1000};
  for (;;) {
    const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      std::fprintf(stderr, "forge serve: stopping (finishing the requests in flight)\n");
      server.stop();
      std::fprintf(stderr, "forge serve: stopped\n");
      return 0;
    }
    if (const std::string err = server.load_error(); !err.empty()) {
      server.stop();
      throw Error(ErrorKind::Io, err.rfind("serve: ", 0) == 0 ? err : "serve: " + err);
    }
    if (!announced && server.ready()) {
      std::fprintf(stderr, "forge serve: model ready, %d slot%s\n", o.parallel,
                   o.parallel == 1 ? "" : "s");
      announced = true;
    }
  }
}
#endif

}  // namespace

void register_serve(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve a model over HTTP with OpenAI's API (completions, chat, streaming)");
#ifdef FORGE_HAVE_SERVE
  auto o = std::make_shared<serve::ServerOptions>();
  cmd->add_option("-m,--model", o->model, "Model folder or .gguf file")->required();
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port (0: any free one)")
      ->check(int_in_range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--parallel", o->parallel, "Sequences decoded together (slots)")
      ->check(int_in_range(1, 256))
      ->capture_default_str();
  cmd->add_option("--queue", o->max_queue, "Requests waiting for a slot before 503s")
      ->check(int_in_range(0, 4096))
      ->capture_default_str();
  cmd->add_option("--api-key", o->api_key,
                  "Require 'Authorization: Bearer KEY' (also FORGE_API_KEY)");
  cmd->add_option("--device", o->device, "Device (" + device_choices() + ")")
      ->capture_default_str();
  cmd->add_option("--tokenizer", o->tokenizer, "Tokenizer folder (default: the model's)");
  cmd->add_option("--max-body", o->max_body_bytes, "Largest request body in bytes (413 above)")
      ->check(int_in_range(1024, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout_seconds,
                  "Seconds a client may stay silent while sending or reading")
      ->check(int_in_range(1, 3600))
      ->capture_default_str();
  cmd->callback([&action, o] { action = [o]() -> int { return run_serve(*o); }; });
#else
  cmd->allow_extras();
  cmd->callback([&action] {
    action = []() -> int {
      throw Error(
          ErrorKind::Unsupported,
          "serve: this build has no HTTP server (cpp-httplib was not found when it was built)");
    };
  });
#endif
}

}  // namespace forge::cli
