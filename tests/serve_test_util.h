// forge serve's tests: a served model (a small random GPT-2 with GPT-2's real tokenizer),
// requests through curl, server-sent events parsed, raw sockets for misbehaving clients.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_runner.h"
#include "forge/gpt2.h"
#include "forge/tokenizer.h"
#include "serve/http_server.h"

namespace forge::test::serve_tests {

namespace fs = std::filesystem;
using nlohmann::json;

inline const std::string kGpt2TokenizerDir = FORGE_SOURCE_DIR "/data/gpt2-tokenizer";

/// The served model: 2 layers, C = 64, GPT-2's vocabulary and 1024 positions (long
/// generations for the tests that need a request to last), random weights, GPT-2's
/// tokenizer files beside it. Made once per process.
inline const fs::path& model_dir() {
  static const fs::path dir = [] {
    const fs::path d =
        fs::path(::testing::TempDir()) / ("forge_serve_model_" + std::to_string(::getpid()));
    gpt2::Config c = gpt2::Config::preset("mini");
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 64;
    c.n_ctx = 1024;
    gpt2::Model::random(c, 17).save(d.string());
    Tokenizer::load(kGpt2TokenizerDir).save(d.string());
    return d;
  }();
  return dir;
}

/// A server of model_dir() on a free port, in this process; ready when made.
class Served {
 public:
  /// o.model: model_dir() unless set.
  explicit Served(serve::ServerOptions o = {}) {
    if (o.model.empty()) o.model = model_dir().string();
    o.port = 0;
    server_ = std::make_unique<serve::Server>(o);
    server_->start();
    const auto t0 = std::chrono::steady_clock::now();
    while (!server_->ready() && server_->load_error().empty() &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(server_->ready()) << server_->load_error();
  }
  std::string url(const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + path;
  }
  int port() const { return server_->port(); }
  serve::Server& server() { return *server_; }

 private:
  std::unique_ptr<serve::Server> server_;
};

struct Reply {
  int status = 0;
  std::string body;
  std::string headers;
  json j() const {
    json v = json::parse(body, nullptr, false);
    EXPECT_FALSE(v.is_discarded()) << "not JSON: " << body.substr(0, 300);
    return v;
  }
};

/// One request through curl. `body` goes from a file (any bytes); `extra`: more curl
/// arguments (headers).
inline Reply curl(const std::string& method, const std::string& url, const std::string& body = "",
                  const std::string& extra = "") {
  static std::atomic<int> n{0};
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(n++);
  const fs::path dir = fs::path(::testing::TempDir());
  const fs::path in = dir / ("serve_in_" + tag), out = dir / ("serve_out_" + tag),
                 hdr = dir / ("serve_hdr_" + tag), code = dir / ("serve_code_" + tag);
  std::string cmd = "curl -s -N --max-time 120 -X " + method + " -o " + out.string() + " -D " +
                    hdr.string() + " -w '%{http_code}' " + extra;
  if (!body.empty() || method == "POST") {
    std::ofstream(in, std::ios::binary) << body;
    cmd += " -H 'Content-Type: application/json' --data-binary @" + in.string();
  }
  cmd += " '" + url + "' > " + code.string();
  (void)std::system(cmd.c_str());
  Reply r;
  try {
    r.status = std::stoi(slurp(code));
  } catch (...) {
    r.status = -1;
  }
  r.body = slurp(out);
  r.headers = slurp(hdr);
  for (const fs::path& p : {in, out, hdr, code}) fs::remove(p);
  return r;
}

/// The data: payloads of a server-sent-event stream, in order ("[DONE]" included).
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
  return out;
}

/// A connected TCP socket to 127.0.0.1:port (receive timeout `seconds`); -1 on failure.
inline int connect_to(int port, int seconds = 10) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

inline void send_all(int fd, const std::string& s) {
  for (size_t done = 0; done < s.size();) {
    const ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

/// A POST request as raw HTTP/1.1 text.
inline std::string raw_post(const std::string& path, const std::string& body) {
  return "POST " + path +
         " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

/// The value of a Prometheus sample line "name value" (or "name{labels} value"); -1 if absent.
inline double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return -1;
}

}  // namespace forge::test::serve_tests
