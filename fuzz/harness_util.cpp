#include "harness_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace forge::fuzz {

namespace {

std::string make_scratch_dir() {
  namespace fs = std::filesystem;
  std::string base;
  if (const char* env = std::getenv("FORGE_FUZZ_TMP"); env && *env)
    base = env;
  else if (fs::is_directory("/dev/shm"))
    base = "/dev/shm";
  else
    base = fs::temp_directory_path().string();
  const std::string dir = base + "/forge-fuzz-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void remove_scratch_dir() {
  std::error_code ec;
  std::filesystem::remove_all(scratch_dir(), ec);
}

}  // namespace

const std::string& scratch_dir() {
  static const std::string dir = make_scratch_dir();
  // Registered after dir's destructor, so it runs before it.
  static const bool removed_at_exit = std::atexit(remove_scratch_dir) == 0;
  (void)removed_at_exit;
  return dir;
}

std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail("cannot write the scratch file " + path);
  return path;
}

std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  return write_scratch(name, std::string_view(reinterpret_cast<const char*>(data), size));
}

std::vector<std::string_view> split_parts(const uint8_t* data, size_t size, size_t count) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < count) {
    const size_t at = rest.find(kPartSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(rest.substr(0, at));
    rest.remove_prefix(at + kPartSeparator.size());
  }
  parts.push_back(rest);
  parts.resize(count);  // missing parts are empty
  return parts;
}

gpt2::Config small_model_config() {
  gpt2::Config c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  c.n_ctx = 8;
  c.vocab_size = 16;
  c.bos_id = c.eos_id = 15;
  return c;
}

void fail(const std::string& what) {
  std::fprintf(stderr, "forge fuzz harness: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

void silence_stdout() {
  if (!std::freopen("/dev/null", "w", stdout)) fail("cannot point stdout at /dev/null");
}

}  // namespace forge::fuzz
