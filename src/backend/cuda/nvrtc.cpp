#include "backend/cuda/nvrtc.h"

#include <memory>
#include <string>

#include "backend/cuda/shared_library.h"
#include "forge/error.h"

namespace forge::cuda {
namespace {

// nvrtc.h's types (its values: docs/CUDA_PLAN.md).
using nvrtcResult = int;
using nvrtcProgram = struct nvrtc_program_st*;
constexpr nvrtcResult NVRTC_SUCCESS = 0;

struct Nvrtc {
  std::unique_ptr<SharedLibrary> library;
  const char* (*get_error_string)(nvrtcResult) = nullptr;
  nvrtcResult (*version)(int*, int*) = nullptr;
  nvrtcResult (*create_program)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                const char* const*) = nullptr;
  nvrtcResult (*compile_program)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*get_program_log_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*get_program_log)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*get_cubin_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*get_cubin)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*get_ptx_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*get_ptx)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*destroy_program)(nvrtcProgram*) = nullptr;
  std::string error;  // why there is no NVRTC
};

template <typename Fn>
void resolve(const SharedLibrary& lib, Fn& fn, const char* symbol) {
  fn = lib.get<Fn>(symbol);
}

Nvrtc load() {
  Nvrtc n;
  try {
    n.library = std::make_unique<SharedLibrary>(
        SharedLibrary::open_first({"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"},
                                  "NVRTC (CUDA's run-time compiler)"));
    const SharedLibrary& lib = *n.library;
    resolve(lib, n.get_error_string, "nvrtcGetErrorString");
    resolve(lib, n.version, "nvrtcVersion");
    resolve(lib, n.create_program, "nvrtcCreateProgram");
    resolve(lib, n.compile_program, "nvrtcCompileProgram");
    resolve(lib, n.get_program_log_size, "nvrtcGetProgramLogSize");
    resolve(lib, n.get_program_log, "nvrtcGetProgramLog");
    resolve(lib, n.get_cubin_size, "nvrtcGetCUBINSize");
    resolve(lib, n.get_cubin, "nvrtcGetCUBIN");
    resolve(lib, n.get_ptx_size, "nvrtcGetPTXSize");
    resolve(lib, n.get_ptx, "nvrtcGetPTX");
    resolve(lib, n.destroy_program, "nvrtcDestroyProgram");
  } catch (const Error& e) {
    n.library.reset();
    n.error = e.what();
  }
  return n;
}

const Nvrtc& nvrtc() {
  // Never destroyed: the library stays loaded until exit (unloading it from a static
  // destructor would leave its own allocations to the leak checker without a module name).
  static const Nvrtc& n = *new Nvrtc(load());
  if (!n.library) throw Error(ErrorKind::Device, "cuda: " + n.error);
  return n;
}

void check(const Nvrtc& n, nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS) {
    const char* text = n.get_error_string(r);
    throw Error(ErrorKind::Backend, std::string("cuda: ") + call + ": " +
                                        (text ? text : "NVRTC error " + std::to_string(r)));
  }
}

// Owns an nvrtcProgram.
class Program {
 public:
  Program(const Nvrtc& n, const std::string& source, const std::string& name) : n_(n) {
    check(n_, n_.create_program(&p_, source.c_str(), name.c_str(), 0, nullptr, nullptr),
          "nvrtcCreateProgram");
  }
  ~Program() { n_.destroy_program(&p_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return p_; }

 private:
  const Nvrtc& n_;
  nvrtcProgram p_ = nullptr;
};

}  // namespace

NvrtcVersion nvrtc_version() {
  const Nvrtc& n = nvrtc();
  NvrtcVersion v;
  check(n, n.version(&v.major, &v.minor), "nvrtcVersion");
  return v;
}

CompiledKernel nvrtc_compile(const std::string& source, const std::string& name,
                             const std::string& arch, const std::vector<std::string>& options) {
  const Nvrtc& n = nvrtc();
  const bool cubin = arch.rfind("sm_", 0) == 0;
  if (!cubin && arch.rfind("compute_", 0) != 0)
    throw Error(ErrorKind::Backend, "cuda: compiling " + name + ": the architecture '" + arch +
                                        "' is neither sm_XY nor compute_XY");
  Program program(n, source, name);
  std::vector<std::string> all{"--gpu-architecture=" + arch};
  all.insert(all.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const std::string& o : all) argv.push_back(o.c_str());
  const nvrtcResult compiled =
      n.compile_program(program.get(), static_cast<int>(argv.size()), argv.data());
  CompiledKernel out;
  size_t log_size = 0;
  if (n.get_program_log_size(program.get(), &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.log.resize(log_size);
    if (n.get_program_log(program.get(), out.log.data()) != NVRTC_SUCCESS) out.log.clear();
    while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n'))
      out.log.pop_back();
  }
  if (compiled != NVRTC_SUCCESS)
    throw Error(ErrorKind::Backend, "cuda: " + name + " does not compile for " + arch + ": " +
                                        (out.log.empty() ? n.get_error_string(compiled) : out.log));
  size_t size = 0;
  check(n, cubin ? n.get_cubin_size(program.get(), &size) : n.get_ptx_size(program.get(), &size),
        cubin ? "nvrtcGetCUBINSize" : "nvrtcGetPTXSize");
  out.image.resize(size);
  check(n,
        cubin ? n.get_cubin(program.get(), out.image.data())
              : n.get_ptx(program.get(), out.image.data()),
        cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX");
  out.is_cubin = cubin;
  return out;
}

}  // namespace forge::cuda
