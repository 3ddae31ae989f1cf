// ScopedEnv: sets an environment variable for a scope (for code that reads it then, such as
// a backend's settings parsed from the environment), then restores it.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace forge::test {

/// Sets `name` to `value` for its lifetime, then restores the previous value (or unsets it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace forge::test
