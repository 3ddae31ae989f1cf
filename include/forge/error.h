// forge::Error — the one exception type every public function throws on bad input.
#pragma once

#include <stdexcept>
#include <string>

namespace forge {

/// What went wrong, coarsely; the message says precisely.
enum class ErrorKind {
  Shape,        // shapes/ranks/dimensions do not fit the op
  Device,       // tensors on different devices, or data not on the host when it must be
  DType,        // wrong element type
  Io,           // file missing, unreadable, write failed
  Format,       // a file or argument is malformed (safetensors, config.json, CLI values)
  Tokenizer,    // tokenizer files or text that the tokenizer cannot handle
  Backend,      // a backend failed (device lost, out of memory, driver error)
  Unsupported,  // valid request that this build/backend does not implement
  Range,        // an index or value outside its allowed range (ids >= vocab, kv overflow, ...)
};

const char* to_string(ErrorKind kind);

/// Thrown by forge on every invalid input. `what()` is "<op>: <detail>", e.g.
/// "matmul: inner dimensions differ: a [2, 3] vs b [4, 5]".
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace forge
