// A shared library opened at run time (dlopen). The CUDA backend loads the NVIDIA driver,
// NVRTC and cuBLASLt this way, so that forge builds without any of them (CI has no CUDA) and
// a machine without them gets an error that names what is missing.
#pragma once

#include <string>
#include <vector>

namespace forge::cuda {

class SharedLibrary {
 public:
  /// The first of `names` (sonames, or paths) that dlopen finds. Throws Error(Device)
  /// naming `what` (e.g. "the NVIDIA driver"), every name tried and dlopen's reason.
  static SharedLibrary open_first(const std::vector<std::string>& names, const std::string& what);

  SharedLibrary(SharedLibrary&& other) noexcept;
  SharedLibrary& operator=(SharedLibrary&& other) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  ~SharedLibrary();

  /// The name it was opened by.
  const std::string& name() const { return name_; }

  /// The address of `symbol`, or nullptr when the library lacks it.
  void* find(const char* symbol) const;

  /// The address of `symbol`; throws Error(Device) naming the symbol and the library (a
  /// library older than forge needs).
  void* require(const char* symbol) const;

  /// require() as a function pointer of type Fn.
  template <typename Fn>
  Fn get(const char* symbol) const {
    return reinterpret_cast<Fn>(require(symbol));
  }

 private:
  SharedLibrary(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}
  void* handle_ = nullptr;
  std::string name_;
};

}  // namespace forge::cuda
