#include "backend/cuda/shared_library.h"

#include <dlfcn.h>

#include <utility>

#include "forge/error.h"

namespace forge::cuda {

SharedLibrary SharedLibrary::open_first(const std::vector<std::string>& names,
                                        const std::string& what) {
  std::string tried;
  for (const std::string& name : names) {
    // RTLD_LOCAL: the vendor's symbols stay out of the global namespace.
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return SharedLibrary(h, name);
    const char* why = dlerror();
    tried += (tried.empty() ? "" : "; ") + name + ": " + (why ? why : "not found");
  }
  throw Error(ErrorKind::Device, what + " is not installed or not found (" + tried + ")");
}

SharedLibrary::SharedLibrary(SharedLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), name_(std::move(other.name_)) {}

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    name_ = std::move(other.name_);
  }
  return *this;
}

SharedLibrary::~SharedLibrary() {
  if (handle_) dlclose(handle_);
}

void* SharedLibrary::find(const char* symbol) const {
  return handle_ ? dlsym(handle_, symbol) : nullptr;
}

void* SharedLibrary::require(const char* symbol) const {
  if (void* p = find(symbol)) return p;
  throw Error(ErrorKind::Device,
              name_ + " has no " + symbol + " (a version older than forge needs)");
}

}  // namespace forge::cuda
