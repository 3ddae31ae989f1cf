#include "backend/cuda/kernels.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "backend/cuda/nvrtc.h"
#include "forge/error.h"

namespace forge::cuda {
namespace {

// No fast math: the kernels must agree with the CPU within the op harness's tolerances.
const std::vector<std::string>& compile_options() {
  static const std::vector<std::string> options = {"--std=c++17", "-default-device"};
  return options;
}

// FNV-1a, 64 bits: a stable name for one (source, options, arch, compiler) combination.
uint64_t fnv1a(const std::string& text, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string image_key(const std::string& arch) {
  const NvrtcVersion v = nvrtc_version();
  std::string what = std::string(kKernelSource) + '\0' + arch + '\0' + std::to_string(v.major) +
                     "." + std::to_string(v.minor);
  for (const std::string& o : compile_options()) what += '\0' + o;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(what)));
  return arch + "-" + hex;
}

std::vector<char> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Written under a temporary name and renamed: a reader sees a whole image or none.
void write_file(const std::filesystem::path& path, const std::vector<char>& bytes) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return;
  const std::filesystem::path tmp = path.string() + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace

std::string kernel_cache_dir() {
  if (const char* d = std::getenv("FORGE_CACHE_DIR"); d && *d) return std::string(d) + "/cuda";
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/forge/cuda";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/forge/cuda";
  return "";
}

std::vector<char> kernel_image(const std::string& arch) {
  const std::string dir = kernel_cache_dir();
  std::filesystem::path path;
  if (!dir.empty()) {
    path = std::filesystem::path(dir) / (image_key(arch) + ".cubin");
    std::vector<char> cached = read_file(path);
    if (!cached.empty()) return cached;
  }
  CompiledKernel k = nvrtc_compile(kKernelSource, "forge_kernels.cu", arch, compile_options());
  if (!path.empty()) write_file(path, k.image);
  return std::move(k.image);
}

Kernels::Kernels(const Context& context) : context_(context) {
  std::vector<char> image = kernel_image(context.arch());
  try {
    module_ = std::make_unique<Module>(context, image);
  } catch (const Error&) {
    // A damaged cached image: compile afresh (and replace it).
    image =
        nvrtc_compile(kKernelSource, "forge_kernels.cu", context.arch(), compile_options()).image;
    module_ = std::make_unique<Module>(context, image);
    const std::string dir = kernel_cache_dir();
    if (!dir.empty())
      write_file(std::filesystem::path(dir) / (image_key(context.arch()) + ".cubin"), image);
  }
}

CUfunction Kernels::function(const char* name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = functions_.find(name);
  if (it != functions_.end()) return it->second;
  const CUfunction fn = module_->function(name);
  functions_.emplace(name, fn);
  return fn;
}

}  // namespace forge::cuda
